import assert from "node:assert/strict";
import { create, toJson } from "@bufbuild/protobuf";
import { ApiStyle, CompletionSchema, FinishReason, StreamChatRequestSchema } from "../../../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { toErrorInfo } from "../../../../../src/core/errors.js";
import { createOpenAiAdapter } from "../../../../../src/core/proxy/upstreams/openai/adapter.js";
import { MAX_TOKENS_COUNT } from "../../../../../src/core/proxy/canonical.js";
import { costPico, formatUsd } from "../../../../../src/core/proxy/cost.js";
import { defaultModels, pricesOf } from "../../../../../src/core/proxy/models.js";

const adapter = createOpenAiAdapter();
const req = create(StreamChatRequestSchema, { model: "chat-4o", style: ApiStyle.CHAT_COMPLETIONS });

const usage = {
  prompt_tokens: 82,
  completion_tokens: 17,
  total_tokens: 99,
  prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
};

const textBody = {
  id: "chatcmpl-BkZ1a2b3c4d5e6f7g8h9i0j1k2l3m",
  object: "chat.completion",
  created: 1750432000,
  model: "gpt-4o-2024-08-06",
  choices: [{ index: 0, message: { role: "assistant", content: "Paris.", refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }],
  usage,
  service_tier: "default",
  system_fingerprint: "fp_07871e2ad8",
};

const toolBody = {
  ...textBody,
  choices: [{
    index: 0,
    message: {
      role: "assistant",
      content: null,
      tool_calls: [
        { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
        { id: "call_b", type: "function", function: { name: "get_weather", arguments: '{"city":"Tokyo"}' } },
      ],
      refusal: null,
      annotations: [],
    },
    logprobs: null,
    finish_reason: "tool_calls",
  }],
};

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const json = (body: unknown) => toJson(CompletionSchema, adapter.parseCompletion(body, req)) as Record<string, any>;

describe("openai response conversion", () => {
  it("converts a text answer with the public model id and the extras of each level", () => {
    assert.deepEqual(json(textBody), {
      id: "chatcmpl-BkZ1a2b3c4d5e6f7g8h9i0j1k2l3m",
      model: "chat-4o",
      created: 1750432000,
      blocks: [{ type: "BLOCK_TYPE_TEXT", text: "Paris." }],
      finishReason: "FINISH_REASON_END_TURN",
      usage: { inputTokens: 82, outputTokens: 17, extraJson: JSON.stringify({ prompt_tokens_details: usage.prompt_tokens_details, completion_tokens_details: usage.completion_tokens_details }) },
      upstreamStyle: "API_STYLE_CHAT_COMPLETIONS",
      extraJson: '{"service_tier":"default","system_fingerprint":"fp_07871e2ad8"}',
      messageExtraJson: '{"annotations":[]}',
    });
  });

  it("converts tool calls to one tool-use block each, in order", () => {
    assert.deepEqual(json(toolBody).blocks, [
      { type: "BLOCK_TYPE_TOOL_USE", toolCallId: "call_a", toolName: "get_weather", toolInputJson: '{"city":"Paris"}', style: "API_STYLE_CHAT_COMPLETIONS" },
      { type: "BLOCK_TYPE_TOOL_USE", toolCallId: "call_b", toolName: "get_weather", toolInputJson: '{"city":"Tokyo"}', style: "API_STYLE_CHAT_COMPLETIONS" },
    ]);
  });

  it("keeps a tool call's own fields, and its function's, in the block's extra_json (Gemini's extra_content)", () => {
    const call = { id: "call_g", type: "function", function: { name: "f", arguments: "{}", x_fn: [1] }, extra_content: { google: { thought_signature: "s" } } };
    const custom = { id: "call_c", type: "custom", custom: { name: "grep", input: "a.*b", x_c: true }, extra_content: 1 };
    const body = { ...toolBody, choices: [{ ...toolBody.choices[0], message: { role: "assistant", content: null, tool_calls: [call, custom] } }] };
    assert.deepEqual(json(body).blocks.map((b: { extraJson: string }) => JSON.parse(b.extraJson)), [
      { extra_content: { google: { thought_signature: "s" } }, function: { x_fn: [1] } },
      { extra_content: 1, custom: { x_c: true }, type: "custom" },
    ]);
  });

  for (const [reason, expected] of [
    ["stop", "FINISH_REASON_END_TURN"],
    ["length", "FINISH_REASON_MAX_TOKENS"],
    ["tool_calls", "FINISH_REASON_TOOL_USE"],
    ["function_call", "FINISH_REASON_TOOL_USE"],
    ["content_filter", "FINISH_REASON_CONTENT_FILTER"],
  ]) {
    it(`maps finish_reason ${reason} to ${expected}`, () => {
      const body = { ...textBody, choices: [{ ...textBody.choices[0], finish_reason: reason }] };
      assert.equal(json(body).finishReason, expected);
    });
  }

  it("gives a messages client TOOL_USE for tool calls that finished with \"stop\" (a call tool_choice forced); a chat client the reason as sent", () => {
    const forced = { ...toolBody, choices: [{ ...toolBody.choices[0], finish_reason: "stop" }] };
    const messagesReq = create(StreamChatRequestSchema, { model: "assistant-x", style: ApiStyle.MESSAGES });
    assert.equal(adapter.parseCompletion(forced, messagesReq).finishReason, FinishReason.TOOL_USE);
    assert.equal(adapter.parseCompletion(forced, req).finishReason, FinishReason.END_TURN);
    // Only tool calls make it so: a text answer's "stop", and a cut-off call's "length", stay.
    assert.equal(adapter.parseCompletion(textBody, messagesReq).finishReason, FinishReason.END_TURN);
    const cut = { ...toolBody, choices: [{ ...toolBody.choices[0], finish_reason: "length" }] };
    assert.equal(adapter.parseCompletion(cut, messagesReq).finishReason, FinishReason.MAX_TOKENS);
  });

  it("reads choice 0 when the upstream returned several", () => {
    const second = { index: 1, message: { role: "assistant", content: "Other." }, finish_reason: "stop" };
    assert.deepEqual(json({ ...textBody, choices: [second, textBody.choices[0]] }).blocks, [{ type: "BLOCK_TYPE_TEXT", text: "Paris." }]);
  });

  it("holds absurd token counts from a broken upstream to what a count can carry, so the request's cost stays loggable", () => {
    const huge = adapter.parseCompletion({ ...textBody, usage: { prompt_tokens: 1e15, completion_tokens: 1e22, prompt_tokens_details: { cached_tokens: 1e400 } } }, req).usage!;
    assert.deepEqual([huge.inputTokens, huge.outputTokens, huge.cacheReadTokens], [MAX_TOKENS_COUNT, MAX_TOKENS_COUNT, MAX_TOKENS_COUNT]);
    // The most expensive default prices (assistant-3-opus, 15 / 75 USD per 1M) on those counts: below the log's 1,000,000 USD.
    const cost = Number(formatUsd(costPico(pricesOf(defaultModels.find((m) => m.id === "assistant-3-opus-20240229")!), huge)));
    assert.ok(cost > 0 && cost < 1_000_000, String(cost));
  });

  it("reads token counts sent as strings of digits (some compatible servers), and nothing else that is not a number", () => {
    const u = adapter.parseCompletion({ ...textBody, usage: { prompt_tokens: "82", completion_tokens: "17", prompt_tokens_details: { cached_tokens: "2" } } }, req).usage!;
    assert.deepEqual([u.inputTokens, u.outputTokens, u.cacheReadTokens], [82, 17, 2]);
    const odd = adapter.parseCompletion({ ...textBody, usage: { prompt_tokens: "8.5", completion_tokens: "-3", prompt_tokens_details: { cached_tokens: " 2" } } }, req).usage!;
    assert.deepEqual([odd.inputTokens, odd.outputTokens, odd.cacheReadTokens], [0, 0, 0]);
  });

  it("leaves usage unset when the upstream sent none", () => {
    const { usage: _u, ...noUsage } = textBody;
    assert.equal(adapter.parseCompletion(noUsage, req).usage, undefined);
  });

  it("does not change the upstream body", () => {
    const copy = structuredClone(toolBody);
    adapter.parseCompletion(copy, req);
    assert.deepEqual(copy, toolBody);
  });

  it("rejects a body without choices as a 502 upstream_invalid_response", () => {
    assert.throws(() => adapter.parseCompletion({ id: "x" }, req), (err) => {
      const info = toErrorInfo(err);
      return info.status === 502 && info.code === "upstream_invalid_response";
    });
  });
});
