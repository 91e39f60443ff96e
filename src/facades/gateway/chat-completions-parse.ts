import { checkStreamOptions } from "../../core/proxy/request-checks.js";
import { ApiStyle, BlockType, type ChatMessage, type ContentBlock, type ToolDefinition } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { extraJson, isObject, type JsonObject } from "../../core/json.js";
import { chatMessage, contentBlock, toolDefinition } from "../../core/proxy/canonical.js";
import {
  CHAT_FUNCTION_FIELDS,
  CHAT_REQUEST_FIELDS,
  CHAT_ROLES,
  CHAT_TEXT_PART_FIELDS,
  CHAT_CUSTOM_CALL_FIELDS,
  CHAT_TOOL_CALL_FIELDS,
  CHAT_TOOL_FIELDS,
  MAX_TEMPERATURE_CHAT,
  MIN_MAX_TOKENS,
  saysWithoutContent,
  TOOL_NAME,
} from "../../core/proxy/request-rules.js";
import type { ParsedChatRequest } from "./codec.js";
import {
  fail,
  missing,
  optionalArray,
  optionalBoolean,
  optionalIntegerInRange,
  optionalNumberInRange,
  optionalString,
  requireArray,
  requireBody,
  requireObject,
  requireOneOf,
  requireString,
  shownNumber,
  wrongType,
} from "../../core/validate.js";
import { cutText } from "../../core/text.js";

const chat = ApiStyle.CHAT_COMPLETIONS;
// Fields the canonical model does not name (top_p, stop, tool_choice, seed, response_format,
// max_completion_tokens, ...) are kept verbatim for a chat-completions upstream. The names and
// limits (CHAT_*, TOOL_NAME) are shared with the check of requests that come over the network
// (core/proxy/request-rules.ts).

/**
 * Validates a chat-completions body (https://platform.openai.com/docs/api-reference/chat/create) and
 * converts it to the canonical request. Reads only: `body` is never changed.
 */
export function parseChatCompletionsRequest(body: unknown): ParsedChatRequest {
  const b = requireBody(body);
  const model = requireString(b, "model");
  if (model === "") fail("invalid_value", "`model` must be a non-empty string.");
  const rawMessages = requireArray(b, "messages");
  if (rawMessages.length === 0) fail("invalid_value", "`messages` must contain at least one message.");
  const messages = rawMessages.map((m, i) => parseMessage(m, `messages[${i}]`));
  const temperature = optionalNumberInRange(b, "temperature", 0, MAX_TEMPERATURE_CHAT);
  const maxTokens = optionalIntegerInRange(b, "max_tokens", MIN_MAX_TOKENS);
  const maxCompletionTokens = optionalIntegerInRange(b, "max_completion_tokens", MIN_MAX_TOKENS);
  const stream = optionalBoolean(b, "stream") ?? false;
  checkChoiceCount(b);
  checkStreamOptions(b, stream);
  const tools = optionalArray(b, "tools")?.map((t, i) => parseTool(t, `tools[${i}]`)) ?? [];
  return {
    style: chat,
    model,
    system: "",
    messages,
    temperature,
    maxTokens: maxTokens ?? maxCompletionTokens,
    stream,
    tools,
    extraJson: extraJson(b, CHAT_REQUEST_FIELDS),
  };
}

/** The gateway answers, caches and prices exactly one choice. */
function checkChoiceCount(b: JsonObject): void {
  const n = b.n;
  if (n === undefined || n === null || n === 1) return;
  if (typeof n !== "number") return wrongType("n", "an integer", n);
  if (Number.isFinite(n) && !Number.isInteger(n)) fail("invalid_type", `\`n\` must be an integer, got ${n}.`);
  fail("unsupported_parameter", `\`n\` must be 1: the gateway returns a single choice, got ${shownNumber(n)}.`);
}


function parseMessage(v: unknown, path: string): ChatMessage {
  const m = requireObject(v, path);
  const role = requireOneOf(m, "role", CHAT_ROLES, `${path}.role`);
  if (role === "tool") return parseToolMessage(m, path);
  const known = new Set(["role", "content"]);
  const blocks: ContentBlock[] = [];
  let contentIsString = false;
  const content = m.content;
  const calls = role === "assistant" ? optionalArray(m, "tool_calls", `${path}.tool_calls`) : undefined;
  if (calls) known.add("tool_calls");
  if (typeof content === "string") {
    contentIsString = true;
    blocks.push(contentBlock({ type: BlockType.TEXT, text: content, style: chat }));
  } else if (Array.isArray(content)) {
    content.forEach((p, j) => blocks.push(parsePart(p, `${path}.content[${j}]`)));
  } else if (content === undefined || content === null) {
    // Only an assistant turn that called tools, refused or answered in audio may come without content.
    if (role !== "assistant" || !saysWithoutContent(m, calls?.length ?? 0)) missing(`${path}.content`);
  } else {
    wrongType(`${path}.content`, "a string or an array of content parts", content);
  }
  calls?.forEach((c, j) => blocks.push(parseToolCall(c, `${path}.tool_calls[${j}]`)));
  return chatMessage({ role, blocks, contentIsString, extraJson: extraJson(m, known) });
}

