import assert from "node:assert/strict";
import { log } from "../../../src/logger.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson } from "../../support/http.js";

/** `SVC_LOG_LEVEL=debug` writes a line per finished request: what an operator follows a request by, never its bodies. */
describe("SVC_LOG_LEVEL=debug: one log line per request", () => {
  let gw: TestGateway;
  let key: string;
  const lines: string[] = [];
  const write = process.stderr.write.bind(process.stderr);

  before(async () => {
    gw = await startTestGateway();
    key = (await gw.project()).live;
    log.setLevel("debug");
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      lines.push(String(chunk));
      return write(chunk, ...rest);
    }) as typeof process.stderr.write;
  });
  after(async () => {
    process.stderr.write = write;
    log.setLevel((process.env.SVC_LOG_LEVEL as "info") || "info");
    await gw?.close();
  });

  it("gives the request's id, status, cache, cost and timings, without its prompt", async () => {
    const res = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { model: "chat-4o", messages: [{ role: "user", content: "secret-prompt-text" }] }, { "X-Svc-User-Id": "u-1" });
    assert.equal(res.status, 200, res.text);
    const bad = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { model: "chat-4o", messages: [], temperature: 9 });
    assert.equal(bad.status, 400);
    const of = (id: string) => {
      const found = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === "request" && l.requestId === id);
      assert.ok(found, `a debug line for ${id}: ${lines.join("")}`);
      return found;
    };
    const ok = of(res.headers["x-svc-request-id"] as string);
    assert.deepEqual([ok.level, ok.status, ok.cache, ok.costUsd, ok.endpoint, ok.model, ok.keyMode, ok.userId], ["debug", 200, "MISS", res.headers["x-svc-cost"], "/v1/chat/completions", "chat-4o", "live", "u-1"]);
    assert.equal(typeof ok.latencyMs, "number");
    assert.equal(lines.some((l) => l.includes("secret-prompt-text")), false, "no body in the logs");
    const refused = of(bad.headers["x-svc-request-id"] as string);
    assert.deepEqual([refused.status, refused.errorType, typeof refused.errorCode], [400, "invalid_request_error", "string"]);
  });
});
