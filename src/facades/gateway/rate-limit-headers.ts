import { type AdmitResponse, Decision, LimitWindow } from "../../gen/svc/limits/v1/limits_service_pb.js";
import { ApiStyle } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { apiError, SDK_RETRY_MAX_SECONDS } from "../../core/errors.js";

/**
 * The request-limit headers of an admitted or refused live request, in each surface's own
 * convention: OpenAI's `x-ratelimit-*-requests` (reset as a duration such as "6m0s",
 * https://platform.openai.com/docs/guides/rate-limits) on chat completions, Anthropic's
 * `anthropic-ratelimit-requests-*` (reset as an RFC 3339 time,
 * https://docs.anthropic.com/en/api/rate-limits) on messages. Empty when no request limit applied.
 */
export function rateLimitHeaders(a: AdmitResponse, style: ApiStyle, nowMs = Date.now()): Record<string, string> {
  const h: Record<string, string> = {};
  if (a.limit > 0) {
    if (style === ApiStyle.MESSAGES) {
      h["anthropic-ratelimit-requests-limit"] = String(a.limit);
      h["anthropic-ratelimit-requests-remaining"] = String(a.remaining);
      h["anthropic-ratelimit-requests-reset"] = resetInstant(a.resetSeconds, nowMs);
    } else {
      h["x-ratelimit-limit-requests"] = String(a.limit);
      h["x-ratelimit-remaining-requests"] = String(a.remaining);
      h["x-ratelimit-reset-requests"] = duration(a.resetSeconds);
    }
  }
  if (a.decision !== Decision.ALLOWED && a.retryAfterSeconds > 0) {
    h["Retry-After"] = String(a.retryAfterSeconds);
    // The official SDKs sleep for whatever Retry-After says before retrying (openai with no bound),
    // past their own request timeout: a day's limit or the month's spend cap would hold the call
    // for hours or weeks. Both SDKs obey `x-should-retry`, so a refusal that will not clear within
    // a minute's window is raised at once instead.
    if (a.retryAfterSeconds > SDK_RETRY_MAX_SECONDS) h["x-should-retry"] = "false";
  }
  return h;
}

/**
 * When a window resets, as an RFC 3339 time in whole seconds: the first second at or after the
 * real reset. `resetSeconds` is the wait rounded up to a second, taken at the admission, a moment
 * before `nowMs`. A window frees on a bucket boundary (a whole second), which lies within the
 * second before now + `resetSeconds`: that second, rounded down, is it. A reset of 0 (nothing
 * counted: fully replenished at the admission) is now, rounded up.
 */
export function resetInstant(resetSeconds: number, nowMs: number): string {
  const s = resetSeconds > 0 ? Math.floor(nowMs / 1000) + resetSeconds : Math.ceil(nowMs / 1000);
  return new Date(s * 1000).toISOString().replace(".000Z", "Z");
}

/** Seconds as a Go-style duration, the form OpenAI's reset headers use: "45s", "6m0s", "2h0m0s". */
function duration(s: number): string {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60}s`;
  return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m${s % 60}s`;
}

const windowWords: Partial<Record<LimitWindow, string>> = {
  [LimitWindow.MINUTE]: " per minute",
  [LimitWindow.DAY]: " per day",
};

/** "1 request", "60 requests". */
const requests = (n: number) => `${n} request${n === 1 ? "" : "s"}`;

/** The error of a refused admission: 429 rate_limit_error with a code per kind of limit. */
export function admissionError(a: AdmitResponse, worstCaseUsd?: string): Error {
  const retry = `Retry after ${a.retryAfterSeconds} s.`;
  // A request that could cost more than the whole cap never fits, whatever is spent: waiting for
  // the month's end (its Retry-After, with x-should-retry false) would only be refused again.
  if (a.decision === Decision.SPEND_CAPPED && worstCaseUsd !== undefined && a.spendCapUsd !== "" && Number(worstCaseUsd) > Number(a.spendCapUsd)) {
    return apiError(429, "rate_limit_error", "spend_cap_exceeded", `This request could cost up to $${worstCaseUsd} (its prompt, and max_tokens or the model's output ceiling, at the model's prices), more than the project's whole monthly spend cap of $${a.spendCapUsd}: it cannot fit in any month. Send a shorter prompt or a lower max_tokens, or raise the cap.`);
  }
  switch (a.decision) {
    case Decision.PLAN_LIMITED:
      return apiError(429, "rate_limit_error", "rate_limit_exceeded", `The project's limit of ${requests(a.limit)}${windowWords[a.window] ?? ""} is reached. ${retry}`);
    case Decision.USER_LIMITED:
      return apiError(429, "rate_limit_error", "user_rate_limit_exceeded", `This user's limit of ${requests(a.limit)} per minute (X-Svc-User-Id) is reached. ${retry}`);
    case Decision.SPEND_CAPPED:
      return apiError(429, "rate_limit_error", "spend_cap_exceeded", `The project's monthly spend cap of $${a.spendCapUsd} would be exceeded by this request ($${a.spendRemainingUsd} left this month beyond what requests in flight have reserved). ${retry}`);
    default:
      return apiError(503, "api_error", "limits_unavailable", "Rate limits cannot be checked right now and the gateway is set to refuse requests until they can. Retry shortly.");
  }
}
