/** Small helpers for carrying JSON fields the canonical model does not name. */

/** A plain JSON object. */
export type JsonObject = Record<string, unknown>;

export const isObject = (v: unknown): v is JsonObject =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Returns the fields of `obj` not in `known`, as a JSON object text, or "" when there are none.
 * `dropNull` leaves out null values as well: for objects whose unnamed fields are usually null (a
 * choice's `logprobs`), which the renderer writes as null anyway. Never mutates `obj`.
 */
export function extraJson(obj: JsonObject, known: ReadonlySet<string>, dropNull = false): string {
  let extra: JsonObject | undefined;
  for (const k in obj) {
    const v = obj[k];
    if (!known.has(k) && v !== undefined && !(dropNull && v === null)) setOwn<unknown>((extra ??= {}), k, v);
  }
  return extra ? JSON.stringify(extra) : "";
}

/** A JSON text's object, or undefined when the text is not JSON or not an object (a raw part's JSON). */
export function parseObject(json: string): JsonObject | undefined {
  try {
    const v: unknown = JSON.parse(json);
    return isObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Parses a JSON body an upstream sent, skipping a leading byte order mark (U+FEFF) as `fetch`'s
 * `json()` does, so an answer the official SDKs read from a provider is read here too.
 */
export const parseUpstreamJson = (text: string): unknown => JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);

/** Parses an `extra_json` text into an object ({} when empty). */
export const parseExtra = (json: string): JsonObject => (json ? (JSON.parse(json) as JsonObject) : {});

/** An `extra_json` text with `key` set to `value`; the text as it is when `value` is undefined. */
export const withExtraField = (extra: string, key: string, value: unknown): string =>
  value === undefined ? extra : JSON.stringify({ ...parseExtra(extra), [key]: value });

/**
 * The deepest nesting of arrays and objects accepted in JSON from a client: a request body, the
 * `X-Svc-Metadata` header, a JSON text on the core port (the value itself is level 1). No real
 * provider request comes near it (a tool's JSON Schema nests a few levels a property), while
 * thousands of levels would overflow the stack of the recursive code that writes JSON back out
 * (JSON.stringify, the cache key) and fail as an internal error.
 */
export const MAX_JSON_DEPTH = 128;

/**
 * The most items a JSON text from a client may hold in all (a request body, a JSON text on the core
 * port), counting each `[`, `{`, `:` and `,` outside strings: an array or object counts one, an
 * array element one (its comma; the first none), an object member two (its colon and comma).
 * Each costs the gateway from a fraction of a microsecond (a number) to a few (an object's key) to
 * parse and write out again (the body, its cache key, the upstream's body), so without a bound a
 * 4 MiB body of `[]`, `{}` or of one object's keys held the event loop, and every other request,
 * for seconds. Real requests stay far below it: a 5,000-message conversation holds about 25,000.
 */
export const MAX_JSON_ITEMS = 200_000;

/** What an item is, as the refusals of a text past MAX_JSON_ITEMS say it. */
export const JSON_ITEMS_COUNTED = "each `[`, `{`, `:` and `,` outside strings: an array or object counts one, an array element one, an object member two";

/**
 * Reads a JSON text's structure before it is parsed: "depth" when it nests arrays and objects more
 * than `maxDepth` levels (the text itself is level 1), "items" when it holds more than `maxItems`
 * (see MAX_JSON_ITEMS), undefined otherwise. String contents are skipped (a jump to the next
 * unescaped quote), so a text of large strings (base64 images) costs a few searches. The text need
 * not be valid JSON: what it is otherwise is JSON.parse's to say. Texts too short to reach either
 * limit (each level and item takes two characters) are not read at all.
 */
export function jsonTextBeyond(text: string, maxDepth = MAX_JSON_DEPTH, maxItems = MAX_JSON_ITEMS): "depth" | "items" | undefined {
  const n = text.length;
  if (n < 2 * (Math.min(maxDepth, maxItems) + 1)) return undefined;
  let depth = 0;
  let items = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      let j = text.indexOf('"', i + 1);
      while (j !== -1 && escaped(text, j)) j = text.indexOf('"', j + 1);
      if (j === -1) return undefined;
      i = j;
    } else if (c === 91 /* [ */ || c === 123 /* { */) {
      if (++depth > maxDepth) return "depth";
      if (++items > maxItems) return "items";
    } else if (c === 93 /* ] */ || c === 125 /* } */) {
      depth--;
    } else if (c === 44 /* , */ || c === 58 /* : */) {
      if (++items > maxItems) return "items";
    }
  }
  return undefined;
}

/** Whether the character at `at` follows an odd number of backslashes. */
function escaped(text: string, at: number): boolean {
  let k = at - 1;
  while (k >= 0 && text.charCodeAt(k) === 92 /* \ */) k--;
  return (at - 1 - k) % 2 === 1;
}

/**
 * `obj[key] = value`, as an own property also when `key` is `__proto__`, which plain assignment
 * takes as the object's prototype (a string is then dropped without a word). For objects whose
 * keys a client chose (X-Svc-Metadata, metadata filters); JSON.parse and the protobuf runtime
 * already keep such a key as an ordinary one.
 */
export function setOwn<V>(obj: Record<string, V>, key: string, value: V): void {
  if (key === "__proto__") Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
  else obj[key] = value;
}

/**
 * A number literal JSON.parse may have read as ±Infinity (1.8e308 and beyond): one with an exponent
 * of two digits or more, or 300 digits in a row (its whole part then; with an exponent of one digit
 * at most, it takes 300 to pass 1e308: `9` and 299 zeros, `e9`). A number of more whole digits
 * with a two-digit exponent (`1` and 250 zeros, `e99`) passes too, so an exponent of three digits
 * alone would not do. Texts without one (nearly all) skip the walk below, which reads the parsed
 * values themselves. The run is only tried where one starts (the lookbehind): tried at every
 * digit, long runs made the test quadratic (3.5 s on a 4 MB body of 308-digit numbers, against
 * 41 ms so).
 */
const MAY_OVERFLOW = /\d[eE]\+?\d{2}|(?<!\d)\d{300}/;

/**
 * Where a parsed JSON text holds a number too large for a double (JSON.parse reads `1e400` as
 * Infinity, which JSON.stringify writes as `null`): the path of the first one (`a.b[2]`, "" for the
 * text itself), or undefined when it holds none. `text` is the JSON text, `value` its parse.
 */
export function overflowedNumberAt(text: string, value: unknown): string | undefined {
  return MAY_OVERFLOW.test(text) ? overflowAt(value, "") : undefined;
}

/** The path of the first non-finite number in `v`, or undefined. */
function overflowAt(v: unknown, path: string): string | undefined {
  if (typeof v === "number") return Number.isFinite(v) ? undefined : path;
  if (typeof v !== "object" || v === null) return undefined;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const at = overflowAt(v[i], `${path}[${i}]`);
      if (at !== undefined) return at;
    }
    return undefined;
  }
  const obj = v as Record<string, unknown>;
  for (const k in obj) {
    const at = overflowAt(obj[k], path ? `${path}.${k}` : k);
    if (at !== undefined) return at;
  }
  return undefined;
}
