import { isUtf8 } from "node:buffer";
import type { IncomingMessage } from "node:http";
import { apiError, invalidApiKey, invalidRequest, withRetryGuidance } from "../../core/errors.js";
import type { BodyBudget, BodyRead } from "./body-budget.js";
import { isObject, JSON_ITEMS_COUNTED, jsonTextBeyond, MAX_JSON_ITEMS, MAX_JSON_DEPTH, overflowedNumberAt, setOwn } from "../../core/json.js";
import { startsWithCalendarDate } from "../../core/calendar.js";
import { bodyBrokenOff, headerLines, refuseRepeatedAuthorization } from "../http-errors.js";
import { BETA_NAME, MAX_BETAS, MAX_USER_ID_CHARS } from "../../core/proxy/request-rules.js";
import { checkMetadataLimits } from "../../core/validate.js";

/**
 * Reading the parts of a gateway request that are not the provider-style body: the service key,
 * the JSON body within the size limit, and the X-Svc-* and provider-version headers.
 */

/**
 * The service key from `X-Svc-Api-Key` (spec 5.2). So that the official SDKs work with only their
 * `apiKey` option set, a `svc_sk_` key is also taken from `Authorization: Bearer` (the openai SDK)
 * or `x-api-key` (the anthropic SDK) when X-Svc-Api-Key is absent.
 */
export function apiKeyOf(req: IncomingMessage): string {
  const direct = req.headers["x-svc-api-key"];
  if (typeof direct === "string" && direct) return direct.trim();
  const bearer = req.headers.authorization;
  if (bearer !== undefined) refuseRepeatedAuthorization(req);
  if (bearer && /^Bearer\s+svc_sk_/i.test(bearer)) return bearer.replace(/^Bearer\s+/i, "").trim();
  const xApiKey = req.headers["x-api-key"];
  if (typeof xApiKey === "string" && xApiKey.startsWith("svc_sk_")) return xApiKey.trim();
  // A provider's own key where the SDK puts it (the likeliest mistake) is a wrong key, not a missing one.
  if (bearer || xApiKey) {
    throw invalidApiKey(`Invalid API key: the ${bearer ? "Authorization" : "x-api-key"} header holds a key that is not a service key (svc_sk_live_… or svc_sk_test_…); send the service key there or in X-Svc-Api-Key.`);
  }
  throw invalidApiKey("Missing API key: send the service key in the X-Svc-Api-Key header.");
}

/** A request body: its text as sent and its parsed value. */
export interface JsonBody {
  text: string;
  value: unknown;
}

/**
 * Parses a body read by `readBodyText` (apart, so a body seen before can skip it: hit-memo.ts).
 * A body nested deeper than MAX_JSON_DEPTH, or holding more than MAX_JSON_ITEMS items, is refused
 * from its text, before the parse it would stall (core/json.ts).
 */
export function parseJsonBody(text: string): JsonBody {
  const beyond = jsonTextBeyond(text);
  if (beyond === "depth") {
    throw invalidRequest("json_too_deep", `The request body nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep.`);
  }
  if (beyond === "items") {
    throw invalidRequest("json_too_complex", `The request body holds more than ${MAX_JSON_ITEMS} JSON items in all (${JSON_ITEMS_COUNTED}).`);
  }
  try {
    return { text, value: JSON.parse(text) };
  } catch (e) {
    // The parser's own words quote the mark as an invisible character.
    if (text.charCodeAt(0) === 0xfeff) throw invalidRequest("invalid_json", "The request body starts with a byte order mark (bytes EF BB BF), which JSON bodies must not have: send the body without it.");
    throw invalidRequest("invalid_json", `The request body is not valid JSON: ${(e as Error).message}`);
  }
}

/**
 * Refuses a body holding a number too large for a double anywhere (JSON.parse reads `1e400` as
 * Infinity, and writing the body out again would send the upstream `null` in its place: a field
 * passed through, a tool's schema or input). The fields the codecs name are checked first, with
 * their own messages; this catches every other place. `text` is the body's text, `value` its parse.
 */
export function refuseOverflowedNumbers(text: string, value: unknown): void {
  const path = overflowedNumberAt(text, value);
  if (path !== undefined) {
    throw invalidRequest("invalid_value", `\`${path || "(body)"}\` is a number too large to represent (beyond ±1.8e308).`);
  }
}

/**
 * The error of a request whose Content-Type is not JSON, or whose body is sent encoded
 * (Content-Encoding other than identity: the gateway does not decode bodies, and would otherwise
 * read gzip bytes as text); undefined when it is plain JSON.
 */
