import {
  ApiStyle,
  BlockType,
  FinishReason,
  type StreamChatRequest,
  type StreamChatResponse,
  type Usage,
} from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { extraJson, isObject, type JsonObject } from "../../../json.js";
import type { SseEvent } from "../../../sse.js";
import { streamEvent } from "../../canonical.js";
import type { StreamConverter } from "../adapter.js";
import { convertOpenAiStreamError, invalidUpstreamResponse } from "./error.js";
import { answerCallExtra, callParts } from "./tool-call.js";
import { finishForClient, toFinishReason, toUsage, withFinishReason } from "./usage.js";

/**
 * Chunk fields the canonical events name. `obfuscation` is random padding OpenAI adds to each chunk
 * against side channels; it means nothing once re-framed, so it is dropped.
 */
const kChunkKnown: ReadonlySet<string> = new Set(["id", "object", "created", "model", "choices", "usage", "obfuscation"]);

/**
 * Choice and delta fields the canonical events name; the others (`logprobs`, Azure's
 * `content_filter_results`; `reasoning_content`, `annotations`, `audio`) ride with the events their
 * chunk gives, as `choice_extra_json` and `delta_extra_json`.
 */
const kChoiceKnown: ReadonlySet<string> = new Set(["index", "delta", "finish_reason"]);
const kDeltaKnown: ReadonlySet<string> = new Set(["role", "content", "refusal", "tool_calls"]);

/** How many plain text chunks a stream may try to learn its template from before it stops trying. */
const kLearnTries = 3;

/**
 * Converts OpenAI `chat.completion.chunk` SSE (https://platform.openai.com/docs/api-reference/chat-streaming)
 * into canonical events. OpenAI streams a flat delta per chunk; the canonical model wants numbered
 * blocks, so text and each tool call (by its `index`) become their own block, opened at their first
 * fragment. A text (or refusal) block is closed when another block begins. A tool call's block stays
 * open until the answer ends: parallel tool calls may interleave (indexes 0, 1, 0, 2, ...), and only
 * the finish says a call has all its arguments, so blocks may overlap and their stops come together
 * at the end. The finish reason and the usage arrive in separate chunks before `[DONE]`, so
 * `message_end` waits for `[DONE]` (or the end of the body).
 */
class OpenAiStreamConverter implements StreamConverter {
  readonly #model: string;
  readonly #clientStyle: ApiStyle;
  #complete = false;
  #started = false;
  #ended = false;
  #nextIndex = 0;
  /** The block opened last (text fragments continue it when it is text of their kind). */
  #open: { index: number; type: BlockType } | undefined;
  /**
   * OpenAI tool_calls[].index -> canonical block index; each stays open until the answer ends. A
   * call streamed without an `index` (Gemini's OpenAI-compatible endpoint sends each call whole,
   * with its id and no index) is keyed by its id instead: `id <id>`.
   */
  readonly #toolBlocks = new Map<number | string, number>();
  /** The key of the last call that came without an `index`: its fragments without an id continue it. */
  #unindexed: number | string = 0;
  #finish = FinishReason.UNSPECIFIED;
  /** The unnamed choice and delta fields of the chunk that carried the finish reason, for message_end. */
  #finishExtra: { choiceExtraJson: string; deltaExtraJson: string } | undefined;
  #usage: Usage | undefined;
  /** The stream's text chunks' frame, once learnt; `undefined` while not (yet) known. */
  #template: TextChunkTemplate | undefined;
  #learnTries: number;

  constructor(publicModel: string, clientStyle: ApiStyle, templates: boolean) {
    this.#model = publicModel;
    this.#clientStyle = clientStyle;
    this.#learnTries = templates ? kLearnTries : 0;
  }

  get complete(): boolean {
    return this.#complete;
  }

  get finished(): boolean {
    return this.#finish !== FinishReason.UNSPECIFIED;
  }

