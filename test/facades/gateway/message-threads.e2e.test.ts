import assert from "node:assert/strict";
import type http from "node:http";
import { postJson } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * The message-threads beta on a messages-style upstream: a turn carries `thread` (create, or
 * continue from a message id) and the upstream keeps the conversation. A turn is never answered
 * from the cache or shared with an identical one in flight (another conversation's answer id would
 * continue the wrong thread), and the upstream's error `details` (its `error_code`, which the
 * Anthropic SDK's tool runner acts on: `thread_not_found` makes it resend the whole history) reach
 * the client as sent.
 */
let calls = 0;

function answer(body: { thread?: { type: string }; messages: Array<{ content: string }> }, res: http.ServerResponse): void {
  calls++;
  if (body.thread?.type === "continue") {
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ type: "error", error: { type: "not_found_error", message: "thread not found", details: { error_code: "thread_not_found" } } }));
    return;
  }
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ id: `msg_${calls}`, type: "message", role: "assistant", model: "claude", content: [{ type: "text", text: "Hi" }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } }));
}

describe("POST /v1/messages: message threads", () => {
  const on = gatewayOnScriptedUpstream(answer);
  const ask = (body: object) =>
    postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-sonnet-20241022", max_tokens: 20, messages: [{ role: "user", content: "same first prompt" }], ...body });

  it("never answers a thread's turn from the cache: each creates its own thread upstream", async () => {
    calls = 0;
    const first = await ask({ thread: { type: "create" } });
    const second = await ask({ thread: { type: "create" } });
    assert.deepEqual([first.headers["x-svc-cache"], second.headers["x-svc-cache"]], ["MISS", "MISS"]);
    assert.notEqual(first.json().id, second.json().id);
    assert.equal(calls, 2);
    // Without a thread, the same request is cached as ever.
    await ask({});
    assert.equal((await ask({})).headers["x-svc-cache"], "HIT");
  });

  it("passes the upstream's error details on, as the SDK reads them", async () => {
    const res = await ask({ thread: { type: "continue", previous_message_id: "msg_gone" } });
    assert.equal(res.status, 404, res.text);
    assert.deepEqual(res.json().error, { message: "Upstream error: thread not found", type: "not_found_error", code: "upstream_not_found_error", details: { error_code: "thread_not_found" } });
  });
});
