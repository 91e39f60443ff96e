/**
 * The built-in demo provider's behaviour, shared by its two wire styles. It answers without a model:
 * the reply echoes the last user text, token counts are estimated from characters, and directives in
 * the last user text script failures for trying the gateway's error paths (documented in the README):
 *
 *   [[fake:status=NNN]]   answer with that HTTP status and the style's error body
 *   [[fake:retry=S]]      with a scripted status: send `retry-after: S` and `retry-after-ms`, as
 *                         providers do on 429, 503 and 529
 *   [[fake:delay=MS]]     wait MS milliseconds before the response headers
 *   [[fake:stall]]        stream: send the first events, then nothing (an idle upstream)
 *   [[fake:drop]]         stream: send the first events, then cut the connection
 *   [[fake:tool]]         when tools are given, call the first one instead of answering in text
 *   [[fake:chunks=N]]     stream the reply in N pieces (default: one piece per word)
 */
import type { ServerResponse } from "node:http";
import { drainedOrClosed } from "../drained.js";

export interface FakeDirectives {
  status?: number;
  retryAfterSeconds?: number;
  delayMs?: number;
  stall: boolean;
  drop: boolean;
  tool: boolean;
  chunks?: number;
}

const re = /\[\[fake:([a-z]+)(?:=(\d+))?\]\]/g;

export function parseDirectives(text: string): FakeDirectives {
  const d: FakeDirectives = { stall: false, drop: false, tool: false };
  for (const m of text.matchAll(re)) {
    const n = m[2] === undefined ? undefined : Number(m[2]);
    if (m[1] === "status") d.status = n;
    else if (m[1] === "retry") d.retryAfterSeconds = n;
    else if (m[1] === "delay") d.delayMs = n;
    else if (m[1] === "stall") d.stall = true;
    else if (m[1] === "drop") d.drop = true;
    else if (m[1] === "tool") d.tool = true;
    else if (m[1] === "chunks") d.chunks = n;
  }
  return d;
}

/** Rough token estimate: one token per 4 characters, at least 1 for non-empty text. */
/** The retry guidance headers of a scripted failure (none unless `[[fake:retry=S]]` was given). */
export const retryHeaders = (d: FakeDirectives): Record<string, string> =>
  d.retryAfterSeconds === undefined ? {} : { "retry-after": String(d.retryAfterSeconds), "retry-after-ms": String(d.retryAfterSeconds * 1000) };

export const countTokens = (text: string): number => (text.length === 0 ? 0 : Math.max(1, Math.ceil(text.length / 4)));

/**
 * The reply text for the last user text, cut when given `maxTokens` so that it counts at most that
 * many of the fake's tokens (countTokens: 4 characters each), as a provider never reports more
 * output tokens than max_tokens; at a word's end where one falls within the cut. `truncated` is
 * true when the cut happened (finish reason length / max_tokens).
 */
export function fakeReply(lastUserText: string, maxTokens?: number): { text: string; truncated: boolean } {
  const clean = lastUserText.replace(re, "").trim();
  const full = `Echo: ${clean || "(empty)"}`.split(/\s+/).join(" ");
  if (maxTokens !== undefined && countTokens(full) > maxTokens) {
    const cut = full.slice(0, maxTokens * 4);
    const space = cut.lastIndexOf(" ");
    return { text: space > 0 ? cut.slice(0, space) : cut, truncated: true };
  }
  return { text: full, truncated: false };
}

/** Splits a reply into stream pieces: `n` pieces, or one per word (keeping the spaces). */
export function splitPieces(text: string, n?: number): string[] {
  return [...piecesOf(text, n)];
}

/** `splitPieces`, one piece at a time (a long echo's pieces are made as they are written). */
export function* piecesOf(text: string, n?: number): Generator<string> {
  if (n !== undefined && n > 0) {
    const size = Math.ceil(text.length / n) || 1;
    // Between characters, as a provider's deltas are: never between the halves of a surrogate pair.
    for (let i = 0; i < text.length; ) {
      let end = Math.min(i + size, text.length);
      const last = text.charCodeAt(end - 1);
      if (last >= 0xd800 && last <= 0xdbff && end < text.length) end++;
      yield text.slice(i, end);
      i = end;
    }
    return;
  }
  if (text === "") yield ""; // one empty piece, as splitting "" on spaces gives
  for (let i = 0; i < text.length; ) {
    const space = text.indexOf(" ", i);
    const end = space < 0 ? text.length : space + 1;
    yield text.slice(i, end);
    i = end;
  }
}

/** The first `n` events of a stream, joined (what a stalled or dropped stream sends). */
export function firstEvents(events: Iterable<string>, n: number): string {
  let out = "";
  for (const e of events) {
    if (n-- <= 0) break;
    out += e;
  }
  return out;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A stream is written in parts of about this many characters; a shorter one in one write. */
const PART_CHARS = 16 * 1024;

/**
 * Writes a stream's events, made as they are written, and ends the response. A long one (an echo
 * of a large prompt) is written as its reader takes it, as a provider streams: written whole, all
 * of it would sit in this process's memory while a slow reader (the gateway pausing for its own
 * slow client) took it, and in `--demo` that is the gateway's own process.
 */
export async function writeEvents(res: ServerResponse, events: Iterable<string>): Promise<void> {
  let part = "";
  for (const e of events) {
    part += e;
    if (part.length < PART_CHARS) continue;
    if (res.destroyed) return;
    const more = res.write(part);
    part = "";
    if (!more) await drainedOrClosed(res);
  }
  if (!res.destroyed) res.end(part);
}