export function contentTypeError(req: IncomingMessage): Error | undefined {
  const type = req.headers["content-type"] ?? "";
  if (!/^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i.test(type)) {
    return invalidRequest("invalid_content_type", `Content-Type must be application/json, got '${headerText(type) || "(none)"}'.`);
  }
  const encoding = req.headers["content-encoding"];
  if (encoding !== undefined && !/^\s*(identity\s*)?$/i.test(encoding)) {
    return invalidRequest("unsupported_content_encoding", `Content-Encoding '${headerText(encoding)}' is not supported: send the body uncompressed.`);
  }
  return undefined;
}

/** A body read as UTF-8 text, and whether its bytes were UTF-8 (if not, each bad sequence is U+FFFD in `text`). */
export interface BodyText {
  text: string;
  utf8: boolean;
}

/** The refusal of a body whose bytes are not UTF-8, as JSON must be (RFC 8259 8.1). */
export const notUtf8 = () =>
  invalidRequest("invalid_json", "The request body is not valid UTF-8: JSON must be sent as UTF-8 (RFC 8259), whatever charset the Content-Type names.");

/**
 * Reads the body as text (UTF-8, whatever its Content-Type: contentTypeError() judges that),
 * refusing bodies over `maxBytes`. Bytes that are not UTF-8 are read as U+FFFD and flagged, so the
 * caller can refuse the body and still log what came. With a `budget`, the body counts in it while
 * it comes in, and is refused 503 `gateway_overloaded` if the budget drops it (body-budget.ts).
 */
export function readBodyText(req: IncomingMessage, maxBytes: number, budget?: BodyBudget): Promise<BodyText> {
  const declared = Number(req.headers["content-length"] ?? NaN);
  if (declared > maxBytes) throw tooLarge(maxBytes);
  // Events, not `for await`: the stream's async iterator costs more than the rest of the read.
  return new Promise((resolve, reject) => {
    let chunks: Buffer[] = [];
    let size = 0;
    // Opened at the body's second part: most bodies come whole in one read of the socket (up to
    // 64 KiB), and those cost the budget nothing; what one part holds is bounded as a request's
    // headers are.
    let account: BodyRead | undefined;
    // Leaves the budget. A body whose answer went before it was whole (a refusal that came first:
    // a key used lately and deleted since, whose body was being read while it was verified) gets
    // neither 'end' nor 'error' when its connection then closes: that close is waited for too.
    const socket = req.socket;
    const leave = () => {
      if (!account) return;
      account.close();
      socket.off("close", leave);
    };
    // Set once the body is refused (too large, or dropped by the budget): its end is then no answer.
    let stopped = false;
    // Stops reading: the rest of the body is drained unread so the connection stays usable.
    const stop = (err: Error) => {
      stopped = true;
      leave();
      req.off("data", onData);
      req.resume();
      chunks = [];
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) return stop(tooLarge(maxBytes));
      chunks.push(chunk);
      if (account) account.take(chunk.length);
      else if (budget && chunks.length === 2) {
        account = budget.open(() => stop(bodiesOverBudget()));
        socket.once("close", leave);
        account.take(size);
      }
    };
    req.on("data", onData);
    // A body that broke off (the client left, or node:http answered its socket: timeout, bad framing):
    // what had come is kept with the error, for the request's log. Every body ends so, or whole
    // ('end'), or refused, or with its connection after its answer: its account is closed in each.
    req.once("error", () => {
      leave();
      if (stopped) return;
      const err = bodyBrokenOff(req.socket);
      partialBodies.set(err, Buffer.concat(chunks).toString("utf8"));
      reject(err);
    });
    req.once("end", () => {
      leave();
      if (stopped) return;
      const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      resolve({ text: bytes.toString("utf8"), utf8: isUtf8(bytes) });
    });
  });
}

/** The part of a body that broke off, by the error `readBodyText` gave for it. */
const partialBodies = new WeakMap<object, string>();

/** What had come of a body before it broke off, when `err` is `readBodyText`'s error for it. */
export const partialBodyOf = (err: unknown): string | undefined => (typeof err === "object" && err !== null ? partialBodies.get(err) : undefined);

/** A body the gateway dropped as it came in, the bodies then coming in holding more than their budget. */
const bodiesOverBudget = () =>
  withRetryGuidance(apiError(503, "api_error", "gateway_overloaded", "The gateway is holding more request bodies than it can right now, and this one, the largest coming in, was dropped; retry shortly."), { "retry-after": "1" });

const tooLarge = (max: number) => invalidRequest("request_too_large", `The request body is larger than the limit of ${max} bytes.`);

/** A byte that is not ASCII, in a header value as Node gives it (one character per byte). */
const NON_ASCII = /[\x80-\xff]/;

