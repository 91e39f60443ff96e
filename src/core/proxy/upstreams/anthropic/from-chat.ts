import { BlockType, type ChatMessage, type ContentBlock, type StreamChatRequest, type ToolDefinition } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { invalidRequest } from "../../../errors.js";
import { isObject, overflowedNumberAt, parseExtra, parseObject, type JsonObject } from "../../../json.js";
import { refuseOversizedJson } from "../../../validate.js";
import { isCustomCall } from "../openai/tool-call.js";
import { blockToWire, toolInput } from "./blocks.js";
import { cutMarked, quotedWord } from "../../../text.js";
import { dataUrl } from "../data-url.js";

/**
 * Translates a chat-completions-style request into a messages-style body
 * (https://docs.anthropic.com/en/api/openai-sdk lists the same correspondences). The two styles
 * differ in shape, not meaning: system turns become `system`, tool turns become user turns of
 * tool_result blocks, and turns must alternate. Chat-style unknown fields are not messages-style
 * fields, so only the ones with a known counterpart are translated; the rest stay behind. What
 * cannot be translated without changing the conversation (a tool call's arguments that are not an
 * object, an audio part, a file known only by its OpenAI file id) is refused with a 400 naming
 * the message, rather than left out.
 */

type Role = "user" | "assistant";
interface Turn {
  role: Role;
  content: JsonObject[];
}

/** `defaultMaxTokens`: the limit sent for a request that sets none (the API requires one; see unlimitedOutputTokens). */
export function chatToMessagesBody(req: StreamChatRequest, defaultMaxTokens: number): JsonObject {
  const extra = parseExtra(req.extraJson);
  refuseAnswerForms(extra, req.model);
  refuseLegacyFunctions(extra, req.messages, req.model);
  const system: string[] = req.system ? [req.system] : [];
  const turns: Turn[] = [];
  for (const [i, m] of req.messages.entries()) {
    if (m.role === "system" || m.role === "developer") {
      const text = m.blocks.filter((b) => b.type === BlockType.TEXT).map((b) => b.text).join("\n\n");
      if (text) system.push(text);
      continue;
    }
    const content = blocksFromChat(m, `messages[${i}]`, req.model);
    if (!content.length) continue; // e.g. a turn whose only text was empty
    const role: Role = m.role === "assistant" ? "assistant" : "user";
    const last = turns.at(-1);
    if (last?.role === role) last.content.push(...content);
    else turns.push({ role, content });
  }

  // Anthropic refuses a request without a message (a conversation of system prompts only, or of
  // empty texts): refused here, saying why, rather than with the upstream's own 400.
  if (!turns.length) {
    throw invalidRequest("invalid_value", `\`messages\` holds no message with content besides system prompts: ${routed(req.model)}, which needs at least one user or assistant message that is not empty.`);
  }
  const body: JsonObject = {
    model: "",
    max_tokens: req.maxTokens ?? positiveInt(extra.max_completion_tokens) ?? defaultMaxTokens,
    messages: turns.map(turnToWire),
  };
  if (system.length) body.system = system.join("\n\n");
  // Chat style allows temperatures up to 2; this style's range is 0..1.
  if (req.temperature !== undefined) body.temperature = Math.min(1, Math.max(0, req.temperature));
  // A chat-style tool that is not a function (a custom tool, carried whole) has no messages-style form.
  req.tools.forEach((t, i) => {
    if (!t.name) {
      const type = quotedWord(parseExtra(t.extraJson).type);
      throw invalidRequest("unsupported_parameter", `\`tools[${i}].type\` ${type} is not supported: ${routed(req.model)}, which takes function tools only.`);
    }
  });
  const tools = req.tools.map(toolFromChat);
  if (tools.length) body.tools = tools;
  Object.assign(body, samplingFromChat(extra, req.model), toolChoiceFromChat(extra, tools.length > 0, req.model), outputFromChat(extra));
  return body;
}

/**
 * What the client asked of the answer's form that this API cannot give, refused rather than left
 * out (the client would read a field that is not there, or free text where it expects JSON): JSON
 * mode (`response_format` `json_object`; a JSON schema has a counterpart: outputFromChat), audio
 * output, log probabilities, and OpenAI's own web search, whose results come back as annotations.
 */
