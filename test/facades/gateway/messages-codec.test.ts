import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { create, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import {
  ApiStyle,
  BlockType,
  CompletionSchema,
  FinishReason,
  StreamChatRequestSchema,
  StreamChatResponseSchema,
  type StreamChatResponse,
} from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { createAnthropicAdapter } from "../../../src/core/proxy/upstreams/anthropic/adapter.js";
import { messagesCodec as codec } from "../../../src/facades/gateway/messages-codec.js";
import { deepFreeze } from "../../support/freeze.js";
import { itRejects, type InvalidCase } from "../../support/codec-cases.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = Record<string, any>;
const M = ApiStyle.MESSAGES;
const C = ApiStyle.CHAT_COMPLETIONS;
const MODEL = "assistant-3-5-sonnet-20241022";
const user = [{ role: "user", content: "hi" }];
const valid = (extra: object = {}) => ({ model: MODEL, max_tokens: 64, messages: user, ...extra });

const canonical = (body: unknown) => toJson(StreamChatRequestSchema, create(StreamChatRequestSchema, codec.parseRequest(deepFreeze(body)))) as Json;

/** The official SDK reading a body the gateway would send, through a fetch that returns it. */
const sdk = (body: string, contentType: string) =>
  new Anthropic({ apiKey: "svc_sk_test_x", baseURL: "http://gateway.test", maxRetries: 0, fetch: async () => new Response(body, { headers: { "content-type": contentType } }) });

describe("messages codec: invalid requests", () => {
  const cases: InvalidCase[] = [
    ["a body that is not an object", "hi", "invalid_body", "body"],
    ["no model", { max_tokens: 5, messages: user }, "missing_required_field", "`model`"],
    ["an empty model", valid({ model: "" }), "invalid_value", "`model`"],
    ["a numeric model", valid({ model: 3 }), "invalid_type", "`model`"],
    ["no max_tokens", { model: MODEL, messages: user }, "missing_required_field", "`max_tokens`"],
    ["max_tokens zero", valid({ max_tokens: 0 }), "invalid_value", "`max_tokens`"],
    ["max_tokens fractional", valid({ max_tokens: 2.5 }), "invalid_type", "`max_tokens`"],
    ["max_tokens a string", valid({ max_tokens: "64" }), "invalid_type", "`max_tokens`"],
    ["no messages", { model: MODEL, max_tokens: 5 }, "missing_required_field", "`messages`"],
    ["empty messages", valid({ messages: [] }), "invalid_value", "`messages`"],
    ["messages an object", valid({ messages: { role: "user" } }), "invalid_type", "`messages`"],
    ["a message that is a string", valid({ messages: ["hi"] }), "invalid_type", "`messages[0]`"],
    ["a role no message has", valid({ messages: [{ role: "tool", content: "x" }] }), "invalid_value", "`messages[0].role`"],
    ["a message that is null (there, mistyped, not missing)", valid({ messages: [null] }), "invalid_type", "`messages[0]`"],
    ["a missing role", valid({ messages: [{ content: "x" }] }), "missing_required_field", "`messages[0].role`"],
    ["a missing content", valid({ messages: [{ role: "user" }] }), "missing_required_field", "`messages[0].content`"],
    ["a numeric content", valid({ messages: [{ role: "user", content: 1 }] }), "invalid_type", "`messages[0].content`"],
    ["a block without type", valid({ messages: [{ role: "user", content: [{ text: "x" }] }] }), "missing_required_field", "`messages[0].content[0].type`"],
    ["a block that is a string", valid({ messages: [{ role: "user", content: ["x"] }] }), "invalid_type", "`messages[0].content[0]`"],
    ["a text block without text", valid({ messages: [{ role: "user", content: [{ type: "text" }] }] }), "missing_required_field", "`messages[0].content[0].text`"],
    ["a tool_use without id", valid({ messages: [{ role: "assistant", content: [{ type: "tool_use", name: "f", input: {} }] }] }), "missing_required_field", "`messages[0].content[0].id`"],
    ["a tool_use with a string input", valid({ messages: [{ role: "assistant", content: [{ type: "tool_use", id: "t", name: "f", input: "{}" }] }] }), "invalid_type", "`messages[0].content[0].input`"],
    ["a tool_result without tool_use_id", valid({ messages: [{ role: "user", content: [{ type: "tool_result", content: "r" }] }] }), "missing_required_field", "`messages[0].content[0].tool_use_id`"],
    ["a tool_result with numeric content", valid({ messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: 5 }] }] }), "invalid_type", "`messages[0].content[0].content`"],
    ["a tool_result with a bad nested block", valid({ messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: [{ type: "text" }] }] }] }), "missing_required_field", "`messages[0].content[0].content[0].text`"],
    ["a numeric system", valid({ system: 1 }), "invalid_type", "`system`"],
    ["a system block that is not text", valid({ system: [{ type: "image", source: {} }] }), "invalid_value", "`system[0].type`"],
    ["a system block without text", valid({ system: [{ type: "text" }] }), "missing_required_field", "`system[0].text`"],
    ["temperature above 1", valid({ temperature: 1.5 }), "invalid_value", "`temperature`"],
    ["temperature a string", valid({ temperature: "warm" }), "invalid_type", "`temperature`"],
    ["stream a string", valid({ stream: "true" }), "invalid_type", "`stream`"],
    ["tools an object", valid({ tools: {} }), "invalid_type", "`tools`"],
    ["a tool without name", valid({ tools: [{ input_schema: { type: "object" } }] }), "missing_required_field", "`tools[0].name`"],
    ["a tool name with spaces", valid({ tools: [{ name: "get weather", input_schema: { type: "object" } }] }), "invalid_value", "`tools[0].name`"],
    ["a tool without input_schema", valid({ tools: [{ name: "f" }] }), "missing_required_field", "`tools[0].input_schema`"],
    ["a custom tool without input_schema", valid({ tools: [{ type: "custom", name: "f" }] }), "missing_required_field", "`tools[0].input_schema`"],
    ["a tool description that is a number", valid({ tools: [{ name: "f", input_schema: {}, description: 1 }] }), "invalid_type", "`tools[0].description`"],
    ["stop_sequences with a number", valid({ stop_sequences: ["a", 1] }), "invalid_type", "`stop_sequences[1]`"],
    ["stop_sequences a string", valid({ stop_sequences: "a" }), "invalid_type", "`stop_sequences`"],
    ["top_k negative", valid({ top_k: -1 }), "invalid_value", "`top_k`"],
    ["top_k fractional", valid({ top_k: 1.5 }), "invalid_type", "`top_k`"],
    ["top_p above 1", valid({ top_p: 1.1 }), "invalid_value", "`top_p`"],
    ["metadata a string", valid({ metadata: "u" }), "invalid_type", "`metadata`"],
    ["tool_choice without type", valid({ tool_choice: {} }), "missing_required_field", "`tool_choice.type`"],
  ];
  itRejects(codec, cases);
});

