import assert from "node:assert/strict";
import { isWellFormed } from "../../../src/core/text.js";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { MAX_LOGGED_BODY_CHARS } from "../../../src/facades/gateway/request-trace.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, rawRequest, type RawResponse } from "../../support/http.js";

/** Polls `fn` until `ok` holds (logs are written off the request path), or gives back the last answer after `ms`. */
async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms: number): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe("request logs of a batch holding text UTF-8 cannot carry (real gateway, embedded ClickHouse)", function () {
  this.timeout(120_000);
  let gw: TestGateway;

  before(async () => {
    // A long flush interval: the requests below, made together, are logged in one batch.
    gw = await startTestGateway({ SVC_TELEMETRY_FLUSH_INTERVAL_MS: "3000", SVC_LOG_LEVEL: "error" });
  });
  after(() => gw?.close());

  const get = (path: string, key: string): Promise<RawResponse> => rawRequest(`${gw.managementUrl}${path}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
  const listed = async (key: string): Promise<string[]> => {
    const r = await get("/v1/logs?limit=100", key);
    return r.status === 200 ? r.json().data.map((l: { id: string }) => l.id) : [];
  };

  it("lists every request batched with a large emoji body (cut between characters) and a lone surrogate in metadata, and theirs", async () => {
    const emoji = await gw.project(Plan.PRO);
    const other = await gw.project(Plan.PRO);
    const url = `${gw.gatewayUrl}/v1/chat/completions`;
    const chat = (key: string, content: string, headers: Record<string, string> = {}) =>
      postJson(url, key, { model: "chat-4o-mini", messages: [{ role: "user", content }] }, headers);
    // Bodies of 600,000 UTF-16 code units, all emoji: the log's cut at MAX_LOGGED_BODY_CHARS falls
    // inside a pair in one of the two (the body's prefix before the emoji is odd in one, even in the other).
    const bigBodies = ["", "a"].map((pad) => JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content: `${pad}${"😀".repeat(300_000)}` }] }));
    const responses = await Promise.all([
      ...Array.from({ length: 10 }, (_, i) => chat(other.live, `before ${i}`)),
      ...bigBodies.map((body) => rawRequest(url, { headers: { "content-type": "application/json", "x-svc-api-key": emoji.live }, body })),
      // X-Svc-Metadata is JSON: these escapes are lone surrogates once parsed.
      chat(other.live, "odd metadata", { "X-Svc-Metadata": '{"team\\ud800":"v\\udc00","ok":"\\ud83d\\ude00"}' }),
      ...Array.from({ length: 10 }, (_, i) => chat(other.live, `after ${i}`)),
    ]);
    for (const r of responses) assert.equal(r.status, 200, r.text.slice(0, 200));
    const id = (r: RawResponse) => String(r.headers["x-svc-request-id"]);
    const bigIds = responses.slice(10, 12).map(id);
    const otherIds = [...responses.slice(0, 10), ...responses.slice(12)].map(id);

    const others = await until(() => listed(other.live), (ids) => ids.length >= otherIds.length, 30_000);
    assert.deepEqual([...others].sort(), [...otherIds].sort(), "every request of the other project is logged");
    assert.deepEqual([...(await listed(emoji.live))].sort(), [...bigIds].sort(), "both large emoji requests are logged");

    for (const [i, reqId] of bigIds.entries()) {
      const r = await get(`/v1/logs/${reqId}`, emoji.live);
      assert.equal(r.status, 200, r.text.slice(0, 200));
      const body: string = r.json().request_body;
      assert.ok(isWellFormed(body), "no half emoji in the logged body");
      const m = /^([^]*)…\[truncated (\d+) characters\]$/.exec(body);
      assert.ok(m, body.slice(-80));
      const kept = m[1]!;
      assert.ok(bigBodies[i]!.startsWith(kept), "the body as sent, up to the cut");
      assert.ok(kept.length === MAX_LOGGED_BODY_CHARS || kept.length === MAX_LOGGED_BODY_CHARS - 1, String(kept.length));
      assert.equal(Number(m[2]), bigBodies[i]!.length - kept.length);
    }
    const odd = (await get(`/v1/logs/${id(responses[12]!)}`, other.live)).json();
    assert.deepEqual(odd.metadata, { "team\ufffd": "v\ufffd", ok: "😀" }, "lone surrogates logged as U+FFFD");
  });
});
