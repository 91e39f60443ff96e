import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import {
  ApiStyle,
  BlockType,
  type ChatMessage,
  type ContentBlock,
  type StreamChatRequest,
  type ToolDefinition,
} from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { REQUEST_ID } from "../ids.js";
import { isObject, type JsonObject, overflowedNumberAt } from "../json.js";
import { checkMessagesExtraFields, checkStreamOptions } from "./request-checks.js";
import { checkMetadataLimits, fail, refuseOversizedJson } from "../validate.js";
import {
  BETA_NAME,
  CHAT_FUNCTION_FIELDS,
  CHAT_REQUEST_FIELDS,
  CHAT_TEXT_PART_FIELDS,
  CHAT_CUSTOM_CALL_FIELDS,
  CHAT_TOOL_CALL_FIELDS,
  MAX_BETAS,
  MAX_USER_ID_CHARS,
  maxTemperatureOf,
  MESSAGE_FIELDS,
  MESSAGES_REQUEST_FIELDS,
  MESSAGES_TOOL_FIELDS,
  MIN_MAX_TOKENS,
  rolesOf,
  TOOL_NAME,
} from "./request-rules.js";
import { MAX_TOKENS_COUNT } from "./canonical.js";
import { isCustomCall } from "./upstreams/openai/tool-call.js";
import { TEXT_KEYS, TOOL_RESULT_KEYS, TOOL_USE_KEYS } from "./upstreams/anthropic/blocks.js";
import { cutText } from "../text.js";

/**
 * Checks a StreamChatRequest that arrived over the network, before anything is sent upstream. The
 * HTTP facades build their requests from JSON they have validated (chat-completions-parse.ts,
 * messages-codec.ts), so their in-process calls skip this; a caller on the core port builds the
 * canonical request itself, and gets here what a client of the HTTP endpoints gets from them: a 400
 * invalid_request_error (INVALID_ARGUMENT) with the same codes and limits (request-rules.ts), naming
 * the field by its proto path. Whether the project exists is asked of the registry after this
 * (src/core/served.ts).
 *
 * Beyond the facades' rules, the JSON texts the canonical model carries must be what the facades
 * write: `extra_json` a JSON object that holds none of the fields its level names (it would
 * override them upstream: `{"model":"gpt-4"}` would call another model than the one priced),
 * `raw_json` JSON (an object for image and other blocks), a tool's input and input schema JSON
 * objects.
 */
export function checkWireChatRequest(req: StreamChatRequest): void {
  if (req.requestId && !REQUEST_ID.test(req.requestId)) {
    fail("invalid_value", "`request_id` must be a gateway request id (`req_` and 24 letters or digits), or empty to have one made.");
  }
  if (!req.projectId) fail("missing_required_field", "`project_id` is required.");
  if (!req.keyId) fail("missing_required_field", "`key_id` is required.");
  if (req.keyMode !== KeyMode.LIVE && req.keyMode !== KeyMode.TEST) fail("invalid_value", "`key_mode` must be KEY_MODE_LIVE or KEY_MODE_TEST.");
  const style = req.style;
  if (style !== ApiStyle.CHAT_COMPLETIONS && style !== ApiStyle.MESSAGES) {
    fail("invalid_value", "`style` must be API_STYLE_CHAT_COMPLETIONS or API_STYLE_MESSAGES.");
  }
  if (!req.model) fail("missing_required_field", "`model` is required.");
  if (req.temperature !== undefined) {
    const max = maxTemperatureOf(style);
    // NaN fails both comparisons.
    if (!(req.temperature >= 0 && req.temperature <= max)) fail("invalid_value", `\`temperature\` must be between 0 and ${max}, got ${req.temperature}.`);
  }
  if (req.maxTokens !== undefined && req.maxTokens < MIN_MAX_TOKENS) {
    fail("invalid_value", `\`max_tokens\` must be an integer between ${MIN_MAX_TOKENS} and ${MAX_TOKENS_COUNT}, got ${req.maxTokens}.`);
  }
  // As on /v1/messages, where the provider's API requires it.
  if (style === ApiStyle.MESSAGES && req.maxTokens === undefined) fail("missing_required_field", "`max_tokens` is required.");
  if (req.messages.length === 0) fail("invalid_value", "`messages` must contain at least one message.");
  req.messages.forEach((m, i) => checkMessage(m, `messages[${i}]`, style));
  req.tools.forEach((t, i) => checkTool(t, `tools[${i}]`, style));
  checkRequestExtra(req.extraJson, style, req.stream);
  if (req.userId.length > MAX_USER_ID_CHARS) fail("invalid_user_id", `\`user_id\` must be at most ${MAX_USER_ID_CHARS} characters.`);
  // As X-Svc-Metadata on the HTTP endpoints.
  checkMetadataLimits("`metadata`", Object.entries(req.metadata));
  if (req.betas.length > MAX_BETAS || !req.betas.every((b) => BETA_NAME.test(b))) {
    fail("invalid_beta", `\`betas\` must be at most ${MAX_BETAS} beta feature names (letters, digits, \`.\`, \`_\`, \`-\`).`);
  }
}

