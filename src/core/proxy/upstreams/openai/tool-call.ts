import { ApiStyle, BlockType, type ContentBlock } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { isObject, parseExtra, type JsonObject } from "../../../json.js";

/**
 * The extra_json of a tool-use block that is a call of an OpenAI custom tool
 * (`{"type":"custom","custom":{"name","input"}}`): its name is the tool's, and its input, free text
 * rather than JSON arguments, is the block's tool_input_json.
 */
export const CUSTOM_CALL_EXTRA = '{"type":"custom"}';

/** Whether a tool-use block is a custom tool's call (CUSTOM_CALL_EXTRA, with any unnamed fields of the call). */
export const isCustomCall = (b: { type: BlockType; extraJson: string }): boolean =>
  b.type === BlockType.TOOL_USE && b.extraJson !== "" && parseExtra(b.extraJson).type === "custom";

const kCallKnown: ReadonlySet<string> = new Set(["index", "id", "type", "function", "custom"]);
const kFunctionKnown: ReadonlySet<string> = new Set(["name", "arguments"]);
const kCustomKnown: ReadonlySet<string> = new Set(["name", "input"]);

/**
 * The name and input text (free text for a custom tool's call, JSON arguments otherwise; "" where
 * not a string) of a tool call in an upstream's answer, whole or a stream's fragment of it.
 */
export function callParts(call: JsonObject, custom: boolean): { name: string; input: string } {
  const inner = custom ? call.custom : call.function;
  const fn = isObject(inner) ? inner : {};
  const input = custom ? fn.input : fn.arguments;
  return { name: typeof fn.name === "string" ? fn.name : "", input: typeof input === "string" ? input : "" };
}

/**
 * The extra_json of a tool call in an upstream's answer (whole, or a stream's first fragment of the
 * call): the call's fields the canonical block does not name (Gemini's `extra_content` with the
 * thought signature a client must send back, ...), those of its `function` (or `custom`) object
 * under that key, and a custom call's mark. Empty when there are none.
 */
export function answerCallExtra(call: JsonObject, custom: boolean): string {
  const out: JsonObject = {};
  for (const k in call) if (!kCallKnown.has(k)) out[k] = call[k];
  const inner = custom ? call.custom : call.function;
  if (isObject(inner)) {
    const known = custom ? kCustomKnown : kFunctionKnown;
    const more: JsonObject = {};
    for (const k in inner) if (!known.has(k)) more[k] = inner[k];
    if (Object.keys(more).length) out[custom ? "custom" : "function"] = more;
  }
  if (custom) out.type = "custom";
  return Object.keys(out).length ? JSON.stringify(out) : "";
}

/** A tool-use block's unnamed fields in the chat-completions style, for a chat-style client ({} for another style's). */
export const sameStyleCallExtra = (b: ContentBlock): JsonObject =>
  b.style === ApiStyle.CHAT_COMPLETIONS && b.extraJson !== "" ? parseExtra(b.extraJson) : {};

/**
 * A tool-use block as an OpenAI `tool_calls` item, in a request or an answer. `extra` holds the
 * call's own unnamed fields (a custom tool's call's `type` among them; those of its `function` or
 * `custom` object under that key), only when the block came in the chat-completions style. An
 * empty input becomes `emptyArguments` ("{}": OpenAI rejects ""). A custom tool's call keeps its
 * shape and its free-text input as it is.
 */
export function toolCall(b: ContentBlock, extra: JsonObject = {}, emptyArguments = "{}"): JsonObject {
  if (extra.type === "custom" || isCustomCall(b)) {
    return { ...extra, id: b.toolCallId, type: "custom", custom: { ...objectOf(extra.custom), name: b.toolName, input: b.toolInputJson } };
  }
  return { ...extra, id: b.toolCallId, type: "function", function: { ...objectOf(extra.function), name: b.toolName, arguments: b.toolInputJson || emptyArguments } };
}

const objectOf = (v: unknown): JsonObject | undefined => (isObject(v) ? v : undefined);
