import { Code, ConnectError } from "@connectrpc/connect";
import { cutText } from "./text.js";

/**
 * The one error type of the core is ConnectError. The spec's error object (status, type, code) rides
 * in the error's metadata so it survives both the in-process path and the gRPC wire, and is mapped
 * to HTTP once, at the facade edge (see `toErrorBody`).
 */
const kStatus = "svc-error-status";
const kType = "svc-error-type";
const kCode = "svc-error-code";
/** The error object's `details` (JSON text), for the few errors whose client SDK acts on them. */
const kDetails = "svc-error-details";

/** What a facade writes for an error: the HTTP status and the spec's error object. */
export interface ErrorInfo {
  status: number;
  type: string;
  code: string;
  message: string;
  /**
   * Machine-readable detail the client's SDK acts on, written as the error object's `details`
   * (Anthropic's shape: `details.error_code` names the cause); absent on almost every error.
   */
  details?: Record<string, unknown>;
}

const statusByCode: Partial<Record<Code, number>> = {
  [Code.InvalidArgument]: 400,
  [Code.FailedPrecondition]: 400,
  [Code.OutOfRange]: 400,
  [Code.Unauthenticated]: 401,
  [Code.PermissionDenied]: 403,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.ResourceExhausted]: 429,
  [Code.Canceled]: 499,
  [Code.Unavailable]: 502,
  [Code.DeadlineExceeded]: 504,
};

const codeByStatus = (status: number): Code => {
  if (status === 400 || status === 413 || status === 422) return Code.InvalidArgument;
  if (status === 401) return Code.Unauthenticated;
  if (status === 403) return Code.PermissionDenied;
  if (status === 404) return Code.NotFound;
  if (status === 409) return Code.AlreadyExists;
  if (status === 429) return Code.ResourceExhausted;
  if (status === 504) return Code.DeadlineExceeded;
  if (status === 502 || status === 503) return Code.Unavailable;
  if (status >= 400 && status < 500) return Code.FailedPrecondition;
  return Code.Internal;
};

/**
 * Creates an error carrying the spec's error object; the Connect code follows from the status.
 * `details` (optional) rides as JSON text, its non-ASCII escaped, so it survives gRPC metadata.
 */
