import { BlockType, type ChatMessage, type ContentBlock, type StreamChatRequest } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { invalidRequest } from "../../../errors.js";
import { carriesThread } from "../../request-rules.js";
import { isObject, parseExtra, parseObject, type JsonObject } from "../../../json.js";
import { quotedWord } from "../../../text.js";
import { toolCall } from "./tool-call.js";

/**
 * Messages-style conversations as chat-completions messages. The two styles differ in where tool
 * results live (a user block there, a `tool` message here) and in the system prompt (a field there,
 * a leading message here). Blocks with no chat-completions equivalent that the model can do without
 * (thinking, server tool results) are left out; what would change the question if it were left out
 * (an image or a document OpenAI cannot read, an image or a document inside a tool result) is
 * refused with a 400 naming the block.
 */
export function messagesFromMessagesStyle(req: StreamChatRequest): JsonObject[] {
  const out: JsonObject[] = [];
  if (req.system) out.push({ role: "system", content: req.system });
  req.messages.forEach((m, i) => {
    if (m.role === "assistant") pushAssistant(m, out);
    // A system message in the conversation stays one, where it was (chat completions takes them anywhere).
    else if (m.role === "system") out.push({ role: "system", content: m.blocks.filter((b) => b.type === BlockType.TEXT).map((b) => b.text).join("\n\n") });
    else pushUser(m, `messages[${i}]`, req.model, out);
  });
  return out;
}

const routed = (model: string) => `the model '${model}' is served by a chat-completions-style (OpenAI) upstream`;

/**
 * Refuses a request that continues or creates a message thread (the message-threads beta: a turn
 * carries `thread` and only its new messages, the server holding the rest). OpenAI keeps no
 * conversation between requests, so without the thread the upstream would answer a conversation
 * missing its history. `details.error_code` is the one the Anthropic SDK reads to resend the turn
 * with the whole history and no `thread` (its tool runner does so on its own).
 */
export function refuseThread(extra: JsonObject, model: string): void {
  if (!carriesThread(extra)) return;
  throw invalidRequest(
    "unsupported_parameter",
    `\`thread\` cannot be used here: ${routed(model)}, which keeps no conversation between requests; send the whole conversation in \`messages\`, without \`thread\`.`,
    { error_code: "thread_unsupported_request" },
  );
}

/**
 * Refuses a server tool (web search, code execution, ...: a tool with a `type` of its own, carried
 * whole): it runs on Anthropic's side, and an OpenAI upstream has none. Left out, the model would
 * answer without the search the client asked for, and a `tool_choice` naming it would reach
 * OpenAI without any tool, which it refuses.
 */
export function refuseServerTools(req: StreamChatRequest): void {
  req.tools.forEach((t, i) => {
    if (t.name !== "") return;
    const type = quotedWord(parseExtra(t.extraJson).type);
    throw invalidRequest("unsupported_parameter", `\`tools[${i}].type\` ${type} is not supported: ${routed(req.model)}, which takes custom (function) tools only.`);
  });
}

function pushAssistant(m: ChatMessage, out: JsonObject[]): void {
  const text = m.blocks.filter((b) => b.type === BlockType.TEXT).map((b) => b.text).join("");
  const calls = m.blocks.filter((b) => b.type === BlockType.TOOL_USE).map((b) => toolCall(b));
  if (!text && !calls.length) return; // e.g. a turn that held only thinking blocks
  const msg: JsonObject = { role: "assistant", content: text || null };
  if (calls.length) msg.tool_calls = calls;
  out.push(msg);
}

/** A user turn; `path` names it as the client wrote it (`messages[i]`), its blocks being its `content[j]`. */
function pushUser(m: ChatMessage, path: string, model: string, out: JsonObject[]): void {
  // OpenAI wants each tool result right after the assistant turn that called it: results first.
  m.blocks.forEach((b, j) => {
    if (b.type === BlockType.TOOL_RESULT) out.push({ role: "tool", tool_call_id: b.toolCallId, content: toolMessageText(b, `${path}.content[${j}]`, model) });
  });
  const parts: JsonObject[] = [];
  m.blocks.forEach((b, j) => {
    if (b.type === BlockType.TEXT) parts.push({ type: "text", text: b.text });
    else if (b.type === BlockType.IMAGE) parts.push(imagePart(b.rawJson, `${path}.content[${j}]`, model));
    else if (b.type === BlockType.OTHER) parts.push(otherPart(b.rawJson, `${path}.content[${j}]`, model));
  });
  if (!parts.length) return;
  const onlyText = parts.every((p) => p.type === "text");
  const content = onlyText && (m.contentIsString || parts.length === 1) ? parts.map((p) => p.text).join("") : parts;
  out.push({ role: m.role || "user", content });
}

