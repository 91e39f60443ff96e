import assert from "node:assert/strict";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { ApiStyle, BlockType, StreamChatRequestSchema, type StreamChatRequest } from "../../../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { createOpenAiAdapter } from "../../../../../src/core/proxy/upstreams/openai/adapter.js";
import type { UpstreamTarget } from "../../../../../src/core/proxy/upstreams/adapter.js";
import { toErrorInfo } from "../../../../../src/core/errors.js";
import { chatCompletionsCodec } from "../../../../../src/facades/gateway/chat-completions-codec.js";
import { messagesCodec } from "../../../../../src/facades/gateway/messages-codec.js";
import { deepFreeze } from "../../../../support/freeze.js";

const target: UpstreamTarget = { provider: "openai", style: ApiStyle.CHAT_COMPLETIONS, baseUrl: "https://api.openai.com/v1/", apiKey: "sk-test", upstreamModel: "gpt-4o" };
const adapter = createOpenAiAdapter();

/** A canonical request, frozen so any mutation by the adapter throws. */
const canonical = (init: MessageInitShape<typeof StreamChatRequestSchema>): StreamChatRequest =>
  deepFreeze(create(StreamChatRequestSchema, { model: "chat-4o", ...init }));

/** The chat codec's canonical form of a client body, as the gateway would hand it on. */
const fromChatBody = (body: object): StreamChatRequest => canonical(chatCompletionsCodec.parseRequest(deepFreeze(structuredClone(body))));

const bodyOf = (req: StreamChatRequest, t = target) => JSON.parse(adapter.buildRequest(req, t).body) as Record<string, unknown>;

describe("openai request: http envelope", () => {
  const req = canonical({ style: ApiStyle.CHAT_COMPLETIONS, messages: [{ role: "user", blocks: [{ type: BlockType.TEXT, text: "hi" }], contentIsString: true }] });

  it("posts to {baseUrl}/chat/completions without a doubled slash", () => {
    assert.equal(adapter.buildRequest(req, target).url, "https://api.openai.com/v1/chat/completions");
  });

  it("sends a bearer token and a JSON content type, and asks for no content coding (the gateway decodes none)", () => {
    assert.deepEqual(adapter.buildRequest(req, target).headers, { "content-type": "application/json", "accept-encoding": "identity", authorization: "Bearer sk-test" });
  });

  it("omits authorization when no key is configured", () => {
    assert.equal(adapter.buildRequest(req, { ...target, apiKey: "" }).headers.authorization, undefined);
  });

  it("names the upstream model, not the public id", () => {
    assert.equal(bodyOf(req).model, "gpt-4o");
  });
});

