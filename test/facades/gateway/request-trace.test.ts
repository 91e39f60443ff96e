import assert from "node:assert/strict";
import { isWellFormed } from "../../../src/core/text.js";
import { rowOfLog } from "../../../src/core/telemetry/log-row.js";
import { MAX_LOGGED_BODY_CHARS, MAX_LOGGED_COST_USD, RequestTrace } from "../../../src/facades/gateway/request-trace.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";

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

  it("logs a cost of a million USD or more as the most a log holds, so the log is stored, not refused", () => {
    const trace = new RequestTrace("req_000000000000000000000001", "/v1/chat/completions");
    trace.projectId = "proj_x";
    trace.keyMode = KeyMode.LIVE;
    trace.costUsd = "1610612.73525";
    trace.costSavedUsd = "12.5";
    const log = trace.toLog();
    assert.deepEqual([log.costUsd, log.costSavedUsd], [MAX_LOGGED_COST_USD, "12.5"]);
    assert.equal(rowOfLog(log, { bodyTtlDays: 30, nowMs: Date.now() }).row.cost_usd, MAX_LOGGED_COST_USD);
    trace.costUsd = "999999.5";
    assert.equal(trace.toLog().costUsd, "999999.5");
  });
});