describe("messages codec: valid requests", () => {
  it("parses the minimal body", () => {
    assert.deepEqual(canonical(valid()), {
      style: "API_STYLE_MESSAGES",
      model: MODEL,
      maxTokens: 64,
      messages: [{ role: "user", contentIsString: true, blocks: [{ type: "BLOCK_TYPE_TEXT", text: "hi", style: "API_STYLE_MESSAGES" }] }],
    });
  });

  it("parses temperature and stream", () => {
    const c = canonical(valid({ temperature: 0, stream: true }));
    assert.deepEqual([c.temperature, c.stream], [0, true]);
  });

  it("joins a system given as blocks, and keeps the blocks in extra", () => {
    const system = [{ type: "text", text: "A", cache_control: { type: "ephemeral" } }, { type: "text", text: "B" }];
    const c = canonical(valid({ system }));
    assert.equal(c.system, "A\n\nB");
    assert.deepEqual(JSON.parse(c.extraJson), { system });
  });

  it("parses content blocks, keeping their unknown fields and raw blocks", () => {
    const c = canonical(
      valid({
        messages: [
          { role: "user", content: [{ type: "text", text: "look", cache_control: { type: "ephemeral" } }, { type: "image", source: { type: "url", url: "https://x.test/a.png" } }] },
          { role: "assistant", content: [{ type: "thinking", thinking: "t", signature: "s" }, { type: "tool_use", id: "toolu_1", name: "f", input: { a: 1 } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "done", is_error: true }] },
        ],
      }),
    );
    assert.deepEqual(
      c.messages.map((m: Json) => m.blocks),
      [
        [
          { type: "BLOCK_TYPE_TEXT", text: "look", extraJson: '{"cache_control":{"type":"ephemeral"}}', style: "API_STYLE_MESSAGES" },
          { type: "BLOCK_TYPE_IMAGE", rawJson: '{"type":"image","source":{"type":"url","url":"https://x.test/a.png"}}', style: "API_STYLE_MESSAGES" },
        ],
        [
          { type: "BLOCK_TYPE_OTHER", rawJson: '{"type":"thinking","thinking":"t","signature":"s"}', style: "API_STYLE_MESSAGES" },
          { type: "BLOCK_TYPE_TOOL_USE", toolCallId: "toolu_1", toolName: "f", toolInputJson: '{"a":1}', style: "API_STYLE_MESSAGES" },
        ],
        [{ type: "BLOCK_TYPE_TOOL_RESULT", toolCallId: "toolu_1", text: "done", isError: true, style: "API_STYLE_MESSAGES" }],
      ],
    );
  });

  it("parses custom tools, and carries server tools whole", () => {
    const c = canonical(
      valid({
        tools: [
          { name: "get_weather", description: "Weather", input_schema: { type: "object" }, cache_control: { type: "ephemeral" } },
          { type: "custom", name: "f", input_schema: { type: "object" } },
          { type: "web_search_20250305", name: "web_search", max_uses: 5 },
        ],
      }),
    );
    assert.deepEqual(c.tools, [
      { name: "get_weather", description: "Weather", inputSchemaJson: '{"type":"object"}', extraJson: '{"cache_control":{"type":"ephemeral"}}' },
      { name: "f", inputSchemaJson: '{"type":"object"}', extraJson: '{"type":"custom"}' },
      { extraJson: '{"type":"web_search_20250305","name":"web_search","max_uses":5}' },
    ]);
  });

  it("keeps every other top-level field verbatim in extra", () => {
    const extra = { top_k: 5, top_p: 0.5, stop_sequences: ["x"], metadata: { user_id: "u" }, tool_choice: { type: "any" }, thinking: { type: "enabled", budget_tokens: 1024 }, service_tier: "auto", x_new: [null] };
    assert.deepEqual(JSON.parse(canonical(valid(extra)).extraJson), extra);
  });

  it("rebuilds the client's body for a messages-style upstream (codec + adapter round trip)", () => {
    const body = {
      model: MODEL,
      max_tokens: 300,
      system: [{ type: "text", text: "sys", cache_control: { type: "ephemeral" } }],
      messages: [
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: [{ type: "thinking", thinking: "t", signature: "s" }, { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "20C" }] }, { type: "text", text: "thanks", cache_control: { type: "ephemeral" } }] },
      ],
      temperature: 0.3,
      stream: true,
      tools: [{ name: "get_weather", input_schema: { type: "object" } }, { type: "web_search_20250305", name: "web_search" }],
      top_k: 3,
      thinking: { type: "enabled", budget_tokens: 1024 },
    };
    const req = create(StreamChatRequestSchema, codec.parseRequest(deepFreeze(body)));
    const target = { provider: "anthropic", style: M, baseUrl: "https://api.anthropic.com", apiKey: "k", upstreamModel: "claude-3-5-sonnet-20241022" };
    const sent = JSON.parse(createAnthropicAdapter().buildRequest(req, target).body);
    assert.deepEqual(sent, { ...body, model: "claude-3-5-sonnet-20241022" });
  });
});