function refuseAnswerForms(extra: JsonObject, model: string): void {
  const format = extra.response_format;
  if (isObject(format) && format.type !== "text" && format.type !== "json_schema") {
    throw invalidRequest("unsupported_parameter", `\`response_format\` ${quotedWord(format.type)} is not supported: ${routed(model)}, which has no JSON mode without a schema; send a \`json_schema\`, ask for JSON in the prompt, or use a tool whose input is the JSON.`);
  }
  const refuse = (field: string, what: string) => {
    throw invalidRequest("unsupported_parameter", `\`${field}\` is not supported: ${routed(model)}, which ${what}.`);
  };
  if ((Array.isArray(extra.modalities) && extra.modalities.includes("audio")) || (extra.audio !== undefined && extra.audio !== null)) refuse(extra.audio != null ? "audio" : "modalities", "answers in text only");
  if (extra.logprobs === true) refuse("logprobs", "gives no log probabilities");
  if (extra.web_search_options !== undefined && extra.web_search_options !== null) refuse("web_search_options", "runs no web search for a chat-completions request; left out, the model would answer without searching");
}

/**
 * OpenAI's older form of tools (`functions` and `function_call`, an assistant turn's `function_call`,
 * a `function` turn with its result): refused, naming the field, rather than left out, which would
 * send the model no tools and the function's result as the user's own words. The answer's form is
 * the reason it is not translated: the model's call would come back as `tool_calls`, where a client
 * of this form reads `function_call`.
 */
function refuseLegacyFunctions(extra: JsonObject, messages: ChatMessage[], model: string): void {
  const refuse = (field: string) => {
    throw invalidRequest("unsupported_parameter", `\`${field}\` (OpenAI's older form of function calling) is not supported: ${routed(model)}; send the functions as \`tools\` (each {"type": "function", "function": {...}}), calls as \`tool_calls\` and results as \`tool\` messages.`);
  };
  for (const field of ["functions", "function_call"]) if (extra[field] !== undefined && extra[field] !== null) refuse(field);
  messages.forEach((m, i) => {
    if (m.role === "function") refuse(`messages[${i}].role`);
    if (m.role === "assistant" && m.extraJson !== "") {
      const call = parseExtra(m.extraJson).function_call;
      if (call !== undefined && call !== null) refuse(`messages[${i}].function_call`);
    }
  });
}

/**
 * `response_format` `json_schema` → `output_config.format` (structured outputs: the answer follows
 * the schema). Its `name` and `strict` have no counterpart: the answer is always held to the schema.
 */
function outputFromChat(extra: JsonObject): JsonObject {
  const format = extra.response_format;
  if (!isObject(format) || format.type !== "json_schema") return {};
  const spec = format.json_schema;
  if (!isObject(spec) || !isObject(spec.schema)) {
    throw invalidRequest("invalid_value", "`response_format.json_schema.schema` must be a JSON schema object.");
  }
  return { output_config: { format: { type: "json_schema", schema: spec.schema } } };
}

/**
 * A chat-style turn's blocks as messages-style ones, in order. `path` names the turn as the client
 * wrote it (`messages[i]`): a chat message's content parts come first, one block each, and then its
 * tool calls, so a part is `content[k]` and a call `tool_calls[j]`.
 */
function blocksFromChat(m: ChatMessage, path: string, model: string): JsonObject[] {
  const out: JsonObject[] = [];
  if (m.role === "assistant" && m.extraJson !== "") {
    // An earlier answer the client sends back in OpenAI's forms without content: an audio answer
    // has no counterpart; a refusal is what the model said, as text (as a refusal answer reads for
    // a messages client).
    const extra = parseExtra(m.extraJson);
    if (isObject(extra.audio)) {
      throw invalidRequest("unsupported_parameter", `\`${path}.audio\` is an earlier audio answer: ${routed(model)}, which has no audio; send its transcript as the turn's content.`);
    }
    if (typeof extra.refusal === "string" && extra.refusal !== "" && !m.blocks.some((b) => b.type === BlockType.TEXT && b.text !== "")) {
      out.push({ type: "text", text: extra.refusal });
    }
  }
  let call = 0;
  for (const [k, b] of m.blocks.entries()) {
    if (isCustomCall(b)) {
      throw invalidRequest("unsupported_parameter", `\`${path}.tool_calls[${call}]\` is a custom tool's call: ${routed(model)}, which takes function tools only.`);
    }
    const block =
      b.type === BlockType.TOOL_USE
        ? toolUseFromChat(b, `${path}.tool_calls[${call++}].function.arguments`, model)
        : blockFromChat(b, `${path}.content[${k}]`, model);
    if (block) out.push(block);
  }
  return out;
}

/** A chat-style block as a messages-style one; undefined for what is left out (an empty text, an unknown part). */
function blockFromChat(b: ContentBlock, path: string, model: string): JsonObject | undefined {
  switch (b.type) {
    case BlockType.TEXT:
      return b.text ? blockToWire(b) : undefined; // the API rejects empty text blocks
    case BlockType.TOOL_RESULT:
      return blockToWire(b);
    case BlockType.IMAGE:
      return imageFromChat(b.rawJson, path, model);
    case BlockType.OTHER:
      return otherFromChat(b.rawJson, path, model);
    default:
      return undefined;
  }
}