export function apiError(status: number, type: string, code: string, message: string, details?: Record<string, unknown>): ConnectError {
  const metadata = new Headers({ [kStatus]: String(status), [kType]: type, [kCode]: code });
  if (details) metadata.set(kDetails, JSON.stringify(details).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`));
  return new ConnectError(message, codeByStatus(status), metadata);
}

/** Whether an error carries the spec's error object: an answer of the core, not a transport failure. */
export const carriesErrorInfo = (err: ConnectError): boolean => err.metadata.has(kStatus);

/** A provider API key's shape (OpenAI `sk-...`, `sk-proj-...`; Anthropic `sk-ant-...`), masked or not. */
const PROVIDER_KEY = /\bsk-[A-Za-z0-9_*.\-]{6,}/g;

/**
 * The error with a secret of the gateway's (`secret`: the provider key it sent) and anything shaped
 * like a provider key (an upstream's 401 quotes the key it refused, masked to its last characters)
 * replaced in its message by `[redacted]`: an upstream's words are relayed to the client and the
 * request log, which must never learn the operator's credential. Other errors, and errors whose
 * message holds neither, are returned as they are.
 */
export function withoutSecrets(e: unknown, secret: string): unknown {
  if (!(e instanceof ConnectError)) return e;
  const message = redacted(e.rawMessage, secret);
  // The upstream's `details` are its words too (an Anthropic error's object, passed on as sent).
  const details = e.metadata.get(kDetails);
  const cleanDetails = details === null ? null : redacted(details, secret);
  if (message === e.rawMessage && cleanDetails === details) return e;
  const metadata = new Headers(e.metadata);
  if (cleanDetails !== null) metadata.set(kDetails, cleanDetails);
  return new ConnectError(message, e.code, metadata, undefined, e.cause);
}

/** The shortest start of a secret taken for it where a cut ends a text. */
const CUT_SECRET_MIN = 4;

/**
 * `text` with `secret` (8 characters or more), the start of it that ends where the text was cut
 * (cutMarked's `…`: an upstream's message and a redirect's Location are cut before they reach
 * here), and anything shaped like a provider key, each replaced by `[redacted]`.
 */
function redacted(text: string, secret: string): string {
  let t = text;
  if (secret.length >= 8) {
    t = t.replaceAll(secret, "[redacted]");
    for (let at = t.indexOf("…"); at >= 0; at = t.indexOf("…", at + 1)) {
      for (let k = Math.min(secret.length - 1, at); k >= CUT_SECRET_MIN; k--) {
        if (t.startsWith(secret.slice(0, k), at - k)) {
          t = `${t.slice(0, at - k)}[redacted]${t.slice(at)}`;
          at = at - k + "[redacted]".length;
          break;
        }
      }
    }
  }
  return t.replace(PROVIDER_KEY, "[redacted]");
}

/** 400 invalid_request_error with the given code. */
export const invalidRequest = (code: string, message: string, details?: Record<string, unknown>) =>
  apiError(400, "invalid_request_error", code, message, details);

/** 401 authentication_error / invalid_api_key (spec 5.10, 7.1). */
export const invalidApiKey = (message = "Invalid API key.") =>
  apiError(401, "authentication_error", "invalid_api_key", message);

/** 404 not_found_error with the given code. */
export const notFound = (code: string, message: string) => apiError(404, "not_found_error", code, message);

/**
 * The longest error message answered, in characters: a message that quotes what the client sent
 * (a model id, a role, a header) would otherwise carry all of it back, megabytes for a megabyte
 * value.
 */
export const MAX_ERROR_MESSAGE_CHARS = 1024;

/** A message cut to MAX_ERROR_MESSAGE_CHARS between characters, marked with `…` when cut. */
export const bounded = (m: string): string => (m.length <= MAX_ERROR_MESSAGE_CHARS ? m : `${cutText(m, MAX_ERROR_MESSAGE_CHARS - 1)}…`);

/**
 * Maps any thrown value to what the client sees. Errors without the spec's metadata are internal:
 * their message never reaches the client (a 5xx never leaks internals).
 */
export function toErrorInfo(err: unknown): ErrorInfo {
  const ce = err instanceof ConnectError ? err : undefined;
  const status = Number(ce?.metadata.get(kStatus) ?? NaN);
  if (ce && Number.isInteger(status)) {
    const details = detailsOf(ce.metadata.get(kDetails));
    return {
      status,
      type: ce.metadata.get(kType) ?? "api_error",
      code: ce.metadata.get(kCode) ?? "internal_error",
      message: bounded(ce.rawMessage),
      ...(details ? { details } : {}),
    };
  }
  if (ce && ce.code !== Code.Internal && ce.code !== Code.Unknown && statusByCode[ce.code]) {
    const s = statusByCode[ce.code]!;
    return { status: s, type: s < 500 ? "invalid_request_error" : "api_error", code: Code[ce.code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase(), message: bounded(ce.rawMessage) };
  }
  return { status: 500, type: "api_error", code: "internal_error", message: "The server had an error while processing the request." };
}

/**
 * Retry guidance, which the client's SDK acts on: `retry-after` (seconds or an HTTP date),
 * `retry-after-ms` (OpenAI's SDK reads it first) and `x-should-retry`. An upstream's, passed on, or
 * the core's own (a 503 while a store is out of reach). Carried in the error's metadata (the gRPC
 * trailers on the wire) and written back as response headers by the facades.
 */
const RETRY_HEADERS: ReadonlyArray<readonly [name: string, valid: RegExp]> = [
  ["retry-after", /^(?:\d{1,10}|[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT)$/],
  ["retry-after-ms", /^\d{1,13}(?:\.\d{1,6})?$/],
  ["x-should-retry", /^(?:true|false)$/],
];
const kRetry = "svc-upstream-";

/** Copies retry guidance (an upstream answer's headers) onto an error, dropping values of any other form. */
export function withRetryGuidance(err: ConnectError, headers: Record<string, string | string[] | undefined>): ConnectError {
  for (const [name, valid] of RETRY_HEADERS) {
    const v = headers[name];
    if (typeof v === "string" && valid.test(v)) err.metadata.set(kRetry + name, v);
  }
  return err;
}

/** The longest Retry-After the SDKs are left to wait on: a minute's window, which can read 61 s. */
export const SDK_RETRY_MAX_SECONDS = 61;

/**
 * The retry guidance an error carries from its upstream, as response headers; undefined when none.
 * A wait longer than SDK_RETRY_MAX_SECONDS also gets `x-should-retry: false` (over an upstream's
 * own `true`): the official SDKs sleep for whatever the wait says before retrying, with no bound
 * and past their own timeout, so a provider's `retry-after: 100000` held a call for a day. The
 * wait itself is passed on as the provider gave it, for a client that schedules its own retry.
 */
export function retryGuidanceOf(err: unknown, nowMs = Date.now()): Record<string, string> | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  let out: Record<string, string> | undefined;
  for (const [name, valid] of RETRY_HEADERS) {
    const v = err.metadata.get(kRetry + name);
    if (v !== null && valid.test(v)) (out ??= {})[name] = v;
  }
  if (out && waitSeconds(out, nowMs) > SDK_RETRY_MAX_SECONDS) out["x-should-retry"] = "false";
  return out;
}

/**
 * The error with its retry guidance (retryGuidanceOf) under the names an HTTP answer gives it
 * (`retry-after`, `retry-after-ms`, `x-should-retry`), in place of the internal names it rides
 * under (withRetryGuidance): for a caller that reads the error's metadata as its response's
 * headers or trailers (the core port). An error without guidance is returned as it is.
 */
export function withPlainRetryGuidance(err: unknown): unknown {
  const guidance = retryGuidanceOf(err);
  if (!guidance || !(err instanceof ConnectError)) return err;
  for (const name of [...err.metadata.keys()]) if (name.startsWith(kRetry)) err.metadata.delete(name);
  for (const [name, value] of Object.entries(guidance)) err.metadata.set(name, value);
  return err;
}

/** The wait retry guidance asks for, in seconds, read as the SDKs read it: `retry-after-ms` first. */
function waitSeconds(h: Record<string, string>, nowMs: number): number {
  const ms = h["retry-after-ms"];
  if (ms !== undefined && Number(ms) > 0) return Number(ms) / 1000;
  const after = h["retry-after"];
  if (after === undefined) return 0;
  return /^\d+$/.test(after) ? Number(after) : (Date.parse(after) - nowMs) / 1000;
}

/** An error's `details`, when its metadata holds a JSON object there. */
function detailsOf(text: string | null): Record<string, unknown> | undefined {
  if (text === null) return undefined;
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The spec's error body (section 2.6), with `details` after them for an error that has some. */
export function toErrorBody(info: ErrorInfo): { error: { message: string; type: string; code: string; details?: Record<string, unknown> } } {
  const error = { message: info.message, type: info.type, code: info.code };
  return { error: info.details ? { ...error, details: info.details } : error };
}