describe("openai request: from a chat-completions client (same style)", () => {
  const clientBody = {
    model: "chat-4o",
    messages: [
      { role: "developer", content: "Be brief.", name: "ops" },
      { role: "user", content: [{ type: "text", text: "What is in this image?" }, { type: "image_url", image_url: { url: "https://example.com/a.png", detail: "low" } }, { type: "input_audio", input_audio: { data: "UklGR", format: "wav" } }] },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "lookup", arguments: '{"q":"a"}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "a cat" },
      { role: "tool", tool_call_id: "call_2", content: [{ type: "text", text: "part" }] },
      { role: "assistant", content: "" , tool_calls: [{ id: "call_3", type: "function", function: { name: "lookup", arguments: "{}" } }] },
    ],
    temperature: 0.3,
    max_tokens: 200,
    top_p: 0.9,
    stop: ["END"],
    seed: 7,
    user: "u-1",
    logprobs: true,
    top_logprobs: 2,
    response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" }, strict: true } },
    tool_choice: { type: "function", function: { name: "lookup" } },
    parallel_tool_calls: false,
    metadata: { trace: "t1" },
    tools: [{ type: "function", function: { name: "lookup", description: "Looks up", parameters: { type: "object", properties: { q: { type: "string" } } }, strict: true } }],
  };

  it("rebuilds the body exactly as the client sent it, unknown fields included", () => {
    assert.deepEqual(bodyOf(fromChatBody(clientBody)), { ...clientBody, model: "gpt-4o" });
  });

  it("uses max_completion_tokens alone when the client did", () => {
    const body = bodyOf(fromChatBody({ model: "chat-4o", messages: [{ role: "user", content: "x" }], max_completion_tokens: 50 }));
    assert.equal(body.max_completion_tokens, 50);
    assert.equal("max_tokens" in body, false);
  });

  it("turns on include_usage while keeping the client's other stream_options", () => {
    const body = bodyOf(fromChatBody({ model: "chat-4o", messages: [{ role: "user", content: "x" }], stream: true, stream_options: { include_obfuscation: false } }));
    assert.deepEqual([body.stream, body.stream_options], [true, { include_obfuscation: false, include_usage: true }]);
  });

  it("sends neither stream nor stream_options for a non-stream request", () => {
    const req = canonical({ style: ApiStyle.CHAT_COMPLETIONS, stream: false, extraJson: '{"stream_options":{"include_usage":true}}', messages: [] });
    const body = bodyOf(req);
    assert.deepEqual(["stream" in body, "stream_options" in body], [false, false]);
  });

  it("sends an empty content array as an empty array, and an assistant tool turn's missing content as null", () => {
    const messages = [
      { role: "user", content: [] },
      { role: "assistant", content: [] },
      { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] },
    ];
    assert.deepEqual(bodyOf(fromChatBody({ model: "chat-4o", messages })).messages, messages);
  });

  it("sends an assistant turn that refused or answered in audio, without content, with content null", () => {
    const messages = [
      { role: "user", content: "hi" },
      { role: "assistant", content: null, refusal: "I can't help with that." },
      { role: "user", content: "say it" },
      { role: "assistant", content: null, audio: { id: "audio_abc" } },
      { role: "user", content: "again" },
    ];
    assert.deepEqual(bodyOf(fromChatBody({ model: "chat-4o", messages })).messages, messages);
  });

  it("gives a tool call with no input the arguments {}", () => {
    const req = canonical({ style: ApiStyle.CHAT_COMPLETIONS, messages: [{ role: "assistant", blocks: [{ type: BlockType.TOOL_USE, toolCallId: "c", toolName: "f" }] }] });
    assert.deepEqual((bodyOf(req).messages as unknown[])[0], { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] });
  });
});