const typeName = (v: unknown): string => (v === null ? "null" : Array.isArray(v) ? "an array" : `a ${typeof v}`);

/**
 * A JSON text, parsed; undefined when empty. Nested deeper than MAX_JSON_DEPTH or holding more than
 * MAX_JSON_ITEMS items, refused before its parse, as a body would be.
 */
function jsonText(json: string, path: string): unknown {
  if (json === "") return undefined;
  refuseOversizedJson(json, path);
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    return fail("invalid_value", `\`${path}\` must be a JSON text; it is not valid JSON.`);
  }
  // As in a body sent to the HTTP endpoints: written out again, `1e400` would reach the upstream as null.
  const at = overflowedNumberAt(json, v);
  if (at !== undefined) fail("invalid_value", `\`${at ? `${path}.${at}` : path}\` is a number too large to represent (beyond ±1.8e308).`);
  return v;
}

/** A JSON object text holding none of `named`, parsed; undefined when empty. */
function objectText(json: string, path: string, named?: ReadonlySet<string>): JsonObject | undefined {
  const v = jsonText(json, path);
  if (v === undefined) return undefined;
  if (!isObject(v)) return fail("invalid_value", `\`${path}\` must be a JSON object, got ${typeName(v)}.`);
  if (named) for (const k of named) if (Object.hasOwn(v, k)) namedField(path, k);
  return v;
}

const namedField = (path: string, key: string): never =>
  fail("invalid_value", `\`${path}\` must not hold \`${key}\`: the canonical request names that field itself.`);

function checkRequestExtra(json: string, style: ApiStyle, stream: boolean): void {
  const extra = objectText(json, "extra_json");
  if (!extra) return;
  const messages = style === ApiStyle.MESSAGES;
  for (const k of messages ? MESSAGES_REQUEST_FIELDS : CHAT_REQUEST_FIELDS) {
    // A messages-style system sent as blocks rides here (the messages codec puts it there).
    if (!Object.hasOwn(extra, k) || (messages && k === "system" && Array.isArray(extra.system))) continue;
    namedField("extra_json", k);
  }
  // As on the HTTP endpoints: the fields they check that the canonical model does not name.
  if (messages) checkMessagesExtraFields(extra);
  else checkStreamOptions(extra, stream);
  // As on /v1/chat/completions: the gateway answers, caches and prices one choice.
  const n = extra.n;
  if (!messages && n !== undefined && n !== null && n !== 1) fail("unsupported_parameter", `\`n\` must be 1: the gateway returns a single choice, got ${JSON.stringify(n)}.`);
  // As on /v1/chat/completions: the limit it names is the request's output limit too.
  const mct = extra.max_completion_tokens;
  if (!messages && mct !== undefined && mct !== null && !(Number.isInteger(mct) && (mct as number) >= MIN_MAX_TOKENS && (mct as number) <= MAX_TOKENS_COUNT)) {
    fail("invalid_value", `\`max_completion_tokens\` must be an integer between ${MIN_MAX_TOKENS} and ${MAX_TOKENS_COUNT}, got ${JSON.stringify(mct)}.`);
  }
}

function checkMessage(m: ChatMessage, path: string, style: ApiStyle): void {
  const roles = rolesOf(style);
  if (m.role === "") fail("missing_required_field", `\`${path}.role\` is required.`);
  if (!roles.includes(m.role)) fail("invalid_value", `\`${path}.role\` must be one of ${roles.map((r) => `'${r}'`).join(", ")}, got '${cutText(m.role, 80)}'.`);
  objectText(m.extraJson, `${path}.extra_json`, MESSAGE_FIELDS);
  m.blocks.forEach((b, j) => checkBlock(b, `${path}.blocks[${j}]`));
}

const BLOCK_TYPES: ReadonlySet<BlockType> = new Set([BlockType.TEXT, BlockType.TOOL_USE, BlockType.TOOL_RESULT, BlockType.IMAGE, BlockType.OTHER, BlockType.REFUSAL]);
const TYPE_ONLY: ReadonlySet<string> = new Set(["type"]);

/** The fields of a block's wire form the canonical block names, in the style its extra_json is written in. */
function namedBlockFields(b: ContentBlock): ReadonlySet<string> {
  if (b.style === ApiStyle.MESSAGES) {
    return b.type === BlockType.TEXT ? TEXT_KEYS : b.type === BlockType.TOOL_USE ? TOOL_USE_KEYS : b.type === BlockType.TOOL_RESULT ? TOOL_RESULT_KEYS : TYPE_ONLY;
  }
  if (b.type === BlockType.TOOL_USE) return isCustomCall(b) ? CHAT_CUSTOM_CALL_FIELDS : CHAT_TOOL_CALL_FIELDS;
  return b.type === BlockType.TEXT ? CHAT_TEXT_PART_FIELDS : TYPE_ONLY;
}

