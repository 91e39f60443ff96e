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
import { isObject, type JsonObject } from "../core/json.js";
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

/**
 * The reply when the request asks for structured output (`format`: a chat completion's
 * `response_format`, or a message's `output_config.format`): JSON an SDK's `parse()` accepts. For
 * `json_schema`, a value of the schema, each string in it the echo; for `json_object`, `{"echo": ...}`.
 * Undefined for any other format (plain text). It is never cut at max_tokens (JSON cut short would
 * not parse).
 */
export function structuredReply(format: unknown, lastUserText: string): string | undefined {
  if (!isObject(format)) return undefined;
  const echo = fakeReply(lastUserText).text;
  if (format.type === "json_object") return JSON.stringify({ echo });
  if (format.type !== "json_schema") return undefined;
  // chat completions: {type, json_schema: {name, schema}}; messages: {type, schema}.
  const schema = isObject(format.json_schema) ? format.json_schema.schema : format.schema;
  return JSON.stringify(valueOf(schema, isObject(schema) ? schema : {}, echo, 0, { values: MAX_VALUES, chars: MAX_CHARS }));
}

/**
 * Bounds on the value `structuredReply` builds, all of it together: a schema whose properties refer
 * back to its root (12 of them: 12^8 values), or arrays nested deep, would otherwise build more than
 * the process holds (the demo provider runs in the gateway's process). Past them a value is null, a
 * string empty.
 */
const MAX_VALUES = 10_000;
const MAX_CHARS = 1 << 20;

/** `v` (a schema's const or enum value) when its JSON fits in what is left, else null. */
function within(v: unknown, left: { chars: number }): unknown {
  const size = JSON.stringify(v)?.length ?? 0;
  if (size > left.chars) return null;
  left.chars -= size;
  return v;
}

/** A value of JSON Schema `schema` (the subset structured outputs use), `root` for its $refs, within `left`. */
function valueOf(schema: unknown, root: JsonObject, echo: string, depth: number, left: { values: number; chars: number }): unknown {
  if (!isObject(schema) || depth > 16 || left.values <= 0) return null;
  left.values--;
  if (typeof schema.$ref === "string") {
    const path = schema.$ref.replace(/^#\/?/, "").split("/").filter(Boolean);
    let at: unknown = root;
    for (const part of path) at = isObject(at) ? at[part.replace(/~1/g, "/").replace(/~0/g, "~")] : undefined;
    return valueOf(at, root, echo, depth + 1, left);
  }
  if ("const" in schema) return within(schema.const, left);
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return within(schema.enum[0], left);
  for (const alt of [schema.anyOf, schema.oneOf, schema.allOf]) {
    if (Array.isArray(alt) && alt.length > 0) return valueOf(alt.find((a) => !(isObject(a) && a.type === "null")) ?? alt[0], root, echo, depth + 1, left);
  }
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  const type = types.find((t) => t !== "null") ?? types[0] ?? (isObject(schema.properties) ? "object" : undefined);
  switch (type) {
    case "object": {
      const out: JsonObject = {};
      const props = isObject(schema.properties) ? schema.properties : {};
      for (const [k, v] of Object.entries(props)) {
        if (left.values <= 0) break;
        out[k] = valueOf(v, root, echo, depth + 1, left) as JsonObject[string];
      }
      return out;
    }
    case "array": {
      const min = typeof schema.minItems === "number" ? Math.min(schema.minItems, 8) : 0;
      return Array.from({ length: Math.max(min, 1) }, () => valueOf(schema.items, root, echo, depth + 1, left));
    }
    case "string": {
      if (echo.length > left.chars) return "";
      left.chars -= echo.length;
      return echo;
    }
    case "integer":
    case "number":
      return typeof schema.minimum === "number" ? (type === "integer" ? Math.ceil(schema.minimum) : schema.minimum) : 0;
    case "boolean":
      return false;
    default:
      return null;
  }
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