describe("openai request: from a messages client (cross style)", () => {
  const req = canonical({
    style: ApiStyle.MESSAGES,
    system: "You are terse.",
    maxTokens: 300,
    temperature: 0.5,
    stream: true,
    extraJson: JSON.stringify({ stop_sequences: ["STOP"], top_p: 0.8, top_k: 5, metadata: { user_id: "user-9" }, tool_choice: { type: "any", disable_parallel_tool_use: true }, thinking: { type: "enabled", budget_tokens: 1024 } }),
    tools: [
      { name: "get_weather", description: "Weather", inputSchemaJson: '{"type":"object","properties":{"city":{"type":"string"}}}', extraJson: '{"cache_control":{"type":"ephemeral"}}' },
    ],
    messages: [
      { role: "user", contentIsString: true, blocks: [{ type: BlockType.TEXT, text: "Weather in Paris?" }] },
      {
        role: "assistant",
        blocks: [
          { type: BlockType.OTHER, rawJson: '{"type":"thinking","thinking":"hmm","signature":"s"}', style: ApiStyle.MESSAGES },
          { type: BlockType.TEXT, text: "Checking." },
          { type: BlockType.TOOL_USE, toolCallId: "toolu_1", toolName: "get_weather", toolInputJson: '{"city":"Paris"}', extraJson: '{"cache_control":{"type":"ephemeral"}}', style: ApiStyle.MESSAGES },
        ],
      },
      {
        role: "user",
        blocks: [
          { type: BlockType.TOOL_RESULT, toolCallId: "toolu_1", text: "18C" },
          { type: BlockType.TEXT, text: "And this?" },
          { type: BlockType.IMAGE, rawJson: '{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0"}}', style: ApiStyle.MESSAGES },
        ],
      },
    ],
  });

  it("writes the system prompt as a leading system message", () => {
    assert.deepEqual((bodyOf(req).messages as unknown[])[0], { role: "system", content: "You are terse." });
  });

  it("turns tool_use blocks into tool_calls, dropping thinking blocks", () => {
    assert.deepEqual((bodyOf(req).messages as unknown[])[2], {
      role: "assistant",
      content: "Checking.",
      tool_calls: [{ id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
    });
  });

  it("puts tool results in tool messages before the rest of the user turn", () => {
    const msgs = bodyOf(req).messages as unknown[];
    assert.deepEqual(msgs[3], { role: "tool", tool_call_id: "toolu_1", content: "18C" });
  });

  it("turns a base64 image into a data URL part", () => {
    assert.deepEqual((bodyOf(req).messages as unknown[])[4], {
      role: "user",
      content: [{ type: "text", text: "And this?" }, { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0" } }],
    });
  });

  it("maps stop_sequences, top_p, metadata.user_id and tool_choice, and nothing else of the other style", () => {
    const { messages: _m, tools: _t, ...rest } = bodyOf(req);
    assert.deepEqual(rest, {
      model: "gpt-4o",
      stop: ["STOP"],
      top_p: 0.8,
      user: "user-9",
      tool_choice: "required",
      parallel_tool_calls: false,
      temperature: 0.5,
      max_completion_tokens: 300,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it("maps input_schema to parameters", () => {
    assert.deepEqual(bodyOf(req).tools, [
      { type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } } } },
    ]);
  });

  it("maps a named tool_choice to a function choice", () => {
    const named = canonical({ style: ApiStyle.MESSAGES, extraJson: '{"tool_choice":{"type":"tool","name":"get_weather"}}', tools: [{ name: "get_weather" }], messages: [] });
    assert.deepEqual(bodyOf(named).tool_choice, { type: "function", function: { name: "get_weather" } });
  });

  it("sends the limit as max_completion_tokens, which every OpenAI chat model takes (reasoning models refuse max_tokens)", () => {
    const body = bodyOf(canonical({ style: ApiStyle.MESSAGES, maxTokens: 64, messages: [] }));
    assert.equal(body.max_completion_tokens, 64);
    assert.equal("max_tokens" in body, false);
  });

  it("sends a tool's strict: true as the function's strict, and nothing for strict false", () => {
    const req = canonical({ style: ApiStyle.MESSAGES, tools: [{ name: "a", extraJson: '{"strict":true}' }, { name: "b", extraJson: '{"strict":false}' }], messages: [] });
    assert.deepEqual((bodyOf(req).tools as Array<{ function: object }>).map((t) => t.function), [
      { name: "a", parameters: { type: "object", properties: {} }, strict: true },
      { name: "b", parameters: { type: "object", properties: {} } },
    ]);
  });

  it("refuses mcp_servers (tools run on Anthropic's side), rather than answering without them", () => {
    const req = canonical({ style: ApiStyle.MESSAGES, extraJson: '{"mcp_servers":[{"type":"url","url":"https://mcp.example.com/sse","name":"x"}]}', messages: [] });
    assert.throws(() => adapter.buildRequest(req, target), (e: unknown) => {
      const info = toErrorInfo(e);
      return info.status === 400 && info.code === "unsupported_parameter" && info.message.startsWith("`mcp_servers` is not supported");
    });
    assert.equal("mcp_servers" in bodyOf(canonical({ style: ApiStyle.MESSAGES, extraJson: '{"mcp_servers":[]}', messages: [] })), false);
  });

  it("sends no tool_choice when no tools are sent", () => {
    const noTools = canonical({ style: ApiStyle.MESSAGES, extraJson: '{"tool_choice":{"type":"auto"}}', messages: [] });
    assert.equal("tool_choice" in bodyOf(noTools), false);
  });
});

describe("openai request: from a messages client, what has no plain counterpart", () => {
  const msgs = (content: object[], extra: object = {}) =>
    canonical(messagesCodec.parseRequest(deepFreeze({ model: "assistant-x", max_tokens: 10, messages: [{ role: "user", content }], ...extra })));
  const history = (result: object) =>
    canonical(messagesCodec.parseRequest(deepFreeze({
      model: "assistant-x", max_tokens: 10,
      messages: [
        { role: "user", content: "What time is it?" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_T", name: "get_time", input: {} }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_T", ...result }] },
      ],
    })));
  /** The refusal buildRequest throws: [status, code, message, details]. */
  const refusal = (req: StreamChatRequest) => {
    try {
      adapter.buildRequest(req, target);
    } catch (e) {
      const info = toErrorInfo(e);
      return [info.status, info.code, info.message, info.details];
    }
    return assert.fail("not refused");
  };

  it("refuses `thread` (OpenAI keeps no conversation), with the details the Anthropic SDK reads", () => {
    assert.deepEqual(refusal(msgs([{ type: "text", text: "hi" }], { thread: { type: "continue", previous_message_id: "msg_1" } })), [
      400, "unsupported_parameter",
      "`thread` cannot be used here: the model 'assistant-x' is served by a chat-completions-style (OpenAI) upstream, which keeps no conversation between requests; send the whole conversation in `messages`, without `thread`.",
      { error_code: "thread_unsupported_request" },
    ]);
    assert.equal(refusal(msgs([{ type: "text", text: "hi" }], { thread: { type: "create" } }))[1], "unsupported_parameter");
    assert.deepEqual(bodyOf(msgs([{ type: "text", text: "hi" }], { thread: null })).messages, [{ role: "user", content: "hi" }]);
  });

  it("turns a base64 PDF document into a file part, and a text document into a text part, in place", () => {
    const req = msgs([
      { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0=" }, title: "a.pdf", context: "ctx", citations: { enabled: true } },
      { type: "text", text: "and" },
      { type: "document", source: { type: "text", media_type: "text/plain", data: "Plain words." } },
    ]);
    assert.deepEqual(bodyOf(req).messages, [{
      role: "user",
      content: [
        { type: "file", file: { filename: "a.pdf", file_data: "data:application/pdf;base64,JVBERi0=" } },
        { type: "text", text: "and" },
        { type: "text", text: "Plain words." },
      ],
    }]);
  });

  it("refuses a document by URL, by file id or of custom content, and a base64 one that is not a PDF, naming it", () => {
    for (const [source, code] of [
      [{ type: "url", url: "https://example.com/a.pdf" }, "unsupported_parameter"],
      [{ type: "file", file_id: "file_1" }, "unsupported_parameter"],
      [{ type: "content", content: [{ type: "text", text: "x" }] }, "unsupported_parameter"],
      [{ type: "base64", media_type: "text/plain", data: "eA==" }, "invalid_value"],
    ] as const) {
      const [status, got, message] = refusal(msgs([{ type: "text", text: "read" }, { type: "document", source }]));
      assert.deepEqual([status, got], [400, code], JSON.stringify(source));
      assert.match(String(message), /^`messages\[0\]\.content\[1\]/);
    }
  });

  it("refuses a server tool (it runs on Anthropic's side), naming it, rather than leaving it out", () => {
    const [status, code, message] = refusal(msgs([{ type: "text", text: "news?" }], { tools: [{ name: "f", input_schema: { type: "object" } }, { type: "web_search_20250305", name: "web_search" }], tool_choice: { type: "any" } }));
    assert.deepEqual([status, code], [400, "unsupported_parameter"]);
    assert.equal(message, '`tools[1].type` "web_search_20250305" is not supported: the model \'assistant-x\' is served by a chat-completions-style (OpenAI) upstream, which takes custom (function) tools only.');
  });

  it("refuses an image of a source form it cannot express and a user block of another type, naming them, rather than leaving them out", () => {
    for (const block of [
      { type: "image", source: { type: "file", file_id: "file_1" } },
      { type: "image", source: { type: "bogus" } },
      { type: "search_result", source: "https://x.test", title: "T", content: [{ type: "text", text: "found" }] },
    ]) {
      const [status, code, message] = refusal(msgs([{ type: "text", text: "look" }, block]));
      assert.deepEqual([status, code], [400, "unsupported_parameter"], JSON.stringify(block));
      assert.match(String(message), /^`messages\[0\]\.content\[1\]` is (an image with a `(file|bogus)` source|a block of type "search_result")/);
    }
  });

  it("refuses a tool_choice with no counterpart rather than leaving the model free", () => {
    for (const choice of [{ type: "tool" }, { type: "bogus" }]) {
      const [status, code, message] = refusal(msgs([{ type: "text", text: "hi" }], { tools: [{ name: "f", input_schema: { type: "object" } }], tool_choice: choice }));
      assert.deepEqual([status, code], [400, "invalid_value"], JSON.stringify(choice));
      assert.match(String(message), /^`tool_choice` must be/);
    }
  });

  it("prefixes an error result's text with \"Error: \" unless it says so already", () => {
    const toolMsg = (result: object) => (bodyOf(history(result)).messages as unknown[])[2];
    assert.deepEqual(toolMsg({ content: "no clock", is_error: true }), { role: "tool", tool_call_id: "toolu_T", content: "Error: no clock" });
    assert.deepEqual(toolMsg({ content: [{ type: "text", text: "no clock" }], is_error: true }), { role: "tool", tool_call_id: "toolu_T", content: "Error: no clock" });
    assert.deepEqual(toolMsg({ is_error: true }), { role: "tool", tool_call_id: "toolu_T", content: "Error" });
    assert.deepEqual(toolMsg({ content: "Error: no clock", is_error: true }), { role: "tool", tool_call_id: "toolu_T", content: "Error: no clock" });
    assert.deepEqual(toolMsg({ content: "12:00", is_error: false }), { role: "tool", tool_call_id: "toolu_T", content: "12:00" });
  });

  it("refuses a tool result holding an image or a document, which a tool message cannot carry, naming it", () => {
    const image = { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBO" } };
    const [status, code, message] = refusal(history({ content: [{ type: "text", text: "shot" }, image] }));
    assert.deepEqual([status, code], [400, "unsupported_parameter"]);
    assert.equal(message, "`messages[2].content[0].content[1]` is a block of type `image` inside a tool_result: the model 'assistant-x' is served by a chat-completions-style (OpenAI) upstream, whose tool messages carry text only; send it as a block of the user message instead.");
    const doc = { type: "document", source: { type: "text", media_type: "text/plain", data: "x" } };
    assert.match(String(refusal(history({ content: [doc] }))[2]), /^`messages\[2\]\.content\[0\]\.content\[0\]` is a block of type `document`/);
  });
});

describe("openai request: structured outputs from a messages client", () => {
  const schema = { type: "object", properties: { a: { type: "number" } }, required: ["a"], additionalProperties: false };
  const ask = (extra: object) =>
    canonical(messagesCodec.parseRequest(deepFreeze({ model: "assistant-x", max_tokens: 10, messages: [{ role: "user", content: "give me a" }], ...extra })));
  const strict = { type: "json_schema", json_schema: { name: "output", schema, strict: true } };

  it("sends output_config.format (the API's) as a strict json_schema response_format, and nothing else of output_config", () => {
    const body = bodyOf(ask({ output_config: { format: { type: "json_schema", schema }, effort: "low" } }));
    assert.deepEqual(body.response_format, strict);
    assert.equal("output_config" in body, false);
  });

  it("sends the beta's output_format the same way", () => {
    assert.deepEqual(bodyOf(ask({ output_format: { type: "json_schema", schema } })).response_format, strict);
  });

  it("sends no response_format without one (output_config with only effort, or a null format)", () => {
    assert.equal("response_format" in bodyOf(ask({})), false);
    assert.equal("response_format" in bodyOf(ask({ output_config: { effort: "low" } })), false);
    assert.equal("response_format" in bodyOf(ask({ output_config: { format: null }, output_format: null })), false);
  });

  it("refuses a format it cannot send (400 invalid_value naming the field), rather than leaving the answer free text", () => {
    for (const [extra, path] of [
      [{ output_config: { format: { type: "text" } } }, "output_config.format"],
      [{ output_config: { format: { type: "json_schema" } } }, "output_config.format"],
      [{ output_format: "json" }, "output_format"],
    ] as const) {
      let info: ReturnType<typeof toErrorInfo> | undefined;
      try {
        adapter.buildRequest(ask(extra), target);
      } catch (e) {
        info = toErrorInfo(e);
      }
      assert.equal(info?.status, 400, JSON.stringify(extra));
      assert.equal(info?.code, "invalid_value");
      assert.match(info!.message, new RegExp(`^\`${path.replace(".", "\\.")}\``));
    }
  });
});

describe("openai request: a system prompt set by the core", () => {
  it("goes first, as a system message, for a chat-style request", () => {
    const req = canonical({ style: ApiStyle.CHAT_COMPLETIONS, system: "Policy.", messages: [{ role: "user", contentIsString: true, blocks: [{ type: BlockType.TEXT, text: "hi" }] }] });
    assert.deepEqual(bodyOf(req).messages, [{ role: "system", content: "Policy." }, { role: "user", content: "hi" }]);
  });
});
