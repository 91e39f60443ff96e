import assert from "node:assert/strict";
import { isWellFormed } from "../../../src/core/text.js";
import { MAX_LOGGED_BODY_CHARS, RequestTrace } from "../../../src/facades/gateway/request-trace.js";

describe("request trace", () => {
  it("cuts a long body between characters, never inside an emoji, and says how much it left out", () => {
    // The body's prefix decides where the cut falls within the emoji: both parities.
    for (const prefix of ['{"content":"', '{"content":"a']) {
      const body = `${prefix}${"😀".repeat(MAX_LOGGED_BODY_CHARS)}"}`;
      const trace = new RequestTrace("req_000000000000000000000001", "/v1/chat/completions");
      trace.requestBody = body;
      trace.responseBody = body;
      const log = trace.toLog();
      for (const got of [log.requestBody, log.responseBody]) {
        assert.ok(isWellFormed(got), `${prefix}: the logged body has a lone surrogate`);
        const m = /^([^]*)…\[truncated (\d+) characters\]$/.exec(got);
        assert.ok(m, got.slice(-60));
        const kept = m[1]!;
        assert.ok(kept.length === MAX_LOGGED_BODY_CHARS || kept.length === MAX_LOGGED_BODY_CHARS - 1, String(kept.length));
        assert.ok(body.startsWith(kept));
        assert.equal(Number(m[2]), body.length - kept.length);
      }
    }
  });

  it("logs a body within the limit as it is", () => {
    const trace = new RequestTrace("req_000000000000000000000001", "/v1/chat/completions");
    trace.requestBody = "😀".repeat(MAX_LOGGED_BODY_CHARS / 2);
    assert.equal(trace.toLog().requestBody, trace.requestBody);
  });
});
