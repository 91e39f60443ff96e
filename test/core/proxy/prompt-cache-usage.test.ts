import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  ApiStyle,
  type Completion,
  StreamChatRequestSchema,
  type StreamChatResponse,
  type Usage,
} from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { loadConfig } from "../../../src/config.js";
import { SseParser } from "../../../src/core/sse.js";
import { costPico, formatUsd } from "../../../src/core/proxy/cost.js";
import { pricesOf } from "../../../src/core/proxy/models.js";
import { createAnthropicAdapter } from "../../../src/core/proxy/upstreams/anthropic/adapter.js";
import { createOpenAiAdapter } from "../../../src/core/proxy/upstreams/openai/adapter.js";
import type { UpstreamAdapter } from "../../../src/core/proxy/upstreams/adapter.js";
import { chatCompletionsCodec } from "../../../src/facades/gateway/chat-completions-codec.js";
import { messagesCodec } from "../../../src/facades/gateway/messages-codec.js";

/**
 * Prompt-cache counts from each upstream style: into the canonical usage (every input token counted,
 * the cache's reads and writes apart), priced as the provider bills them, and written back to a
 * client of either style (a same-style client gets the upstream's usage exactly as sent).
 */

// An Anthropic answer's usage with prompt caching: `input_tokens` excludes the cache's 7 + 11.
const anthropicUsage = { input_tokens: 25, cache_creation_input_tokens: 7, cache_read_input_tokens: 11, output_tokens: 12 };
// An OpenAI answer's usage: `prompt_tokens` includes the 3 cached tokens.
const openaiUsage = {
  prompt_tokens: 19,
  completion_tokens: 5,
  total_tokens: 24,
  prompt_tokens_details: { cached_tokens: 3, audio_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
};

const counts = (u: Usage | undefined) => u && { input: u.inputTokens, cacheRead: u.cacheReadTokens, cacheWrite: u.cacheWriteTokens, output: u.outputTokens };

const anthropic = createAnthropicAdapter();
const openai = createOpenAiAdapter();
const messagesReq = create(StreamChatRequestSchema, { model: "assistant-3-5-sonnet-20241022", style: ApiStyle.MESSAGES, stream: true });
const chatReq = create(StreamChatRequestSchema, { model: "chat-4o", style: ApiStyle.CHAT_COMPLETIONS, stream: true });

const anthropicAnswer = {
  id: "msg_1",
  type: "message",
  role: "assistant",
  model: "claude-3-5-sonnet-20241022",
  content: [{ type: "text", text: "Hi" }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: anthropicUsage,
};
const openaiAnswer = {
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1750431500,
  model: "gpt-4o-2024-11-20",
  choices: [{ index: 0, message: { role: "assistant", content: "Hi", refusal: null }, logprobs: null, finish_reason: "stop" }],
  usage: openaiUsage,
};

const sse = (event: string, data: object) => `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
const anthropicStream = (deltaUsage: object) =>
  sse("message_start", { message: { ...anthropicAnswer, content: [], stop_reason: null, usage: { ...anthropicUsage, output_tokens: 1 } } }) +
  sse("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
  sse("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hi" } }) +
  sse("content_block_stop", { index: 0 }) +
  sse("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: deltaUsage }) +
  sse("message_stop", {});
const chunk = (o: object) => `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 1750431500, model: "gpt-4o", ...o })}\n\n`;
const openaiStream =
  chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] }) +
  chunk({ choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: null }] }) +
  chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }) +
  chunk({ choices: [], usage: openaiUsage }) +
  "data: [DONE]\n\n";

/** The canonical events of an upstream stream, through the SSE parser and the adapter's converter. */
function convert(adapter: UpstreamAdapter, req: typeof messagesReq, text: string): StreamChatResponse[] {
  const conv = adapter.createStreamConverter(req);
  const parser = new SseParser();
  const out: StreamChatResponse[] = [];
  for (const e of [...parser.push(text), ...parser.end()]) out.push(...conv.push(e));
  out.push(...conv.end());
  return out;
}
const endUsage = (events: StreamChatResponse[]) => {
  const e = events.at(-1)!.event;
  assert.equal(e.case, "messageEnd");
  return e.value.usage;
};

/** The usage objects a client of each style reads from a stream rendered from `events`. */
function streamedUsage(events: StreamChatResponse[]) {
  const chat = chatCompletionsCodec.createStreamRenderer({ model: "m", stream: true, extraJson: '{"stream_options":{"include_usage":true}}' });
  const chatText = events.map((e) => chat.render(e)).join("");
  const chatChunks = chatText.split("\n\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)));
  const msgs = messagesCodec.createStreamRenderer({ model: "m", stream: true });
  const msgText = events.map((e) => msgs.render(e)).join("");
  const msgEvents = msgText.split("\n\n").filter(Boolean).map((b) => JSON.parse(b.split("\n")[1]!.slice(6)));
  return {
    chat: chatChunks.at(-1).usage,
    messagesStart: msgEvents.find((e) => e.type === "message_start").message.usage,
    messagesDelta: msgEvents.find((e) => e.type === "message_delta").usage,
  };
}

describe("prompt-cache tokens: usage from each upstream style, and what each client style reads", () => {
  describe("from a messages-style (Anthropic) upstream", () => {
    it("counts every input token, the cache's writes and reads apart, in a whole answer", () => {
      const c = anthropic.parseCompletion(anthropicAnswer, messagesReq);
      assert.deepEqual(counts(c.usage), { input: 43, cacheRead: 11, cacheWrite: 7, output: 12 });
    });

    it("does so in a stream, from message_start's counts and message_delta's (cumulative, maybe repeating them)", () => {
      assert.deepEqual(counts(endUsage(convert(anthropic, messagesReq, anthropicStream({ output_tokens: 12 })))), { input: 43, cacheRead: 11, cacheWrite: 7, output: 12 });
      assert.deepEqual(counts(endUsage(convert(anthropic, messagesReq, anthropicStream(anthropicUsage)))), { input: 43, cacheRead: 11, cacheWrite: 7, output: 12 });
      const start = convert(anthropic, messagesReq, anthropicStream({ output_tokens: 12 }))[0]!.event;
      assert.equal(start.case, "messageStart");
      assert.deepEqual(counts(start.value.usage), { input: 43, cacheRead: 11, cacheWrite: 7, output: 1 });
    });

    it("gives a messages-style client the usage exactly as sent", () => {
      const c = anthropic.parseCompletion(anthropicAnswer, messagesReq) as Completion;
      assert.deepEqual((messagesCodec.renderCompletion(c) as { usage: object }).usage, anthropicUsage);
      const s = streamedUsage(convert(anthropic, messagesReq, anthropicStream({ output_tokens: 12 })));
      assert.deepEqual(s.messagesStart, { ...anthropicUsage, output_tokens: 1 });
      assert.deepEqual(s.messagesDelta, anthropicUsage);
    });

    it("gives a chat-completions client prompt_tokens of all input, with the cache reads as prompt_tokens_details.cached_tokens", () => {
      const expected = { prompt_tokens: 43, completion_tokens: 12, total_tokens: 55, prompt_tokens_details: { cached_tokens: 11 } };
      const c = anthropic.parseCompletion(anthropicAnswer, messagesReq);
      assert.deepEqual((chatCompletionsCodec.renderCompletion(c) as { usage: object }).usage, expected);
      assert.deepEqual(streamedUsage(convert(anthropic, messagesReq, anthropicStream({ output_tokens: 12 }))).chat, expected);
      // No cache reads: no details, as before.
      const plain = anthropic.parseCompletion({ ...anthropicAnswer, usage: { input_tokens: 25, output_tokens: 12 } }, messagesReq);
      assert.deepEqual((chatCompletionsCodec.renderCompletion(plain) as { usage: object }).usage, { prompt_tokens: 25, completion_tokens: 12, total_tokens: 37 });
    });
  });

  describe("from a chat-completions-style (OpenAI) upstream", () => {
    it("takes prompt_tokens as all input and prompt_tokens_details.cached_tokens as the cache reads, whole or streamed", () => {
      assert.deepEqual(counts(openai.parseCompletion(openaiAnswer, chatReq).usage), { input: 19, cacheRead: 3, cacheWrite: 0, output: 5 });
      assert.deepEqual(counts(endUsage(convert(openai, chatReq, openaiStream))), { input: 19, cacheRead: 3, cacheWrite: 0, output: 5 });
      // A cached count above the prompt's (a broken upstream) is cut to it.
      const odd = openai.parseCompletion({ ...openaiAnswer, usage: { prompt_tokens: 2, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 9 } } }, chatReq);
      assert.deepEqual(counts(odd.usage), { input: 2, cacheRead: 2, cacheWrite: 0, output: 1 });
    });

    it("takes prompt_tokens_details.cache_write_tokens (a compatible server fronting Anthropic models) as the cache writes, within the uncached input", () => {
      const written = (details: object) => counts(openai.parseCompletion({ ...openaiAnswer, usage: { prompt_tokens: 19, completion_tokens: 5, prompt_tokens_details: details } }, chatReq).usage);
      assert.deepEqual(written({ cached_tokens: 3, cache_write_tokens: 7 }), { input: 19, cacheRead: 3, cacheWrite: 7, output: 5 });
      assert.deepEqual(written({ cached_tokens: 3, cache_write_tokens: 90 }), { input: 19, cacheRead: 3, cacheWrite: 16, output: 5 });
    });

    it("gives a chat-completions client the usage exactly as sent", () => {
      assert.deepEqual((chatCompletionsCodec.renderCompletion(openai.parseCompletion(openaiAnswer, chatReq)) as { usage: object }).usage, openaiUsage);
      assert.deepEqual(streamedUsage(convert(openai, chatReq, openaiStream)).chat, openaiUsage);
    });

    it("gives a messages-style client input_tokens without the cached tokens, which are cache_read_input_tokens", () => {
      const expected = { input_tokens: 16, cache_read_input_tokens: 3, output_tokens: 5 };
      assert.deepEqual((messagesCodec.renderCompletion(openai.parseCompletion(openaiAnswer, chatReq)) as { usage: object }).usage, expected);
      assert.deepEqual(streamedUsage(convert(openai, chatReq, openaiStream)).messagesDelta, expected);
      // Nothing cached: the usage as before.
      const plain = openai.parseCompletion({ ...openaiAnswer, usage: { prompt_tokens: 19, completion_tokens: 5, total_tokens: 24 } }, chatReq);
      assert.deepEqual((messagesCodec.renderCompletion(plain) as { usage: object }).usage, { input_tokens: 19, output_tokens: 5 });
    });
  });

  describe("priced as the provider bills it", () => {
    const models = loadConfig({}).models;
    const usd = (model: string, u: Usage | undefined) => formatUsd(costPico(pricesOf(models.get(model)!), u!));

    it("Anthropic: cache writes at 1.25x the input price, cache reads at 0.1x", () => {
      // assistant-3-5-sonnet: $3 input ($3.75 writes, $0.30 reads), $15 output per 1M:
      // 25 x 3 + 7 x 3.75 + 11 x 0.30 + 12 x 15 = 284.55 per 1M.
      assert.equal(usd("assistant-3-5-sonnet-20241022", anthropic.parseCompletion(anthropicAnswer, messagesReq).usage), "0.00028455");
      assert.equal(usd("assistant-3-5-sonnet-20241022", endUsage(convert(anthropic, messagesReq, anthropicStream({ output_tokens: 12 })))), "0.00028455");
    });

    it("OpenAI: cached input at 0.5x the input price", () => {
      // chat-4o: $2.50 input ($1.25 cached), $10 output per 1M: 16 x 2.50 + 3 x 1.25 + 5 x 10 = 93.75 per 1M.
      assert.equal(usd("chat-4o", openai.parseCompletion(openaiAnswer, chatReq).usage), "0.00009375");
      assert.equal(usd("chat-4o", endUsage(convert(openai, chatReq, openaiStream))), "0.00009375");
    });
  });
});
