import { toBinary } from "@bufbuild/protobuf";
import { type Completion, CompletionSchema, type ContentBlock, type Usage } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { isWellFormed } from "../text.js";

/**
 * The protobuf binary form of a Completion (the cache's payload), written by hand: protobuf-es
 * encodes by walking the schema at run time, which costs several times this on every answer the
 * gateway stores. The output is byte for byte what `toBinary(CompletionSchema, c)` writes (fields in
 * number order, proto3 defaults left out); test/core/proxy/completion-binary.test.ts holds it to that.
 * A field added to Completion, ContentBlock or Usage in the .proto must be added here too; the
 * test's field lists fail until it is.
 *
 * Undefined for an answer with a string that is not well-formed UTF-16 (a lone surrogate: an
 * upstream's JSON may hold "\ud800"): UTF-8 cannot carry it, so the bytes (ours or protobuf-es')
 * would decode to U+FFFD there, and a hit would answer other text than the miss did. Such an
 * answer is not stored (an answer is served the same whichever way it was first produced), and
 * checking costs nothing for ASCII strings (their UTF-8 length is their length) and one scan of
 * the others, on the store path only; carrying surrogates through the cache would need a decoder
 * of our own on every hit.
 */
export function encodeCompletion(c: Completion): Uint8Array | undefined {
  // Fields this build does not know (a newer core's answer, over gRPC) are kept by protobuf-es only.
  if (c.$unknown || c.usage?.$unknown || c.blocks.some((b) => b.$unknown)) return Number.isNaN(completionSize(c, [])) ? undefined : toBinary(CompletionSchema, c);
  const sizes: number[] = [];
  const size = completionSize(c, sizes);
  if (Number.isNaN(size)) return undefined;
  const buf = Buffer.allocUnsafeSlow(size);
  const end = new Writer(buf, sizes).completion(c);
  if (end !== size) throw new Error(`encodeCompletion wrote ${end} bytes of ${size}`);
  return new Uint8Array(buf.buffer, buf.byteOffset, size);
}

/**
 * The byte length of encodeCompletion's payload of `c`, without writing it; NaN when it has none
 * (a string that is not well-formed).
 */
export function encodedCompletionBytes(c: Completion): number {
  if (c.$unknown || c.usage?.$unknown || c.blocks.some((b) => b.$unknown)) return encodeCompletion(c)?.byteLength ?? Number.NaN;
  return completionSize(c, []);
}

// Sizes are computed first (string byte lengths and message sizes pushed to `sizes` in the order
// they are written), then written in one pass into a buffer of exactly that size. A string that is
// not well-formed has size NaN, which every sum it enters carries to the answer's size.

const varintSize = (v: number): number => (v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : 5);

/** A uint32 or enum; a negative int32 is written as 10 bytes, as protobuf does. */
const intSize = (v: number): number => (v < 0 ? 10 : varintSize(v));

function stringSize(s: string, sizes: number[]): number {
  if (s === "") return 0;
  const n = Buffer.byteLength(s, "utf8");
  if (n !== s.length && !isWellFormed(s)) return NaN;
  sizes.push(n);
  return 1 + varintSize(n) + n;
}

function messageSize(n: number, sizes: number[], at: number): number {
  sizes[at] = n;
  return 1 + varintSize(n) + n;
}

function usageSize(u: Usage, sizes: number[]): number {
  const at = sizes.push(0) - 1;
  let n = 0;
  if (u.inputTokens !== 0) n += 1 + intSize(u.inputTokens);
  if (u.outputTokens !== 0) n += 1 + intSize(u.outputTokens);
  n += stringSize(u.extraJson, sizes);
  if (u.cacheReadTokens !== 0) n += 1 + intSize(u.cacheReadTokens);
  if (u.cacheWriteTokens !== 0) n += 1 + intSize(u.cacheWriteTokens);
  if (u.cacheWrite1hTokens !== 0) n += 1 + intSize(u.cacheWrite1hTokens);
  return messageSize(n, sizes, at);
}

function blockSize(b: ContentBlock, sizes: number[]): number {
  const at = sizes.push(0) - 1;
  let n = 0;
  if (b.type !== 0) n += 1 + intSize(b.type);
  n += stringSize(b.text, sizes);
  n += stringSize(b.toolCallId, sizes);
  n += stringSize(b.toolName, sizes);
  n += stringSize(b.toolInputJson, sizes);
  if (b.isError) n += 2;
  n += stringSize(b.rawJson, sizes);
  n += stringSize(b.extraJson, sizes);
  if (b.style !== 0) n += 1 + intSize(b.style);
  return messageSize(n, sizes, at);
}

