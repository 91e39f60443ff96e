import { checkMessagesExtraFields } from "../../core/proxy/request-checks.js";
import {
  ApiStyle,
  type BlockDelta,
  BlockType,
  type ChatMessage,
  type Completion,
  type ContentBlock,
  FinishReason,
  type StreamChatResponse,
  type ToolDefinition,
  type Usage,
} from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { type ErrorInfo, invalidRequest } from "../../core/errors.js";
import { extraJson, isObject, parseExtra, type JsonObject } from "../../core/json.js";
import { chatMessage, contentBlock, toolDefinition } from "../../core/proxy/canonical.js";
import {
  MAX_TEMPERATURE_MESSAGES,
  MESSAGE_FIELDS,
  MESSAGES_REQUEST_FIELDS,
  MESSAGES_ROLES,
  MESSAGES_TOOL_FIELDS,
  MIN_MAX_TOKENS,
  TOOL_NAME,
} from "../../core/proxy/request-rules.js";
import { blockFromWire, blockToWire, joinTexts, uncachedInput } from "../../core/proxy/upstreams/anthropic/blocks.js";
import { stopReasonFromFinish } from "../../core/proxy/upstreams/anthropic/stop-reason.js";
import { formatSse } from "../../core/sse.js";
import type { ClientCodec, ParsedChatRequest, RenderedRequest, StreamRenderer } from "./codec.js";
import {
  fail,
  missing,
  optionalArray,
  optionalBoolean,
  optionalNumberInRange,
  optionalString,
  requireArray,
  requireBody,
  requireIntegerInRange,
  requireObject,
  requireOneOf,
  requireString,
  wrongType,
} from "../../core/validate.js";
import { cutText } from "../../core/text.js";

/**
 * The messages style (spec 2.4, 2.5, 6.2; https://docs.anthropic.com/en/api/messages). Validation
 * covers what the spec names plus what the official SDK sends; every field the canonical model does
 * not name is carried verbatim to a messages-style upstream, so nothing a client sends is dropped.
 */
export const messagesCodec: ClientCodec = {
  requestIdHeader: "request-id",
  parseRequest,
  renderCompletion,
  // An answer cut short: `stop_reason` null, as in the stream's message_start, unless it had come.
  renderPartial: (c) => (c.finishReason === FinishReason.UNSPECIFIED ? { ...renderCompletion(c), stop_reason: null } : renderCompletion(c)),
  createStreamRenderer: (req) => new MessagesStreamRenderer(req),
};

// The names and limits (MESSAGES_*, MESSAGE_FIELDS, TOOL_NAME) are shared with the check of
// requests that come over the network (core/proxy/request-rules.ts).
// A system sent as blocks (cache_control...) also stays in extra_json, where it wins for a same-style upstream.
const TOP_KEYS_BLOCK_SYSTEM = new Set([...MESSAGES_REQUEST_FIELDS].filter((k) => k !== "system"));

// ---- request ----------------------------------------------------------------------------------

function parseRequest(input: unknown): ParsedChatRequest {
  const body = requireBody(input);
  const model = requireString(body, "model");
  if (!model) fail("invalid_value", "`model` must be a non-empty string.");
  const maxTokens = requireIntegerInRange(body, "max_tokens", MIN_MAX_TOKENS);
  const messages = requireArray(body, "messages");
  if (!messages.length) fail("invalid_value", "`messages` must contain at least one message.");
  const system = parseSystem(body.system);
  const temperature = optionalNumberInRange(body, "temperature", 0, MAX_TEMPERATURE_MESSAGES);
  const stream = optionalBoolean(body, "stream") ?? false;
  const tools = (optionalArray(body, "tools") ?? []).map(parseTool);
  checkMessagesExtraFields(body);
  return {
    style: ApiStyle.MESSAGES,
    model,
    system,
    messages: messages.map(parseMessage),
    temperature,
    maxTokens,
    stream,
    tools,
    extraJson: extraJson(body, Array.isArray(body.system) ? TOP_KEYS_BLOCK_SYSTEM : MESSAGES_REQUEST_FIELDS),
  };
}

