import { invalidRequest } from "./errors.js";
import { LIMITS } from "./telemetry/log-row.js";
import { cutText } from "./text.js";
import { isObject, JSON_ITEMS_COUNTED, type JsonObject, jsonTextBeyond, MAX_JSON_DEPTH, MAX_JSON_ITEMS } from "./json.js";

/**
 * Field checks shared by the client codecs. Each throws the core's 400 error with a stable code and a
 * message that names the field by its path (e.g. `messages[2].content`):
 *   missing_required_field  a required field is absent or null
 *   invalid_type            a field has the wrong JSON type
 *   invalid_value           a field has the right type but a value out of range or not allowed
 *   unsupported_parameter   a parameter the gateway does not support
 */
const typeName = (v: unknown): string => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

export const fail = (code: string, message: string): never => {
  throw invalidRequest(code, message);
};

export const missing = (path: string): never => fail("missing_required_field", `\`${path}\` is required.`);

export const wrongType = (path: string, expected: string, v: unknown): never =>
  fail("invalid_type", `\`${path}\` must be ${expected}, got ${typeName(v)}.`);

/** The request body itself must be a JSON object. */
export function requireBody(body: unknown): JsonObject {
  if (!isObject(body)) return fail("invalid_body", `The request body must be a JSON object, got ${typeName(body)}.`);
  return body;
}

export function requireString(obj: JsonObject, key: string, path = key): string {
  const v = obj[key];
  if (v === undefined || v === null) return missing(path);
  if (typeof v !== "string") return wrongType(path, "a string", v);
  return v;
}

export function optionalString(obj: JsonObject, key: string, path = key): string | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") return wrongType(path, "a string", v);
  return v;
}

export function requireArray(obj: JsonObject, key: string, path = key): unknown[] {
  const v = obj[key];
  if (v === undefined || v === null) return missing(path);
  if (!Array.isArray(v)) return wrongType(path, "an array", v);
  return v;
}

export function optionalArray(obj: JsonObject, key: string, path = key): unknown[] | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) return wrongType(path, "an array", v);
  return v;
}

export function requireObject(v: unknown, path: string): JsonObject {
  // A null field is a field left out; a null item of an array (`messages[0]`) is there, mistyped.
  if (v === undefined || (v === null && !path.endsWith("]"))) return missing(path);
  if (!isObject(v)) return wrongType(path, "an object", v);
  return v;
}

export function optionalBoolean(obj: JsonObject, key: string, path = key): boolean | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") return wrongType(path, "a boolean", v);
  return v;
}

/**
 * A number as a message shows it. JSON.parse reads one too large for a double (`1e309`) as
 * Infinity: a value out of range, shown as such rather than as "Infinity" or its type.
 */
export const shownNumber = (v: number): string =>
  Number.isFinite(v) ? String(v) : `${v < 0 ? "a negative number" : "a number"} too large to represent`;

/** A finite number within [min, max]. */
export function optionalNumberInRange(obj: JsonObject, key: string, min: number, max: number, path = key): number | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number") return wrongType(path, "a number", v);
  if (!Number.isFinite(v)) return fail("invalid_value", `\`${path}\` must be a finite number between ${min} and ${max}, got ${shownNumber(v)}.`);
  if (v < min || v > max) return fail("invalid_value", `\`${path}\` must be between ${min} and ${max}, got ${v}.`);
  return v;
}

/** An integer within [min, max] (max defaults to the int32 range the core carries). */
export function optionalIntegerInRange(obj: JsonObject, key: string, min: number, max = 2_147_483_647, path = key): number | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number") return wrongType(path, "an integer", v);
  if (!Number.isFinite(v)) return fail("invalid_value", `\`${path}\` must be an integer between ${min} and ${max}, got ${shownNumber(v)}.`);
  if (!Number.isInteger(v)) return fail("invalid_type", `\`${path}\` must be an integer, got ${v}.`);
  if (v < min || v > max) return fail("invalid_value", `\`${path}\` must be an integer between ${min} and ${max}, got ${v}.`);
  return v;
}

export function requireIntegerInRange(obj: JsonObject, key: string, min: number, max = 2_147_483_647, path = key): number {
  const v = optionalIntegerInRange(obj, key, min, max, path);
  return v === undefined ? missing(path) : v;
}

/** A value from a fixed set of strings. */
export function requireOneOf<T extends string>(obj: JsonObject, key: string, allowed: readonly T[], path = key): T {
  const v = requireString(obj, key, path);
  if (!(allowed as readonly string[]).includes(v)) {
    return fail("invalid_value", `\`${path}\` must be one of ${allowed.map((a) => `'${a}'`).join(", ")}, got '${v}'.`);
  }
  return v as T;
}

/**
 * Refuses a JSON text a client sent inside a request (not the body itself) that is nested deeper
 * than MAX_JSON_DEPTH (json_too_deep) or holds more than MAX_JSON_ITEMS items (json_too_complex),
 * naming it by `path`, before it is parsed: as a body is bounded (core/json.ts).
 */
export function refuseOversizedJson(text: string, path: string): void {
  const beyond = jsonTextBeyond(text);
  if (beyond === "depth") fail("json_too_deep", `\`${path}\` nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep.`);
  if (beyond === "items") fail("json_too_complex", `\`${path}\` holds more than ${MAX_JSON_ITEMS} JSON items in all (${JSON_ITEMS_COUNTED}).`);
}

/**
 * Holds a request's metadata (key, value text pairs) to what a log keeps (LIMITS), so that nothing
 * sent is logged cut or dropped and then not found by a filter on it: at most LIMITS.metadataPairs
 * keys, none empty or longer than LIMITS.metadataKey, no value longer than LIMITS.metadataValue.
 * `label` names it in the refusal (X-Svc-Metadata on the HTTP endpoints, `metadata` on the core port).
 */
export function checkMetadataLimits(label: string, pairs: ReadonlyArray<readonly [string, string]>): void {
  if (pairs.length > LIMITS.metadataPairs) fail("invalid_metadata", `${label} holds ${pairs.length} keys; at most ${LIMITS.metadataPairs} are logged.`);
  for (const [k, v] of pairs) {
    if (!k) fail("invalid_metadata", `${label} keys must not be empty.`);
    if (k.length > LIMITS.metadataKey) fail("invalid_metadata", `${label} keys must be at most ${LIMITS.metadataKey} characters.`);
    if (v.length > LIMITS.metadataValue) fail("invalid_metadata", `${label} values must be at most ${LIMITS.metadataValue} characters (\`${cutText(k, 64)}\` has ${v.length}).`);
  }
}
