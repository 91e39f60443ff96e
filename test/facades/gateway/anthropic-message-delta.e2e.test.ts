import assert from "node:assert/strict";
import type http from "node:http";
import { postJson, sseEvents } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * What a messages-style upstream says at the end of an answer beyond the stop reason the canonical
 * model names reaches a messages-style client as sent: a `stop_reason` the canonical reasons do not
 * say exactly (`model_context_window_exceeded`, one newer than this build), message_delta's
 * `delta.container` (code execution) and its `context_management`
 * (https://docs.anthropic.com/en/api/messages-streaming). A chat client gets its own terms.
 */
const container = { id: "cont_1", expires_at: "2026-11-27T15:00:00Z" };
const stopDetails = { type: "refusal", category: "cyber", explanation: "nope" };
const contextManagement = { applied_edits: [{ type: "clear_tool_uses_20250919", cleared_tool_uses: 2 }] };

function answer(body: { stream?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse): void {
  const stopReason = body.messages.at(-1)!.content.split(" ")[0]!;
  const usage = { input_tokens: 10, output_tokens: 5 };
  const message = { id: "msg_md", type: "message", role: "assistant", model: "claude-3-5-sonnet-20241022", content: [{ type: "text", text: "Hi" }], stop_reason: stopReason, stop_sequence: null, usage, container, context_management: contextManagement };
  if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(message));
    return;
  }
  const sse = (event: string, data: object) => `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.end(
    sse("message_start", { message: { ...message, content: [], stop_reason: null, container: undefined, context_management: undefined, usage: { ...usage, output_tokens: 1 } } }) +
      sse("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
      sse("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hi" } }) +
      sse("content_block_stop", { index: 0 }) +
      (body.messages.at(-1)!.content.includes("details")
        ? // Today's API: stop_details (a refusal's) and a null container in every message_delta.
          sse("message_delta", { delta: { stop_reason: stopReason, stop_sequence: null, stop_details: stopDetails, container: null }, usage })
        : body.messages.at(-1)!.content.includes("plain")
        ? sse("message_delta", { delta: { stop_reason: stopReason, stop_sequence: null }, usage })
        : sse("message_delta", { delta: { stop_reason: stopReason, stop_sequence: null, container }, usage, context_management: contextManagement })) +
      sse("message_stop", {}),
  );
}

describe("POST /v1/messages: message_delta's fields and stop reasons passed on as the upstream sent them", () => {
  const on = gatewayOnScriptedUpstream(answer);
  let n = 0;

  const ask = (stopReason: string, extra: object = {}) =>
    postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-sonnet-20241022", max_tokens: 100, messages: [{ role: "user", content: `${stopReason} ${++n}` }], ...extra });
  const messageDelta = (text: string) => JSON.parse(sseEvents(text).find((e) => e.event === "message_delta")!.data);

  it("streams message_delta with the upstream's stop_reason, container and context_management", async () => {
    for (const stopReason of ["model_context_window_exceeded", "some_future_reason", "end_turn"]) {
      const res = await ask(stopReason, { stream: true });
      assert.equal(res.status, 200, res.text);
      const delta = messageDelta(res.text);
      assert.deepEqual(delta.delta, { stop_reason: stopReason, stop_sequence: null, container }, stopReason);
      assert.deepEqual(delta.context_management, contextManagement, stopReason);
    }
  });

  it("answers a whole message, and its cached copy as JSON and as a stream, with the stop_reason as sent", async () => {
    const first = await ask("model_context_window_exceeded");
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json().stop_reason, "model_context_window_exceeded");
    assert.deepEqual([first.json().container, first.json().context_management], [container, contextManagement]);
    const content = `model_context_window_exceeded ${n}`;
    const again = await postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-sonnet-20241022", max_tokens: 100, messages: [{ role: "user", content }] });
    assert.equal(again.headers["x-svc-cache"], "HIT");
    assert.equal(again.json().stop_reason, "model_context_window_exceeded");
    const streamed = await postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-sonnet-20241022", max_tokens: 100, stream: true, messages: [{ role: "user", content }] });
    assert.equal(streamed.headers["x-svc-cache"], "HIT");
    assert.equal(messageDelta(streamed.text).delta.stop_reason, "model_context_window_exceeded");
    const start = JSON.parse(sseEvents(streamed.text).find((e) => e.event === "message_start")!.data);
    assert.equal(start.message.stop_reason, null, "message_start says no stop reason yet");
    // The container goes where a live stream has it, the delta (the SDKs' stream helpers read it there).
    assert.deepEqual(messageDelta(streamed.text).delta.container, container);
    assert.equal("container" in start.message, false);
  });

  it("caches a stream whose message_delta carries stop_details and a null container, and gives both back in message_delta and in the JSON", async () => {
    const content = `refusal details ${++n}`;
    const req = (stream: boolean) => postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-sonnet-20241022", max_tokens: 100, stream, messages: [{ role: "user", content }] });
    const first = await req(true);
    assert.equal(first.headers["x-svc-cache"], "MISS", first.text);
    assert.deepEqual(messageDelta(first.text).delta, { stop_reason: "refusal", stop_sequence: null, stop_details: stopDetails, container: null });
    const streamed = await req(true);
    assert.equal(streamed.headers["x-svc-cache"], "HIT", streamed.text);
    // The same message_delta as the live stream's, its null container included.
    assert.deepEqual(messageDelta(streamed.text).delta, { stop_reason: "refusal", stop_sequence: null, stop_details: stopDetails, container: null });
    const start = JSON.parse(sseEvents(streamed.text).find((e) => e.event === "message_start")!.data);
    assert.equal("stop_details" in start.message, false, "stop_details is said at the end, as live");
    const whole = await req(false);
    assert.equal(whole.headers["x-svc-cache"], "HIT", whole.text);
    assert.deepEqual([whole.json().stop_reason, whole.json().stop_details, whole.json().container], ["refusal", stopDetails, null]);
  });

  it("caches a streamed answer whose only unnamed end field is its stop_reason, and gives it back with it as a stream and as JSON", async () => {
    const content = `model_context_window_exceeded plain ${++n}`;
    const req = (stream: boolean) => postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-sonnet-20241022", max_tokens: 100, stream, messages: [{ role: "user", content }] });
    const first = await req(true);
    assert.equal(first.headers["x-svc-cache"], "MISS", first.text);
    assert.equal(messageDelta(first.text).delta.stop_reason, "model_context_window_exceeded");
    const streamed = await req(true);
    assert.equal(streamed.headers["x-svc-cache"], "HIT", streamed.text);
    assert.equal(messageDelta(streamed.text).delta.stop_reason, "model_context_window_exceeded");
    const whole = await req(false);
    assert.equal(whole.headers["x-svc-cache"], "HIT", whole.text);
    assert.equal(whole.json().stop_reason, "model_context_window_exceeded");
    assert.equal(whole.json().content[0].text, "Hi");
  });
});
