import { ApiStyle, BlockType, type Completion, type ContentBlock, type StreamChatResponse } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { parseExtra, withExtraField, type JsonObject } from "../json.js";
import { cutText } from "../text.js";
import { completion, contentBlock } from "./canonical.js";

/**
 * Builds the whole answer from a stream's canonical events, so a streamed answer can be cached and
 * served again as JSON or as a stream. Only text, refusal and tool-use blocks are assembled; an answer
 * with anything else (thinking, signatures, other raw deltas, per-chunk logprobs, or any other field
 * an upstream's chunk carried unnamed in its choice or delta) has no faithful whole form here, so it
 * is reported as not assemblable and simply not cached. Those per-chunk fields have no general
 * whole form: Azure's content_filter_results judge each chunk's text on its own, and a delta's
 * reasoning_content, annotations or audio each add up by rules of their own (concatenated strings,
 * appended arrays, an audio's id given once), which the gateway cannot know for a field it does not
 * name.
 */
export class CompletionAssembler {
  #c: Completion | undefined;
  #blocks = new Map<number, ContentBlock>();
  #ok = true;
  #ended = false;
  /** Characters of text and tool input assembled so far, and the most kept (`maxChars`). */
  #chars = 0;
  readonly #maxChars: number;
  /** Characters of text and tool input that came past `maxChars`, not kept. */
  #dropped = 0;

  /**
   * `maxChars`: the most characters of text and tool input assembled. A longer answer is not
   * assembled (the cache could not hold it: its bytes are at least its characters) and only its
   * first `maxChars` are kept (a delta crossing the line cut there), for partial(), and the rest
   * counted (droppedChars): the stream itself is passed on whole, but the
   * gateway never holds a copy of an answer of any size.
   */
  constructor(maxChars = Infinity) {
    this.#maxChars = maxChars;
  }

  push(ev: StreamChatResponse): void {
    const e = ev.event;
    switch (e.case) {
      case "messageStart":
        if (hasChunkFields(e.value)) this.#ok = false;
        this.#c = completion({
          id: e.value.id,
          model: e.value.model,
          created: e.value.created,
          usage: e.value.usage,
          upstreamStyle: e.value.upstreamStyle,
          extraJson: e.value.extraJson,
        });
        break;
      case "blockStart": {
        const b = e.value.block;
        if (!b || (b.type !== BlockType.TEXT && b.type !== BlockType.REFUSAL && b.type !== BlockType.TOOL_USE) || b.rawJson !== "") this.#ok = false;
        // The block's own fields as its start gave them (a tool call's `caller` or `extra_content`,
        // a custom tool's call's mark): what comes after its start comes as deltas.
        else this.#blocks.set(e.value.index, contentBlock({ type: b.type, text: b.text, toolCallId: b.toolCallId, toolName: b.toolName, toolInputJson: b.toolInputJson, style: b.style, extraJson: b.extraJson }));
        break;
      }
      case "blockDelta": {
        const b = this.#blocks.get(e.value.index);
        if (!b) {
          this.#ok = false;
          break;
        }
        // Per-chunk choice and delta fields (logprobs, content_filter_results, reasoning_content...)
        // have no place in the whole answer: such a stream is not cached (its text is still kept, for partial()).
        if (e.value.rawJson !== "" || hasChunkFields(e.value)) this.#ok = false;
        const more = e.value.text.length + e.value.partialJson.length;
        if (this.#chars + more > this.#maxChars) {
          // Kept as far as it fits (never half an emoji), the rest counted as dropped: nothing more is kept.
          this.#ok = false;
          const room = this.#maxChars - this.#chars;
          const text = cutText(e.value.text, room);
          const json = cutText(e.value.partialJson, room - text.length);
          if (text !== "") b.text += text;
          if (json !== "") b.toolInputJson += json;
          this.#chars = this.#maxChars;
          this.#dropped += more - text.length - json.length;
          break;
        }
        this.#chars += more;
        if (e.value.text !== "") b.text += e.value.text;
        if (e.value.partialJson !== "") b.toolInputJson += e.value.partialJson;
        break;
      }
      case "messageEnd":
        if (!this.#c) break;
        if (hasChunkFields(e.value) && !this.#keptEndFields(e.value)) this.#ok = false;
        this.#ended = true;
        this.#c.finishReason = e.value.finishReason;
        this.#c.stopSequence = e.value.stopSequence;
        this.#c.usage = e.value.usage ?? this.#c.usage;
        this.#c.costUsd = e.value.costUsd;
        break;
      case "completion":
        this.#c = e.value;
        this.#ended = true;
        break;
      default:
        break;
    }
  }

