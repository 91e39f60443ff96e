import assert from "node:assert/strict";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  ApiStyle,
  BlockType,
  StreamChatRequestSchema,
  type StreamChatRequest,
} from "../../../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import type { UpstreamTarget } from "../../../../../src/core/proxy/upstreams/adapter.js";
import { createAnthropicAdapter } from "../../../../../src/core/proxy/upstreams/anthropic/adapter.js";
import { toErrorInfo } from "../../../../../src/core/errors.js";
import { deepFreeze } from "../../../../support/freeze.js";

const adapter = createAnthropicAdapter();
const target: UpstreamTarget = {
  provider: "anthropic",
  style: ApiStyle.MESSAGES,
  baseUrl: "https://api.anthropic.com/",
  apiKey: "sk-ant-test",
  upstreamModel: "claude-3-5-sonnet-20241022",
};
const M = ApiStyle.MESSAGES;
const C = ApiStyle.CHAT_COMPLETIONS;

/** Freezes a request all the way down: a conversion that writes to its input throws. */
type Init = Exclude<MessageInitShape<typeof StreamChatRequestSchema>, StreamChatRequest>;

const request = (init: Init): StreamChatRequest =>
  deepFreeze(create(StreamChatRequestSchema, { model: "assistant-3-5-sonnet-20241022", ...init }));

const body = (req: StreamChatRequest) => JSON.parse(adapter.buildRequest(req, target).body) as Record<string, unknown>;

const user = (text: string, style = M) => ({ role: "user", contentIsString: true, blocks: [{ type: BlockType.TEXT, text, style }] });

describe("anthropic request: envelope", () => {
  it("posts to {baseUrl}/v1/messages, without a doubled slash", () => {
    assert.equal(adapter.buildRequest(request({ style: M, maxTokens: 10, messages: [user("hi")] }), target).url, "https://api.anthropic.com/v1/messages");
  });

  it("sends content-type, x-api-key and anthropic-version, and asks for no content coding (the gateway decodes none)", () => {
    const { headers } = adapter.buildRequest(request({ style: M, maxTokens: 10, messages: [user("hi")] }), target);
    assert.deepEqual(headers, { "content-type": "application/json", "accept-encoding": "identity", "x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01" });
  });

  it("omits x-api-key when no key is configured", () => {
    const { headers } = adapter.buildRequest(request({ style: M, maxTokens: 10, messages: [user("hi")] }), { ...target, apiKey: "" });
    assert.equal("x-api-key" in headers, false);
  });

  it("names the upstream model, not the public id", () => {
    assert.equal(body(request({ style: M, maxTokens: 10, messages: [user("hi")] })).model, "claude-3-5-sonnet-20241022");
  });

  it("sets stream only when the client streams", () => {
    assert.equal(body(request({ style: M, maxTokens: 10, stream: true, messages: [user("hi")] })).stream, true);
    assert.equal("stream" in body(request({ style: M, maxTokens: 10, messages: [user("hi")] })), false);
  });
});

