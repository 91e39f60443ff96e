/** Small helpers for carrying JSON fields the canonical model does not name. */

/** A plain JSON object. */
export type JsonObject = Record<string, unknown>;

export const isObject = (v: unknown): v is JsonObject =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Returns the fields of `obj` not in `known`, as a JSON object text, or "" when there are none.
 * Never mutates `obj`.
 */
export function extraJson(obj: JsonObject, known: ReadonlySet<string>): string {
  let extra: JsonObject | undefined;
  for (const k in obj) {
    if (!known.has(k) && obj[k] !== undefined) (extra ??= {})[k] = obj[k];
  }
  return extra ? JSON.stringify(extra) : "";
}

/** Parses an `extra_json` text into an object ({} when empty). */
export const parseExtra = (json: string): JsonObject => (json ? (JSON.parse(json) as JsonObject) : {});

const noExtra: JsonObject = Object.freeze({});
/** Extras texts whose read-only objects are kept, and the longest text kept. */
const READ_EXTRAS_MAX = 512;
const READ_EXTRA_MAX_CHARS = 2048;
const readExtras = new Map<string, JsonObject>();

/**
 * Parses an `extra_json` text for reading only (rendering an answer, which spreads it): the object
 * is deeply frozen and shared by every caller with the same text. An upstream sends the same extras
 * on most answers (system_fingerprint, service_tier, zero token details), so rendering does not
 * parse them again each time. `parseExtra` gives an object to change.
 */
export function readExtra(json: string): JsonObject {
  if (!json) return noExtra;
  let v = readExtras.get(json);
  if (v === undefined) {
    v = deepFreeze(JSON.parse(json) as JsonObject);
    if (json.length <= READ_EXTRA_MAX_CHARS) {
      if (readExtras.size >= READ_EXTRAS_MAX) readExtras.clear();
      readExtras.set(json, v);
    }
  }
  return v;
}

function deepFreeze<T>(v: T): T {
  if (typeof v === "object" && v !== null && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const k of Object.keys(v)) deepFreeze((v as Record<string, unknown>)[k]);
  }
  return v;
}
