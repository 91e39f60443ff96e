import {
  ApiStyle,
  BlockType,
  type BlockDelta,
  type BlockStart,
  type Completion,
  type MessageEnd,
  type MessageStart,
  type StreamChatResponse,
  type Usage,
} from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { ErrorInfo } from "../../core/errors.js";
import { isObject, parseExtra, type JsonObject } from "../../core/json.js";
import { formatSse } from "../../core/sse.js";
import { isCustomCall, sameStyleCallExtra, toolCall } from "../../core/proxy/upstreams/openai/tool-call.js";
import type { RenderedRequest, StreamRenderer } from "./codec.js";
import { answerParts, createdOr, finishName, renderUsage, sameStyleExtra } from "./chat-completions-render.js";

const done = formatSse("[DONE]");

/** The fields of an upstream chunk's choice and delta that the canonical events carry unnamed. */
type ChunkFields = Pick<BlockDelta, "choiceExtraJson" | "deltaExtraJson">;

/** Whether the client asked for the final usage chunk (`stream_options.include_usage`). */
function wantsUsage(req: RenderedRequest): boolean {
  try {
    const opts = parseExtra(req.extraJson ?? "").stream_options;
    return isObject(opts) && opts.include_usage === true;
  } catch {
    return false;
  }
}

/**
 * Renders canonical events as OpenAI `chat.completion.chunk` SSE
 * (https://platform.openai.com/docs/api-reference/chat-streaming): a role chunk (`role`, `content: ""`
 * and `refusal: null`, as OpenAI's first chunk), content and tool-call fragments, a finish chunk,
 * the usage chunk when asked for, then `data: [DONE]`. When the usage chunk is asked for, every
 * chunk before it carries `"usage":null`, as OpenAI's do. Every chunk repeats the same id, created,
 * model and (same style) system_fingerprint, so that head is serialised once per stream, and the
 * same ending.
 */
class ChatStreamRenderer implements StreamRenderer {
  readonly #includeUsage: boolean;
  readonly #model: string;
  #head = "";
  /** What closes each chunk after its choices: `,"usage":null}` when the usage chunk is asked for, else `}`. */
  readonly #tail: string;
  #style = ApiStyle.UNSPECIFIED;
  /** Canonical block index -> position among tool calls (OpenAI's tool_calls[].index). */
  readonly #toolIndex = new Map<number, number>();
  /** Canonical block indexes of refusal blocks, whose text goes out as `delta.refusal`. */
  readonly #refusals = new Set<number>();
  /** Canonical block indexes of custom tools' calls, whose input goes out under `custom`. */
  readonly #customCalls = new Set<number>();
  /**
   * Tool calls from an upstream of another style that have had no arguments yet. A messages-style
   * upstream streams a call without input as `input: {}` and no fragment (or an empty one); OpenAI
   * always writes arguments as JSON, so such a call gets `"{}"` at its end, as its whole answer does.
   */
  readonly #noArguments = new Set<number>();

  constructor(req: RenderedRequest) {
    this.#includeUsage = wantsUsage(req);
    this.#tail = this.#includeUsage ? ',"usage":null}' : "}";
    this.#model = req.model ?? "";
  }

  render(event: StreamChatResponse): string {
    const e = event.event;
    switch (e.case) {
      case "messageStart":
        return this.#start(e.value, e.value);
      case "blockStart":
        return this.#blockStart(e.value);
      case "blockDelta":
        if (e.value.partialJson !== "" && this.#noArguments.size) this.#noArguments.delete(e.value.index);
        return this.#blockDelta(e.value);
      case "blockStop":
        // OpenAI has no marker for the end of a part; a tool call's arguments are complete here.
        return this.#noArguments.size ? this.#emptyArguments(e.value.index) : "";
      case "messageEnd":
        return this.#end(e.value, e.value);
      case "completion":
        return this.#completion(e.value);
      default:
        return "";
    }
  }

  error(info: ErrorInfo): string {
    return formatSse(JSON.stringify({ error: { message: info.message, type: info.type, code: info.code } }));
  }

  /** `fields`: those the upstream's first chunk carried (Azure's content_filter_results), for the role chunk. */
  #start(s: Pick<MessageStart, "id" | "model" | "created" | "upstreamStyle" | "extraJson">, fields?: ChunkFields): string {
    this.#style = s.upstreamStyle;
    const head = {
      id: s.id,
      object: "chat.completion.chunk",
      created: createdOr(s.created),
      model: s.model,
      ...sameStyleExtra(s.upstreamStyle, s.extraJson),
    };
    // '{"id":...,"model":"x"' without the closing brace: each chunk appends its choices.
    this.#head = JSON.stringify(head).slice(0, -1);
    const role = { role: "assistant", content: "", refusal: null };
    if (!fields) return this.#chunk(role);
    return this.#chunk({ ...role, ...this.#sameStyle(fields.deltaExtraJson) }, null, this.#sameStyle(fields.choiceExtraJson));
  }

  #blockStart(b: BlockStart): string {
    const block = b.block;
    if (block?.type === BlockType.TOOL_USE) {
      const k = this.#toolIndex.size;
      this.#toolIndex.set(b.index, k);
      if (isCustomCall(block)) this.#customCalls.add(b.index);
      // The call's own unnamed fields (Gemini's extra_content) go out with its first fragment, as they came.
      const call = { index: k, ...toolCall(block, sameStyleCallExtra(block), "") };
      if (block.toolInputJson === "" && this.#style !== ApiStyle.CHAT_COMPLETIONS) this.#noArguments.add(b.index);
      return this.#chunk({ tool_calls: [call] });
    }
    if (block?.type === BlockType.REFUSAL) {
      this.#refusals.add(b.index);
      return block.text !== "" ? this.#chunk({ refusal: block.text }) : "";
    }
    if (block?.type === BlockType.TEXT && block.text !== "") return this.#chunk({ content: block.text });
    return "";
  }