  /** Characters of text and tool input past `maxChars`: left out of partial(). */
  get droppedChars(): number {
    return this.#dropped;
  }

  /** False once the stream has shown something that cannot be assembled: result() will be undefined. */
  get assemblable(): boolean {
    return this.#ok;
  }

  /** The whole answer, or undefined when the stream did not end well or held blocks that cannot be assembled. */
  result(): Completion | undefined {
    if (!this.#ok || !this.#ended || !this.#c) return undefined;
    if (this.#blocks.size) this.#c.blocks = this.#sortedBlocks();
    return this.#c;
  }

  /**
   * The answer as far as it came, for a stream that was cut short (the upstream broke off, the
   * client left): its text, refusal and tool-use blocks so far (the others left out), and no finish
   * reason unless it had one. Undefined before the answer's start. A copy: result() is unchanged.
   */
  partial(): Completion | undefined {
    if (!this.#c) return undefined;
    return { ...this.#c, blocks: this.#blocks.size ? this.#sortedBlocks() : this.#c.blocks };
  }

  /**
   * Whether the end's unnamed fields are ones the whole answer keeps where a non-stream answer has
   * them, so such an answer is cached and given back with them as the non-stream answer is: the
   * upstream's own finish word where the canonical reason does not say it (a `stop_reason` newer
   * than this build: withStopReason; a `finish_reason`: withFinishReason), and a messages-style
   * `message_delta`'s `stop_details` (why a refusal stopped; null on other answers). A `container`
   * is kept only when null (today's API sends the key on every stream): one with an id belongs to
   * a code-execution container that expires, and its answer is not for the cache. Anything else
   * unnamed makes the stream not assemblable.
   */
  #keptEndFields(end: { choiceExtraJson: string; deltaExtraJson: string }): boolean {
    const c = this.#c!;
    if (c.upstreamStyle === ApiStyle.MESSAGES) {
      if (end.choiceExtraJson !== "") return false;
      const d = parseExtra(end.deltaExtraJson);
      for (const k of Object.keys(d)) {
        if (k === "stop_reason" ? typeof d[k] !== "string" : k === "container" ? d[k] !== null : k !== "stop_details") return false;
      }
      for (const k of ["stop_reason", "stop_details", "container"]) if (k in d) c.extraJson = withExtraField(c.extraJson, k, d[k]);
      return true;
    }
    if (end.deltaExtraJson !== "" || !onlyKey(parseExtra(end.choiceExtraJson), "finish_reason")) return false;
    c.choiceExtraJson = end.choiceExtraJson;
    return true;
  }

  #sortedBlocks(): ContentBlock[] {
    return [...this.#blocks.entries()].sort((a, b) => a[0] - b[0]).map(([, b]) => b);
  }
}

const onlyKey = (o: JsonObject, key: string): boolean => {
  const keys = Object.keys(o);
  return keys.length === 1 && keys[0] === key && typeof o[key] === "string";
};

/** Whether an event carries fields of an upstream chunk's choice or delta that the canonical model does not name. */
const hasChunkFields = (e: { choiceExtraJson: string; deltaExtraJson: string }): boolean => e.choiceExtraJson !== "" || e.deltaExtraJson !== "";
