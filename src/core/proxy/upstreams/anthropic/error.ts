import type { ConnectError } from "@connectrpc/connect";
import { apiError, withRetryGuidance } from "../../../errors.js";
import { isObject, parseUpstreamJson } from "../../../json.js";
import { clip, passedOnType } from "../openai/error.js";
import { credentialsRefused, UPSTREAM_SAID } from "../adapter.js";

/**
 * Messages-style upstream errors (https://docs.anthropic.com/en/api/errors) as the core's error.
 * Bodies are `{"type":"error","error":{"type","message"}}`. A client error keeps its status and
 * type, so the caller can fix its request; rate limits stay 429; anything the upstream failed at
 * (5xx, 529 overloaded) is the gateway's 502, with a message that names the upstream and nothing of
 * ours.
 */

/**
 * The HTTP status the API uses for each error type, for errors that arrive inside a 200 stream
 * (authentication_error and permission_error are the gateway's credentials refused: convertStreamError).
 */
const statusByType: Record<string, number> = {
  invalid_request_error: 400,
  billing_error: 402,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  timeout_error: 504,
  overloaded_error: 529,
};

/** Converts an upstream error response (status and body text). */
export function convertMessagesError(status: number, bodyText: string): ConnectError {
  let json: unknown;
  try {
    json = parseUpstreamJson(bodyText);
  } catch {
    json = undefined; // not the API's JSON (a proxy's HTML page): status alone decides
  }
  const { type, message, details } = readError(json);
  return upstreamError(status, type, message, details);
}

/**
 * Converts an `error` event of a stream (its data text), which arrives after a 200 status. A
 * refusal of the gateway's credentials is answered as the same refusal made with a 401 or 403 is
 * (credentialsRefused: a 502, not the client's own 401 or 403).
 */
export function convertStreamError(data: unknown): ConnectError {
  const { type, message } = readError(data);
  if (type === "authentication_error" || type === "permission_error") return credentialsRefused(`${type === "authentication_error" ? "an" : "a"} ${type} event in its stream`, message);
  return upstreamError((type && statusByType[type]) || 500, type, message);
}

function upstreamError(status: number, type: string | undefined, message: string | undefined, details?: Record<string, unknown>): ConnectError {
  const detail = message ? `${UPSTREAM_SAID}${message}` : `The upstream provider answered with HTTP ${status}.`;
  if (status === 429 || type === "rate_limit_error") {
    // Worded as the OpenAI-style adapter words it: one refusal reads the same on both endpoints.
    return apiError(429, "rate_limit_error", "upstream_rate_limited", `Upstream rate limit: ${message ?? "too many requests."}`);
  }
  if (status === 529 || type === "overloaded_error") {
    return apiError(502, "api_error", "upstream_overloaded", detail);
  }
  // The provider account out of credit (402 billing_error): the operator's to fix, not the
  // client's own billing, and waiting does not clear it. Answered as OpenAI's insufficient_quota
  // is, so one empty account reads the same on both endpoints.
  if (status === 402 || type === "billing_error") {
    return withRetryGuidance(
      apiError(502, "api_error", "upstream_quota_exhausted", `The upstream provider's account cannot be billed (HTTP 402)${message ? `: ${message}` : "."}`),
      { "x-should-retry": "false" },
    );
  }
  if (status >= 400 && status < 500) {
    const t = passedOnType(type);
    // The upstream's `details` (its `error_code`: the SDK's thread runner resends a conversation
    // whose thread is gone on `thread_not_found`) reach the client as sent.
    return apiError(status, t, `upstream_${t}`, detail, details);
  }
  if (status >= 500) return apiError(502, "api_error", "upstream_error", detail);
  return apiError(502, "api_error", "upstream_invalid_response", `The upstream provider answered with an unexpected HTTP ${status}.`);
}

/** The most characters of an upstream error's `details` passed on (its JSON); larger ones are dropped. */
const MAX_DETAILS_CHARS = 2048;

/** The error type, message and details of a parsed error body, when it has the API's shape. */
function readError(json: unknown): { type?: string; message?: string; details?: Record<string, unknown> } {
  const err = isObject(json) && isObject(json.error) ? json.error : {};
  const details = isObject(err.details) && JSON.stringify(err.details).length <= MAX_DETAILS_CHARS ? err.details : undefined;
  return {
    type: typeof err.type === "string" ? err.type : undefined,
    message: typeof err.message === "string" ? clip(err.message) : undefined,
    ...(details ? { details } : {}),
  };
}
