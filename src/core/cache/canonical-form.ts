/**
 * The canonical form of JSON values, written only to be hashed: the same value always gives the
 * same text, whatever the key order or number spelling it arrived in, and two different values
 * never give the same text.
 *
 * It is JSON's grammar with one change: a string is written as `"<length>:<characters>` (its length
 * in UTF-16 units, then the characters as they are) instead of quoted and escaped. Each token still
 * starts with a character that tells its type, and a string's end is known from its length, so the
 * text decodes one way only; and it skips JSON.stringify's escaping scan, which costs ~3 ns a
 * character (a long conversation, an image in base64) where a length costs nothing.
 */

/** Frames a string: its length, then the characters verbatim. */
export const frame = (s: string): string => `"${s.length}:${s}`;

/**
 * Writes a parsed JSON value in canonical form: object keys sorted (by UTF-16 code units, like
 * `Array.prototype.sort`) at every depth, arrays in order, numbers as JSON.stringify writes them
 * (so `1`, `1.0` and `1e0` are one value). It writes text rather than building sorted copies: a
 * copy would lose an own `__proto__` key (assigning one sets the prototype instead).
 */
export function writeCanonical(v: unknown): string {
  if (typeof v === "string") return frame(v);
  if (v === null || typeof v !== "object") return typeof v === "number" || typeof v === "boolean" ? JSON.stringify(v) : "null";
  if (Array.isArray(v)) {
    let out = "[";
    for (let i = 0; i < v.length; i++) out += (i ? "," : "") + writeCanonical(v[i]);
    return `${out}]`;
  }
  const obj = v as Record<string, unknown>;
  let out = "{";
  let first = true;
  for (const k of Object.keys(obj).sort()) {
    if (obj[k] === undefined) continue;
    out += `${first ? "" : ","}${frame(k)}:${writeCanonical(obj[k])}`;
    first = false;
  }
  return `${out}}`;
}

/**
 * A JSON text as a value to write canonically: "" and an empty object (the canonical model's two
 * spellings of "no extra fields") become null. A text that does not parse, which the facades never
 * produce, is kept as the string itself so the key still depends on it.
 */
export function parseForKey(text: string): unknown {
  if (!text) return null;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return text;
  }
  return isEmptyObject(v) ? null : v;
}

/** The canonical form of a JSON text (see parseForKey). */
export const canonicalText = (text: string): string => writeCanonical(parseForKey(text));

const isEmptyObject = (v: unknown): boolean =>
  v !== null && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 0;