const completion = (init: MessageInitShape<typeof CompletionSchema>) => create(CompletionSchema, { id: "msg_1", model: MODEL, created: 1, ...init });

describe("messages codec: render a whole answer", () => {
  const same = completion({
    blocks: [
      { type: BlockType.OTHER, rawJson: '{"type":"thinking","thinking":"hm","signature":"sig"}', style: M },
      { type: BlockType.TEXT, text: "Hello", extraJson: '{"citations":null}', style: M },
      { type: BlockType.TOOL_USE, toolCallId: "toolu_1", toolName: "f", toolInputJson: '{"a":1}', style: M },
    ],
    finishReason: FinishReason.TOOL_USE,
    usage: { inputTokens: 10, outputTokens: 5, extraJson: '{"cache_read_input_tokens":4}' },
    upstreamStyle: M,
    extraJson: '{"container":null}',
  });

  it("renders a messages-style answer with its extras", () => {
    assert.deepEqual(codec.renderCompletion(same), {
      id: "msg_1",
      type: "message",
      role: "assistant",
      model: MODEL,
      content: [
        { type: "thinking", thinking: "hm", signature: "sig" },
        { type: "text", text: "Hello", citations: null },
        { type: "tool_use", id: "toolu_1", name: "f", input: { a: 1 } },
      ],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 4 },
      container: null,
    });
  });

  it("renders a chat-style answer without that style's extras or raw parts", () => {
    const c = completion({
      blocks: [{ type: BlockType.TEXT, text: "Hi", extraJson: '{"annotations":[]}', style: C }, { type: BlockType.OTHER, rawJson: '{"type":"refusal"}', style: C }],
      finishReason: FinishReason.END_TURN,
      usage: { inputTokens: 3, outputTokens: 1, extraJson: '{"prompt_tokens_details":{"cached_tokens":0}}' },
      upstreamStyle: C,
      extraJson: '{"system_fingerprint":"fp_1"}',
    });
    assert.deepEqual(codec.renderCompletion(c), {
      id: "msg_1",
      type: "message",
      role: "assistant",
      model: MODEL,
      content: [{ type: "text", text: "Hi" }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: 3, output_tokens: 1 },
    });
  });

  for (const [reason, stop] of [
    [FinishReason.END_TURN, "end_turn"],
    [FinishReason.MAX_TOKENS, "max_tokens"],
    [FinishReason.STOP_SEQUENCE, "stop_sequence"],
    [FinishReason.TOOL_USE, "tool_use"],
    [FinishReason.PAUSE_TURN, "pause_turn"],
    [FinishReason.CONTENT_FILTER, "refusal"],
    // None said (the upstream's stop_reason null): null, as Anthropic writes a message that has not stopped.
    [FinishReason.UNSPECIFIED, null],
  ] as const) {
    it(`renders ${FinishReason[reason]} as stop_reason ${stop}`, () => {
      assert.equal((codec.renderCompletion(completion({ finishReason: reason })) as Json).stop_reason, stop);
    });
  }

  it("renders the stop sequence that ended the answer", () => {
    const r = codec.renderCompletion(completion({ finishReason: FinishReason.STOP_SEQUENCE, stopSequence: "END" })) as Json;
    assert.equal(r.stop_sequence, "END");
  });

  it("parses with the official SDK", async () => {
    const msg = await sdk(JSON.stringify(codec.renderCompletion(same)), "application/json").messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] });
    assert.deepEqual([msg.content.map((b) => b.type), msg.stop_reason, msg.usage.input_tokens], [["thinking", "text", "tool_use"], "tool_use", 10]);
  });
});

