import assert from "node:assert/strict";
import type http from "node:http";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { eventually, postJson, sseEvents } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * A stream ends at the upstream's last event ([DONE], message_stop): the client's answer is whole
 * then, even when the upstream keeps its connection open after it (past the idle timeout), and
 * nothing the upstream sends after that event (a second message_stop, a stray delta) reaches the
 * client, the log or the cache.
 */
const IDLE_MS = 600;
const HOLD_MS = 3000;

const sse = (event: string, data: object) => `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
const messagesStream = (text: string) =>
  sse("message_start", { message: { id: "msg_end", type: "message", role: "assistant", model: "claude-3-5-haiku-20241022", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }) +
  sse("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
  sse("content_block_delta", { index: 0, delta: { type: "text_delta", text } }) +
  sse("content_block_stop", { index: 0 }) +
  sse("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 3 } }) +
  sse("message_stop", {});
const chatStream = (text: string) => {
  const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ id: "chatcmpl-end", object: "chat.completion.chunk", created: 1750431500, model: "gpt-4o", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  return chunk({ role: "assistant", content: "" }, null) + chunk({ content: text }, null) + chunk({}, "stop") + "data: [DONE]\n\n";
};

function answer(body: { messages: Array<{ content: string }> }, res: http.ServerResponse, req: http.IncomingMessage): void {
  const prompt = body.messages.at(-1)!.content;
  const chatStyle = req.url!.includes("/chat/completions");
  res.writeHead(200, { "content-type": "text/event-stream" });
  const whole = chatStyle ? chatStream("Done.") : messagesStream("Done.");
  if (prompt.startsWith("hold")) {
    // The whole answer, then the connection held open past the gateway's idle timeout.
    res.write(whole);
    setTimeout(() => res.end(), HOLD_MS);
  } else if (prompt.startsWith("thinking")) {
    // Thinking before the text: a stream the cache does not keep (it cannot be rebuilt whole).
    res.end(
      sse("message_start", { message: { id: "msg_th", type: "message", role: "assistant", model: "claude-3-5-haiku-20241022", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }) +
        sse("content_block_start", { index: 0, content_block: { type: "thinking", thinking: "" } }) +
        sse("content_block_delta", { index: 0, delta: { type: "thinking_delta", thinking: "hmm" } }) +
        sse("content_block_delta", { index: 0, delta: { type: "signature_delta", signature: "sig" } }) +
        sse("content_block_stop", { index: 0 }) +
        sse("content_block_start", { index: 1, content_block: { type: "text", text: "" } }) +
        sse("content_block_delta", { index: 1, delta: { type: "text_delta", text: "Result" } }) +
        sse("content_block_stop", { index: 1 }) +
        sse("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 3 } }) +
        sse("message_stop", {}),
    );
  } else if (prompt.startsWith("after")) {
    // More after the last event: a stray delta and a second message_stop, in the same write.
    res.end(whole + sse("content_block_delta", { index: 0, delta: { type: "text_delta", text: "AFTER" } }) + sse("message_stop", {}));
  } else {
    res.end(whole);
  }
}

describe("a stream ends at the upstream's last event", () => {
  const on = gatewayOnScriptedUpstream(answer, { SVC_UPSTREAM_IDLE_TIMEOUT_MS: String(IDLE_MS) });
  let n = 0;

  it("messages: an upstream that holds its connection open after message_stop neither holds nor fails the answer (anthropic SDK)", async () => {
    const client = new Anthropic({ apiKey: on.key, baseURL: on.gw.gatewayUrl, maxRetries: 0 });
    const started = Date.now();
    const message = await client.messages.stream({ model: "assistant-3-5-haiku-20241022", max_tokens: 50, messages: [{ role: "user", content: `hold ${++n}` }] }).finalMessage();
    assert.equal(message.stop_reason, "end_turn");
    assert.equal(message.content[0]!.type === "text" && message.content[0]!.text, "Done.");
    assert.ok(Date.now() - started < HOLD_MS - 500, `answered in ${Date.now() - started} ms, not when the upstream let go`);
  });

  it("chat completions: the same after [DONE] (openai SDK), and the raw stream ends at [DONE] with no error event", async () => {
    const client = new OpenAI({ apiKey: on.key, baseURL: `${on.gw.gatewayUrl}/v1`, maxRetries: 0 });
    const started = Date.now();
    const final = await client.chat.completions.stream({ model: "chat-4o", messages: [{ role: "user", content: `hold ${++n}` }] }).finalChatCompletion();
    assert.equal(final.choices[0]!.message.content, "Done.");
    assert.ok(Date.now() - started < HOLD_MS - 500, `answered in ${Date.now() - started} ms`);
    const raw = await postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { model: "chat-4o", stream: true, messages: [{ role: "user", content: `hold ${++n}` }] });
    const events = sseEvents(raw.text);
    assert.equal(events.at(-1)!.data, "[DONE]", raw.text);
    assert.ok(!raw.text.includes('"error"'), raw.text);
    assert.ok(Number(raw.trailers["x-svc-cost"]) > 0, "the cost trailer came with the answer");
  });

  it("logs a whole stream the cache does not keep (thinking) with its answer, not an empty body", async () => {
    const raw = await postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-haiku-20241022", max_tokens: 50, stream: true, messages: [{ role: "user", content: `thinking ${++n}` }] });
    assert.equal(raw.status, 200, raw.text);
    const id = String(raw.headers["x-svc-request-id"]);
    const projectId = on.projectId;
    let log: { responseBody: string; status: number } | undefined;
    await eventually(async () => {
      log = (await on.gw.telemetry.getLog({ projectId, keyMode: KeyMode.LIVE, requestId: id }).catch(() => undefined))?.log;
      return log !== undefined;
    }, 5_000, "the stream's log");
    assert.equal(log!.status, 200);
    const body = JSON.parse(log!.responseBody);
    assert.equal(body.stop_reason, "end_turn");
    assert.ok(body.content.some((b: { type: string; text?: string }) => b.type === "text" && b.text === "Result"), log!.responseBody);
  });

  it("messages: nothing after message_stop reaches the client; the stream has one message_stop, last", async () => {
    const raw = await postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-haiku-20241022", max_tokens: 50, stream: true, messages: [{ role: "user", content: `after ${++n}` }] });
    const events = sseEvents(raw.text);
    assert.equal(events.filter((e) => e.event === "message_stop").length, 1, raw.text);
    assert.equal(events.at(-1)!.event, "message_stop", raw.text);
    assert.ok(!raw.text.includes("AFTER"), raw.text);
  });
});