  push(event: SseEvent): StreamChatResponse[] {
    if (this.#ended) return [];
    const data = event.data.trim();
    if (data === "") return [];
    if (data === "[DONE]") {
      this.#complete = true;
      return this.#close();
    }
    const out: StreamChatResponse[] = [];
    const text = this.#template?.match(data);
    if (text !== undefined) {
      // Read without JSON.parse: what the full path would do for this chunk (see TextChunkTemplate).
      if (text !== "") this.#text(text, kNoChunk, out);
      return out;
    }
    const chunk = parseChunk(data);
    if (isObject(chunk.error)) throw convertOpenAiStreamError(chunk.error);
    // vLLM's form of the same: the chunk is the error object.
    if (chunk.object === "error") throw convertOpenAiStreamError(chunk);
    // Azure sends a first chunk with an empty id (prompt filter results): start at a real one.
    if (!this.#started && typeof chunk.id === "string" && chunk.id !== "") this.#start(chunk, out);
    const usage = toUsage(chunk.usage);
    if (usage) this.#usage = usage;
    const choice = firstChoice(chunk.choices);
    if (choice) this.#choice(choice, chunk, out);
    if (this.#learnTries > 0 && this.#template === undefined && this.#started) {
      const content = plainTextContent(chunk);
      if (content !== undefined) {
        this.#learnTries--;
        this.#template = TextChunkTemplate.learn(data, content);
      }
    }
    return out;
  }

  end(): StreamChatResponse[] {
    return this.#ended ? [] : this.#close();
  }

  #start(chunk: JsonObject, out: StreamChatResponse[]): void {
    this.#started = true;
    const created = typeof chunk.created === "number" && chunk.created > 0 ? Math.trunc(chunk.created) : 0;
    out.push(streamEvent({
      case: "messageStart",
      value: {
        id: typeof chunk.id === "string" ? chunk.id : "",
        model: this.#model, // the public id: the upstream's model name never reaches the client
        created,
        upstreamStyle: ApiStyle.CHAT_COMPLETIONS,
        extraJson: extraJson(chunk, kChunkKnown),
      },
    }));
  }

  #choice(choice: JsonObject, chunk: JsonObject, out: StreamChatResponse[]): void {
    const delta = isObject(choice.delta) ? choice.delta : {};
    const from = out.length;
    if (typeof delta.content === "string" && delta.content !== "") this.#text(delta.content, chunk, out);
    // A refusal is what the model says instead of answering: a block of its own.
    if (typeof delta.refusal === "string" && delta.refusal !== "") this.#text(delta.refusal, chunk, out, BlockType.REFUSAL);
    if (Array.isArray(delta.tool_calls)) {
      for (const call of delta.tool_calls) if (isObject(call)) this.#toolCall(call, chunk, out);
    }
    const finished = typeof choice.finish_reason === "string";
    if (finished) this.#finish = toFinishReason(choice.finish_reason as string);
    // The chunk's unnamed fields (logprobs of its tokens, Azure's content_filter_results; a
    // delta's reasoning_content, annotations...) go out with the chunk that carries them. A null
    // (logprobs: null on every chunk) is left out: the renderer writes logprobs null itself.
    const ownExtraJson = extraJson(choice, kChoiceKnown, true);
    const deltaExtraJson = extraJson(delta, kDeltaKnown);
    if (finished && out.slice(from).some((e) => e.event.case === "blockDelta")) {
      // A chunk that carried the last text and the finish reason together (as TGI and vLLM end):
      // the upstream's own finish word (one the canonical reason does not say as sent, such as
      // `eos`) goes with the answer's end, which renders the finish, not with the text, which
      // would render it a second time before the end's.
      const word = withFinishReason("", choice.finish_reason);
      if (word !== "") this.#finishExtra = { choiceExtraJson: word, deltaExtraJson: "" };
      if (ownExtraJson !== "" || deltaExtraJson !== "") this.#extra({ choiceExtraJson: ownExtraJson, deltaExtraJson }, false, chunk, from, out);
      return;
    }
    const choiceExtraJson = withFinishReason(ownExtraJson, choice.finish_reason);
    if (choiceExtraJson === "" && deltaExtraJson === "") return;
    this.#extra({ choiceExtraJson, deltaExtraJson }, finished, chunk, from, out);
  }

