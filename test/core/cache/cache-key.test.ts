import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { cacheKeyOf } from "../../../src/core/cache/cache-key.js";
import type { ParsedChatRequest } from "../../../src/facades/gateway/codec.js";
import { chatCompletionsCodec } from "../../../src/facades/gateway/chat-completions-codec.js";
import { messagesCodec } from "../../../src/facades/gateway/messages-codec.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { ApiStyle, type StreamChatRequest, StreamChatRequestSchema } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";

type Who = Partial<Pick<StreamChatRequest, "requestId" | "projectId" | "keyId" | "keyMode" | "userId" | "metadata">>;

/** A request as the gateway builds it: the client body through the real codec, plus who is asking. */
const request = (parsed: ParsedChatRequest, who: Who = {}): StreamChatRequest =>
  create(StreamChatRequestSchema, { ...parsed, requestId: "req_1", projectId: "proj_1", keyId: "key_1", keyMode: KeyMode.LIVE, ...who });
const chatKey = (body: object, who?: Who) => cacheKeyOf(request(chatCompletionsCodec.parseRequest(body), who));
const messagesKey = (body: object, who?: Who) => cacheKeyOf(request(messagesCodec.parseRequest(body), who));

const chat = { model: "chat-4o", messages: [{ role: "user", content: "Hi" }] };
const msgs = { model: "assistant-3-5-haiku-20241022", max_tokens: 100, messages: [{ role: "user", content: "Hi" }] };
const weather = (props: object) => ({ type: "function", function: { name: "weather", description: "Weather for a city.", parameters: props } });
const schemaAB = { type: "object", properties: { city: { type: "string" }, unit: { type: "string", enum: ["c", "f"] } }, required: ["city"] };
const schemaBA = { required: ["city"], properties: { unit: { enum: ["c", "f"], type: "string" }, city: { type: "string" } }, type: "object" };
const messagesTool = { name: "weather", description: "Weather for a city.", input_schema: schemaAB };
const toolTurns = (input: object) => [
  { role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "weather", input }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "18C" }] },
];

/** A chat request whose last message is a tool's result, with the given content. */
const toolMessage = (content: unknown) => ({
  ...chat,
  messages: [...chat.messages, { role: "assistant", tool_calls: [{ id: "c1", type: "function", function: { name: "weather", arguments: "{}" } }] }, { role: "tool", tool_call_id: "c1", content }],
});
/** A messages request whose last turn is a tool_result block with the given content. */
const toolResult = (content: unknown) => ({ ...msgs, messages: [...toolTurns({ city: "Paris" }).slice(0, 2), { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content }] }] });

interface Case {
  name: string;
  a: () => string;
  b: () => string;
}

