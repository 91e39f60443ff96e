import assert from "node:assert/strict";
import type http from "node:http";
import { postJson, type RawResponse, sseEvents } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * An upstream answer that does not say how it finished (chat: `finish_reason` null, or a stream
 * whose chunks never carry one before `[DONE]`; messages: `stop_reason` null, or a stream without
 * `message_delta`) is passed on without a made-up reason (null, as the upstream said) and is not
 * cached: its repeat goes to the upstream again. Only complete answers are cached (README, Cache).
 */
const calls = new Map<string, number>();

function answer(body: { stream?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse, req: http.IncomingMessage): void {
  const prompt = body.messages.at(-1)!.content;
  calls.set(prompt, (calls.get(prompt) ?? 0) + 1);
  const chatStyle = req.url!.includes("/chat/completions");
  if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(chatStyle
      ? { id: "chatcmpl-u", object: "chat.completion", created: 1750431500, model: "gpt-4o", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, logprobs: null, finish_reason: null }], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } }
      : { id: "msg_u", type: "message", role: "assistant", model: "claude-3-5-haiku-20241022", content: [{ type: "text", text: "Hi" }], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } }));
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream" });
  if (chatStyle) {
    const chunk = (delta: object) => `data: ${JSON.stringify({ id: "chatcmpl-u", object: "chat.completion.chunk", created: 1750431500, model: "gpt-4o", choices: [{ index: 0, delta, logprobs: null, finish_reason: null }] })}\n\n`;
    res.end(chunk({ role: "assistant", content: "" }) + chunk({ content: "Hi" }) + "data: [DONE]\n\n");
    return;
  }
  const sse = (event: string, data: object) => `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
  res.end(
    sse("message_start", { message: { id: "msg_u", type: "message", role: "assistant", model: "claude-3-5-haiku-20241022", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }) +
      sse("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
      sse("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hi" } }) +
      sse("content_block_stop", { index: 0 }) +
      sse("message_stop", {}),
  );
}

describe("an upstream answer that does not say how it finished: passed on as it came, never cached", () => {
  const on = gatewayOnScriptedUpstream(answer);
  let n = 0;

  const chat = (prompt: string, stream: boolean) => postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { model: "chat-4o", stream, messages: [{ role: "user", content: prompt }] });
  const messages = (prompt: string, stream: boolean) =>
    postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-haiku-20241022", max_tokens: 50, stream, messages: [{ role: "user", content: prompt }] });

  /** The finish reason the client got: the whole answer's, or the last one its stream carried. */
  const chatFinish = (r: RawResponse, stream: boolean): unknown => {
    if (!stream) return r.json().choices[0].finish_reason;
    const chunks = sseEvents(r.text).filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data));
    assert.equal(sseEvents(r.text).at(-1)!.data, "[DONE]", r.text);
    return chunks.flatMap((c) => c.choices.map((ch: { finish_reason: unknown }) => ch.finish_reason)).filter((f: unknown) => f !== null).at(-1) ?? null;
  };
  const messagesStop = (r: RawResponse, stream: boolean): unknown => {
    if (!stream) return r.json().stop_reason;
    const events = sseEvents(r.text);
    assert.equal(events.at(-1)!.event, "message_stop", r.text);
    return JSON.parse(events.find((e) => e.event === "message_delta")!.data).delta.stop_reason;
  };

  const surfaces = [
    ["chat completions", "finish_reason", chat, chatFinish],
    ["messages", "stop_reason", messages, messagesStop],
  ] as const;
  for (const stream of [false, true]) {
    const how = stream ? "streamed" : "whole";
    for (const [name, field, send, reasonOf] of surfaces) {
      it(`${name}, ${how}: ${field} null, and the repeat is a miss that calls the upstream again`, async () => {
        const prompt = `${name} ${how} ${++n}`;
        for (let i = 1; i <= 2; i++) {
          const r = await send(prompt, stream);
          assert.equal(r.status, 200, r.text);
          assert.equal(r.headers["x-svc-cache"], "MISS", `request ${i}`);
          assert.equal(reasonOf(r, stream), null, r.text);
        }
        assert.equal(calls.get(prompt), 2);
      });
    }
  }
});
