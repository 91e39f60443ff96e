import {
  ApiStyle,
  BlockType,
  type ChatMessage,
  type ContentBlock,
  type StreamChatRequest,
  type ToolDefinition,
} from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { isObject, parseExtra, type JsonObject } from "../../../json.js";
import type { UpstreamHttpRequest, UpstreamTarget } from "../adapter.js";
import { messagesFromMessagesStyle, paramsFromMessagesStyle, refuseServerTools, refuseThread } from "./request-from-messages.js";
import { saysWithoutContent } from "../../request-rules.js";
import { toolCall } from "./tool-call.js";

/**
 * Builds the OpenAI chat-completions request (https://platform.openai.com/docs/api-reference/chat/create)
 * for a canonical request of either client style. Pure: every object written is new, so a retry can
 * run it again on the same request.
 */
export function buildOpenAiRequest(req: StreamChatRequest, target: UpstreamTarget): UpstreamHttpRequest {
  // The gateway reads bodies as they come and decodes no content coding: it asks for none.
  const headers: Record<string, string> = { "content-type": "application/json", "accept-encoding": "identity" };
  if (target.apiKey !== "") headers.authorization = `Bearer ${target.apiKey}`;
  return {
    url: `${target.baseUrl.replace(/\/+$/, "")}/chat/completions`,
    headers,
    body: JSON.stringify(buildOpenAiBody(req, target.upstreamModel)),
  };
}

/** The request body as an object (exported for tests). */
export function buildOpenAiBody(req: StreamChatRequest, upstreamModel: string): JsonObject {
  const crossStyle = req.style === ApiStyle.MESSAGES;
  const extra = parseExtra(req.extraJson);
  if (crossStyle) {
    refuseThread(extra, req.model);
    refuseServerTools(req);
  }
  // Same style: everything the client sent rides along verbatim. Cross style: only the few
  // parameters with an OpenAI equivalent (the rest means nothing to this upstream).
  const params = crossStyle ? paramsFromMessagesStyle(extra, req.tools.length > 0, req.model) : extra;
  const body: JsonObject = {
    model: upstreamModel,
    messages: crossStyle ? messagesFromMessagesStyle(req) : sameStyleMessages(req),
    ...params,
  };
  if (req.temperature !== undefined) body.temperature = req.temperature;
  // A client that used `max_completion_tokens` (kept verbatim in extra_json, and copied into the
  // canonical limit) must not also get `max_tokens`: reasoning models reject it. A messages
  // client's limit (which that API requires) goes as `max_completion_tokens`, the field every
  // OpenAI chat model takes (`max_tokens` is deprecated there, and refused by o-series and gpt-5).
  if (req.maxTokens !== undefined) {
    if (crossStyle) body.max_completion_tokens = req.maxTokens;
    else if (params.max_completion_tokens !== req.maxTokens) body.max_tokens = req.maxTokens;
  }
  if (req.tools.length) {
    const tools = crossStyle ? req.tools.map(crossStyleTool) : req.tools.map(sameStyleTool);
    if (tools.length) body.tools = tools;
  }
  if (req.stream) {
    body.stream = true;
    // The gateway prices a stream from its usage, which OpenAI only sends when asked to.
    const opts = isObject(params.stream_options) ? params.stream_options : {};
    body.stream_options = { ...opts, include_usage: true };
  } else {
    delete body.stream;
    delete body.stream_options; // OpenAI rejects stream_options without stream
  }
  return body;
}

/** A chat client sends its system prompt as a message; one the core set (`system`) goes first. */
function sameStyleMessages(req: StreamChatRequest): JsonObject[] {
  const messages = req.messages.map(chatMessage);
  return req.system ? [{ role: "system", content: req.system }, ...messages] : messages;
}

/** A chat-style message rebuilt as the client sent it. */
function chatMessage(m: ChatMessage): JsonObject {
  const out: JsonObject = { role: m.role, ...parseExtra(m.extraJson) };
  const result = m.blocks.find((b) => b.type === BlockType.TOOL_RESULT);
  if (result) {
    out.tool_call_id = result.toolCallId;
    out.content = !m.contentIsString && result.rawJson ? JSON.parse(result.rawJson) : result.text;
    return out;
  }
  const parts = m.blocks.filter((b) => b.type !== BlockType.TOOL_USE);
  const calls = m.blocks.filter((b) => b.type === BlockType.TOOL_USE);
  // No parts: the null content of an assistant turn that called tools, refused or answered in audio
  // (saysWithoutContent), or an empty array as sent (only such a turn may come without content).
  const said = m.role === "assistant" && saysWithoutContent(out, calls.length);
  if (m.contentIsString) out.content = parts.map((b) => b.text).join("");
  else out.content = parts.length ? parts.map(contentPart).filter((p) => p !== undefined) : said ? null : [];
  if (calls.length) out.tool_calls = calls.map((b) => toolCall(b, parseExtra(b.extraJson)));
  return out;
}

function contentPart(b: ContentBlock): unknown {
  if (b.type === BlockType.TEXT) return { type: "text", text: b.text, ...parseExtra(b.extraJson) };
  return b.rawJson ? JSON.parse(b.rawJson) : undefined;
}

/**
 * A chat-style tool. The codec keeps the tool's own extra fields at the top of extra_json and the
 * function's (e.g. `strict`) under its `function` key, so both levels come back where they were.
 */
function sameStyleTool(t: ToolDefinition): JsonObject {
  // A tool that is not a function (a custom tool) was carried whole.
  if (t.name === "") return parseExtra(t.extraJson);
  const { function: fnExtra, ...toolExtra } = parseExtra(t.extraJson);
  const fn: JsonObject = { name: t.name };
  if (t.description) fn.description = t.description;
  if (t.inputSchemaJson) fn.parameters = JSON.parse(t.inputSchemaJson);
  return { type: "function", ...toolExtra, function: { ...fn, ...(isObject(fnExtra) ? fnExtra : {}) } };
}

/**
 * A messages-style tool: `input_schema` becomes `parameters`, and `strict: true` (inputs that must
 * follow the schema) the function's `strict`; its other extras are another style's and stay behind.
 */
function crossStyleTool(t: ToolDefinition): JsonObject {
  const fn: JsonObject = { name: t.name };
  if (t.description) fn.description = t.description;
  fn.parameters = t.inputSchemaJson ? JSON.parse(t.inputSchemaJson) : { type: "object", properties: {} };
  if (parseExtra(t.extraJson).strict === true) fn.strict = true;
  return { type: "function", function: fn };
}
