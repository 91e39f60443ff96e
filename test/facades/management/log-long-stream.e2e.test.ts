import assert from "node:assert/strict";
import { MAX_LOGGED_BODY_CHARS } from "../../../src/facades/gateway/request-trace.js";
import { eventually, postJson, rawRequest, sseEvents } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * A streamed answer longer than the copy the gateway keeps of it (the larger of the cache's entry
 * limit and the log's body limit) is streamed whole, and its log's response body is its start, cut
 * at the log's limit, with a note counting every character left out: the part past the copy too,
 * and a single delta larger than the copy kept as far as it fits, not dropped (real gateway, a
 * scripted OpenAI-style upstream, embedded ClickHouse).
 */
describe("request logs of a streamed answer longer than the copy kept of it", function () {
  this.timeout(120_000);
  const HUGE = 300_000; // one delta, past the copy's 256 Ki characters on its own
  const PIECES = 40;
  const PIECE = 10_000;
  const on = gatewayOnScriptedUpstream((_body, res) => {
    const chunk = (choices: unknown[], usage?: unknown) => `data: ${JSON.stringify({ id: "c9", object: "chat.completion.chunk", created: 1, model: "gpt-4o", choices, ...(usage ? { usage } : {}) })}\n\n`;
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]));
    res.write(chunk([{ index: 0, delta: { content: "x".repeat(HUGE) }, finish_reason: null }]));
    for (let i = 0; i < PIECES; i++) res.write(chunk([{ index: 0, delta: { content: "y".repeat(PIECE) }, finish_reason: null }]));
    res.write(chunk([{ index: 0, delta: {}, finish_reason: "stop" }]));
    res.end(`${chunk([], { prompt_tokens: 5, completion_tokens: 1000, total_tokens: 1005 })}data: [DONE]\n\n`);
  }, { SVC_CACHE_MAX_ENTRY_BYTES: "65536", SVC_TELEMETRY_FLUSH_INTERVAL_MS: "20" });

  it("logs the answer's start, cut at the log's limit, and counts what was left out, the part past the copy included", async () => {
    const res = await postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { model: "chat-4o", stream: true, messages: [{ role: "user", content: "long" }] });
    assert.equal(res.status, 200);
    const text = HUGE + PIECES * PIECE;
    const streamed = sseEvents(res.text).filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data).choices[0]?.delta?.content ?? "").join("");
    assert.equal(streamed, "x".repeat(HUGE) + "y".repeat(PIECES * PIECE), "streamed whole");
    const id = String(res.headers["x-svc-request-id"]);
    let body = "";
    await eventually(async () => {
      const r = await rawRequest(`${on.gw.managementUrl}/v1/logs/${id}`, { method: "GET", headers: { authorization: `Bearer ${on.key}` } });
      if (r.status !== 200) return false;
      body = r.json().response_body;
      return true;
    }, 20_000, "the request logged");
    const m = /^([^]*)…\[truncated (\d+) characters\]$/.exec(body);
    assert.ok(m, body.slice(0, 200));
    const kept = m[1]!;
    assert.equal(kept.length, MAX_LOGGED_BODY_CHARS);
    // The answer's text from its start: the huge delta kept as far as the copy goes, not dropped.
    const start = kept.indexOf("xxxx");
    assert.ok(start > 0 && start < 200, kept.slice(0, 200));
    assert.equal(kept.slice(start), "x".repeat(MAX_LOGGED_BODY_CHARS - start));
    // Left out: every character of the text past what is kept, and the JSON's end after it.
    const left = Number(m[2]);
    const textKept = MAX_LOGGED_BODY_CHARS - start;
    assert.ok(left >= text - textKept && left < text - textKept + 1000, `${left} characters said left out, ${text - textKept} of text were`);
  });
});
