import {
  ApiStyle,
  BlockType,
  FinishReason,
  type StreamChatRequest,
  type StreamChatResponse,
} from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { extraJson, isObject, parseExtra, type JsonObject } from "../../../json.js";
import type { SseEvent } from "../../../sse.js";
import { nowSeconds, streamEvent } from "../../canonical.js";
import type { StreamConverter } from "../adapter.js";
import { blockFromWire, oneHourWrites, uncachedInput, usageFromCounts, usageFromWire } from "./blocks.js";
import { convertStreamError } from "./error.js";
import { invalidResponse, MESSAGE_KEYS, withStopReason } from "./response.js";
import { finishFromStopReason } from "./stop-reason.js";

/** The fields of message_delta's `delta`, and of the event itself, that the canonical end names. */
const DELTA_KEYS = new Set(["stop_reason", "stop_sequence"]);
const EVENT_KEYS = new Set(["type", "delta", "usage"]);

/**
 * Converts a messages-style stream (https://docs.anthropic.com/en/api/messages-streaming) into
 * canonical events. The block events map one to one; the finish reason and final usage arrive in
 * `message_delta` and are released with `message_end` when `message_stop` says the answer is whole.
 */
/** The events of an answer after its message_start. */
const IN_MESSAGE = new Set(["content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);

export class MessagesStreamConverter implements StreamConverter {
  readonly #req: StreamChatRequest;
  #complete = false;
  /** Whether message_start came. */
  #started = false;
  /** The wire's `input_tokens`: input neither read from nor written to the prompt cache. */
  #inputTokens = 0;
  #cacheWriteTokens = 0;
  /** Of the cache writes, those to a one-hour entry. */
  #cacheWrite1hTokens = 0;
  #cacheReadTokens = 0;
  #outputTokens = 0;
  #usageExtra: JsonObject = {};
  #finish = FinishReason.UNSPECIFIED;
  #stopSequence = "";
  /**
   * What message_delta carried that the canonical end does not name, for a messages-style client:
   * its delta's other fields (a code-execution `container`; the `stop_reason` itself when the
   * canonical reason does not say it as sent) and the event's own (`context_management`).
   */
  #deltaExtra = "";
  #eventExtra = "";
  /**
   * Tool calls (by block index) whose input came whole in their content_block_start, which the API
   * sends as `{}` with input_json_delta fragments to follow: a compatible server may send it there
   * instead. Sent on as one fragment at the block's stop, unless fragments came (they are the input).
   */
  readonly #startInputs = new Map<number, string>();

  constructor(req: StreamChatRequest) {
    this.#req = req;
  }

  get complete(): boolean {
    return this.#complete;
  }

  push(sse: SseEvent): StreamChatResponse[] {
    if (sse.event === "ping" || (!sse.data && sse.event !== "error")) return [];
    let data: unknown;
    try {
      data = JSON.parse(sse.data);
    } catch {
      // An error event is the upstream failing whatever its data says; anything else is garbage.
      if (sse.event === "error") throw convertStreamError(undefined);
      throw invalidResponse(`a \`${sse.event ?? "data"}\` event is not JSON`);
    }
    if (!isObject(data)) throw invalidResponse(`a \`${sse.event ?? "data"}\` event is not a JSON object`);
    // The data's own `type` is authoritative; the `event:` name repeats it.
    const type = typeof data.type === "string" ? data.type : sse.event;
    // An answer's events come after its message_start: without it there is no message to pass on
    // (a client's SDK would fail on a stream that begins with a block or the message's end).
    if (!this.#started && type !== undefined && IN_MESSAGE.has(type)) throw invalidResponse(`a \`${type}\` event came before \`message_start\``);
    switch (type) {
      case "message_start":
        return [this.#start(data.message)];
      case "content_block_start":
        if (!isObject(data.content_block)) throw invalidResponse("`content_block_start` has no content_block");
        return [this.#blockStart(index(data), data.content_block)];
      case "content_block_delta": {
        const d = delta(data.delta);
        if (d.partialJson !== undefined) this.#startInputs.delete(index(data));
        return [streamEvent({ case: "blockDelta", value: { index: index(data), ...d } })];
      }
      case "content_block_stop": {
        const at = index(data);
        const stop = streamEvent({ case: "blockStop", value: { index: at } });
        const input = this.#startInputs.get(at);
        if (input === undefined) return [stop];
        this.#startInputs.delete(at);
        return [streamEvent({ case: "blockDelta", value: { index: at, partialJson: input } }), stop];
      }
      case "message_delta":
        this.#delta(data);
        return [];
      case "message_stop":
        this.#complete = true;
        return [this.#end()];
      case "error":
        throw convertStreamError(data);
      default:
        return []; // event types added to the API after this was written
    }
  }

  get finished(): boolean {
    return this.#finish !== FinishReason.UNSPECIFIED;
  }

  end(): StreamChatResponse[] {
    // Everything owed was sent at message_stop. Without it, a stream whose message_delta said how
    // it finished (its blocks all stopped before) owes the answer's end; one that did not is the
    // caller's upstream failure, not something to paper over here.
    return this.#complete || !this.finished ? [] : [this.#end()];
  }

  /** A block's start; a tool call's input is left to its fragments (see #startInputs). */
  #blockStart(at: number, wire: JsonObject): StreamChatResponse {
    const block = blockFromWire(wire);
    if (block.type === BlockType.TOOL_USE) {
      if (block.toolInputJson !== "" && block.toolInputJson !== "{}") this.#startInputs.set(at, block.toolInputJson);
      block.toolInputJson = "";
    }
    return streamEvent({ case: "blockStart", value: { index: at, block } });
  }

  #start(message: unknown): StreamChatResponse {
    this.#started = true;
    const m = isObject(message) ? message : {};
    const usage = usageFromWire(m.usage);
    this.#inputTokens = uncachedInput(usage);
    this.#cacheWriteTokens = usage.cacheWriteTokens;
    this.#cacheWrite1hTokens = usage.cacheWrite1hTokens;
    this.#cacheReadTokens = usage.cacheReadTokens;
    this.#outputTokens = usage.outputTokens;
    this.#usageExtra = parseExtra(usage.extraJson);
    return streamEvent({
      case: "messageStart",
      value: {
        id: typeof m.id === "string" ? m.id : "",
        model: this.#req.model,
        created: nowSeconds(),
        usage,
        upstreamStyle: ApiStyle.MESSAGES,
        extraJson: extraJson(m, MESSAGE_KEYS),
      },
    });
  }

  /** message_delta counters are cumulative totals for the whole answer: overwrite, never add. */
  #delta(data: JsonObject): void {
    const d = isObject(data.delta) ? data.delta : {};
    this.#finish = finishFromStopReason(d.stop_reason);
    this.#stopSequence = typeof d.stop_sequence === "string" ? d.stop_sequence : "";
    this.#deltaExtra = withStopReason(extraJson(d, DELTA_KEYS), d.stop_reason);
    this.#eventExtra = extraJson(data, EVENT_KEYS);
    if (!isObject(data.usage)) return;
    const usage = usageFromWire(data.usage);
    if (typeof data.usage.output_tokens === "number") this.#outputTokens = usage.outputTokens;
    if (typeof data.usage.input_tokens === "number") this.#inputTokens = uncachedInput(usage);
    if (typeof data.usage.cache_creation_input_tokens === "number") this.#cacheWriteTokens = usage.cacheWriteTokens;
    if (isObject(data.usage.cache_creation)) this.#cacheWrite1hTokens = oneHourWrites(data.usage);
    if (typeof data.usage.cache_read_input_tokens === "number") this.#cacheReadTokens = usage.cacheReadTokens;
    Object.assign(this.#usageExtra, parseExtra(usage.extraJson));
  }

  #end(): StreamChatResponse {
    const extra = Object.keys(this.#usageExtra).length ? JSON.stringify(this.#usageExtra) : "";
    return streamEvent({
      case: "messageEnd",
      value: {
        finishReason: this.#finish,
        stopSequence: this.#stopSequence,
        usage: usageFromCounts(this.#inputTokens, this.#cacheWriteTokens, this.#cacheReadTokens, this.#outputTokens, extra, this.#cacheWrite1hTokens),
        deltaExtraJson: this.#deltaExtra,
        choiceExtraJson: this.#eventExtra,
      },
    });
  }
}

const index = (data: JsonObject): number => (typeof data.index === "number" && data.index >= 0 ? Math.floor(data.index) : 0);

/** A delta's canonical fields: text and tool input have their own; thinking, signatures and citations ride raw. */
function delta(d: unknown): { text?: string; partialJson?: string; rawJson?: string } {
  if (!isObject(d)) return {};
  if (d.type === "text_delta") return { text: String(d.text ?? "") };
  if (d.type === "input_json_delta") return { partialJson: String(d.partial_json ?? "") };
  return { rawJson: JSON.stringify(d) };
}