const same: Case[] = [
  { name: "chat: top-level key order", a: () => chatKey(chat), b: () => chatKey({ messages: chat.messages, model: "chat-4o" }) },
  { name: "chat: key order inside a tool's schema", a: () => chatKey({ ...chat, tools: [weather(schemaAB)] }), b: () => chatKey({ ...chat, tools: [weather(schemaBA)] }) },
  {
    name: "chat: key order inside a pass-through field",
    a: () => chatKey({ ...chat, response_format: { type: "json_schema", json_schema: { name: "x", schema: schemaAB } } }),
    b: () => chatKey({ ...chat, response_format: { json_schema: { schema: schemaBA, name: "x" }, type: "json_schema" } }),
  },
  { name: "chat: temperature omitted and 1", a: () => chatKey(chat), b: () => chatKey({ ...chat, temperature: 1 }) },
  { name: "chat: temperature 1 and 1.0e0 written differently", a: () => chatKey({ ...chat, temperature: 1 }), b: () => chatKey(JSON.parse('{"model":"chat-4o","messages":[{"role":"user","content":"Hi"}],"temperature":1.0e0}')) },
  { name: "chat: top_p omitted and 1", a: () => chatKey(chat), b: () => chatKey({ ...chat, top_p: 1 }) },
  { name: "chat: n omitted and 1", a: () => chatKey(chat), b: () => chatKey({ ...chat, n: 1 }) },
  { name: "chat: penalties omitted and 0", a: () => chatKey(chat), b: () => chatKey({ ...chat, presence_penalty: 0, frequency_penalty: 0 }) },
  { name: "chat: logprobs omitted and false", a: () => chatKey(chat), b: () => chatKey({ ...chat, logprobs: false }) },
  { name: "chat: response_format omitted and text", a: () => chatKey(chat), b: () => chatKey({ ...chat, response_format: { type: "text" } }) },
  { name: "chat: null parameters and omitted ones", a: () => chatKey(chat), b: () => chatKey({ ...chat, stop: null, seed: null, temperature: null, max_tokens: null }) },
  { name: "chat: tool_choice omitted and none without tools", a: () => chatKey(chat), b: () => chatKey({ ...chat, tool_choice: "none" }) },
  {
    name: "chat: tool_choice omitted and auto with tools, parallel_tool_calls omitted and true",
    a: () => chatKey({ ...chat, tools: [weather(schemaAB)] }),
    b: () => chatKey({ ...chat, tools: [weather(schemaAB)], tool_choice: "auto", parallel_tool_calls: true }),
  },
  { name: "chat: stream and not", a: () => chatKey(chat), b: () => chatKey({ ...chat, stream: true, stream_options: { include_usage: true } }) },
  { name: "chat: end-user tags in the body", a: () => chatKey(chat), b: () => chatKey({ ...chat, user: "u-42", safety_identifier: "s", metadata: { team: "x" } }) },
  { name: "chat: content as a string and as one text part", a: () => chatKey(chat), b: () => chatKey({ ...chat, messages: [{ role: "user", content: [{ type: "text", text: "Hi" }] }] }) },
  {
    name: "chat: who is asking (request id, user id, X-Svc-Metadata, key, project, mode)",
    a: () => chatKey(chat),
    b: () => chatKey(chat, { requestId: "req_2", userId: "user-9", metadata: { a: "b" }, keyId: "key_2", projectId: "proj_2", keyMode: KeyMode.TEST }),
  },
  { name: "messages: top-level key order", a: () => messagesKey(msgs), b: () => messagesKey({ messages: msgs.messages, max_tokens: 100, model: msgs.model }) },
  { name: "messages: temperature omitted and 1", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, temperature: 1 }) },
  { name: "messages: stop_sequences omitted and empty", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, stop_sequences: [] }) },
  { name: "messages: system omitted and empty", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, system: "" }) },
  {
    name: "messages: tool_choice omitted and auto with tools",
    a: () => messagesKey({ ...msgs, tools: [messagesTool] }),
    b: () => messagesKey({ ...msgs, tools: [messagesTool], tool_choice: { type: "auto" } }),
  },
  {
    name: "messages: key order inside a tool_use input",
    a: () => messagesKey({ ...msgs, messages: toolTurns({ city: "Paris", unit: "c" }) }),
    b: () => messagesKey({ ...msgs, messages: toolTurns({ unit: "c", city: "Paris" }) }),
  },
  { name: "messages: stream and not", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, stream: true }) },
  { name: "messages: metadata.user_id", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, metadata: { user_id: "u-1" } }) },
  { name: "messages: content as a string and as one text block", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, messages: [{ role: "user", content: [{ type: "text", text: "Hi" }] }] }) },
  { name: "chat: a tool message's content as a string and as one text part", a: () => chatKey(toolMessage("18C")), b: () => chatKey(toolMessage([{ type: "text", text: "18C" }])) },
  { name: "messages: a tool_result's content as a string and as one text block", a: () => messagesKey(toolResult("18C")), b: () => messagesKey(toolResult([{ text: "18C", type: "text" }])) },
  { name: "messages: system as a string and as one text block", a: () => messagesKey({ ...msgs, system: "Be brief." }), b: () => messagesKey({ ...msgs, system: [{ type: "text", text: "Be brief." }] }) },
];