/** Where a refusal says the request went: the reason a chat-completions request cannot carry it. */
const routed = (model: string) => `the model '${model}' is served by a messages-style (Anthropic) upstream`;

/**
 * A chat-style tool call. Its `arguments` are a JSON text, a messages-style `input` an object: the
 * text of a JSON object becomes that object, and "" (a call without arguments) {}. Anything else
 * (not JSON, an array, a string) has no faithful `input`; {} would rewrite the earlier call, so the
 * request is refused.
 */
function toolUseFromChat(b: ContentBlock, path: string, model: string): JsonObject {
  let input: unknown = {};
  if (b.toolInputJson !== "") {
    // Bounded as a body is: parsed and written out again, a text nested thousands of levels deep
    // overflowed the stack of JSON.stringify (an internal error).
    refuseOversizedJson(b.toolInputJson, path);
    try {
      input = JSON.parse(b.toolInputJson);
    } catch {
      input = undefined;
    }
  }
  if (!isObject(input)) {
    const shown = JSON.stringify(cutMarked(b.toolInputJson, 80));
    throw invalidRequest("invalid_value", `\`${path}\` must be the text of a JSON object: ${routed(model)}, whose tool calls take an object as their input; got ${shown}.`);
  }
  // Written out again, a number beyond a double's range would reach the upstream as null.
  const overflowed = overflowedNumberAt(b.toolInputJson, input);
  if (overflowed !== undefined) throw invalidRequest("invalid_value", `\`${path}\` holds a number too large to represent (beyond ±1.8e308) at \`${overflowed}\`: ${routed(model)}, whose tool calls take an object as their input.`);
  return { type: "tool_use", id: b.toolCallId, name: b.toolName, input };
}

/**
 * A chat-style part of a type the canonical model does not name. A `file` part carrying a PDF as a
 * `data:` URL becomes a document block (https://docs.anthropic.com/en/docs/build-with-claude/pdf-support);
 * a file known only by its `file_id` (OpenAI's Files API) and an `input_audio` part have no
 * counterpart, and leaving them out would answer a different question, so they are refused. Other
 * parts are left out.
 */
function otherFromChat(rawJson: string, path: string, model: string): JsonObject | undefined {
  const part = parseObject(rawJson);
  if (!part) return undefined;
  if (part.type === "input_audio") {
    throw invalidRequest("unsupported_parameter", `\`${path}\` is an \`input_audio\` part: ${routed(model)}, which takes no audio input.`);
  }
  if (part.type !== "file") return undefined;
  const file = isObject(part.file) ? part.file : {};
  if (typeof file.file_data !== "string") {
    const why = typeof file.file_id === "string" ? "names a file by `file_id` (OpenAI's Files API)" : "has no `file.file_data`";
    throw invalidRequest("unsupported_parameter", `\`${path}\` ${why}: ${routed(model)}, which cannot read OpenAI files; send the file's content as \`file.file_data\` (a \`data:application/pdf;base64,...\` URL).`);
  }
  const pdf = pdfData(file.file_data);
  if (pdf === undefined) {
    throw invalidRequest("invalid_value", `\`${path}.file.file_data\` must be a PDF as a base64 data URL (\`data:application/pdf;base64,...\`): ${routed(model)}, which reads PDF documents.`);
  }
  return { type: "document", source: { type: "base64", media_type: "application/pdf", data: pdf } };
}

/** The base64 data of a `data:application/pdf[;param...];base64,DATA` URL; undefined for any other text. */
function pdfData(url: string): string | undefined {
  const d = dataUrl(url);
  return d?.mediaType === "application/pdf" && d.base64 ? d.data : undefined;
}

/**
 * A chat-style image part as an image block: an inline base64 `data:` URL (with or without
 * parameters) becomes a base64 source, an http(s) URL a url source
 * (https://docs.anthropic.com/en/docs/build-with-claude/vision). Any other image (a data URL that
 * is not base64 or names no image type, another scheme) has no counterpart, and leaving it out
 * would ask about an image the model never sees: refused, naming the part.
 */