/**
 * A tool result as a tool message's text. An OpenAI tool message carries text only, so a result
 * whose content holds anything else (an image, a document) has no counterpart: the request is
 * refused, naming the block, rather than sent with the result emptied. A result marked `is_error`
 * has no flag there either: its text is prefixed "Error: " (or is "Error" when it has none) so the
 * model still reads it as the tool's failure, unless it already begins with "Error" (the Anthropic
 * SDK's tool runner writes a thrown error as "Error: <message>").
 */
function toolMessageText(b: ContentBlock, path: string, model: string): string {
  const raw = b.rawJson ? parseOr(b.rawJson) : undefined;
  // The messages codec keeps an array content in extra_json; a block given whole holds it in raw_json.
  const holder = raw ?? (b.extraJson ? parseOr(b.extraJson) : undefined);
  const items = isObject(holder) ? holder.content : holder;
  if (Array.isArray(items)) {
    items.forEach((item, k) => {
      if (isObject(item) && item.type === "text") return;
      const what = isObject(item) && typeof item.type === "string" ? `a block of type \`${item.type}\`` : "not a text block";
      throw invalidRequest(
        "unsupported_parameter",
        `\`${path}.content[${k}]\` is ${what} inside a tool_result: ${routed(model)}, whose tool messages carry text only; send it as a block of the user message instead.`,
      );
    });
  }
  let text = b.text;
  // When only the raw block came through: its text, or the text of its text items.
  if (!text && raw !== undefined) {
    if (typeof items === "string") text = items;
    else if (Array.isArray(items)) text = items.map((i) => (isObject(i) && typeof i.text === "string" ? i.text : "")).join("");
  }
  if (!b.isError || /^error\b/i.test(text)) return text;
  return text ? `Error: ${text}` : "Error";
}

const parseOr = (json: string): unknown => {
  try {
    return JSON.parse(json);
  } catch {
    return undefined;
  }
};

/**
 * A user block of a type the canonical model does not name, as a content part. A messages-style
 * document block (https://docs.anthropic.com/en/docs/build-with-claude/pdf-support): a base64 PDF becomes a `file` part holding it as a data URL in `file_data`
 * (https://platform.openai.com/docs/guides/pdf-files), named by the document's `title` (else
 * "document.pdf"); a plain-text source becomes a text part with its text. A document OpenAI cannot
 * be given (a URL, a Files API id, custom content) is refused, naming the block, rather than left
 * out, and so is a user block of any other type (a search result, a container upload): the model
 * would answer without what it holds.
 */
function otherPart(rawJson: string, path: string, model: string): JsonObject {
  const raw = parseObject(rawJson);
  if (raw?.type !== "document") {
    const type = quotedWord(raw?.type);
    throw invalidRequest("unsupported_parameter", `\`${path}\` is a block of type ${type}: ${routed(model)}, which has no such content; send its content as text.`);
  }
  const src = isObject(raw.source) ? raw.source : {};
  if (src.type === "base64") {
    if (src.media_type !== "application/pdf" || typeof src.data !== "string") {
      throw invalidRequest("invalid_value", `\`${path}.source\` must hold a PDF (\`media_type\` "application/pdf") as base64 \`data\`: ${routed(model)}, which reads PDF documents.`);
    }
    const filename = typeof raw.title === "string" && raw.title !== "" ? raw.title : "document.pdf";
    return { type: "file", file: { filename, file_data: `data:application/pdf;base64,${src.data}` } };
  }
  if (src.type === "text" && typeof src.data === "string") return { type: "text", text: src.data };
  const what = typeof src.type === "string" ? `a \`${src.type}\` source` : "no source";
  throw invalidRequest(
    "unsupported_parameter",
    `\`${path}\` is a document with ${what}: ${routed(model)}, which reads a document only as a base64 PDF or plain text (\`source.type\` "base64" or "text").`,
  );
}

