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
    if (!known.has(k) && v !== undefined && !(dropNull && v === null)) (extra ??= {})[k] = v;
  }
  return extra ? JSON.stringify(extra) : "";
}

/** Parses an `extra_json` text into an object ({} when empty). */
export const parseExtra = (json: string): JsonObject => (json ? (JSON.parse(json) as JsonObject) : {});
