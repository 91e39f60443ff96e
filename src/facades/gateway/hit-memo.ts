import { fromBinary } from "@bufbuild/protobuf";
import { type Completion, CompletionSchema, FinishReason } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { deepFreeze } from "../../core/freeze.js";
import type { ClientCodec, ParsedChatRequest } from "./codec.js";

/**
 * What makes a repeated cache hit cheap: the work a hit does that depends only on bytes it has seen
 * before. Parsing, validating and hashing a body depends only on the endpoint and the body's text;
 * decoding and rendering a stored answer only on the payload and the client style. Key checks,
 * limits, headers and the request log are still done for every request.
 */

/** A body as the gateway works with it: its JSON value, the codec's parse and its cache key. */
export interface PreparedRequest {
  value: unknown;
  parsed: ParsedChatRequest;
  cacheKey: string;
}

/**
 * Bodies of requests that were answered from the cache, by endpoint and exact text. A repeat of one
 * (an SDK writes the same call the same way each time) skips JSON.parse, validation and the cache
 * key's hash. Only hits are kept, so a stream of unique requests never churns it. Bounded: at most
 * MAX_ENTRIES bodies of at most MAX_BODY_CHARS each (the oldest goes first). Entries are frozen, so
 * nothing downstream can change what a later request reads.
 */
export class PreparedRequests {
  static readonly MAX_ENTRIES = 1024;
  static readonly MAX_BODY_CHARS = 8 * 1024;
  readonly #byPath = new Map<string, Map<string, PreparedRequest>>();
  #size = 0;

  get(path: string, text: string): PreparedRequest | undefined {
    return text.length <= PreparedRequests.MAX_BODY_CHARS ? this.#byPath.get(path)?.get(text) : undefined;
  }

  remember(path: string, text: string, prepared: PreparedRequest): void {
    if (text.length > PreparedRequests.MAX_BODY_CHARS) return;
    let bodies = this.#byPath.get(path);
    if (!bodies) this.#byPath.set(path, (bodies = new Map()));
    if (bodies.has(text)) return;
    if (this.#size >= PreparedRequests.MAX_ENTRIES) {
      // The oldest entry of the largest path (an endpoint, with the betas a request named).
      let largest: [string, Map<string, PreparedRequest>] = [path, bodies];
      for (const e of this.#byPath) if (e[1].size > largest[1].size) largest = e;
      const oldest = largest[1].keys().next();
      if (!oldest.done) {
        largest[1].delete(oldest.value);
        this.#size--;
      }
      // A path left empty goes: paths with betas can be many, and each held a map.
      if (largest[1].size === 0 && largest[1] !== bodies) this.#byPath.delete(largest[0]);
    }
    bodies.set(text, deepFreeze(prepared));
    this.#size++;
  }

  get size(): number {
    return this.#size;
  }

  /** Paths with bodies kept (for tests). */
  get paths(): number {
    return this.#byPath.size;
  }
}

/**
 * Answers read from the cache, decoded once per payload: the embedded store hands back the same
 * bytes for an entry until it is replaced or evicted, and then this entry is dropped with them
 * (weakly held). A store that returns new bytes every time (Redis) decodes every time. Only
 * payloads up to MAX_KEPT_BYTES are kept decoded: a decoded answer and its rendering take two to
 * three times its payload, which the cache's byte budget does not count, so the copies of large
 * answers (a few MB each) are made per hit and dropped, and the budget holds within that factor of
 * the small ones.
 */
export class CachedAnswers {
  static readonly MAX_KEPT_BYTES = 64 * 1024;
  readonly #byPayload = new WeakMap<Uint8Array, CachedAnswer>();

  of(payload: Uint8Array): CachedAnswer {
    let answer = this.#byPayload.get(payload);
    if (answer) return answer;
    const c = fromBinary(CompletionSchema, payload);
    // Every stored answer says how it finished (serve-chat's storable): one that does not (an
    // empty payload decodes as an empty answer) is damaged, answered as a miss.
    if (c.finishReason === FinishReason.UNSPECIFIED) throw new Error("the cached answer has no finish reason: not a whole answer");
    answer = new CachedAnswer(deepFreeze(c));
    if (payload.byteLength <= CachedAnswers.MAX_KEPT_BYTES) this.#byPayload.set(payload, answer);
    return answer;
  }
}

/**
 * An answer served without an upstream call (from the cache, frozen, or shared by an identical
 * request in flight), with its JSON response body rendered once for the style that asked.
 */
export class CachedAnswer {
  #codec: ClientCodec | undefined;
  #json = "";

  constructor(readonly completion: Completion) {}

  /**
   * The answer as `codec`'s JSON response body. An answer without a creation time is rendered anew
   * each time (the style then writes the current time), so it is not kept.
   */
  json(codec: ClientCodec): string {
    if (this.#codec === codec) return this.#json;
    const json = JSON.stringify(codec.renderCompletion(this.completion));
    if (this.completion.created !== 0) {
      this.#codec = codec;
      this.#json = json;
    }
    return json;
  }
}