describe("anthropic request: from the messages style", () => {
  const toolResultArray = [
    { type: "text", text: "72F" },
    { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
  ];
  const sameStyle = request({
    style: M,
    system: "Be brief.\n\nUse tools.",
    maxTokens: 1024,
    temperature: 0.2,
    stream: true,
    messages: [
      { role: "user", blocks: [{ type: BlockType.TEXT, text: "Weather?", extraJson: '{"cache_control":{"type":"ephemeral"}}', style: M }] },
      {
        role: "assistant",
        blocks: [
          { type: BlockType.OTHER, rawJson: '{"type":"thinking","thinking":"call it","signature":"sig=="}', style: M },
          { type: BlockType.TOOL_USE, toolCallId: "toolu_1", toolName: "get_weather", toolInputJson: '{"city":"Paris"}', style: M },
        ],
      },
      {
        role: "user",
        extraJson: '{"x_future":1}',
        blocks: [
          { type: BlockType.TOOL_RESULT, toolCallId: "toolu_1", text: "72F", extraJson: JSON.stringify({ content: toolResultArray }), style: M },
          { type: BlockType.TOOL_RESULT, toolCallId: "toolu_2", text: "boom", isError: true, style: M },
          { type: BlockType.IMAGE, rawJson: '{"type":"image","source":{"type":"url","url":"https://x.test/a.png"}}', style: M },
        ],
      },
    ],
    tools: [
      { name: "get_weather", description: "Weather by city", inputSchemaJson: '{"type":"object","properties":{"city":{"type":"string"}}}', extraJson: '{"cache_control":{"type":"ephemeral"}}' },
      { name: "", extraJson: '{"type":"web_search_20250305","name":"web_search","max_uses":3}' },
    ],
    extraJson: JSON.stringify({
      system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }, { type: "text", text: "Use tools." }],
      top_p: 0.9,
      top_k: 40,
      stop_sequences: ["\n\nHuman:"],
      metadata: { user_id: "u-1" },
      tool_choice: { type: "auto", disable_parallel_tool_use: true },
      thinking: { type: "enabled", budget_tokens: 2048 },
      x_future_field: { nested: [1, 2] },
    }),
  });

  it("rebuilds the body the client sent, unknown fields included", () => {
    assert.deepEqual(body(sameStyle), {
      model: "claude-3-5-sonnet-20241022",
      max_tokens: 1024,
      temperature: 0.2,
      stream: true,
      system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }, { type: "text", text: "Use tools." }],
      messages: [
        { role: "user", content: [{ type: "text", text: "Weather?", cache_control: { type: "ephemeral" } }] },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "call it", signature: "sig==" },
            { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
          ],
        },
        {
          role: "user",
          x_future: 1,
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: toolResultArray },
            { type: "tool_result", tool_use_id: "toolu_2", content: "boom", is_error: true },
            { type: "image", source: { type: "url", url: "https://x.test/a.png" } },
          ],
        },
      ],
      tools: [
        { name: "get_weather", description: "Weather by city", input_schema: { type: "object", properties: { city: { type: "string" } } }, cache_control: { type: "ephemeral" } },
        { type: "web_search_20250305", name: "web_search", max_uses: 3 },
      ],
      top_p: 0.9,
      top_k: 40,
      stop_sequences: ["\n\nHuman:"],
      metadata: { user_id: "u-1" },
      tool_choice: { type: "auto", disable_parallel_tool_use: true },
      thinking: { type: "enabled", budget_tokens: 2048 },
      x_future_field: { nested: [1, 2] },
    });
  });

  it("sends a string content back as a string", () => {
    assert.deepEqual(body(request({ style: M, maxTokens: 5, messages: [user("hello")] })).messages, [{ role: "user", content: "hello" }]);
  });

  it("sends the system text when the client sent a string", () => {
    assert.equal(body(request({ style: M, maxTokens: 5, system: "Be brief.", messages: [user("hi")] })).system, "Be brief.");
  });

  it("leaves the request as it was (it is deep-frozen here, and equal after)", () => {
    const before = JSON.stringify(sameStyle);
    body(sameStyle);
    assert.equal(JSON.stringify(sameStyle), before);
  });

  it("never lets an unknown field replace a named one", () => {
    const b = body(request({ style: M, maxTokens: 5, messages: [user("hi")], extraJson: '{"model":"other","max_tokens":1,"messages":[]}' }));
    assert.deepEqual([b.model, b.max_tokens, b.messages], ["claude-3-5-sonnet-20241022", 5, [{ role: "user", content: "hi" }]]);
  });
});

