import assert from "node:assert/strict";
import { create, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import OpenAI from "openai";
import {
  ApiStyle,
  BlockType,
  CompletionSchema,
  FinishReason,
  StreamChatRequestSchema,
  StreamChatResponseSchema,
  type Completion,
  type StreamChatResponse,
} from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { chatCompletionsCodec as codec } from "../../../src/facades/gateway/chat-completions-codec.js";
import { renderChatCompletion } from "../../../src/facades/gateway/chat-completions-render.js";
import { deepFreeze } from "../../support/freeze.js";
import { itRejects, type InvalidCase } from "../../support/codec-cases.js";

const user = [{ role: "user", content: "hi" }];
const valid = (extra: object = {}) => ({ model: "chat-4o", messages: user, ...extra });

/** Parses a (frozen) body into the canonical request as JSON, for readable comparisons. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = Record<string, any>;
const canonical = (body: unknown) => toJson(StreamChatRequestSchema, create(StreamChatRequestSchema, codec.parseRequest(deepFreeze(body)))) as Json;

describe("chat-completions codec: invalid requests", () => {
  const cases: InvalidCase[] = [
    ["a body that is not an object", [1], "invalid_body", "body"],
    ["no model", { messages: user }, "missing_required_field", "`model`"],
    ["an empty model", valid({ model: "" }), "invalid_value", "`model`"],
    ["a numeric model", valid({ model: 4 }), "invalid_type", "`model`"],
    ["no messages", { model: "chat-4o" }, "missing_required_field", "`messages`"],
    ["empty messages", valid({ messages: [] }), "invalid_value", "`messages`"],
    ["messages not an array", valid({ messages: "hi" }), "invalid_type", "`messages`"],
    ["a message that is not an object", valid({ messages: ["hi"] }), "invalid_type", "`messages[0]`"],
    ["an unknown role", valid({ messages: [{ role: "robot", content: "x" }] }), "invalid_value", "`messages[0].role`"],
    ["a message that is null (there, mistyped, not missing)", valid({ messages: [null] }), "invalid_type", "`messages[0]`"],
    ["a missing role", valid({ messages: [{ content: "x" }] }), "missing_required_field", "`messages[0].role`"],
    ["user content null", valid({ messages: [{ role: "user", content: null }] }), "missing_required_field", "`messages[0].content`"],
    ["assistant content null without tool calls", valid({ messages: [{ role: "assistant", content: null }] }), "missing_required_field", "`messages[0].content`"],
    ["assistant content null with a null refusal", valid({ messages: [{ role: "assistant", content: null, refusal: null }] }), "missing_required_field", "`messages[0].content`"],
    ["user content null with a refusal (only an assistant refuses)", valid({ messages: [{ role: "user", content: null, refusal: "no" }] }), "missing_required_field", "`messages[0].content`"],
    ["content a number", valid({ messages: [{ role: "user", content: 5 }] }), "invalid_type", "`messages[0].content`"],
    ["a content part without type", valid({ messages: [{ role: "user", content: [{ text: "x" }] }] }), "missing_required_field", "`messages[0].content[0].type`"],
    ["a text part without text", valid({ messages: [{ role: "user", content: [{ type: "text" }] }] }), "missing_required_field", "`messages[0].content[0].text`"],
    ["a tool message without tool_call_id", valid({ messages: [{ role: "tool", content: "r" }] }), "missing_required_field", "`messages[0].tool_call_id`"],
    ["a tool call without function", valid({ messages: [{ role: "assistant", tool_calls: [{ id: "c", type: "function" }] }] }), "missing_required_field", "`messages[0].tool_calls[0].function`"],
    ["a tool call with arguments as an object", valid({ messages: [{ role: "assistant", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: {} } }] }] }), "invalid_type", "`messages[0].tool_calls[0].function.arguments`"],
    ["temperature above 2", valid({ temperature: 2.5 }), "invalid_value", "`temperature`"],
    ["temperature a string", valid({ temperature: "hot" }), "invalid_type", "`temperature`"],
    ["max_tokens zero", valid({ max_tokens: 0 }), "invalid_value", "`max_tokens`"],
    ["max_tokens fractional", valid({ max_tokens: 1.5 }), "invalid_type", "`max_tokens`"],
    ["max_completion_tokens negative", valid({ max_completion_tokens: -1 }), "invalid_value", "`max_completion_tokens`"],
    ["stream a string", valid({ stream: "yes" }), "invalid_type", "`stream`"],
    ["n of 2", valid({ n: 2 }), "unsupported_parameter", "`n`"],
    ["stream_options without stream", valid({ stream_options: { include_usage: true } }), "invalid_value", "`stream_options`"],
    ["stream_options not an object", valid({ stream: true, stream_options: true }), "invalid_type", "`stream_options`"],
    ["stream_options.include_usage a string", valid({ stream: true, stream_options: { include_usage: "true" } }), "invalid_type", "`stream_options.include_usage`"],
    ["stream_options.include_usage a number", valid({ stream: true, stream_options: { include_usage: 1 } }), "invalid_type", "`stream_options.include_usage`"],
    ["tools not an array", valid({ tools: {} }), "invalid_type", "`tools`"],
    ["a tool whose type is not a string", valid({ tools: [{ type: 3 }] }), "invalid_type", "`tools[0].type`"],
    ["a tool without a type", valid({ tools: [{ function: { name: "f" } }] }), "missing_required_field", "`tools[0].type`"],
    ["a tool call of another type", valid({ messages: [{ role: "assistant", content: null, tool_calls: [{ id: "c", type: "retrieval" }] }] }), "invalid_value", "`messages[0].tool_calls[0].type`"],
    ["a custom tool call without its input", valid({ messages: [{ role: "assistant", content: null, tool_calls: [{ id: "c", type: "custom", custom: { name: "g" } }] }] }), "missing_required_field", "`messages[0].tool_calls[0].custom.input`"],
    ["a tool without function", valid({ tools: [{ type: "function" }] }), "missing_required_field", "`tools[0].function`"],
    ["a tool name with spaces", valid({ tools: [{ type: "function", function: { name: "get weather" } }] }), "invalid_value", "`tools[0].function.name`"],
    ["a tool name of 65 characters", valid({ tools: [{ type: "function", function: { name: "a".repeat(65) } }] }), "invalid_value", "`tools[0].function.name`"],
    ["tool parameters as a string", valid({ tools: [{ type: "function", function: { name: "f", parameters: "{}" } }] }), "invalid_type", "`tools[0].function.parameters`"],
    ["a tool description as a number", valid({ tools: [{ type: "function", function: { name: "f", description: 1 } }] }), "invalid_type", "`tools[0].function.description`"],
  ];
  itRejects(codec, cases);
});

describe("chat-completions codec: valid requests", () => {
  it("converts a minimal request", () => {
    assert.deepEqual(canonical(valid()), {
      style: "API_STYLE_CHAT_COMPLETIONS",
      model: "chat-4o",
      messages: [{ role: "user", blocks: [{ type: "BLOCK_TYPE_TEXT", text: "hi", style: "API_STYLE_CHAT_COMPLETIONS" }], contentIsString: true }],
    });
  });

  it("converts content parts: text, image_url and others kept whole", () => {
    const parts = [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: "https://x/y.png" } }, { type: "file", file: { file_id: "f1" } }];
    assert.deepEqual(canonical(valid({ messages: [{ role: "user", content: parts }] })).messages, [{
      role: "user",
      blocks: [
        { type: "BLOCK_TYPE_TEXT", text: "look", style: "API_STYLE_CHAT_COMPLETIONS" },
        { type: "BLOCK_TYPE_IMAGE", rawJson: JSON.stringify(parts[1]), style: "API_STYLE_CHAT_COMPLETIONS" },
        { type: "BLOCK_TYPE_OTHER", rawJson: JSON.stringify(parts[2]), style: "API_STYLE_CHAT_COMPLETIONS" },
      ],
    }]);
  });

  it("converts assistant tool calls and tool results", () => {
    const messages = [
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: '{"a":1}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "done" },
    ];
    assert.deepEqual(canonical(valid({ messages })).messages, [
      { role: "assistant", blocks: [{ type: "BLOCK_TYPE_TOOL_USE", toolCallId: "call_1", toolName: "f", toolInputJson: '{"a":1}', style: "API_STYLE_CHAT_COMPLETIONS" }] },
      { role: "tool", blocks: [{ type: "BLOCK_TYPE_TOOL_RESULT", toolCallId: "call_1", text: "done", style: "API_STYLE_CHAT_COMPLETIONS" }], contentIsString: true },
    ]);
  });

  it("takes an assistant turn without content that refused or answered in audio, as the gateway answers them", () => {
    const messages = [
      { role: "user", content: "hi" },
      { role: "assistant", content: null, refusal: "I can't help with that." },
      { role: "user", content: "say it" },
      { role: "assistant", audio: { id: "audio_abc" } },
      { role: "user", content: "again" },
    ];
    const got = canonical(valid({ messages })).messages as { role: string; blocks?: unknown[]; extraJson?: string }[];
    assert.deepEqual(got.map((m) => [m.role, m.blocks?.length ?? 0, m.extraJson]), [
      ["user", 1, undefined],
      ["assistant", 0, '{"refusal":"I can\'t help with that."}'],
      ["user", 1, undefined],
      ["assistant", 0, '{"audio":{"id":"audio_abc"}}'],
      ["user", 1, undefined],
    ]);
  });

  it("keeps unknown message fields in the message's extra_json", () => {
    const got = canonical(valid({ messages: [{ role: "user", content: "hi", name: "ann" }] }));
    assert.equal((got.messages as { extraJson: string }[])[0]!.extraJson, '{"name":"ann"}');
  });

  it("takes temperature, max_tokens and stream into canonical fields", () => {
    const got = canonical(valid({ temperature: 0, max_tokens: 64, stream: true }));
    assert.deepEqual([got.temperature, got.maxTokens, got.stream, got.extraJson], [0, 64, true, undefined]);
  });

  it("takes max_completion_tokens as the limit and keeps it verbatim", () => {
    const got = canonical(valid({ max_completion_tokens: 99 }));
    assert.deepEqual([got.maxTokens, got.extraJson], [99, '{"max_completion_tokens":99}']);
  });

  it("keeps every other top-level field verbatim in extra_json", () => {
    const extra = { top_p: 0.5, stop: "x", seed: 1, user: "u", n: 1, response_format: { type: "json_object" }, tool_choice: "auto", stream_options: { include_usage: true } };
    assert.deepEqual(JSON.parse(canonical(valid({ ...extra, stream: true })).extraJson as string), extra);
  });

  it("converts tools, keeping function-level extras under `function`", () => {
    const tools = [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object" }, strict: true } }];
    assert.deepEqual(canonical(valid({ tools })).tools, [
      { name: "get_weather", description: "Weather", inputSchemaJson: '{"type":"object"}', extraJson: '{"function":{"strict":true}}' },
    ]);
  });
});

// --- rendering ---------------------------------------------------------------------------------

const completion = (init: Exclude<MessageInitShape<typeof CompletionSchema>, Completion>): Completion =>
  create(CompletionSchema, {
    id: "chatcmpl-abc",
    model: "chat-4o",
    created: 1750432000,
    finishReason: FinishReason.END_TURN,
    usage: { inputTokens: 10, outputTokens: 5, extraJson: '{"prompt_tokens_details":{"cached_tokens":0}}' },
    upstreamStyle: ApiStyle.CHAT_COMPLETIONS,
    ...init,
  });

const textAnswer = completion({
  blocks: [{ type: BlockType.TEXT, text: "Hello!" }],
  extraJson: '{"system_fingerprint":"fp_1","service_tier":"default"}',
  messageExtraJson: '{"refusal":null,"annotations":[{"type":"url_citation"}]}',
});
const toolAnswer = completion({
  finishReason: FinishReason.TOOL_USE,
  blocks: [
    { type: BlockType.TOOL_USE, toolCallId: "call_1", toolName: "f", toolInputJson: '{"a":1}' },
    { type: BlockType.TOOL_USE, toolCallId: "call_2", toolName: "g", toolInputJson: "" },
  ],
});

describe("chat-completions codec: rendering a completion", () => {
  it("renders a same-style text answer with its extras back in place", () => {
    assert.deepEqual(codec.renderCompletion(textAnswer), {
      id: "chatcmpl-abc",
      object: "chat.completion",
      created: 1750432000,
      model: "chat-4o",
      choices: [{ index: 0, message: { role: "assistant", content: "Hello!", refusal: null, annotations: [{ type: "url_citation" }] }, logprobs: null, finish_reason: "stop" }],
      usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, prompt_tokens_details: { cached_tokens: 0 } },
      system_fingerprint: "fp_1",
      service_tier: "default",
    });
  });

  it("renders tool calls with null content", () => {
    const msg = (codec.renderCompletion(toolAnswer) as { choices: { message: object; finish_reason: string }[] }).choices[0]!;
    assert.deepEqual(msg, {
      index: 0,
      message: {
        role: "assistant",
        content: null,
        refusal: null,
        annotations: [],
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "f", arguments: '{"a":1}' } },
          { id: "call_2", type: "function", function: { name: "g", arguments: "{}" } },
        ],
      },
      logprobs: null,
      finish_reason: "tool_calls",
    });
  });

  it("leaves out the extras of an answer from the other style", () => {
    const cross = completion({ upstreamStyle: ApiStyle.MESSAGES, blocks: [{ type: BlockType.TEXT, text: "x" }], extraJson: '{"container":null}', usage: { inputTokens: 1, outputTokens: 2, extraJson: '{"cache_read_input_tokens":0}' } });
    const out = codec.renderCompletion(cross) as Record<string, unknown>;
    assert.deepEqual([out.container, out.usage], [undefined, { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 }]);
  });

  for (const [reason, name] of [
    [FinishReason.END_TURN, "stop"],
    [FinishReason.STOP_SEQUENCE, "stop"],
    [FinishReason.PAUSE_TURN, "stop"],
    [FinishReason.MAX_TOKENS, "length"],
    [FinishReason.TOOL_USE, "tool_calls"],
    [FinishReason.CONTENT_FILTER, "content_filter"],
  ] as const) {
    it(`renders ${FinishReason[reason]} as ${name}`, () => {
      const out = codec.renderCompletion(completion({ finishReason: reason })) as { choices: { finish_reason: string }[] };
      assert.equal(out.choices[0]!.finish_reason, name);
    });
  }
});

// --- streams -----------------------------------------------------------------------------------

const ev = (event: MessageInitShape<typeof StreamChatResponseSchema>["event"]): StreamChatResponse =>
  create(StreamChatResponseSchema, { event });

const textEvents = [
  ev({ case: "messageStart", value: { id: "chatcmpl-s1", model: "chat-4o", created: 1750432000, upstreamStyle: ApiStyle.CHAT_COMPLETIONS, extraJson: '{"system_fingerprint":"fp_1"}' } }),
  ev({ case: "blockStart", value: { index: 0, block: { type: BlockType.TEXT } } }),
  ev({ case: "blockDelta", value: { index: 0, text: "Hel" } }),
  ev({ case: "blockDelta", value: { index: 0, text: "lo" } }),
  ev({ case: "blockStop", value: { index: 0 } }),
  ev({ case: "blockStart", value: { index: 1, block: { type: BlockType.TOOL_USE, toolCallId: "call_1", toolName: "f" } } }),
  ev({ case: "blockDelta", value: { index: 1, partialJson: '{"a":' } }),
  ev({ case: "blockDelta", value: { index: 1, partialJson: "1}" } }),
  ev({ case: "blockStop", value: { index: 1 } }),
  ev({ case: "blockStart", value: { index: 2, block: { type: BlockType.TOOL_USE, toolCallId: "call_2", toolName: "g" } } }),
  ev({ case: "blockDelta", value: { index: 2, partialJson: "{}" } }),
  ev({ case: "blockStop", value: { index: 2 } }),
  ev({ case: "messageEnd", value: { finishReason: FinishReason.TOOL_USE, usage: { inputTokens: 10, outputTokens: 5 } } }),
];

const renderAll = (events: StreamChatResponse[], extra: object = {}) => {
  const r = codec.createStreamRenderer({ model: "chat-4o", stream: true, extraJson: JSON.stringify(extra) });
  return events.map((e) => r.render(e)).join("");
};

/** The JSON data of each `data:` line ([DONE] kept as the string). */
const dataLines = (sse: string) =>
  sse.split("\n\n").filter(Boolean).map((block) => {
    assert.ok(block.startsWith("data: "), `every event is a single data line: ${block}`);
    const data = block.slice(6);
    return data === "[DONE]" ? data : JSON.parse(data);
  });

/** The official SDK's own parsers, fed the SSE text through a fetch that never touches the network. */
function sdkClient(sse: string, contentType = "text/event-stream"): OpenAI {
  return new OpenAI({ apiKey: "k", baseURL: "http://gateway.invalid/v1", maxRetries: 0, fetch: async () => new Response(sse, { headers: { "content-type": contentType } }) });
}

describe("chat-completions codec: rendering a stream", () => {
  it("writes text chunks byte for byte as the serialised chunk object, whatever the text holds", () => {
    const start = ev({ case: "messageStart", value: { id: "chatcmpl-t", model: "chat-4o", created: 1750432000, upstreamStyle: ApiStyle.CHAT_COMPLETIONS } });
    for (const usage of [false, true]) {
      for (const text of ['plain', 'quotes " and \\ backslash', "line\nbreak\ttab", "ünïcödé 日本 🎉", "\u0000\u001f\u2028", "lone \ud800"]) {
        const r = codec.createStreamRenderer({ model: "chat-4o", stream: true, extraJson: usage ? '{"stream_options":{"include_usage":true}}' : "" });
        r.render(start);
        const expected = { id: "chatcmpl-t", object: "chat.completion.chunk", created: 1750432000, model: "chat-4o", choices: [{ index: 0, delta: { content: text }, logprobs: null, finish_reason: null }], ...(usage ? { usage: null } : {}) };
        assert.equal(r.render(ev({ case: "blockDelta", value: { index: 0, text } })), `data: ${JSON.stringify(expected)}\n\n`);
      }
    }
  });

  it("writes OpenAI chunks: role, content, tool calls, finish, [DONE]", () => {
    const head = { id: "chatcmpl-s1", object: "chat.completion.chunk", created: 1750432000, model: "chat-4o", system_fingerprint: "fp_1" };
    const chunk = (delta: object, finish: string | null = null) => ({ ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
    assert.deepEqual(dataLines(renderAll(textEvents)), [
      chunk({ role: "assistant", content: "", refusal: null }),
      chunk({ content: "Hel" }),
      chunk({ content: "lo" }),
      chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "f", arguments: "" } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: "1}" } }] }),
      chunk({ tool_calls: [{ index: 1, id: "call_2", type: "function", function: { name: "g", arguments: "" } }] }),
      chunk({ tool_calls: [{ index: 1, function: { arguments: "{}" } }] }),
      chunk({}, "tool_calls"),
      "[DONE]",
    ]);
  });

  it("adds the usage chunk with empty choices only when stream_options.include_usage is set", () => {
    const lines = dataLines(renderAll(textEvents, { stream_options: { include_usage: true } }));
    assert.deepEqual(lines.at(-2).choices, []);
    assert.deepEqual(lines.at(-2).usage, { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
    for (const l of dataLines(renderAll(textEvents, { stream_options: { include_usage: false } })).slice(0, -1)) assert.ok(!("usage" in l), "no usage field unless asked for");
  });

  it("puts \"usage\":null on every chunk before the usage chunk when it is asked for, as OpenAI does", () => {
    for (const events of [textEvents, [ev({ case: "completion", value: textAnswer })]]) {
      const lines = dataLines(renderAll(events, { stream_options: { include_usage: true } }));
      assert.equal(lines.at(-1), "[DONE]");
      const before = lines.slice(0, -2);
      assert.ok(before.length >= 3);
      for (const l of before) {
        assert.equal(l.choices.length, 1);
        assert.ok("usage" in l && l.usage === null, JSON.stringify(l));
        // After the choices, as OpenAI orders it.
        assert.deepEqual(Object.keys(l).slice(-2), ["choices", "usage"]);
      }
      assert.ok(lines.at(-2).usage.total_tokens > 0);
    }
  });

  it("renders a whole completion served to a stream request as the full chunk sequence, the message's own fields with its text", () => {
    const lines = dataLines(renderAll([ev({ case: "completion", value: textAnswer })]));
    assert.deepEqual(lines.map((l) => (l === "[DONE]" ? l : [l.choices[0].delta, l.choices[0].finish_reason])), [
      [{ role: "assistant", content: "", refusal: null }, null],
      [{ content: "Hello!", refusal: null, annotations: [{ type: "url_citation" }] }, null],
      [{}, "stop"],
      "[DONE]",
    ]);
  });

  it("sends a whole answer's own fields once, with its first part or in a chunk of their own, and only from a same-style upstream", () => {
    const fields = { messageExtraJson: '{"annotations":[]}', choiceExtraJson: '{"logprobs":{"content":[],"refusal":null},"content_filter_results":{}}' };
    const deltas = (c: Completion) =>
      dataLines(renderAll([ev({ case: "completion", value: c })])).slice(1, -2).map((l) => [l.choices[0].delta, l.choices[0].logprobs, l.choices[0].content_filter_results]);
    assert.deepEqual(deltas(completion({ ...fields, finishReason: FinishReason.TOOL_USE, blocks: toolAnswer.blocks })), [
      [{ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "f", arguments: '{"a":1}' } }], annotations: [] }, { content: [], refusal: null }, {}],
      [{ tool_calls: [{ index: 1, id: "call_2", type: "function", function: { name: "g", arguments: "{}" } }] }, null, undefined],
    ]);
    assert.deepEqual(deltas(completion({ ...fields, blocks: [] })), [[{ annotations: [] }, { content: [], refusal: null }, {}]]);
    // The `annotations: []` a whole answer adds where the upstream sent none (renderChatCompletion)
    // is no field of the upstream's: a live stream never carries it, so neither does a hit.
    assert.deepEqual(deltas(completion({ blocks: [] })), [[{}, null, undefined]]);
    assert.deepEqual(deltas(completion({ ...fields, blocks: textAnswer.blocks, upstreamStyle: ApiStyle.MESSAGES })), [[{ content: "Hello!" }, null, undefined]]);
  });

  it("writes an error as a data event with the error object and no [DONE]", () => {
    const r = codec.createStreamRenderer({ model: "chat-4o" });
    assert.equal(r.error({ status: 502, type: "api_error", code: "upstream_error", message: "Upstream failed." }),
      'data: {"error":{"message":"Upstream failed.","type":"api_error","code":"upstream_error"}}\n\n');
  });

  it("is accepted by the openai SDK's stream helper, which rebuilds the whole answer", async () => {
    const stream = sdkClient(renderAll(textEvents, { stream_options: { include_usage: true } })).chat.completions.stream({ model: "chat-4o", messages: [{ role: "user", content: "x" }] });
    const final = await stream.finalChatCompletion();
    assert.equal(final.choices[0]!.message.content, "Hello");
    assert.deepEqual(final.choices[0]!.message.tool_calls?.map((c) => c.type === "function" && [c.id, c.function.name, c.function.arguments]), [["call_1", "f", '{"a":1}'], ["call_2", "g", "{}"]]);
    assert.equal(final.choices[0]!.finish_reason, "tool_calls");
    assert.equal(final.usage?.total_tokens, 15);
  });

  it("is accepted by the openai SDK when a completion is served to a stream", async () => {
    const stream = sdkClient(renderAll([ev({ case: "completion", value: toolAnswer })])).chat.completions.stream({ model: "chat-4o", messages: [{ role: "user", content: "x" }] });
    const final = await stream.finalChatCompletion();
    assert.deepEqual(final.choices[0]!.message.tool_calls?.map((c) => c.type === "function" && c.function.arguments), ['{"a":1}', "{}"]);
    // The same message as the whole answer (`parsed` is the SDK's own), but for the `annotations: []`
    // the JSON form adds where the upstream sent none, which no live stream carries either.
    const { parsed: _, ...message } = final.choices[0]!.message as unknown as Record<string, unknown>;
    const { annotations, ...whole } = (renderChatCompletion(toolAnswer).choices as Array<{ message: Record<string, unknown> }>)[0]!.message;
    assert.deepEqual(annotations, []);
    assert.deepEqual(message, whole);
  });

  it("gives an answer without text from a messages-style upstream content null, whole and as the SDK's stream helper assembles it", async () => {
    // Anthropic's refusal: stop_reason "refusal", content []; and an empty end_turn answer.
    for (const finishReason of [FinishReason.CONTENT_FILTER, FinishReason.END_TURN]) {
      const cross = completion({ upstreamStyle: ApiStyle.MESSAGES, blocks: [], finishReason });
      const whole = (renderChatCompletion(cross).choices as Array<{ message: { content: unknown } }>)[0]!.message;
      const streamed = await sdkClient(renderAll([ev({ case: "completion", value: cross })])).chat.completions.stream({ model: "chat-4o", messages: [{ role: "user", content: "x" }] }).finalChatCompletion();
      assert.equal(whole.content, null, FinishReason[finishReason]);
      assert.equal(streamed.choices[0]!.message.content, whole.content, FinishReason[finishReason]);
    }
    // A chat-style upstream's empty text is its own: kept as sent.
    const same = (renderChatCompletion(completion({ blocks: [] })).choices as Array<{ message: { content: unknown } }>)[0]!.message;
    assert.equal(same.content, "");
  });

  it("makes the openai SDK raise an APIError for the error event", async () => {
    const r = codec.createStreamRenderer({ model: "chat-4o" });
    const sse = r.render(textEvents[0]!) + r.error({ status: 502, type: "api_error", code: "upstream_error", message: "Upstream failed." });
    const stream = await sdkClient(sse).chat.completions.create({ model: "chat-4o", messages: [{ role: "user", content: "x" }], stream: true });
    await assert.rejects(async () => {
      for await (const _ of stream) { /* drain */ }
    }, (err) => err instanceof OpenAI.APIError && err.message.includes("Upstream failed."));
  });

  it("gives a tool call of a messages-style upstream that streamed no input the arguments \"{}\", at its end", () => {
    const M = ApiStyle.MESSAGES;
    const toolCalls = (events: StreamChatResponse[]) =>
      dataLines(renderAll(events)).flatMap((l) => (l === "[DONE]" ? [] : (l.choices[0].delta.tool_calls ?? []))) as Array<{ index: number; function: { arguments: string } }>;
    const start = (style: ApiStyle) => ev({ case: "messageStart", value: { id: "msg_1", model: "chat-4o", upstreamStyle: style } });
    const call = (index: number) => ev({ case: "blockStart", value: { index, block: { type: BlockType.TOOL_USE, toolCallId: `toolu_${index}`, toolName: "f", toolInputJson: "" } } });
    const json = (index: number, partialJson: string) => ev({ case: "blockDelta", value: { index, partialJson } });
    const stop = (index: number) => ev({ case: "blockStop", value: { index } });
    const end = ev({ case: "messageEnd", value: { finishReason: FinishReason.TOOL_USE } });
    // Anthropic sends such a call as `input: {}` and no input_json_delta, or one with partial_json "".
    for (const deltas of [[], [json(0, "")]]) {
      const calls = toolCalls([start(M), call(0), ...deltas, stop(0), call(1), json(1, '{"a":1}'), stop(1), end]);
      assert.deepEqual(calls.map((c) => [c.index, c.function.arguments]), [[0, ""], [0, "{}"], [1, ""], [1, '{"a":1}']]);
    }
    // One the upstream never stopped gets them before the finish.
    assert.deepEqual(toolCalls([start(M), call(0), end]).map((c) => c.function.arguments), ["", "{}"]);
    // An OpenAI-style upstream's arguments go out as it sent them, even none.
    assert.deepEqual(toolCalls([start(ApiStyle.CHAT_COMPLETIONS), call(0), stop(0), end]).map((c) => c.function.arguments), [""]);
  });

  it("renders a completion the openai SDK parses", async () => {
    const res = await sdkClient(JSON.stringify(codec.renderCompletion(textAnswer)), "application/json").chat.completions.create({ model: "chat-4o", messages: [{ role: "user", content: "x" }] });
    assert.equal(res.choices[0]!.message.content, "Hello!");
  });
});