/** A `tool` message is one tool-result block; an array content is also kept whole for the same style. */
function parseToolMessage(m: JsonObject, path: string): ChatMessage {
  const toolCallId = requireString(m, "tool_call_id", `${path}.tool_call_id`);
  const content = m.content;
  let block: ContentBlock;
  if (typeof content === "string") {
    block = contentBlock({ type: BlockType.TOOL_RESULT, toolCallId, text: content, style: chat });
  } else if (Array.isArray(content)) {
    const parts = content.map((p, j) => parsePart(p, `${path}.content[${j}]`));
    const text = parts.map((p) => (p.type === BlockType.TEXT ? p.text : "")).join("");
    block = contentBlock({ type: BlockType.TOOL_RESULT, toolCallId, text, rawJson: JSON.stringify(content), style: chat });
  } else if (content === undefined || content === null) {
    return missing(`${path}.content`);
  } else {
    return wrongType(`${path}.content`, "a string or an array of content parts", content);
  }
  const known = new Set(["role", "content", "tool_call_id"]);
  return chatMessage({ role: "tool", blocks: [block], contentIsString: typeof content === "string", extraJson: extraJson(m, known) });
}

function parsePart(v: unknown, path: string): ContentBlock {
  const part = requireObject(v, path);
  const type = requireString(part, "type", `${path}.type`);
  if (type === "text") {
    const text = requireString(part, "text", `${path}.text`);
    return contentBlock({ type: BlockType.TEXT, text, extraJson: extraJson(part, CHAT_TEXT_PART_FIELDS), style: chat });
  }
  const rawJson = JSON.stringify(part);
  return contentBlock({ type: type === "image_url" ? BlockType.IMAGE : BlockType.OTHER, rawJson, style: chat });
}

function parseToolCall(v: unknown, path: string): ContentBlock {
  const call = requireObject(v, path);
  const id = requireString(call, "id", `${path}.id`);
  if (call.type !== undefined) requireOneOf(call, "type", ["function", "custom"], `${path}.type`);
  if (call.type === "custom") {
    // A custom tool's call: free-text input, not JSON arguments. Its `type` stays in extra_json,
    // which marks the block (CUSTOM_CALL_EXTRA).
    const custom = requireObject(call.custom, `${path}.custom`);
    return contentBlock({
      type: BlockType.TOOL_USE,
      toolCallId: id,
      toolName: requireString(custom, "name", `${path}.custom.name`),
      toolInputJson: requireString(custom, "input", `${path}.custom.input`),
      extraJson: extraJson(call, CHAT_CUSTOM_CALL_FIELDS),
      style: chat,
    });
  }
  const fn = requireObject(call.function, `${path}.function`);
  return contentBlock({
    type: BlockType.TOOL_USE,
    toolCallId: id,
    toolName: requireString(fn, "name", `${path}.function.name`),
    toolInputJson: requireString(fn, "arguments", `${path}.function.arguments`),
    extraJson: extraJson(call, CHAT_TOOL_CALL_FIELDS),
    style: chat,
  });
}

/**
 * A function tool. Unnamed fields of the tool stay at the top of extra_json and those of the function
 * (e.g. `strict`) under its `function` key, so the adapter can put each back where it was.
 */
function parseTool(v: unknown, path: string): ToolDefinition {
  const t = requireObject(v, path);
  // A tool that is not a function (OpenAI's `custom` tools, and types to come) rides whole, with no
  // name of its own, to an upstream of this style; the upstream judges it.
  const type = requireString(t, "type", `${path}.type`);
  if (type !== "function") return toolDefinition({ name: "", extraJson: JSON.stringify(t) });
  const fn = requireObject(t.function, `${path}.function`);
  const name = requireString(fn, "name", `${path}.function.name`);
  if (!TOOL_NAME.test(name)) {
    fail("invalid_value", `\`${path}.function.name\` must match ^[a-zA-Z0-9_-]{1,64}$, got '${cutText(name, 80)}'.`);
  }
  const description = optionalString(fn, "description", `${path}.function.description`) ?? "";
  const params = fn.parameters;
  if (params !== undefined && params !== null && !isObject(params)) wrongType(`${path}.function.parameters`, "an object", params);
  const toolExtra: JsonObject = JSON.parse(extraJson(t, CHAT_TOOL_FIELDS) || "{}");
  const fnExtra = extraJson(fn, CHAT_FUNCTION_FIELDS);
  if (fnExtra) toolExtra.function = JSON.parse(fnExtra);
  return toolDefinition({
    name,
    description,
    inputSchemaJson: isObject(params) ? JSON.stringify(params) : "",
    extraJson: Object.keys(toolExtra).length ? JSON.stringify(toolExtra) : "",
  });
}