  /**
   * Puts a chunk's unnamed fields on the event that renders as that chunk: its first block delta;
   * else message_start for the chunk that began the answer (the role chunk), message_end for the
   * one that carried the finish reason; else a delta of their own, on the open block (-1 when none
   * is: reasoning before any text).
   */
  #extra(extra: { choiceExtraJson: string; deltaExtraJson: string }, finished: boolean, chunk: JsonObject, from: number, out: StreamChatResponse[]): void {
    for (let i = from; i < out.length; i++) {
      const e = out[i]!.event;
      if (e.case === "blockDelta") {
        Object.assign(e.value, extra);
        return;
      }
    }
    if (!this.#started) this.#start(chunk, out);
    // The last event is this chunk's message_start only when the chunk began the answer and gave no other.
    const last = out.at(-1)?.event;
    if (last?.case === "messageStart") Object.assign(last.value, extra);
    else if (finished) this.#finishExtra = extra;
    else out.push(streamEvent({ case: "blockDelta", value: { index: this.#open?.index ?? -1, ...extra } }));
  }

  #text(text: string, chunk: JsonObject, out: StreamChatResponse[], type = BlockType.TEXT): void {
    if (this.#open?.type !== type) this.#openBlock(type, {}, chunk, out);
    out.push(streamEvent({ case: "blockDelta", value: { index: this.#open!.index, text } }));
  }

  #toolCall(call: JsonObject, chunk: JsonObject, out: StreamChatResponse[]): void {
    let key: number | string;
    if (typeof call.index === "number") key = call.index;
    else {
      // Keyed 0 they all were, so each call's arguments were appended to the first one's.
      if (typeof call.id === "string" && call.id !== "") this.#unindexed = `id ${call.id}`;
      key = this.#unindexed;
    }
    // A custom tool's call streams its free-text input as a function's arguments stream: under
    // `custom` instead of `function`.
    const custom = call.type === "custom" || (call.function === undefined && isObject(call.custom));
    const { name, input } = callParts(call, custom);
    let index = this.#toolBlocks.get(key);
    if (index === undefined) {
      index = this.#openBlock(BlockType.TOOL_USE, {
        toolCallId: typeof call.id === "string" ? call.id : "",
        toolName: name,
        // The call's unnamed fields come with its first fragment (Gemini's extra_content).
        extraJson: answerCallExtra(call, custom),
        style: ApiStyle.CHAT_COMPLETIONS,
      }, chunk, out);
      this.#toolBlocks.set(key, index);
    }
    if (input !== "") {
      out.push(streamEvent({ case: "blockDelta", value: { index, partialJson: input } }));
    }
  }

  #openBlock(type: BlockType, fields: { toolCallId?: string; toolName?: string; extraJson?: string; style?: ApiStyle }, chunk: JsonObject, out: StreamChatResponse[]): number {
    if (!this.#started) this.#start(chunk, out);
    this.#closeBlock(out);
    const index = this.#nextIndex++;
    this.#open = { index, type };
    out.push(streamEvent({ case: "blockStart", value: { index, block: { type, ...fields } } }));
    return index;
  }

  /** Closes the open text or refusal block (a later fragment of its kind opens a new one); a tool call's stays open. */
  #closeBlock(out: StreamChatResponse[]): void {
    if (this.#open && this.#open.type !== BlockType.TOOL_USE) out.push(streamEvent({ case: "blockStop", value: { index: this.#open.index } }));
    this.#open = undefined;
  }

  #close(): StreamChatResponse[] {
    this.#ended = true;
    const out: StreamChatResponse[] = [];
    if (!this.#started) this.#start({}, out);
    // Every tool call, then the open text block: block order, as a text block still open began last.
    for (const index of this.#toolBlocks.values()) out.push(streamEvent({ case: "blockStop", value: { index } }));
    this.#closeBlock(out);
    const finishReason = finishForClient(this.#finish, this.#toolBlocks.size > 0, this.#clientStyle);
    out.push(streamEvent({ case: "messageEnd", value: { finishReason, usage: this.#usage, ...this.#finishExtra } }));
    return out;
  }
}

const kNoChunk: JsonObject = Object.freeze({}) as JsonObject;

/**
 * The text of a chunk that carries nothing but one non-empty text fragment at choice 0 (no finish
 * reason, usage, error, refusal or tool call), or undefined for any other chunk.
 */
function plainTextContent(chunk: JsonObject): string | undefined {
  if (chunk.error !== undefined || (chunk.usage !== undefined && chunk.usage !== null)) return undefined;
  const choices = chunk.choices;
  if (!Array.isArray(choices) || choices.length !== 1) return undefined;
  const choice: unknown = choices[0];
  if (!isObject(choice) || choice.index !== 0) return undefined;
  // No finish reason, and no logprobs or other choice field (content_filter_results) either: null ones only.
  if (choice.finish_reason !== null && choice.finish_reason !== undefined) return undefined;
  for (const k in choice) if (!kChoiceKnown.has(k) && choice[k] !== null && choice[k] !== undefined) return undefined;
  const delta = choice.delta;
  if (!isObject(delta)) return undefined;
  let content: string | undefined;
  for (const k in delta) {
    if (k !== "content" || typeof delta[k] !== "string") return undefined;
    content = delta[k] as string;
  }
  return content === "" ? undefined : content;
}

const kSentinel = "\u0000svc-template\u0000";
const kObfuscation = ',"obfuscation":"';

/**
 * The frame of a stream's text chunks. OpenAI repeats each chunk's head (id, object, created,
 * model, ...) and tail byte for byte, and most chunks differ only in their `content` string, e.g.
 * `{"id":"c1",...,"choices":[{"index":0,"delta":{"content":` + `"Hi"` + `},"logprobs":null,"finish_reason":null}]}`.
 * Once one plain text chunk has been parsed, a chunk that is the same prefix and suffix around one
 * JSON string is that chunk with another text: its text is read by parsing the string alone.
 * The per-chunk random `obfuscation` value OpenAI may append is allowed to differ (it is dropped).
 *
 * Why this is exact: JSON's grammar is context-free, so swapping one string literal for another
 * leaves every other value as it was. `learn` proves the literal it cut out is the value of
 * `choices[0].delta.content` by parsing the frame around a sentinel string, which catches an
 * occurrence elsewhere, a duplicate key that a later one overrides, or any other reading.
 * Anything that does not match (another id, a finish reason, usage, whitespace, a tool call, an
 * error) takes the full parse.
 */
class TextChunkTemplate {
  private constructor(
    readonly prefix: string,
    /** The suffix up to the obfuscation field when there is one, else the whole suffix. */
    readonly suffix: string,
    readonly obfuscated: boolean,
  ) {}

  static learn(data: string, content: string): TextChunkTemplate | undefined {
    const literal = JSON.stringify(content);
    const at = data.lastIndexOf(`"content":${literal}`);
    if (at < 0) return undefined; // written with other escapes or spacing: no template
    const start = at + 10;
    const prefix = data.slice(0, start);
    let suffix = data.slice(start + literal.length);
    const obf = obfuscationAt(suffix);
    const obfuscated = obf >= 0;
    let probe: unknown;
    try {
      probe = JSON.parse(prefix + JSON.stringify(kSentinel) + (obfuscated ? `${suffix.slice(0, obf)}${kObfuscation}x"}` : suffix));
    } catch {
      return undefined;
    }
    if (!isObject(probe) || plainTextContent(probe) !== kSentinel) return undefined;
    if (obfuscated) suffix = suffix.slice(0, obf);
    return new TextChunkTemplate(prefix, suffix, obfuscated);
  }

  /** The text of a chunk in this frame, or undefined when the chunk is not. */
  match(data: string): string | undefined {
    const { prefix, suffix } = this;
    let end = data.length;
    if (this.obfuscated) {
      end = obfuscationAt(data);
      if (end < 0) return undefined;
    }
    const to = end - suffix.length;
    // Slices compared with === rather than startsWith: measured several times faster here.
    if (data.slice(0, prefix.length) !== prefix || data.slice(to, end) !== suffix) return undefined;
    const literal = data.slice(prefix.length, to);
    if (literal.charCodeAt(0) !== 34) return undefined;
    // A literal with no quote, backslash or control character inside is its own text.
    if (endOfSimpleString(literal, 1) === literal.length - 1) return literal.slice(1, -1);
    let value: unknown;
    try {
      value = JSON.parse(literal);
    } catch {
      return undefined; // not one string: the full parse says what it is
    }
    return typeof value === "string" ? value : undefined;
  }
}

/**
 * Where `s` ends in `,"obfuscation":"<value>"}` with a value free of quotes, escapes and control
 * characters: the index of that comma, or -1 when it does not.
 */
function obfuscationAt(s: string): number {
  const at = s.lastIndexOf(kObfuscation);
  const end = s.length;
  if (at < 0 || s.charCodeAt(end - 1) !== 125 || s.charCodeAt(end - 2) !== 34) return -1;
  return endOfSimpleString(s, at + kObfuscation.length) === end - 2 ? at : -1;
}

/** The index of the first `"`, `\\` or control character at or after `from` (the length when none). */
function endOfSimpleString(s: string, from: number): number {
  for (let i = from; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 34 || c === 92 || c < 32) return i;
  }
  return s.length;
}

function parseChunk(data: string): JsonObject {
  let chunk: unknown;
  try {
    chunk = JSON.parse(data);
  } catch {
    throw invalidUpstreamResponse("a stream chunk is not JSON");
  }
  if (!isObject(chunk)) throw invalidUpstreamResponse("a stream chunk is not a JSON object");
  return chunk;
}

/** The gateway answers with one choice; an upstream that sent several is read at choice 0. */
function firstChoice(choices: unknown): JsonObject | undefined {
  if (!Array.isArray(choices)) return undefined;
  for (const c of choices) if (isObject(c) && (c.index === 0 || c.index === undefined)) return c;
  return undefined;
}

/**
 * `templates: false` parses every chunk in full (the reference the template path is tested
 * against).
 */
export const createOpenAiStreamConverter = (req: StreamChatRequest, opts: { templates?: boolean } = {}): StreamConverter =>
  new OpenAiStreamConverter(req.model, req.style, opts.templates ?? true);
