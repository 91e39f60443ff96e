import assert from "node:assert/strict";
import { create, toJson, type JsonObject } from "@bufbuild/protobuf";
import { ApiStyle, CompletionSchema, FinishReason, StreamChatRequestSchema } from "../../../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { toErrorInfo } from "../../../../../src/core/errors.js";
import { createAnthropicAdapter } from "../../../../../src/core/proxy/upstreams/anthropic/adapter.js";

const adapter = createAnthropicAdapter();
const req = create(StreamChatRequestSchema, { model: "assistant-3-5-sonnet-20241022", style: ApiStyle.MESSAGES });

/** A non-stream answer as api.anthropic.com returns it, with thinking, text with citations and a tool call. */
const answer = Object.freeze({
  id: "msg_01Aq9w938a90dw8q",
  type: "message",
  role: "assistant",
  model: "claude-3-5-sonnet-20241022",
  content: [
    { type: "thinking", thinking: "The user wants the weather.", signature: "EqQBCgIYAhIM" },
    { type: "text", text: "Let me check.", citations: null },
    { type: "tool_use", id: "toolu_01A09q90qw90lq917835lq9", name: "get_weather", input: { location: "San Francisco, CA", unit: "celsius" } },
  ],
  stop_reason: "tool_use",
  stop_sequence: null,
  usage: { input_tokens: 2095, cache_creation_input_tokens: 0, cache_read_input_tokens: 1800, output_tokens: 503, service_tier: "standard" },
  container: null,
});

const parse = (body: unknown) => adapter.parseCompletion(body, req);

describe("anthropic response", () => {
  it("converts a whole answer to a Completion", () => {
    const c = toJson(CompletionSchema, parse(answer)) as JsonObject;
    delete c.created;
    assert.deepEqual(c, {
      id: "msg_01Aq9w938a90dw8q",
      model: "assistant-3-5-sonnet-20241022",
      blocks: [
        { type: "BLOCK_TYPE_OTHER", rawJson: '{"type":"thinking","thinking":"The user wants the weather.","signature":"EqQBCgIYAhIM"}', style: "API_STYLE_MESSAGES" },
        { type: "BLOCK_TYPE_TEXT", text: "Let me check.", extraJson: '{"citations":null}', style: "API_STYLE_MESSAGES" },
        {
          type: "BLOCK_TYPE_TOOL_USE",
          toolCallId: "toolu_01A09q90qw90lq917835lq9",
          toolName: "get_weather",
          toolInputJson: '{"location":"San Francisco, CA","unit":"celsius"}',
          style: "API_STYLE_MESSAGES",
        },
      ],
      finishReason: "FINISH_REASON_TOOL_USE",
      // All the input (2095 uncached + 1800 read from the cache), the cache's share counted apart; the wire's counters kept as sent.
      usage: { inputTokens: 3895, outputTokens: 503, extraJson: '{"cache_creation_input_tokens":0,"cache_read_input_tokens":1800,"service_tier":"standard"}', cacheReadTokens: 1800 },
      upstreamStyle: "API_STYLE_MESSAGES",
      extraJson: '{"container":null}',
    });
  });

  it("stamps the creation time in seconds", () => {
    const now = Math.floor(Date.now() / 1000);
    assert.ok(Math.abs(parse(answer).created - now) <= 1);
  });

  for (const [stop, reason] of [
    ["end_turn", FinishReason.END_TURN],
    ["max_tokens", FinishReason.MAX_TOKENS],
    ["stop_sequence", FinishReason.STOP_SEQUENCE],
    ["tool_use", FinishReason.TOOL_USE],
    ["pause_turn", FinishReason.PAUSE_TURN],
    ["refusal", FinishReason.CONTENT_FILTER],
    // One this build does not know still ended the answer (kept as sent for a messages client); none is UNSPECIFIED.
    ["something_new", FinishReason.END_TURN],
    [null, FinishReason.UNSPECIFIED],
  ] as const) {
    it(`maps stop_reason ${stop} to ${FinishReason[reason]}`, () => {
      assert.equal(parse({ ...answer, stop_reason: stop }).finishReason, reason);
    });
  }

  it("keeps the stop sequence that ended the answer", () => {
    assert.equal(parse({ ...answer, stop_reason: "stop_sequence", stop_sequence: "\n\nHuman:" }).stopSequence, "\n\nHuman:");
  });

  it("leaves its input unchanged", () => {
    const before = JSON.stringify(answer);
    parse(answer);
    assert.equal(JSON.stringify(answer), before);
  });

  for (const [what, body] of [
    ["a body that is not an object", ["x"]],
    ["a body without a content array", { ...answer, content: "hi" }],
  ] as const) {
    it(`rejects ${what} as a 502 upstream_invalid_response`, () => {
      assert.throws(() => parse(body), (e) => {
        const info = toErrorInfo(e);
        assert.deepEqual([info.status, info.type, info.code], [502, "api_error", "upstream_invalid_response"]);
        return true;
      });
    });
  }
});