const ev = (event: MessageInitShape<typeof StreamChatResponseSchema>["event"]): StreamChatResponse => create(StreamChatResponseSchema, { event });
const renderAll = (events: StreamChatResponse[]) => {
  const r = codec.createStreamRenderer({ model: MODEL, style: M });
  return events.map((e) => r.render(e)).join("");
};

describe("messages codec: another style's refusal", () => {
  it("reads as text, whole and streamed", () => {
    const refused = completion({ blocks: [{ type: BlockType.REFUSAL, text: "I can't help." }], upstreamStyle: C });
    assert.deepEqual((codec.renderCompletion(refused) as Json).content, [{ type: "text", text: "I can't help." }]);
    const r = codec.createStreamRenderer({ model: MODEL, stream: true });
    r.render(ev({ case: "messageStart", value: { id: "msg_1", model: MODEL, upstreamStyle: C } }));
    const open = r.render(ev({ case: "blockStart", value: { index: 0, block: { type: BlockType.REFUSAL } } }));
    assert.match(open, /"content_block":\{"type":"text","text":""\}/);
    assert.match(r.render(ev({ case: "blockDelta", value: { index: 0, text: "No." } })), /"delta":\{"type":"text_delta","text":"No\."\}/);
  });
});

describe("messages codec: render a stream", () => {
  it("writes text deltas byte for byte as the serialised event, whatever the text holds", () => {
    for (const text of ["plain", 'quotes " and \\ backslash', "line\nbreak\ttab", "ünïcödé 日本 🎉", "\u0000\u001f\u2028", "lone \ud800"]) {
      const r = codec.createStreamRenderer({ model: "assistant-3-haiku-20240307", stream: true });
      r.render(ev({ case: "messageStart", value: { id: "msg_1", model: "assistant-3-haiku-20240307", upstreamStyle: ApiStyle.MESSAGES } }));
      r.render(ev({ case: "blockStart", value: { index: 0, block: { type: BlockType.TEXT } } }));
      const data = { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } };
      assert.equal(r.render(ev({ case: "blockDelta", value: { index: 0, text } })), `event: content_block_delta\ndata: ${JSON.stringify(data)}\n\n`);
    }
  });

  const toolStream = [
    ev({ case: "messageStart", value: { id: "msg_1", model: MODEL, created: 1, usage: { inputTokens: 12, outputTokens: 1 }, upstreamStyle: M } }),
    ev({ case: "blockStart", value: { index: 0, block: { type: BlockType.TEXT, style: M } } }),
    ev({ case: "blockDelta", value: { index: 0, text: "Hi" } }),
    ev({ case: "blockStop", value: { index: 0 } }),
    ev({ case: "blockStart", value: { index: 1, block: { type: BlockType.TOOL_USE, toolCallId: "toolu_1", toolName: "f", style: M } } }),
    ev({ case: "blockDelta", value: { index: 1, partialJson: '{"a":' } }),
    ev({ case: "blockDelta", value: { index: 1, partialJson: "1}" } }),
    ev({ case: "blockStop", value: { index: 1 } }),
    ev({ case: "messageEnd", value: { finishReason: FinishReason.TOOL_USE, usage: { inputTokens: 12, outputTokens: 7 }, costUsd: "0.0001" } }),
  ];

  it("writes the events exactly as the API does", () => {
    const lines = [
      ["message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"${MODEL}","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`],
      ["content_block_start", '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'],
      ["content_block_delta", '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}'],
      ["content_block_stop", '{"type":"content_block_stop","index":0}'],
      ["content_block_start", '{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}'],
      ["content_block_delta", '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"a\\":"}}'],
      ["content_block_delta", '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}'],
      ["content_block_stop", '{"type":"content_block_stop","index":1}'],
      ["message_delta", '{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":12,"output_tokens":7}}'],
      ["message_stop", '{"type":"message_stop"}'],
    ];
    assert.equal(renderAll(toolStream), lines.map(([e, d]) => `event: ${e}\ndata: ${d}\n\n`).join(""));
  });

  it("streams what the official SDK assembles into the whole message", async () => {
    const stream = sdk(renderAll(toolStream), "text/event-stream").messages.stream({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] });
    const msg = await stream.finalMessage();
    assert.deepEqual(msg.content, [
      { type: "text", text: "Hi" },
      { type: "tool_use", id: "toolu_1", name: "f", input: { a: 1 } },
    ]);
    assert.deepEqual([msg.stop_reason, msg.usage.input_tokens, msg.usage.output_tokens], ["tool_use", 12, 7]);
  });

  it("passes raw thinking blocks and deltas through from a messages-style upstream", () => {
    const text = renderAll([
      ev({ case: "messageStart", value: { id: "msg_1", model: MODEL, upstreamStyle: M } }),
      ev({ case: "blockStart", value: { index: 0, block: { type: BlockType.OTHER, rawJson: '{"type":"thinking","thinking":"","signature":""}', style: M } } }),
      ev({ case: "blockDelta", value: { index: 0, rawJson: '{"type":"signature_delta","signature":"abc"}' } }),
    ]);
    assert.ok(text.includes('data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}\n\n'));
    assert.ok(text.includes('data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}\n\n'));
  });

  it("passes a live upstream's raw block start as it came: the block's own deltas follow, so nothing is sent twice", async () => {
    const start = { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: { query: "q" } };
    const text = renderAll([
      ev({ case: "messageStart", value: { id: "msg_1", model: MODEL, upstreamStyle: M } }),
      ev({ case: "blockStart", value: { index: 0, block: { type: BlockType.OTHER, rawJson: JSON.stringify(start), style: M } } }),
      ev({ case: "blockDelta", value: { index: 0, partialJson: '{"query":"q"}' } }),
      ev({ case: "blockStop", value: { index: 0 } }),
      ev({ case: "messageEnd", value: { finishReason: FinishReason.END_TURN } }),
    ]);
    assert.equal(text.split("content_block_delta").length - 1, 2, "one delta event (its event: and type lines)");
    const msg = await sdk(text, "text/event-stream").messages.stream({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] }).finalMessage();
    assert.deepEqual(msg.content, [start]);
  });

  it("leaves out another style's raw blocks and keeps the indexes dense", () => {
    const text = renderAll([
      ev({ case: "messageStart", value: { id: "chatcmpl-1", model: MODEL, upstreamStyle: C } }),
      ev({ case: "blockStart", value: { index: 0, block: { type: BlockType.OTHER, rawJson: '{"type":"refusal"}', style: C } } }),
      ev({ case: "blockDelta", value: { index: 0, rawJson: '{"refusal":"no"}' } }),
      ev({ case: "blockStop", value: { index: 0 } }),
      ev({ case: "blockStart", value: { index: 1, block: { type: BlockType.TEXT, style: C } } }),
      ev({ case: "blockDelta", value: { index: 1, text: "ok" } }),
      ev({ case: "blockStop", value: { index: 1 } }),
    ]);
    assert.ok(!text.includes("refusal"));
    assert.ok(text.includes('"index":0,"delta":{"type":"text_delta","text":"ok"}'));
  });

  it("opens a text block for text that arrives for a block never started", () => {
    const r = codec.createStreamRenderer({ model: MODEL, style: M });
    r.render(ev({ case: "messageStart", value: { id: "msg_1", model: MODEL, upstreamStyle: C } }));
    const out = r.render(ev({ case: "blockDelta", value: { index: 3, text: "late" } }));
    assert.equal(
      out,
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n' +
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"late"}}\n\n',
    );
  });

  it("renders a whole answer (a cache hit) as the full event sequence", () => {
    const c = completion({
      blocks: [
        { type: BlockType.TEXT, text: "Hi", style: M },
        { type: BlockType.TOOL_USE, toolCallId: "toolu_1", toolName: "f", toolInputJson: '{"a":1}', style: M },
      ],
      finishReason: FinishReason.TOOL_USE,
      usage: { inputTokens: 12, outputTokens: 7 },
      upstreamStyle: M,
    });
    const lines = [
      ["message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"${MODEL}","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":0}}}`],
      ["content_block_start", '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'],
      ["content_block_delta", '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}'],
      ["content_block_stop", '{"type":"content_block_stop","index":0}'],
      ["content_block_start", '{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}'],
      ["content_block_delta", '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"a\\":1}"}}'],
      ["content_block_stop", '{"type":"content_block_stop","index":1}'],
      ["message_delta", '{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":12,"output_tokens":7}}'],
      ["message_stop", '{"type":"message_stop"}'],
    ];
    assert.equal(renderAll([ev({ case: "completion", value: c })]), lines.map(([e, d]) => `event: ${e}\ndata: ${d}\n\n`).join(""));
  });

  it("renders a whole answer that the official SDK assembles", async () => {
    const c = completion({ blocks: [{ type: BlockType.TEXT, text: "cached", style: M }], finishReason: FinishReason.END_TURN, usage: { inputTokens: 2, outputTokens: 1 }, upstreamStyle: M });
    const msg = await sdk(renderAll([ev({ case: "completion", value: c })]), "text/event-stream").messages.stream({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] }).finalMessage();
    assert.deepEqual([msg.content, msg.stop_reason, msg.usage.output_tokens], [[{ type: "text", text: "cached" }], "end_turn", 1]);
  });

  it("gives another style's tool call whose arguments are not a JSON object the same input, {}, whole and as a cache hit streamed", async () => {
    for (const args of ['{"city":"Par', "not json", "[1,2]"]) {
      const c = completion({
        blocks: [{ type: BlockType.TOOL_USE, toolCallId: "call_C", toolName: "get_weather", toolInputJson: args, style: C }],
        finishReason: FinishReason.MAX_TOKENS,
        usage: { inputTokens: 2, outputTokens: 5 },
        upstreamStyle: C,
      });
      const want = [{ type: "tool_use", id: "call_C", name: "get_weather", input: {} }];
      assert.deepEqual((codec.renderCompletion(c) as Json).content, want, args);
      const text = renderAll([ev({ case: "completion", value: c })]);
      assert.ok(!text.includes("input_json_delta"), `${args}: no input fragment`);
      const msg = await sdk(text, "text/event-stream").messages.stream({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] }).finalMessage();
      assert.deepEqual(msg.content, want, args);
    }
  });

  it("ends a broken stream with an error event", () => {
    const r = codec.createStreamRenderer({ model: MODEL, style: M });
    assert.equal(
      r.error({ status: 502, type: "api_error", code: "upstream_overloaded", message: "Upstream error: Overloaded" }),
      'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"Upstream error: Overloaded","code":"upstream_overloaded"}}\n\n',
    );
  });

  it("gives an error event the official SDK raises", async () => {
    const r = codec.createStreamRenderer({ model: MODEL, style: M });
    const text = renderAll(toolStream.slice(0, 3)) + r.error({ status: 502, type: "api_error", code: "upstream_error", message: "boom" });
    const stream = sdk(text, "text/event-stream").messages.stream({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] });
    await assert.rejects(stream.finalMessage(), (e: Error) => e.message.includes("boom"));
  });
});

