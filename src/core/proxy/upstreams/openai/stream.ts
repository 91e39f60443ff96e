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
import { toFinishReason, toUsage } from "./usage.js";

/**
 * Chunk fields the canonical events name. `obfuscation` is random padding OpenAI adds to each chunk
 * against side channels; it means nothing once re-framed, so it is dropped.
 */
const kChunkKnown: ReadonlySet<string> = new Set(["id", "object", "created", "model", "choices", "usage", "obfuscation"]);

/**
 * Converts OpenAI `chat.completion.chunk` SSE (https://platform.openai.com/docs/api-reference/chat-streaming)
 * into canonical events. OpenAI streams a flat delta per chunk; the canonical model wants numbered
 * blocks, so text and each tool call (by its `index`) become their own block, opened at their first
 * fragment and closed when another begins. The finish reason and the usage arrive in separate chunks
 * before `[DONE]`, so `message_end` waits for `[DONE]` (or the end of the body).
 */
class OpenAiStreamConverter implements StreamConverter {
  readonly #model: string;
  #complete = false;
  #started = false;
  #ended = false;
  #nextIndex = 0;
  #open: { index: number; type: BlockType } | undefined;
  /** OpenAI tool_calls[].index -> canonical block index. */
  readonly #toolBlocks = new Map<number, number>();
  #finish = FinishReason.UNSPECIFIED;
  #usage: Usage | undefined;

  constructor(publicModel: string) {
    this.#model = publicModel;
  }

  get complete(): boolean {
    return this.#complete;
  }

  push(event: SseEvent): StreamChatResponse[] {
    if (this.#ended) return [];
    const data = event.data.trim();
    if (data === "") return [];
    if (data === "[DONE]") {
      this.#complete = true;
      return this.#close();
    }
    const chunk = parseChunk(data);
    if (isObject(chunk.error)) throw convertOpenAiStreamError(chunk.error);
    const out: StreamChatResponse[] = [];
    // Azure sends a first chunk with an empty id (prompt filter results): start at a real one.
    if (!this.#started && typeof chunk.id === "string" && chunk.id !== "") this.#start(chunk, out);
    const usage = toUsage(chunk.usage);
    if (usage) this.#usage = usage;
    const choice = firstChoice(chunk.choices);
    if (choice) this.#choice(choice, chunk, out);
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
    // A refusal is what the model says instead of answering: the client sees it as text.
    for (const text of [delta.content, delta.refusal]) {
      if (typeof text === "string" && text !== "") this.#text(text, chunk, out);
    }
    if (Array.isArray(delta.tool_calls)) {
      for (const call of delta.tool_calls) if (isObject(call)) this.#toolCall(call, chunk, out);
    }
    if (typeof choice.finish_reason === "string") this.#finish = toFinishReason(choice.finish_reason);
  }

  #text(text: string, chunk: JsonObject, out: StreamChatResponse[]): void {
    if (this.#open?.type !== BlockType.TEXT) this.#openBlock(BlockType.TEXT, {}, chunk, out);
    out.push(streamEvent({ case: "blockDelta", value: { index: this.#open!.index, text } }));
  }

  #toolCall(call: JsonObject, chunk: JsonObject, out: StreamChatResponse[]): void {
    const key = typeof call.index === "number" ? call.index : 0;
    const fn = isObject(call.function) ? call.function : {};
    let index = this.#toolBlocks.get(key);
    if (index === undefined) {
      index = this.#openBlock(BlockType.TOOL_USE, {
        toolCallId: typeof call.id === "string" ? call.id : "",
        toolName: typeof fn.name === "string" ? fn.name : "",
      }, chunk, out);
      this.#toolBlocks.set(key, index);
    }
    if (typeof fn.arguments === "string" && fn.arguments !== "") {
      out.push(streamEvent({ case: "blockDelta", value: { index, partialJson: fn.arguments } }));
    }
  }

  #openBlock(type: BlockType, fields: { toolCallId?: string; toolName?: string }, chunk: JsonObject, out: StreamChatResponse[]): number {
    if (!this.#started) this.#start(chunk, out);
    this.#closeBlock(out);
    const index = this.#nextIndex++;
    this.#open = { index, type };
    out.push(streamEvent({ case: "blockStart", value: { index, block: { type, ...fields } } }));
    return index;
  }

  #closeBlock(out: StreamChatResponse[]): void {
    if (this.#open) out.push(streamEvent({ case: "blockStop", value: { index: this.#open.index } }));
    this.#open = undefined;
  }

  #close(): StreamChatResponse[] {
    this.#ended = true;
    const out: StreamChatResponse[] = [];
    if (!this.#started) this.#start({}, out);
    this.#closeBlock(out);
    out.push(streamEvent({ case: "messageEnd", value: { finishReason: this.#finish, usage: this.#usage } }));
    return out;
  }
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

export const createOpenAiStreamConverter = (req: StreamChatRequest): StreamConverter => new OpenAiStreamConverter(req.model);