function completionSize(c: Completion, sizes: number[]): number {
  let n = stringSize(c.id, sizes);
  n += stringSize(c.model, sizes);
  if (c.created !== 0) n += 1 + varintSize(c.created >>> 0);
  for (const b of c.blocks) n += blockSize(b, sizes);
  if (c.finishReason !== 0) n += 1 + intSize(c.finishReason);
  n += stringSize(c.stopSequence, sizes);
  if (c.usage) n += usageSize(c.usage, sizes);
  n += stringSize(c.costUsd, sizes);
  if (c.upstreamStyle !== 0) n += 1 + intSize(c.upstreamStyle);
  n += stringSize(c.extraJson, sizes);
  n += stringSize(c.messageExtraJson, sizes);
  n += stringSize(c.choiceExtraJson, sizes);
  return n;
}

class Writer {
  #at = 0;
  #next = 0;

  constructor(
    private readonly buf: Buffer,
    private readonly sizes: number[],
  ) {}

  completion(c: Completion): number {
    this.#string(1, c.id);
    this.#string(2, c.model);
    if (c.created !== 0) this.#int(3, c.created >>> 0);
    for (const b of c.blocks) this.#block(4, b);
    if (c.finishReason !== 0) this.#int(5, c.finishReason);
    this.#string(6, c.stopSequence);
    if (c.usage) this.#usage(7, c.usage);
    this.#string(8, c.costUsd);
    if (c.upstreamStyle !== 0) this.#int(9, c.upstreamStyle);
    this.#string(10, c.extraJson);
    this.#string(11, c.messageExtraJson);
    this.#string(12, c.choiceExtraJson);
    return this.#at;
  }

  #block(field: number, b: ContentBlock): void {
    this.#open(field);
    if (b.type !== 0) this.#int(1, b.type);
    this.#string(2, b.text);
    this.#string(3, b.toolCallId);
    this.#string(4, b.toolName);
    this.#string(5, b.toolInputJson);
    if (b.isError) this.#int(6, 1);
    this.#string(7, b.rawJson);
    this.#string(8, b.extraJson);
    if (b.style !== 0) this.#int(9, b.style);
  }

  #usage(field: number, u: Usage): void {
    this.#open(field);
    if (u.inputTokens !== 0) this.#int(1, u.inputTokens);
    if (u.outputTokens !== 0) this.#int(2, u.outputTokens);
    this.#string(3, u.extraJson);
    if (u.cacheReadTokens !== 0) this.#int(4, u.cacheReadTokens);
    if (u.cacheWriteTokens !== 0) this.#int(5, u.cacheWriteTokens);
    if (u.cacheWrite1hTokens !== 0) this.#int(6, u.cacheWrite1hTokens);
  }

  /** A length-delimited message's tag and length (its size was worked out in the first pass). */
  #open(field: number): void {
    this.buf[this.#at++] = (field << 3) | 2;
    this.#varint(this.sizes[this.#next++]!);
  }

  #string(field: number, s: string): void {
    if (s === "") return;
    const n = this.sizes[this.#next++]!;
    this.buf[this.#at++] = (field << 3) | 2;
    this.#varint(n);
    // All ASCII when the byte length is the string's length: latin1 writes the same bytes, faster.
    this.#at += this.buf.write(s, this.#at, n, n === s.length ? "latin1" : "utf8");
  }

  #int(field: number, v: number): void {
    this.buf[this.#at++] = field << 3;
    if (v >= 0) return this.#varint(v);
    // A negative int32 is sign-extended to 64 bits: ten bytes.
    let lo = v >>> 0;
    for (let i = 0; i < 4; i++) {
      this.buf[this.#at++] = (lo & 0x7f) | 0x80;
      lo >>>= 7;
    }
    this.buf[this.#at++] = (lo & 0x0f) | 0x70 | 0x80;
    for (let i = 0; i < 4; i++) this.buf[this.#at++] = 0xff;
    this.buf[this.#at++] = 0x01;
  }

  #varint(v: number): void {
    while (v > 0x7f) {
      this.buf[this.#at++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[this.#at++] = v;
  }
}