describe("messages codec: canonical blocks that overlap (an OpenAI-style upstream's parallel tool calls)", () => {
  const tool = (index: number, id: string, name: string) => ev({ case: "blockStart", value: { index, block: { type: BlockType.TOOL_USE, toolCallId: id, toolName: name, style: C } } });
  const json = (index: number, partialJson: string) => ev({ case: "blockDelta", value: { index, partialJson } });
  const stop = (index: number) => ev({ case: "blockStop", value: { index } });
  const start = ev({ case: "messageStart", value: { id: "chatcmpl-1", model: MODEL, upstreamStyle: C } });
  const end = ev({ case: "messageEnd", value: { finishReason: FinishReason.TOOL_USE, usage: { inputTokens: 9, outputTokens: 12 } } });
  // What the OpenAI converter makes of tool_calls indexes 0, 1, 0, 2, 1, 0, 2: every call open until the end.
  const interleaved = [
    start,
    tool(0, "call_0", "get_weather"),
    tool(1, "call_1", "get_time"),
    json(0, '{"city":'),
    tool(2, "call_2", "get_weather"),
    json(2, '{"ci'),
    json(1, '{"tz":"UTC"}'),
    json(0, '"Paris"}'),
    json(2, 'ty":"Oslo"}'),
    stop(0),
    stop(1),
    stop(2),
    end,
  ];
  const startLine = (at: number, id: string, name: string) =>
    `event: content_block_start\ndata: {"type":"content_block_start","index":${at},"content_block":{"type":"tool_use","id":"${id}","name":"${name}","input":{}}}\n\n`;
  const jsonLine = (at: number, partial: string) =>
    `event: content_block_delta\ndata: ${JSON.stringify({ type: "content_block_delta", index: at, delta: { type: "input_json_delta", partial_json: partial } })}\n\n`;
  const stopLine = (at: number) => `event: content_block_stop\ndata: {"type":"content_block_stop","index":${at}}\n\n`;

  it("streams the open block live and holds the later ones, then writes each whole, in order, once the one before has stopped", () => {
    const r = codec.createStreamRenderer({ model: MODEL, stream: true });
    const out = interleaved.map((e) => r.render(e));
    assert.deepEqual(out.slice(1, -1), [
      startLine(0, "call_0", "get_weather"), // live
      "", // held
      jsonLine(0, '{"city":'), // live
      "",
      "",
      "",
      jsonLine(0, '"Paris"}'), // live
      "",
      // Block 0 stops: block 1 comes out with what it has had, and is live from then on.
      stopLine(0) + startLine(1, "call_1", "get_time") + jsonLine(1, '{"tz":"UTC"}'),
      stopLine(1) + startLine(2, "call_2", "get_weather") + jsonLine(2, '{"ci') + jsonLine(2, 'ty":"Oslo"}'),
      stopLine(2),
    ]);
    assert.match(out.at(-1)!, /^event: message_delta\n/);
  });

  it("gives a stream the official SDK assembles, each contentBlock event with its whole input", async () => {
    const stream = sdk(renderAll(interleaved), "text/event-stream").messages.stream({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] });
    const blocks: unknown[] = [];
    stream.on("contentBlock", (b) => blocks.push(b));
    const msg = await stream.finalMessage();
    const want = [
      { type: "tool_use", id: "call_0", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "call_1", name: "get_time", input: { tz: "UTC" } },
      { type: "tool_use", id: "call_2", name: "get_weather", input: { city: "Oslo" } },
    ];
    assert.deepEqual(blocks, want);
    assert.deepEqual(msg.content, want);
  });

  it("writes text that begins while a tool call is open after that call", () => {
    const text = (index: number) => ev({ case: "blockStart", value: { index, block: { type: BlockType.TEXT, style: C } } });
    const say = (index: number, t: string) => ev({ case: "blockDelta", value: { index, text: t } });
    const r = codec.createStreamRenderer({ model: MODEL, stream: true });
    r.render(start);
    assert.match(r.render(text(0)), /^event: content_block_start\n/);
    assert.match(r.render(say(0, "Hi")), /"text":"Hi"/);
    assert.equal(r.render(stop(0)), stopLine(0));
    assert.equal(r.render(tool(1, "call_1", "f")), startLine(1, "call_1", "f"));
    assert.equal(r.render(text(2)), "");
    assert.equal(r.render(say(2, "more")), "");
    assert.equal(r.render(json(1, "{}")), jsonLine(1, "{}"));
    assert.equal(
      r.render(stop(1)),
      stopLine(1) +
        'event: content_block_start\ndata: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}\n\n' +
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"more"}}\n\n',
    );
    assert.match(r.render(say(2, "!")), /"index":2,"delta":\{"type":"text_delta","text":"!"\}/, "live once it is the open block");
    assert.equal(r.render(stop(2)), stopLine(2));
  });

  it("closes, at the answer's end, blocks held behind one that never stopped", () => {
    const r = codec.createStreamRenderer({ model: MODEL, stream: true });
    const out = [start, tool(0, "call_0", "f"), tool(1, "call_1", "g"), json(1, "{}"), end].map((e) => r.render(e)).join("");
    const types = sseEventsOf(out).map((e) => [e.type, e.index]);
    assert.deepEqual(types, [
      ["message_start", undefined],
      ["content_block_start", 0],
      ["content_block_stop", 0],
      ["content_block_start", 1],
      ["content_block_delta", 1],
      ["content_block_stop", 1],
      ["message_delta", undefined],
      ["message_stop", undefined],
    ]);
  });
});

const sseEventsOf = (text: string): Array<{ type: string; index?: number }> =>
  text.split("\n\n").filter(Boolean).map((b) => JSON.parse(b.split("\n")[1]!.slice(6)) as { type: string; index?: number });