const different: Case[] = [
  { name: "chat: model", a: () => chatKey(chat), b: () => chatKey({ ...chat, model: "chat-4o-mini" }) },
  { name: "chat: message text", a: () => chatKey(chat), b: () => chatKey({ ...chat, messages: [{ role: "user", content: "Hi!" }] }) },
  { name: "chat: message role", a: () => chatKey(chat), b: () => chatKey({ ...chat, messages: [{ role: "system", content: "Hi" }] }) },
  { name: "chat: one more message", a: () => chatKey(chat), b: () => chatKey({ ...chat, messages: [...chat.messages, { role: "assistant", content: "Hello" }] }) },
  { name: "chat: temperature", a: () => chatKey(chat), b: () => chatKey({ ...chat, temperature: 0.7 }) },
  { name: "chat: temperature 0 and omitted", a: () => chatKey(chat), b: () => chatKey({ ...chat, temperature: 0 }) },
  { name: "chat: max_tokens omitted and set", a: () => chatKey(chat), b: () => chatKey({ ...chat, max_tokens: 100 }) },
  { name: "chat: max_tokens", a: () => chatKey({ ...chat, max_tokens: 100 }), b: () => chatKey({ ...chat, max_tokens: 200 }) },
  { name: "chat: tools and none", a: () => chatKey(chat), b: () => chatKey({ ...chat, tools: [weather(schemaAB)] }) },
  { name: "chat: a tool's schema", a: () => chatKey({ ...chat, tools: [weather(schemaAB)] }), b: () => chatKey({ ...chat, tools: [weather({ ...schemaAB, required: [] })] }) },
  { name: "chat: tool order", a: () => chatKey({ ...chat, tools: [weather(schemaAB), weather({})] }), b: () => chatKey({ ...chat, tools: [weather({}), weather(schemaAB)] }) },
  { name: "chat: top_p", a: () => chatKey(chat), b: () => chatKey({ ...chat, top_p: 0.9 }) },
  { name: "chat: seed", a: () => chatKey(chat), b: () => chatKey({ ...chat, seed: 7 }) },
  { name: "chat: tool_choice required", a: () => chatKey({ ...chat, tools: [weather(schemaAB)] }), b: () => chatKey({ ...chat, tools: [weather(schemaAB)], tool_choice: "required" }) },
  { name: "messages: model", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, model: "assistant-3-opus-20240229" }) },
  { name: "messages: max_tokens", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, max_tokens: 101 }) },
  { name: "messages: temperature", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, temperature: 0.5 }) },
  { name: "messages: system", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, system: "Be brief." }) },
  { name: "messages: tools", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, tools: [messagesTool] }) },
  { name: "messages: top_k", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, top_k: 5 }) },
  { name: "messages: system as a string and as a text block with cache_control", a: () => messagesKey({ ...msgs, system: "Be brief." }), b: () => messagesKey({ ...msgs, system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }] }) },
  { name: "messages: system as one text block and as two", a: () => messagesKey({ ...msgs, system: [{ type: "text", text: "Be brief." }] }), b: () => messagesKey({ ...msgs, system: [{ type: "text", text: "Be " }, { type: "text", text: "brief." }] }) },
  { name: "messages: stop_sequences", a: () => messagesKey(msgs), b: () => messagesKey({ ...msgs, stop_sequences: ["END"] }) },
  { name: "chat: a tool message's text part and the same text with cache_control", a: () => chatKey(toolMessage([{ type: "text", text: "18C" }])), b: () => chatKey(toolMessage([{ type: "text", text: "18C", cache_control: { type: "ephemeral" } }])) },
  { name: "messages: a tool_result's text and two text blocks", a: () => messagesKey(toolResult("18C")), b: () => messagesKey(toolResult([{ type: "text", text: "18" }, { type: "text", text: "C" }])) },
  { name: "messages: a tool_result's text and an error with that text", a: () => messagesKey(toolResult("18C")), b: () => messagesKey({ ...toolResult("18C"), messages: [...toolTurns({ city: "Paris" }).slice(0, 2), { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "18C", is_error: true }] }] }) },
  { name: "messages: a tool_use input", a: () => messagesKey({ ...msgs, messages: toolTurns({ city: "Paris" }) }), b: () => messagesKey({ ...msgs, messages: toolTurns({ city: "Rome" }) }) },
  {
    name: "chat: texts that differ only in a lone surrogate",
    a: () => chatKey(JSON.parse('{"model":"chat-4o","messages":[{"role":"user","content":"\\ud800"}]}')),
    b: () => chatKey(JSON.parse('{"model":"chat-4o","messages":[{"role":"user","content":"\\ud801"}]}')),
  },
  {
    name: "style alone (same model id and conversation)",
    a: () => cacheKeyOf(create(StreamChatRequestSchema, { style: ApiStyle.CHAT_COMPLETIONS, model: "m", maxTokens: 10, messages: [{ role: "user", blocks: [{ type: 1, text: "Hi" }] }] })),
    b: () => cacheKeyOf(create(StreamChatRequestSchema, { style: ApiStyle.MESSAGES, model: "m", maxTokens: 10, messages: [{ role: "user", blocks: [{ type: 1, text: "Hi" }] }] })),
  },
];

describe("cacheKeyOf", () => {
  it("is a SHA-256 in base64url", () => {
    assert.match(chatKey(chat), /^[A-Za-z0-9_-]{43}$/);
  });

  describe("gives the same key", () => {
    for (const c of same) it(c.name, () => assert.equal(c.a(), c.b()));
  });

  describe("gives different keys", () => {
    for (const c of different) it(c.name, () => assert.notEqual(c.a(), c.b()));
  });
});