function imageFromChat(rawJson: string, path: string, model: string): JsonObject {
  const ref = parseObject(rawJson)?.image_url;
  const url = typeof ref === "string" ? ref : isObject(ref) && typeof ref.url === "string" ? ref.url : "";
  const d = dataUrl(url);
  if (d?.base64 && d.mediaType.startsWith("image/")) return { type: "image", source: { type: "base64", media_type: d.mediaType, data: d.data } };
  if (/^https?:\/\//i.test(url)) return { type: "image", source: { type: "url", url } };
  throw invalidRequest(
    "invalid_value",
    `\`${path}.image_url.url\` must be an http(s) URL or a base64 data URL of an image (\`data:image/png;base64,...\`): ${routed(model)}, which takes images in those forms only.`,
  );
}

/** Tool results must open the user turn that answers a tool call; the rest keep their order. */
function turnToWire(t: Turn): JsonObject {
  if (t.role === "user") {
    const isResult = (b: JsonObject) => b.type === "tool_result";
    t.content = [...t.content.filter(isResult), ...t.content.filter((b) => !isResult(b))];
  }
  const only = t.content.length === 1 ? t.content[0] : undefined;
  const plain = only?.type === "text" && Object.keys(only).length === 2;
  return { role: t.role, content: plain ? only.text : t.content };
}

/** A chat-style function tool; its `strict: true` (inputs that must follow the schema) is the tool's `strict`. */
function toolFromChat(t: ToolDefinition): JsonObject {
  const fn = parseExtra(t.extraJson).function;
  return {
    name: t.name,
    ...(t.description ? { description: t.description } : {}),
    input_schema: t.inputSchemaJson ? toolInput(t.inputSchemaJson) : { type: "object" },
    ...(isObject(fn) && fn.strict === true ? { strict: true } : {}),
  };
}

/**
 * stop → stop_sequences, top_p → top_p, user (else safety_identifier) → metadata.user_id. The API refuses a stop sequence
 * that is empty or only whitespace (400 "each stop sequence must contain non-whitespace"), so those
 * are left out, as a string `stop` or as items of an array. A value OpenAI itself would refuse (a
 * `stop` that is not a string or an array of strings, a `top_p` outside 0..1, a `user` that is not
 * a string) is refused here too, rather than left out or bent into range: null reads as not sent.
 */
function samplingFromChat(extra: JsonObject, model: string): JsonObject {
  const out: JsonObject = {};
  const stop = extra.stop ?? [];
  if (typeof stop !== "string" && !(Array.isArray(stop) && stop.every((s) => typeof s === "string"))) {
    throw invalidRequest("invalid_type", `\`stop\` must be a string or an array of strings: ${routed(model)}, whose stop sequences are strings.`);
  }
  const sequences = (typeof stop === "string" ? [stop] : (stop as string[])).filter((s) => s.trim() !== "");
  if (sequences.length) out.stop_sequences = sequences;
  const topP = extra.top_p ?? undefined;
  if (topP !== undefined && (typeof topP !== "number" || !(topP >= 0 && topP <= 1))) {
    throw invalidRequest("invalid_value", `\`top_p\` must be a number from 0 to 1: ${routed(model)}.`);
  }
  if (topP !== undefined) out.top_p = topP;
  const user = extra.user ?? "";
  if (typeof user !== "string") throw invalidRequest("invalid_type", "`user` must be a string.");
  // `safety_identifier` is what OpenAI has in `user`'s place.
  const safety = extra.safety_identifier ?? "";
  if (typeof safety !== "string") throw invalidRequest("invalid_type", "`safety_identifier` must be a string.");
  if (user || safety) out.metadata = { user_id: user || safety };
  return out;
}

/**
 * tool_choice auto/none/required/{function} → auto/none/any/tool; parallel_tool_calls false →
 * disable_parallel_tool_use. A tool_choice of another form (one the model could not be held to
 * here) or a parallel_tool_calls that is not a boolean is refused; null reads as not sent.
 */
function toolChoiceFromChat(extra: JsonObject, hasTools: boolean, model: string): JsonObject {
  const c = extra.tool_choice ?? undefined;
  let choice: JsonObject | undefined;
  if (c === "auto") choice = { type: "auto" };
  else if (c === "none") choice = { type: "none" };
  else if (c === "required") choice = { type: "any" };
  else if (isObject(c) && c.type === "function" && isObject(c.function) && typeof c.function.name === "string" && c.function.name !== "") choice = { type: "tool", name: c.function.name };
  else if (c !== undefined) {
    throw invalidRequest("invalid_value", `\`tool_choice\` must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}: ${routed(model)}, which has no other tool choice.`);
  }
  const parallel = extra.parallel_tool_calls ?? undefined;
  if (parallel !== undefined && typeof parallel !== "boolean") throw invalidRequest("invalid_type", "`parallel_tool_calls` must be a boolean.");
  if (!hasTools) return {}; // the API rejects a tool_choice without tools
  if (parallel === false && choice?.type !== "none") {
    choice = { ...(choice ?? { type: "auto" }), disable_parallel_tool_use: true };
  }
  return choice ? { tool_choice: choice } : {};
}

const positiveInt = (v: unknown): number | undefined => (typeof v === "number" && Number.isInteger(v) && v > 0 ? v : undefined);