/** `system` is a string or an array of text blocks; the canonical system is their joined text. */
function parseSystem(v: unknown): string {
  if (v === undefined || v === null) return "";
  if (typeof v === "string") return v;
  if (!Array.isArray(v)) return wrongType("system", "a string or an array of text blocks", v);
  v.forEach((b, i) => {
    const block = requireObject(b, `system[${i}]`);
    requireOneOf(block, "type", ["text"], `system[${i}].type`);
    requireString(block, "text", `system[${i}].text`);
  });
  return joinTexts(v);
}

function parseMessage(v: unknown, i: number): ChatMessage {
  const path = `messages[${i}]`;
  const m = requireObject(v, path);
  const role = requireOneOf(m, "role", MESSAGES_ROLES, `${path}.role`);
  const content = m.content;
  let blocks: ContentBlock[];
  if (content === undefined || content === null) return missing(`${path}.content`);
  if (typeof content === "string") {
    blocks = [contentBlock({ type: BlockType.TEXT, text: content, style: ApiStyle.MESSAGES })];
  } else if (Array.isArray(content)) {
    blocks = content.map((b, j) => blockFromWire(checkBlock(b, `${path}.content[${j}]`)));
  } else {
    return wrongType(`${path}.content`, "a string or an array of content blocks", content);
  }
  if (role === "system") {
    const other = blocks.findIndex((b) => b.type !== BlockType.TEXT);
    if (other >= 0) throw invalidRequest("invalid_value", `\`${path}.content[${other}]\` must be a text block: a system message holds text only.`);
  }
  return chatMessage({ role, blocks, contentIsString: typeof content === "string", extraJson: extraJson(m, MESSAGE_FIELDS) });
}

/** Checks the fields a block type needs; block types this gateway does not know pass whole. */
function checkBlock(v: unknown, path: string): JsonObject {
  const b = requireObject(v, path);
  const type = requireString(b, "type", `${path}.type`);
  if (type === "text") requireString(b, "text", `${path}.text`);
  else if (type === "tool_use") {
    requireString(b, "id", `${path}.id`);
    requireString(b, "name", `${path}.name`);
    requireObject(b.input, `${path}.input`);
  } else if (type === "tool_result") {
    requireString(b, "tool_use_id", `${path}.tool_use_id`);
    optionalBoolean(b, "is_error", `${path}.is_error`);
    const c = b.content;
    if (Array.isArray(c)) c.forEach((item, k) => checkBlock(item, `${path}.content[${k}]`));
    else if (c !== undefined && c !== null && typeof c !== "string") wrongType(`${path}.content`, "a string or an array of content blocks", c);
  }
  return b;
}

/** Custom tools (no type, or "custom") are canonical tool definitions; server tools ride whole. */
function parseTool(v: unknown, i: number): ToolDefinition {
  const path = `tools[${i}]`;
  const t = requireObject(v, path);
  const type = optionalString(t, "type", `${path}.type`);
  if (type !== undefined && type !== "custom") {
    return toolDefinition({ name: "", extraJson: JSON.stringify(t) });
  }
  const name = requireString(t, "name", `${path}.name`);
  if (!TOOL_NAME.test(name)) fail("invalid_value", `\`${path}.name\` must match ^[a-zA-Z0-9_-]{1,64}$, got '${cutText(name, 80)}'.`);
  const schema = requireObject(t.input_schema, `${path}.input_schema`);
  return toolDefinition({
    name,
    description: optionalString(t, "description", `${path}.description`) ?? "",
    inputSchemaJson: JSON.stringify(schema),
    extraJson: extraJson(t, MESSAGES_TOOL_FIELDS),
  });
}

// ---- whole answer -----------------------------------------------------------------------------

function renderCompletion(c: Completion): object {
  const same = c.upstreamStyle === ApiStyle.MESSAGES;
  const extra = same ? parseExtra(c.extraJson) : {};
  return {
    ...extra,
    id: c.id,
    type: "message",
    role: "assistant",
    model: c.model,
    content: c.blocks.map(blockToWire).filter((b) => b !== undefined),
    // A same-style upstream's own value, where the canonical reason does not say it (withStopReason).
    stop_reason: typeof extra.stop_reason === "string" ? extra.stop_reason : stopReasonFromFinish(c.finishReason),
    stop_sequence: c.stopSequence || null,
    usage: renderUsage(c.usage, same),
  };
}