/**
 * A header value as the client wrote it. Node reads header bytes as latin1, one character per byte,
 * so the raw UTF-8 that curl and most clients send for non-ASCII text arrives as mojibake ("Ã©" for
 * "é"): a value with a byte over 0x7f whose bytes are valid UTF-8 is read again as UTF-8. One whose
 * bytes are not (a client that sent latin1, as fetch does for "é") is kept as it came. An ASCII value,
 * nearly every one, costs one scan and no copy.
 */
export function headerText(value: string): string {
  if (!NON_ASCII.test(value)) return value;
  const bytes = Buffer.from(value, "latin1");
  return isUtf8(bytes) ? bytes.toString("utf8") : value;
}

/**
 * `X-Svc-Metadata`: a JSON object, nested no deeper than MAX_JSON_DEPTH; values are kept as strings
 * (non-strings as their JSON text). Raw UTF-8 in the header is read as UTF-8 (`headerText`), as are
 * `\u` escapes in the JSON.
 */
export function metadataOf(req: IncomingMessage): Record<string, string> {
  const raw = req.headers["x-svc-metadata"];
  if (raw === undefined) return {};
  const text = headerText(Array.isArray(raw) ? raw.join(",") : raw);
  // Sent empty is not a JSON object (as an empty provider-version is not a date): refused, not ignored.
  if (text.trim() === "") throw invalidRequest("invalid_metadata", "X-Svc-Metadata must be a JSON object; it is empty.");
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw invalidRequest("invalid_metadata", "X-Svc-Metadata must be a JSON object; it is not valid JSON.");
  }
  if (!isObject(parsed)) throw invalidRequest("invalid_metadata", "X-Svc-Metadata must be a JSON object.");
  if (jsonTextBeyond(text, MAX_JSON_DEPTH, Infinity) === "depth") {
    throw invalidRequest("invalid_metadata", `X-Svc-Metadata must not nest arrays and objects more than ${MAX_JSON_DEPTH} levels deep.`);
  }
  // A value is logged as its JSON text, where `1e400` (read as Infinity) would become "null".
  const overflow = overflowedNumberAt(text, parsed);
  if (overflow !== undefined) throw invalidRequest("invalid_metadata", `X-Svc-Metadata \`${overflow}\` is a number too large to represent (beyond ±1.8e308).`);
  const pairs = Object.entries(parsed).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)] as const);
  checkMetadataLimits("X-Svc-Metadata", pairs);
  const out: Record<string, string> = {};
  // A key named `__proto__` or `constructor` is a key like any other (setOwn).
  for (const [k, value] of pairs) setOwn(out, k, value);
  return out;
}

/** `X-Svc-User-Id`: any non-empty text up to 256 characters (raw UTF-8 read as such: `headerText`). */
export function userIdOf(req: IncomingMessage): string {
  const raw = req.headers["x-svc-user-id"];
  if (raw === undefined) return "";
  // Node joins two of them into one ("alice, bob"): an id nobody sent, which would get a rate-limit window of its own.
  if (headerLines(req.rawHeaders, "x-svc-user-id") > 1) throw invalidRequest("invalid_user_id", "X-Svc-User-Id was sent more than once; send one user id.");
  const v = headerText(Array.isArray(raw) ? raw[0]! : raw).trim();
  if (v.length > MAX_USER_ID_CHARS) throw invalidRequest("invalid_user_id", "X-Svc-User-Id must be at most 256 characters.");
  return v;
}


/**
 * `anthropic-beta` on /v1/messages: opt-in features for the upstream, comma-separated (the SDK's
 * `betas`), sorted and without repeats; [] when absent. A name that is not one is refused: it
 * would otherwise reach the upstream's request headers.
 */
export function betasOf(req: IncomingMessage): string[] {
  const raw = req.headers["anthropic-beta"];
  if (raw === undefined) return [];
  const names = new Set<string>();
  for (const part of (Array.isArray(raw) ? raw.join(",") : raw).split(",")) {
    const name = part.trim();
    if (name === "" || names.has(name)) continue;
    if (names.size >= MAX_BETAS || !BETA_NAME.test(name)) throw invalidRequest("invalid_beta", "anthropic-beta must be a comma-separated list of at most 32 beta feature names.");
    names.add(name);
  }
  return [...names].sort();
}

/** `provider-version` (spec 9.2): optional; when sent, a real calendar date written YYYY-MM-DD. */
export function checkProviderVersion(req: IncomingMessage): void {
  const raw = req.headers["provider-version"];
  if (raw === undefined) return;
  const v = Array.isArray(raw) ? raw[0]! : raw;
  const date = v.trim();
  if (!/^\d{4}-\d{2}-\d{2}$/.test(date) || !startsWithCalendarDate(date)) {
    throw invalidRequest("invalid_provider_version", `provider-version must be a date written YYYY-MM-DD, got '${headerText(v)}'.`);
  }
}
