import type { ConnectError } from "@connectrpc/connect";
import { apiError, withRetryGuidance } from "../../../errors.js";
import { isObject, type JsonObject, parseUpstreamJson } from "../../../json.js";
import { credentialsRefused, UPSTREAM_SAID } from "../adapter.js";
import { cutMarked } from "../../../text.js";

/**
 * The `{error:{message,type,code,param}}` body OpenAI answers errors with, when the text is one;
 * also the forms of compatible servers, as that object: `{"error": "text"}`, and vLLM's
 * `{"object": "error", "message", "type", "code"}`.
 */
function errorObject(bodyText: string): JsonObject | undefined {
  try {
    const body: unknown = parseUpstreamJson(bodyText);
    if (!isObject(body)) return undefined;
    if (isObject(body.error)) return body.error;
    if (typeof body.error === "string") return { message: body.error };
    return body.object === "error" ? body : undefined;
  } catch {
    return undefined; // an HTML page from a proxy, a truncated body: nothing to reuse
  }
}

/**
 * An upstream's error type as passed on to the client (the code is `upstream_` and it, in every
 * upstream style): the upstream's own when it is one (lower-case words joined by `_`, as every
 * provider's are), `invalid_request_error` for none or anything else (spaces, markup).
 */
export const passedOnType = (type: string | undefined): string => (type && /^[a-z_]{1,64}$/.test(type) ? type : "invalid_request_error");

const str = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);

/**
 * An upstream's own error message, cut to 500 characters (ending in `…`): upstream messages are
 * short sentences, and a huge body must never become an error message.
 */
export const clip = (s: string): string => cutMarked(s, 500);

/**
 * Converts an OpenAI error response to the core error. Client errors (4xx) keep their status and
 * type so the caller can fix the request; 429 stays a rate limit; anything else is the gateway's
 * 502, with only the upstream's own message (never a body dump or stack).
 */
export function convertOpenAiError(status: number, bodyText: string): ConnectError {
  const err = errorObject(bodyText);
  const upstreamMessage = str(err?.message);
  // OpenAI answers an account out of credit 429 too, but waiting does not clear it: it is the
  // operator's to fix, so a 502 the SDKs are told not to retry, as for refused credentials.
  if (status === 429 && (err?.type === "insufficient_quota" || err?.code === "insufficient_quota")) {
    return withRetryGuidance(
      apiError(502, "api_error", "upstream_quota_exhausted", `The upstream provider's account has no quota left (HTTP 429)${upstreamMessage ? `: ${clip(upstreamMessage)}` : "."}`),
      { "x-should-retry": "false" },
    );
  }
  if (status === 429) {
    return apiError(429, "rate_limit_error", "upstream_rate_limited",
      `Upstream rate limit: ${clip(upstreamMessage ?? "too many requests.")}`);
  }
  if (status >= 400 && status < 500) {
    const type = passedOnType(str(err?.type));
    return apiError(status, type, `upstream_${type}`,
      upstreamMessage ? `${UPSTREAM_SAID}${clip(upstreamMessage)}` : `The upstream provider answered status ${status}.`);
  }
  const detail = upstreamMessage ? `: ${clip(upstreamMessage)}` : ".";
  return apiError(502, "api_error", "upstream_error", `The upstream provider failed with status ${status}${detail}`);
}

/**
 * An `{"error":{...}}` object sent inside a stream: a 502, except a rate limit or an account out of
 * quota (compatible servers, and OpenAI at times, refuse in the stream's first event rather than
 * with a 429), answered as the same refusal made with a 429 is, and a refusal of the gateway's
 * credentials, answered as one made with a 401 or 403 is (credentialsRefused).
 */
export function convertOpenAiStreamError(err: JsonObject): ConnectError {
  const said = [err.type, err.code].map((v) => (typeof v === "number" ? String(v) : str(v)));
  if (said.some((v) => v === "429" || v === "rate_limit_error" || v === "rate_limit_exceeded" || v === "insufficient_quota")) {
    return convertOpenAiError(429, JSON.stringify({ error: err }));
  }
  const refused = said.find((v) => v === "401" || v === "403" || v === "invalid_api_key" || v === "authentication_error" || v === "permission_error");
  if (refused !== undefined) return credentialsRefused(`${refused} in its stream`, str(err.message) === undefined ? undefined : clip(str(err.message)!));
  const message = str(err.message) ?? "the provider reported an error mid-stream.";
  return apiError(502, "api_error", "upstream_error", `${UPSTREAM_SAID}${clip(message)}`);
}

/** A body that is not the JSON OpenAI documents. */
export const invalidUpstreamResponse = (what: string): ConnectError =>
  apiError(502, "api_error", "upstream_invalid_response", `The upstream provider sent an invalid response: ${what}.`);