function checkBlock(b: ContentBlock, path: string): void {
  if (!BLOCK_TYPES.has(b.type)) {
    fail("invalid_value", `\`${path}.type\` must be one of BLOCK_TYPE_TEXT, _TOOL_USE, _TOOL_RESULT, _IMAGE, _OTHER, _REFUSAL, got ${BlockType[b.type] ? `BLOCK_TYPE_${BlockType[b.type]}` : b.type}.`);
  }
  if (b.style !== ApiStyle.UNSPECIFIED && b.style !== ApiStyle.CHAT_COMPLETIONS && b.style !== ApiStyle.MESSAGES) {
    fail("invalid_value", `\`${path}.style\` must be API_STYLE_CHAT_COMPLETIONS or API_STYLE_MESSAGES.`);
  }
  if (b.style === ApiStyle.UNSPECIFIED && (b.rawJson !== "" || b.extraJson !== "")) {
    fail("missing_required_field", `\`${path}.style\` is required with raw_json or extra_json: it names the style they are written in.`);
  }
  if (b.type === BlockType.IMAGE || b.type === BlockType.OTHER) {
    if (b.rawJson === "") fail("missing_required_field", `\`${path}.raw_json\` is required: an image or other block is carried as its JSON.`);
    // As a content part's `type` is required on the HTTP endpoints: `{}` would reach the upstream as a part of no type.
    const raw = objectText(b.rawJson, `${path}.raw_json`)!;
    if (typeof raw.type !== "string" || raw.type === "") fail("missing_required_field", `\`${path}.raw_json.type\` is required: it is the part's JSON as the client's style writes it.`);
  } else {
    jsonText(b.rawJson, `${path}.raw_json`);
  }
  objectText(b.extraJson, `${path}.extra_json`, namedBlockFields(b));
  if (b.type === BlockType.TOOL_USE) {
    if (b.toolCallId === "") fail("missing_required_field", `\`${path}.tool_call_id\` is required.`);
    if (b.toolName === "") fail("missing_required_field", `\`${path}.tool_name\` is required.`);
    // A chat-style custom tool's call (extra_json {"type":"custom"}) takes free text as its input.
    if (!(b.style === ApiStyle.CHAT_COMPLETIONS && isCustomCall(b))) objectText(b.toolInputJson, `${path}.tool_input_json`);
  } else if (b.type === BlockType.TOOL_RESULT) {
    if (b.toolCallId === "") fail("missing_required_field", `\`${path}.tool_call_id\` is required.`);
  }
}

function checkTool(t: ToolDefinition, path: string, style: ApiStyle): void {
  const extra = objectText(t.extraJson, `${path}.extra_json`);
  if (t.name === "") {
    // A tool that is not a function rides whole in extra_json, with its `type` and no name of its
    // own: a messages-style server tool (web search...), a chat-style custom tool (`custom`).
    if (style === ApiStyle.MESSAGES && typeof extra?.type === "string" && extra.type !== "custom") return;
    if (style === ApiStyle.CHAT_COMPLETIONS && typeof extra?.type === "string" && extra.type !== "function") return;
    fail("missing_required_field", `\`${path}.name\` is required (only a tool carried whole in extra_json with its \`type\`, a messages-style server tool or a chat-style tool that is not a function, has none).`);
  }
  if (!TOOL_NAME.test(t.name)) fail("invalid_value", `\`${path}.name\` must match ^[a-zA-Z0-9_-]{1,64}$, got '${cutText(t.name, 80)}'.`);
  objectText(t.inputSchemaJson, `${path}.input_schema_json`);
  if (!extra) return;
  if (style === ApiStyle.MESSAGES) {
    for (const k of MESSAGES_TOOL_FIELDS) if (Object.hasOwn(extra, k)) namedField(`${path}.extra_json`, k);
    if (extra.type !== undefined && extra.type !== "custom") fail("invalid_value", `\`${path}.extra_json.type\` must be 'custom' on a named tool.`);
    return;
  }
  // Chat style: the tool's own unnamed fields, and the function's under `function`.
  if (Object.hasOwn(extra, "type")) namedField(`${path}.extra_json`, "type");
  const fn = extra.function;
  if (fn === undefined) return;
  if (!isObject(fn)) fail("invalid_value", `\`${path}.extra_json.function\` must be a JSON object, got ${typeName(fn)}.`);
  for (const k of CHAT_FUNCTION_FIELDS) if (Object.hasOwn(fn as JsonObject, k)) namedField(`${path}.extra_json.function`, k);
}