/**
 * The `usage` object. `input_tokens` is the input neither read from nor written to the prompt cache
 * (the canonical count less the cache's). A same-style upstream's other counters, its cache counts
 * among them, are passed on as sent; another style's cache counts are written as this style's.
 */
function renderUsage(u: Usage | undefined, same: boolean): JsonObject {
  const input = u ? uncachedInput(u) : 0;
  const output = u?.outputTokens ?? 0;
  if (same) return { ...(u ? parseExtra(u.extraJson) : {}), input_tokens: input, output_tokens: output };
  return {
    input_tokens: input,
    ...(u?.cacheWriteTokens ? { cache_creation_input_tokens: u.cacheWriteTokens } : {}),
    ...(u?.cacheReadTokens ? { cache_read_input_tokens: u.cacheReadTokens } : {}),
    output_tokens: output,
  };
}

// ---- stream -----------------------------------------------------------------------------------

const sse = (type: string, data: JsonObject): string => formatSse(JSON.stringify({ type, ...data }), type);

/** A block that began while another was still open: its events wait until that one has stopped. */
interface HeldBlock {
  index: number;
  block: ContentBlock;
  deltas: BlockDelta[];
  stopped: boolean;
}

/**
 * Renders canonical events as the messages-style stream
 * (https://docs.anthropic.com/en/api/messages-streaming). Blocks another style cannot express here
 * (its raw parts) are left out, and the remaining blocks are renumbered so indexes stay dense: the
 * SDK addresses blocks by position.
 *
 * The API's blocks are strictly sequential (start, deltas, stop, then the next block), while the
 * canonical ones may overlap (an OpenAI-style upstream interleaves parallel tool calls, and keeps
 * each open until the answer ends). The open block streams live; a block that begins while it is
 * still open is held, with its deltas and stop, and written out in order once the blocks before it
 * have stopped.
 */
class MessagesStreamRenderer implements StreamRenderer {
  readonly #model: string;
  /** Whether the upstream spoke this style, so its raw blocks, deltas and extra fields mean something here. */
  #same = false;
  #next = 0;
  readonly #index = new Map<number, number>();
  /** The canonical index of the block being streamed live (started, not stopped). */
  #live: number | undefined;
  /** Blocks waiting for the live one to stop, in the order they began. */
  readonly #held: HeldBlock[] = [];

  constructor(req: RenderedRequest) {
    this.#model = req.model ?? "";
  }

  render(event: StreamChatResponse): string {
    const e = event.event;
    switch (e.case) {
      case "messageStart":
        this.#same = e.value.upstreamStyle === ApiStyle.MESSAGES;
        return this.#start(e.value.id, e.value.model, renderUsage(e.value.usage, this.#same), e.value.extraJson);
      case "blockStart":
        return e.value.block ? this.#begin(e.value.index, e.value.block) : "";
      case "blockDelta":
        return this.#delta(e.value);
      case "blockStop":
        return this.#stop(e.value.index);
      case "messageEnd":
        return this.#flushHeld() + this.#end(e.value.finishReason, e.value.stopSequence, e.value.usage, e.value.deltaExtraJson, e.value.choiceExtraJson);
      case "completion":
        return this.#completion(e.value);
      default:
        return "";
    }
  }

  error(info: ErrorInfo): string {
    return sse("error", { error: { type: info.type, message: info.message, code: info.code } });
  }

  #start(id: string, model: string, usage: JsonObject, extraJson: string): string {
    const message = {
      ...(this.#same ? parseExtra(extraJson) : {}),
      id,
      type: "message",
      role: "assistant",
      content: [],
      model: model || this.#model,
      stop_reason: null,
      stop_sequence: null,
      usage,
    };
    return sse("message_start", { message });
  }