describe("anthropic request: from the chat-completions style", () => {
  const text = (t: string) => ({ type: BlockType.TEXT, text: t, style: C });
  const chat = (init: Omit<Init, "style">) => body(request({ style: C, ...init }));

  it("moves system and developer turns into system, joined by blank lines", () => {
    const b = chat({ messages: [{ role: "system", blocks: [text("Be brief.")] }, { role: "developer", blocks: [text("Be kind.")] }, user("hi", C)] });
    assert.equal(b.system, "Be brief.\n\nBe kind.");
    assert.deepEqual(b.messages, [{ role: "user", content: "hi" }]);
  });

  it("sends an earlier refusal sent back without content as the assistant's text, and refuses an earlier audio answer", () => {
    const b = chat({ messages: [user("a", C), { role: "assistant", blocks: [], extraJson: '{"refusal":"I can\'t help with that."}' }, user("b", C)] });
    assert.deepEqual(b.messages, [
      { role: "user", content: "a" },
      { role: "assistant", content: "I can't help with that." },
      { role: "user", content: "b" },
    ]);
    assert.throws(
      () => chat({ messages: [user("a", C), { role: "assistant", blocks: [], extraJson: '{"audio":{"id":"audio_1"}}' }, user("b", C)] }),
      (e: Error) => toErrorInfo(e).code === "unsupported_parameter" && e.message.includes("`messages[1].audio`"),
    );
  });

  it("turns tool turns into one user turn of tool_result blocks, ahead of the user's text", () => {
    const b = chat({
      messages: [
        user("weather in Paris and Rome?", C),
        {
          role: "assistant",
          blocks: [
            { type: BlockType.TOOL_USE, toolCallId: "call_1", toolName: "get_weather", toolInputJson: '{"city":"Paris"}', style: C },
            { type: BlockType.TOOL_USE, toolCallId: "call_2", toolName: "get_weather", toolInputJson: '{"city":"Rome"}', style: C },
          ],
        },
        { role: "tool", blocks: [{ type: BlockType.TOOL_RESULT, toolCallId: "call_1", text: "20C", style: C }] },
        { role: "tool", blocks: [{ type: BlockType.TOOL_RESULT, toolCallId: "call_2", text: "25C", style: C }] },
        user("thanks", C),
      ],
    });
    assert.deepEqual(b.messages, [
      { role: "user", content: "weather in Paris and Rome?" },
      {
        role: "assistant",
        content: [
          { type: "tool_use", id: "call_1", name: "get_weather", input: { city: "Paris" } },
          { type: "tool_use", id: "call_2", name: "get_weather", input: { city: "Rome" } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "call_1", content: "20C" },
          { type: "tool_result", tool_use_id: "call_2", content: "25C" },
          { type: "text", text: "thanks" },
        ],
      },
    ]);
  });

  it("merges consecutive turns of the same role, since roles must alternate", () => {
    const b = chat({ messages: [user("a", C), user("b", C), { role: "assistant", blocks: [text("c")] }] });
    assert.deepEqual(b.messages, [
      { role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] },
      { role: "assistant", content: "c" },
    ]);
  });

  it("turns a data: URL image into a base64 image block", () => {
    const part = '{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"}}';
    const b = chat({ messages: [{ role: "user", blocks: [text("what is this?"), { type: BlockType.IMAGE, rawJson: part, style: C }] }] });
    assert.deepEqual(b.messages, [
      { role: "user", content: [{ type: "text", text: "what is this?" }, { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] },
    ]);
  });

  it("turns an http(s) image URL into a url image block", () => {
    const part = '{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}';
    const b = chat({ messages: [{ role: "user", blocks: [{ type: BlockType.IMAGE, rawJson: part, style: C }] }] });
    assert.deepEqual(b.messages, [{ role: "user", content: [{ type: "image", source: { type: "url", url: "https://x.test/a.png" } }] }]);
  });

  it("takes a data: URL with parameters before base64 (RFC 2397) as a base64 image block", () => {
    const part = '{"type":"image_url","image_url":{"url":"data:image/jpeg;name=photo.jpg;base64,/9j/4AAQ"}}';
    const b = chat({ messages: [{ role: "user", blocks: [{ type: BlockType.IMAGE, rawJson: part, style: C }] }] });
    assert.deepEqual(b.messages, [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/jpeg", data: "/9j/4AAQ" } }] }]);
  });

  it("drops other chat-style parts, empty texts, and turns left empty", () => {
    const b = chat({
      messages: [
        user("hi", C),
        { role: "user", blocks: [{ type: BlockType.OTHER, rawJson: '{"type":"x_future_part"}', style: C }] },
        { role: "assistant", blocks: [text(""), text("ok")] },
      ],
    });
    assert.deepEqual(b.messages, [{ role: "user", content: "hi" }, { role: "assistant", content: "ok" }]);
  });

  /** The 400 a translation refuses with: [status, type, code, message]. */
  const refusal = (init: Omit<Init, "style">) => {
    try {
      chat(init);
    } catch (e) {
      const info = toErrorInfo(e);
      return [info.status, info.type, info.code, info.message];
    }
    return assert.fail("the request was translated, not refused");
  };
  const callWith = (args: string) => ({ type: BlockType.TOOL_USE, toolCallId: "call_1", toolName: "f", toolInputJson: args, style: C });

  it("takes a tool call's empty arguments as an empty input", () => {
    const b = chat({ messages: [user("hi", C), { role: "assistant", blocks: [callWith("")] }] });
    assert.deepEqual(b.messages, [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "tool_use", id: "call_1", name: "f", input: {} }] }]);
  });

  for (const args of ["not json", "[1,2]", '"s"', "null", "7", '{"city":']) {
    it(`refuses a tool call whose arguments are ${JSON.stringify(args)}, naming the message, rather than sending input {}`, () => {
      const [status, type, code, message] = refusal({
        model: "chat-x",
        messages: [
          user("hi", C),
          { role: "assistant", blocks: [text("calling"), callWith('{"ok":1}'), callWith(args)] },
          { role: "tool", blocks: [{ type: BlockType.TOOL_RESULT, toolCallId: "call_1", text: "r", style: C }] },
        ],
      });
      assert.deepEqual([status, type, code], [400, "invalid_request_error", "invalid_value"]);
      assert.match(String(message), /^`messages\[1\]\.tool_calls\[1\]\.function\.arguments` must be the text of a JSON object: the model 'chat-x' is served by a messages-style \(Anthropic\) upstream/);
      assert.ok(String(message).includes(JSON.stringify(args)), String(message));
    });
  }

  it("refuses a tool call's arguments nested past 128 levels or holding a number beyond a double's range (JSON.stringify overflowed its stack, or sent null)", () => {
    const deep = `{"a":${"[".repeat(5000)}${"]".repeat(5000)}}`;
    const [status, , code, message] = refusal({ model: "chat-x", messages: [user("hi", C), { role: "assistant", blocks: [callWith(deep)] }] });
    assert.deepEqual([status, code], [400, "json_too_deep"]);
    assert.equal(message, "`messages[1].tool_calls[0].function.arguments` nests arrays and objects more than 128 levels deep.");
    const [s2, , c2, m2] = refusal({ model: "chat-x", messages: [user("hi", C), { role: "assistant", blocks: [callWith('{"n":[1, 1e400]}')] }] });
    assert.deepEqual([s2, c2], [400, "invalid_value"]);
    assert.match(String(m2), /^`messages\[1\]\.tool_calls\[0\]\.function\.arguments` holds a number too large to represent \(beyond ±1\.8e308\) at `n\[1\]`/);
    // 128 levels (the body's own bound) and large finite numbers pass.
    const ok = chat({ messages: [user("hi", C), { role: "assistant", blocks: [callWith(`{"a":${"[".repeat(126)}1e300${"]".repeat(126)}}`)] }] });
    assert.equal(JSON.stringify((ok.messages as Array<{ content: Array<{ input: unknown }> }>)[1]!.content[0]!.input).length, 2 * 126 + 12);
  });

  for (const [what, init, fieldName] of [
    ["`functions`", { messages: [user("hi", C)], extraJson: '{"functions":[{"name":"get_weather","parameters":{"type":"object"}}]}' }, "functions"],
    ["`function_call`", { messages: [user("hi", C)], extraJson: '{"function_call":"auto"}' }, "function_call"],
    ["an assistant turn's `function_call`", { messages: [user("hi", C), { role: "assistant", blocks: [], extraJson: '{"function_call":{"name":"f","arguments":"{}"}}' }] }, "messages[1].function_call"],
    ["a `function` turn", { messages: [user("hi", C), { role: "function", blocks: [text("18C")], extraJson: '{"name":"f"}' }] }, "messages[1].role"],
  ] as const) {
    const field = fieldName;
    it(`refuses ${what} (OpenAI's older function calling), naming it, rather than sending no tools and the result as the user's words`, () => {
      const [status, , code, message] = refusal({ model: "chat-x", ...(init as unknown as Omit<Init, "style">) });
      assert.deepEqual([status, code], [400, "unsupported_parameter"]);
      assert.ok(String(message).startsWith(`\`${field}\` (OpenAI's older form of function calling) is not supported: the model 'chat-x' is served by a messages-style (Anthropic) upstream; send the functions as \`tools\``), String(message));
    });
  }

  it("turns a file part holding a PDF data URL into a base64 document block, in place", () => {
    const file = (url: string) => JSON.stringify({ type: "file", file: { file_data: url, filename: "a.pdf" } });
    const b = chat({
      messages: [
        {
          role: "user",
          blocks: [
            text("summarize"),
            { type: BlockType.OTHER, rawJson: file("data:application/pdf;base64,JVBERi0xLjQ="), style: C },
            text("and compare with"),
            { type: BlockType.OTHER, rawJson: file("data:Application/PDF;name=b.pdf;base64,JVBERi0xLjc="), style: C },
          ],
        },
      ],
    });
    assert.deepEqual(b.messages, [
      {
        role: "user",
        content: [
          { type: "text", text: "summarize" },
          { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0xLjQ=" } },
          { type: "text", text: "and compare with" },
          { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0xLjc=" } },
        ],
      },
    ]);
  });

  for (const [what, part, code, says] of [
    ["a file by file_id", { type: "file", file: { file_id: "file-abc123" } }, "unsupported_parameter", "names a file by `file_id`"],
    ["a file with neither data nor id", { type: "file", file: {} }, "unsupported_parameter", "has no `file.file_data`"],
    ["an input_audio part", { type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }, "unsupported_parameter", "is an `input_audio` part"],
    ["a file_data that is not a PDF data URL", { type: "file", file: { file_data: "data:text/plain;base64,aGk=" } }, "invalid_value", ".file.file_data` must be a PDF"],
    ["a file_data that is bare base64", { type: "file", file: { file_data: "JVBERi0xLjQ=" } }, "invalid_value", ".file.file_data` must be a PDF"],
  ] as const) {
    it(`refuses ${what}, naming the part, rather than dropping it`, () => {
      const [status, type, got, message] = refusal({
        model: "chat-x",
        messages: [user("hi", C), { role: "assistant", blocks: [text("ok")] }, { role: "user", blocks: [text("and this?"), { type: BlockType.OTHER, rawJson: JSON.stringify(part), style: C }] }],
      });
      assert.deepEqual([status, type, got], [400, "invalid_request_error", code]);
      assert.ok(String(message).startsWith("`messages[2].content[1]"), String(message));
      assert.ok(String(message).includes(says), String(message));
      assert.ok(String(message).includes("'chat-x' is served by a messages-style (Anthropic) upstream"), String(message));
    });
  }

  for (const [what, imageUrl] of [
    ["an ftp URL", { url: "ftp://x.test/a.png" }],
    ["an empty URL", { url: "" }],
    ["a URL that is not a string", { url: 5 }],
    ["a data URL that is not base64", { url: "data:image/png,rawbytes" }],
    ["a data URL of something other than an image", { url: "data:text/plain;base64,aGk=" }],
  ] as const) {
    it(`refuses an image part with ${what}, naming it, rather than asking about an image the model never sees`, () => {
      const part = JSON.stringify({ type: "image_url", image_url: imageUrl });
      const [status, type, code, message] = refusal({ model: "chat-x", messages: [user("hi", C), { role: "assistant", blocks: [text("ok")] }, { role: "user", blocks: [text("what is this?"), { type: BlockType.IMAGE, rawJson: part, style: C }] }] });
      assert.deepEqual([status, type, code], [400, "invalid_request_error", "invalid_value"]);
      assert.ok(String(message).startsWith("`messages[2].content[1].image_url.url` must be an http(s) URL or a base64 data URL"), String(message));
    });
  }

  for (const [what, messages] of [
    ["only a system prompt", [{ role: "system", contentIsString: true, blocks: [{ type: BlockType.TEXT, text: "be brief", style: C }] }]],
    ["only an empty user text", [user("", C)]],
  ] as const) {
    it(`refuses a conversation of ${what} (Anthropic needs a message), saying so`, () => {
      const [status, , code, message] = refusal({ model: "chat-x", messages: messages as never });
      assert.deepEqual([status, code], [400, "invalid_value"]);
      assert.match(String(message), /^`messages` holds no message with content besides system prompts/);
    });
  }

  for (const [extra, code, says] of [
    ['{"response_format":{"type":"json_object"}}', "unsupported_parameter", '`response_format` "json_object" is not supported'],
    ['{"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}', "invalid_value", "`response_format.json_schema.schema` must be a JSON schema object"],
    ['{"logprobs":true,"top_logprobs":2}', "unsupported_parameter", "`logprobs` is not supported"],
    ['{"modalities":["text","audio"]}', "unsupported_parameter", "`modalities` is not supported"],
    ['{"modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"}}', "unsupported_parameter", "`audio` is not supported"],
    ['{"web_search_options":{}}', "unsupported_parameter", "`web_search_options` is not supported"],
    ['{"safety_identifier":5}', "invalid_type", "`safety_identifier` must be a string"],
    ['{"stop":5}', "invalid_type", "`stop` must be a string or an array of strings"],
    ['{"stop":["a",1]}', "invalid_type", "`stop` must be a string or an array of strings"],
    ['{"top_p":1.5}', "invalid_value", "`top_p` must be a number from 0 to 1"],
    ['{"top_p":[1]}', "invalid_value", "`top_p` must be a number from 0 to 1"],
    ['{"user":5}', "invalid_type", "`user` must be a string"],
    ['{"tool_choice":"bogus"}', "invalid_value", "`tool_choice` must be"],
    ['{"tool_choice":5}', "invalid_value", "`tool_choice` must be"],
    ['{"tool_choice":{"type":"function"}}', "invalid_value", "`tool_choice` must be"],
    ['{"parallel_tool_calls":"no"}', "invalid_type", "`parallel_tool_calls` must be a boolean"],
  ] as const) {
    it(`refuses ${extra} rather than leaving it out or bending it into range`, () => {
      const [status, , got, message] = refusal({ model: "chat-x", messages: [user("hi", C)], tools: [{ name: "lookup" }], extraJson: extra });
      assert.deepEqual([status, got], [400, code]);
      assert.ok(String(message).startsWith(says), String(message));
    });
  }

  it("takes null sampling and tool fields, and a text response_format, as not sent", () => {
    const b = chat({ messages: [user("hi", C)], tools: [{ name: "lookup" }], extraJson: '{"stop":null,"top_p":null,"user":null,"safety_identifier":null,"tool_choice":null,"parallel_tool_calls":null,"response_format":{"type":"text"},"logprobs":false,"modalities":["text"],"audio":null,"web_search_options":null}' });
    assert.deepEqual(Object.keys(b).sort(), ["max_tokens", "messages", "model", "tools"]);
  });

  it("defaults max_tokens to 4096", () => {
    assert.equal(chat({ messages: [user("hi", C)] }).max_tokens, 4096);
  });

  it("keeps a given max_tokens", () => {
    assert.equal(chat({ maxTokens: 77, messages: [user("hi", C)] }).max_tokens, 77);
  });

  it("clamps temperature into 0..1", () => {
    assert.equal(chat({ temperature: 1.6, messages: [user("hi", C)] }).temperature, 1);
  });

  it("translates stop, top_p and user, and copies no other chat-style field", () => {
    const b = chat({
      messages: [user("hi", C)],
      extraJson: JSON.stringify({ stop: "END", top_p: 0.5, user: "u-9", safety_identifier: "s-1", frequency_penalty: 1, n: 2, seed: 7, reasoning_effort: "low", response_format: { type: "text" } }),
    });
    assert.deepEqual(b, { model: target.upstreamModel, max_tokens: 4096, messages: [{ role: "user", content: "hi" }], stop_sequences: ["END"], top_p: 0.5, metadata: { user_id: "u-9" } });
  });

  it("takes safety_identifier (user's successor) as metadata.user_id when there is no user", () => {
    assert.deepEqual(chat({ messages: [user("hi", C)], extraJson: '{"safety_identifier":"s-1"}' }).metadata, { user_id: "s-1" });
  });

  it("sends a json_schema response_format as output_config.format (structured outputs)", () => {
    const schema = { type: "object", properties: { a: { type: "number" } }, required: ["a"], additionalProperties: false };
    const b = chat({ messages: [user("hi", C)], extraJson: JSON.stringify({ response_format: { type: "json_schema", json_schema: { name: "x", schema, strict: true } } }) });
    assert.deepEqual(b.output_config, { format: { type: "json_schema", schema } });
    assert.equal("response_format" in b, false);
  });

  it("sends a function's strict: true as the tool's strict, and nothing for strict false", () => {
    const b = chat({
      messages: [user("hi", C)],
      tools: [{ name: "a", extraJson: '{"function":{"strict":true}}' }, { name: "b", extraJson: '{"function":{"strict":false}}' }],
    });
    assert.deepEqual(b.tools, [{ name: "a", input_schema: { type: "object" }, strict: true }, { name: "b", input_schema: { type: "object" } }]);
  });

  it("takes an array stop as stop_sequences", () => {
    assert.deepEqual(chat({ messages: [user("hi", C)], extraJson: '{"stop":["a","b"]}' }).stop_sequences, ["a", "b"]);
  });

  it("leaves empty and whitespace-only stop values out of stop_sequences (the API refuses them)", () => {
    const stop = (v: unknown) => chat({ messages: [user("hi", C)], extraJson: JSON.stringify({ stop: v }) }).stop_sequences;
    assert.deepEqual(stop(["\n", "\n\n", " ", "", "\t\r\n", "\u00a0\u3000", "END", " x\n"]), ["END", " x\n"]);
    assert.equal(stop("\n"), undefined, "a string stop");
    assert.equal(stop(["\n", " "]), undefined, "an array of only whitespace");
    assert.deepEqual(stop("\nUser:"), ["\nUser:"], "whitespace around text is kept");
  });

  it("maps function tools' parameters to input_schema, defaulting to an object schema", () => {
    const b = chat({
      messages: [user("hi", C)],
      tools: [
        { name: "lookup", description: "Look up", inputSchemaJson: '{"type":"object","properties":{"q":{"type":"string"}}}', extraJson: '{"strict":true}' },
        { name: "ping" },
      ],
    });
    assert.deepEqual(b.tools, [
      { name: "lookup", description: "Look up", input_schema: { type: "object", properties: { q: { type: "string" } } } },
      { name: "ping", input_schema: { type: "object" } },
    ]);
  });

  for (const [choice, expected] of [
    ['"auto"', { type: "auto" }],
    ['"none"', { type: "none" }],
    ['"required"', { type: "any" }],
    ['{"type":"function","function":{"name":"lookup"}}', { type: "tool", name: "lookup" }],
  ] as const) {
    it(`maps tool_choice ${choice} to ${JSON.stringify(expected)}`, () => {
      const b = chat({ messages: [user("hi", C)], tools: [{ name: "lookup" }], extraJson: `{"tool_choice":${choice}}` });
      assert.deepEqual(b.tool_choice, expected);
    });
  }

  it("maps parallel_tool_calls false to disable_parallel_tool_use", () => {
    const b = chat({ messages: [user("hi", C)], tools: [{ name: "lookup" }], extraJson: '{"parallel_tool_calls":false}' });
    assert.deepEqual(b.tool_choice, { type: "auto", disable_parallel_tool_use: true });
  });

  it("sends no tool_choice without tools", () => {
    assert.equal("tool_choice" in chat({ messages: [user("hi", C)], extraJson: '{"tool_choice":"required"}' }), false);
  });
});
