import { BlockType, type ChatMessage, type ContentBlock, type StreamChatRequest } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { isObject, type JsonObject } from "../../../json.js";
import { toolCall } from "./tool-call.js";

/**
 * Messages-style conversations as chat-completions messages. The two styles differ in where tool
 * results live (a user block there, a `tool` message here) and in the system prompt (a field there,
 * a leading message here). Blocks with no chat-completions equivalent (thinking, documents, server
 * tool results, images in an unknown source form) are left out rather than failing the request.
 */
export function messagesFromMessagesStyle(req: StreamChatRequest): JsonObject[] {
  const out: JsonObject[] = [];
  if (req.system) out.push({ role: "system", content: req.system });
  for (const m of req.messages) {
    if (m.role === "assistant") pushAssistant(m, out);
    else pushUser(m, out);
  }
  return out;
}

function pushAssistant(m: ChatMessage, out: JsonObject[]): void {
  const text = m.blocks.filter((b) => b.type === BlockType.TEXT).map((b) => b.text).join("");
  const calls = m.blocks.filter((b) => b.type === BlockType.TOOL_USE).map((b) => toolCall(b));
  if (!text && !calls.length) return; // e.g. a turn that held only thinking blocks
  const msg: JsonObject = { role: "assistant", content: text || null };
  if (calls.length) msg.tool_calls = calls;
  out.push(msg);
}

function pushUser(m: ChatMessage, out: JsonObject[]): void {
  // OpenAI wants each tool result right after the assistant turn that called it: results first.
  for (const b of m.blocks) {
    if (b.type === BlockType.TOOL_RESULT) out.push({ role: "tool", tool_call_id: b.toolCallId, content: resultText(b) });
  }
  const parts: JsonObject[] = [];
  for (const b of m.blocks) {
    if (b.type === BlockType.TEXT) parts.push({ type: "text", text: b.text });
    else if (b.type === BlockType.IMAGE) {
      const image = imagePart(b.rawJson);
      if (image) parts.push(image);
    }
  }
  if (!parts.length) return;
  const onlyText = parts.every((p) => p.type === "text");
  const content = onlyText && (m.contentIsString || parts.length === 1) ? parts.map((p) => p.text).join("") : parts;
  out.push({ role: m.role || "user", content });
}

/** A tool result's text; when only the raw block came through, the text of its text items. */
function resultText(b: ContentBlock): string {
  if (b.text || !b.rawJson) return b.text;
  try {
    const raw: unknown = JSON.parse(b.rawJson);
    const items = isObject(raw) ? raw.content : raw;
    if (typeof items === "string") return items;
    if (!Array.isArray(items)) return "";
    return items.map((i) => (isObject(i) && i.type === "text" && typeof i.text === "string" ? i.text : "")).join("");
  } catch {
    return "";
  }
}

/** A messages-style image block as an `image_url` part (base64 becomes a data URL). */
function imagePart(rawJson: string): JsonObject | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(rawJson);
  } catch {
    return undefined;
  }
  if (!isObject(raw)) return undefined;
  if (raw.type === "image_url") return raw; // already this style
  const src = raw.source;
  if (!isObject(src)) return undefined;
  if (src.type === "base64" && typeof src.media_type === "string" && typeof src.data === "string") {
    return { type: "image_url", image_url: { url: `data:${src.media_type};base64,${src.data}` } };
  }
  if (src.type === "url" && typeof src.url === "string") return { type: "image_url", image_url: { url: src.url } };
  return undefined;
}

/**
 * The messages-style parameters that have an OpenAI equivalent
 * (https://docs.anthropic.com/en/api/messages). `tool_choice` and parallel-call settings only make
 * sense, and are only accepted by OpenAI, when tools are sent.
 */
export function paramsFromMessagesStyle(extra: JsonObject, hasTools: boolean): JsonObject {
  const out: JsonObject = {};
  if (Array.isArray(extra.stop_sequences) && extra.stop_sequences.length) out.stop = extra.stop_sequences;
  if (typeof extra.top_p === "number") out.top_p = extra.top_p;
  if (isObject(extra.metadata) && typeof extra.metadata.user_id === "string") out.user = extra.metadata.user_id;
  const choice = extra.tool_choice;
  if (hasTools && isObject(choice)) {
    const mapped = toolChoice(choice);
    if (mapped !== undefined) out.tool_choice = mapped;
    if (choice.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  }
  return out;
}

function toolChoice(choice: JsonObject): unknown {
  if (choice.type === "auto") return "auto";
  if (choice.type === "any") return "required";
  if (choice.type === "none") return "none";
  if (choice.type === "tool" && typeof choice.name === "string") return { type: "function", function: { name: choice.name } };
  return undefined;
}