/**
 * A messages-style image block as an `image_url` part (base64 becomes a data URL). An image of
 * another source form (a Files API `file_id`) has no counterpart, and leaving it out would ask
 * about an image the model never sees: refused, naming the block.
 */
function imagePart(rawJson: string, path: string, model: string): JsonObject {
  const raw = parseObject(rawJson) ?? {};
  if (raw.type === "image_url") return raw; // already this style
  const src = isObject(raw.source) ? raw.source : {};
  if (src.type === "base64" && typeof src.media_type === "string" && typeof src.data === "string") {
    return { type: "image_url", image_url: { url: `data:${src.media_type};base64,${src.data}` } };
  }
  if (src.type === "url" && typeof src.url === "string") return { type: "image_url", image_url: { url: src.url } };
  const what = typeof src.type === "string" ? `a \`${src.type}\` source` : "no source";
  throw invalidRequest("unsupported_parameter", `\`${path}\` is an image with ${what}: ${routed(model)}, which takes an image only by URL or as base64 data (\`source.type\` "url" or "base64").`);
}

/**
 * The messages-style parameters that have an OpenAI equivalent
 * (https://docs.anthropic.com/en/api/messages). `tool_choice` and parallel-call settings only make
 * sense, and are only accepted by OpenAI, when tools are sent.
 */
export function paramsFromMessagesStyle(extra: JsonObject, hasTools: boolean, model: string): JsonObject {
  const out: JsonObject = {};
  // MCP servers (the MCP connector beta) are tools run on Anthropic's side, as server tools are.
  if (Array.isArray(extra.mcp_servers) && extra.mcp_servers.length) {
    throw invalidRequest("unsupported_parameter", `\`mcp_servers\` is not supported: ${routed(model)}, which runs no tools of its own; left out, the model would answer without them.`);
  }
  const format = responseFormatOf(extra, model);
  if (format) out.response_format = format;
  if (Array.isArray(extra.stop_sequences) && extra.stop_sequences.length) out.stop = extra.stop_sequences;
  if (typeof extra.top_p === "number") out.top_p = extra.top_p;
  if (isObject(extra.metadata) && typeof extra.metadata.user_id === "string") out.user = extra.metadata.user_id;
  const choice = extra.tool_choice;
  if (hasTools && isObject(choice)) {
    const mapped = toolChoice(choice);
    // The codec checked its `type` is a string; one without a counterpart would leave the model free.
    if (mapped === undefined) {
      throw invalidRequest("invalid_value", `\`tool_choice\` must be {"type": "auto" | "any" | "none"} or {"type": "tool", "name": ...}: ${routed(model)}, which has no other tool choice.`);
    }
    out.tool_choice = mapped;
    if (choice.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  }
  return out;
}

/**
 * Structured outputs (`output_config.format`, or the beta's `output_format`: a JSON schema the
 * answer must follow) as OpenAI's `response_format` `json_schema`, strict as Anthropic's is. Left
 * out, the answer would be free text where the client (the Anthropic SDK's parse()) expects JSON.
 * The rest of `output_config` (`effort`) has no counterpart for these models and is not sent.
 */
function responseFormatOf(extra: JsonObject, model: string): JsonObject | undefined {
  const config = extra.output_config;
  const inConfig = isObject(config) && config.format !== undefined && config.format !== null;
  const format = inConfig ? config.format : extra.output_format;
  if (format === undefined || format === null) return undefined;
  const path = inConfig ? "output_config.format" : "output_format";
  if (!isObject(format) || format.type !== "json_schema" || !isObject(format.schema)) {
    throw invalidRequest("invalid_value", `\`${path}\` must be {"type": "json_schema", "schema": {...}}: ${routed(model)}, which has no other output format.`);
  }
  return { type: "json_schema", json_schema: { name: "output", schema: format.schema, strict: true } };
}

function toolChoice(choice: JsonObject): unknown {
  if (choice.type === "auto") return "auto";
  if (choice.type === "any") return "required";
  if (choice.type === "none") return "none";
  if (choice.type === "tool" && typeof choice.name === "string") return { type: "function", function: { name: choice.name } };
  return undefined;
}