  #blockDelta(d: BlockDelta): string {
    // The fields of the chunk's choice (logprobs, content_filter_results) and delta (reasoning_content,
    // annotations...) that came with it, from an upstream of this style.
    const extra = this.#sameStyle(d.choiceExtraJson);
    const more = this.#sameStyle(d.deltaExtraJson);
    if (d.text !== "") {
      if (this.#refusals.has(d.index)) return this.#chunk({ refusal: d.text, ...more }, null, extra);
      return extra || more ? this.#chunk({ content: d.text, ...more }, null, extra) : this.#content(d.text);
    }
    const k = this.#toolIndex.get(d.index);
    if (d.partialJson !== "" && k !== undefined) {
      const part = this.#customCalls.has(d.index) ? { index: k, custom: { input: d.partialJson } } : { index: k, function: { arguments: d.partialJson } };
      return this.#chunk({ tool_calls: [part], ...more }, null, extra);
    }
    if (extra || more) return this.#chunk({ ...more }, null, extra);
    return ""; // thinking and other deltas of another style have no chat-completions form
  }

  /**
   * `fields`: those the chunk that carried the finish reason had (Azure's content_filter_results);
   * `said`: a whole answer's finish word as the upstream sent it, where the canonical reason would
   * not give it back.
   */
  #end(e: Pick<MessageEnd, "finishReason" | "usage">, fields?: ChunkFields, said?: string): string {
    let out = fields
      ? this.#chunk({ ...this.#sameStyle(fields.deltaExtraJson) }, finishName(e.finishReason), this.#sameStyle(fields.choiceExtraJson))
      : this.#chunk({}, said ?? finishName(e.finishReason));
    if (this.#includeUsage) out += this.#usageChunk(e.usage);
    // A tool call the upstream never stopped gets its arguments before the finish.
    return (this.#noArguments.size ? this.#emptyArgumentsLeft() : "") + out + done;
  }

  /**
   * A whole answer served to a stream request (e.g. from the cache), as the chunks that would have
   * carried it. The message's and the choice's own fields from a same-style upstream (annotations,
   * reasoning_content, audio; logprobs, content_filter_results) go out once, with the first part of
   * the answer (or in a chunk of their own when it has none), so that the chunks add up to the whole
   * answer as the openai SDK's stream helper assembles it.
   */
  #completion(c: Completion): string {
    let out = this.#start(c);
    const { text, refusal, toolCalls } = answerParts(c);
    /** The answer's own fields until a chunk has carried them. */
    // Only the upstream's own: the `annotations: []` a whole answer adds where the upstream sent
    // none (renderChatCompletion) no live stream carries, and a hit streams as a miss would.
    // The upstream's own finish word (withFinishReason: `function_call`, a value newer than this
    // build) belongs to the finish chunk, as a live stream has it, not to the first part.
    const { finish_reason: said, ...choice } = sameStyleExtra(c.upstreamStyle, c.choiceExtraJson);
    let fields: { message: JsonObject; choice: JsonObject } | undefined = {
      message: sameStyleExtra(c.upstreamStyle, c.messageExtraJson),
      choice,
    };
    const part = (delta: JsonObject): string => {
      const f = fields;
      fields = undefined;
      return f ? this.#chunk({ ...delta, ...f.message }, null, f.choice) : this.#chunk(delta);
    };
    if (text !== "") out += part({ content: text });
    if (refusal !== "") out += part({ refusal });
    toolCalls.forEach((call, index) => {
      out += part({ tool_calls: [{ index, ...call }] });
    });
    if (fields) out += part({});
    return out + this.#end(c, undefined, typeof said === "string" ? said : undefined);
  }

  /** An extra_json text of this stream's upstream style as an object; undefined when empty or of another style. */
  #sameStyle(json: string): JsonObject | undefined {
    return json !== "" && this.#style === ApiStyle.CHAT_COMPLETIONS ? parseExtra(json) : undefined;
  }

  #chunk(delta: object, finishReason: string | null = null, extra?: object): string {
    // Events before message_start would be a core bug; still write chunks the SDK can parse.
    if (this.#head === "") this.#start({ id: "", model: this.#model, created: 0, upstreamStyle: ApiStyle.UNSPECIFIED, extraJson: "" });
    const choice = { index: 0, delta, logprobs: null, finish_reason: finishReason, ...extra };
    return formatSse(`${this.#head},"choices":[${JSON.stringify(choice)}]${this.#tail}`);
  }

  /**
   * A text fragment's chunk: what `#chunk({ content: text })` writes, byte for byte, without building
   * and serialising the choice object (most chunks of a stream are these).
   */
  #content(text: string): string {
    if (this.#head === "") return this.#chunk({ content: text });
    return `data: ${this.#head},"choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null}]${this.#tail}\n\n`;
  }

  #usageChunk(usage: Usage | undefined): string {
    return formatSse(`${this.#head},"choices":[],"usage":${JSON.stringify(renderUsage(usage, this.#style))}}`);
  }

  /** `"{}"` as the arguments of a tool call that ends without any (another style's upstream). */
  #emptyArguments(index: number): string {
    const k = this.#toolIndex.get(index);
    if (k === undefined || !this.#noArguments.delete(index)) return "";
    return this.#chunk({ tool_calls: [{ index: k, function: { arguments: "{}" } }] });
  }

  #emptyArgumentsLeft(): string {
    let out = "";
    for (const index of this.#noArguments) out += this.#emptyArguments(index);
    return out;
  }
}

export const createChatStreamRenderer = (req: RenderedRequest): StreamRenderer => new ChatStreamRenderer(req);