  /** A block begins: live when no other block is open, else held until the open ones have stopped. */
  #begin(index: number, block: ContentBlock): string {
    if (this.#live === undefined && !this.#held.length) {
      const out = this.#open(index, block);
      if (out !== "") this.#live = index; // else not expressible here: left out
      return out;
    }
    if (blockToWire(block)) this.#held.push({ index, block, deltas: [], stopped: false });
    return "";
  }

  #stop(index: number): string {
    const held = this.#heldBlock(index);
    if (held) {
      held.stopped = true;
      return "";
    }
    const at = this.#index.get(index);
    if (at === undefined) return "";
    const out = sse("content_block_stop", { index: at });
    if (index !== this.#live) return out;
    this.#live = undefined;
    return out + this.#release();
  }

  #heldBlock(index: number): HeldBlock | undefined {
    if (!this.#held.length) return undefined; // the usual case: one block at a time
    return this.#held.find((h) => h.index === index);
  }

  /** Writes out the held blocks that are now first in line: each one stopped, then the next goes live. */
  #release(): string {
    let out = "";
    while (this.#live === undefined && this.#held.length) {
      const h = this.#held.shift()!;
      out += this.#open(h.index, h.block);
      for (const d of h.deltas) out += this.#delta(d);
      if (h.stopped) out += sse("content_block_stop", { index: this.#index.get(h.index)! });
      else this.#live = h.index;
    }
    return out;
  }

  /**
   * At the answer's end, blocks still held are written out whole, each closed: the one streaming
   * live first (its upstream never stopped it).
   */
  #flushHeld(): string {
    if (!this.#held.length) return "";
    let out = "";
    for (;;) {
      if (this.#live !== undefined) out += sse("content_block_stop", { index: this.#index.get(this.#live)! });
      this.#live = undefined;
      if (!this.#held.length) return out;
      out += this.#release();
    }
  }

  /**
   * Opens a block as the API does, empty: a text or tool input the block already holds (a whole
   * answer, or an upstream that starts blocks with content) follows as one delta. Of a `whole`
   * answer's raw blocks, a text's citations, a thinking block's thinking and signature and a server
   * tool's input follow as deltas too (`openedEmpty`); a live upstream's raw blocks start as it sent
   * them (its deltas follow on their own), and so do redacted_thinking and tool results, as the API
   * sends them whole.
   */
  #open(index: number, block: ContentBlock, whole = false): string {
    const wire = blockToWire(block);
    if (!wire) return "";
    const at = this.#next++;
    this.#index.set(index, at);
    const text = block.type === BlockType.TEXT || block.type === BlockType.REFUSAL;
    if (text) wire.text = "";
    if (block.type === BlockType.TOOL_USE) wire.input = {};
    const deltas = whole ? openedEmpty(wire) : [];
    let out = sse("content_block_start", { index: at, content_block: wire });
    for (const delta of deltas) out += sse("content_block_delta", { index: at, delta });
    if (text && block.text) out += textDelta(at, block.text);
    if (block.type === BlockType.TOOL_USE && block.toolInputJson) out += inputDelta(at, block.toolInputJson);
    return out;
  }

  #delta(d: BlockDelta): string {
    const held = this.#heldBlock(d.index);
    if (held) {
      held.deltas.push(d);
      return "";
    }
    // Text for a block that was never opened (a lenient upstream) opens a text block rather than vanish.
    if (!this.#index.has(d.index) && d.text) return this.#begin(d.index, contentBlock({ type: BlockType.TEXT, text: d.text }));
    const at = this.#index.get(d.index);
    if (at === undefined) return "";
    if (d.text) return textDelta(at, d.text);
    if (d.partialJson) return jsonDelta(at, d.partialJson);
    if (d.rawJson && this.#same) return sse("content_block_delta", { index: at, delta: JSON.parse(d.rawJson) as JsonObject });
    return "";
  }

  /** message_delta's counters are whole-answer totals; input tokens are sent too, since some upstreams only know them at the end. */
  #end(finish: FinishReason, stopSequence: string, usage: Usage | undefined, deltaExtra = "", eventExtra = ""): string {
    // A same-style upstream's other fields of message_delta (a `container`, `context_management`,
    // the stop_reason as sent where the canonical reason does not say it) are passed on as sent.
    const delta = { stop_reason: stopReasonFromFinish(finish), stop_sequence: stopSequence || null, ...(this.#same ? parseExtra(deltaExtra) : {}) };
    return sse("message_delta", { delta, usage: renderUsage(usage, this.#same), ...(this.#same ? parseExtra(eventExtra) : {}) }) + sse("message_stop", {});
  }

  /** A whole answer served to a stream request (a cache hit) as the full event sequence. */
  #completion(c: Completion): string {
    this.#same = c.upstreamStyle === ApiStyle.MESSAGES;
    const usage = { ...renderUsage(c.usage, this.#same), output_tokens: 0 };
    // What a live stream says in message_delta rather than message_start: a stop_reason kept as
    // sent (withStopReason), and the answer's stop_details and container (the SDKs' stream helpers
    // read them from the delta).
    const extra = this.#same ? parseExtra(c.extraJson) : {};
    const delta: JsonObject = {};
    for (const k of DELTA_FIELDS) {
      if (!(k in extra)) continue;
      if (k !== "stop_reason" || typeof extra[k] === "string") delta[k] = extra[k];
      delete extra[k];
    }
    let out = this.#start(c.id, c.model, usage, Object.keys(extra).length ? JSON.stringify(extra) : "");
    c.blocks.forEach((block, i) => {
      const open = this.#open(i, block, true);
      if (open) out += open + sse("content_block_stop", { index: this.#index.get(i)! });
    });
    return out + this.#end(c.finishReason, c.stopSequence, c.usage, Object.keys(delta).length ? JSON.stringify(delta) : "");
  }
}

/** A message's fields a stream gives in message_delta's delta, not in message_start. */
const DELTA_FIELDS = ["stop_reason", "stop_details", "container"] as const;

/** Block types whose input the API streams as input_json_delta, as it does a tool_use's. */
const kStreamedInput: ReadonlySet<unknown> = new Set(["server_tool_use", "mcp_tool_use"]);

/**
 * Empties a block held whole the way the API's content_block_start has it, and returns the deltas
 * that carry what it held (https://docs.anthropic.com/en/api/messages-streaming): a text's
 * citations as citations_delta (before its text, which the caller sends), a thinking block's
 * thinking and signature as thinking_delta and signature_delta, a server tool's input as
 * input_json_delta.
 */
function openedEmpty(wire: JsonObject): JsonObject[] {
  const deltas: JsonObject[] = [];
  if (wire.type === "text" && Array.isArray(wire.citations)) {
    for (const citation of wire.citations as unknown[]) deltas.push({ type: "citations_delta", citation });
    wire.citations = [];
  } else if (wire.type === "thinking") {
    if (typeof wire.thinking === "string" && wire.thinking !== "") deltas.push({ type: "thinking_delta", thinking: wire.thinking });
    if (typeof wire.signature === "string" && wire.signature !== "") deltas.push({ type: "signature_delta", signature: wire.signature });
    wire.thinking = "";
    if ("signature" in wire) wire.signature = "";
  } else if (kStreamedInput.has(wire.type) && isObject(wire.input)) {
    if (Object.keys(wire.input).length) deltas.push({ type: "input_json_delta", partial_json: JSON.stringify(wire.input) });
    wire.input = {};
  }
  return deltas;
}

/**
 * A text fragment's event, written from a template: byte for byte what
 * `sse("content_block_delta", { index, delta: { type: "text_delta", text } })` writes, without
 * building and serialising the objects (most events of a stream are these).
 */
const textDelta = (index: number, text: string): string =>
  `event: content_block_delta\ndata: {"type":"content_block_delta","index":${index},"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}\n\n`;

const jsonDelta = (index: number, partial_json: string): string =>
  sse("content_block_delta", { index, delta: { type: "input_json_delta", partial_json } });

/**
 * A whole tool call's input (a cache hit served as a stream) as the one input_json_delta after its
 * empty start, agreeing with the JSON answer, whose `input` is `toolInput` of the same text: the
 * text of a JSON object goes as it is. Anything else (another style's call cut off by its token
 * limit, `{"city":"Par`, or arguments that are not an object) has no faithful object, the call's
 * real arguments being unknown: the JSON answer gives `{}` and so does the stream, by sending no
 * delta, rather than the fragment, which the SDK's partial-JSON reading would turn into a made-up
 * input (`{"city":"Par"}`) or an error. (A live stream passes fragments as they come: it cannot
 * know they will not be completed.)
 */
function inputDelta(index: number, json: string): string {
  let input: unknown;
  try {
    input = JSON.parse(json);
  } catch {
    input = undefined;
  }
  return isObject(input) ? jsonDelta(index, json) : "";
}
