import type { ConnectError } from "@connectrpc/connect";
import { apiError, withRetryGuidance } from "../../errors.js";
import type { ApiStyle, Completion, StreamChatRequest, StreamChatResponse } from "../../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { SseEvent } from "../../sse.js";

/** How an adapter's error message begins when it carries the upstream's own words after it. */
export const UPSTREAM_SAID = "Upstream error: ";

/**
 * An upstream's rejection of the gateway's own credentials (401), or of what they may use (403: a
 * model the provider account may not sample, a region it does not serve), is the operator's
 * problem, not the client's: it becomes a 502 rather than a 401 or 403 that would read as "your
 * key is wrong", and the SDKs are told not to retry. The upstream's own words (`said`) are kept in
 * the message, for the operator to act on. `how`: how the upstream said it ("HTTP 401", or the
 * type of an error event in its stream, which comes after a 200).
 */
export function credentialsRefused(how: string, said: string | undefined): ConnectError {
  return withRetryGuidance(apiError(502, "api_error", "upstream_authentication_failed", `The upstream provider refused the gateway's credentials (${how})${said ? `: ${said}` : "."}`), { "x-should-retry": "false" });
}

/** Where one request goes: the provider's base URL and key, and the provider's model name. */
export interface UpstreamTarget {
  /** Provider name from configuration, e.g. "openai". */
  provider: string;
  /** The provider's wire style. */
  style: ApiStyle;
  /** Base URL: chat-completions style ends in `/v1`; messages style does not. */
  baseUrl: string;
  /** The provider API key ("" when none is configured). */
  apiKey: string;
  /** The provider's model name, e.g. "gpt-4o". */
  upstreamModel: string;
  /** The `max_tokens` sent for a request that sets none, where the upstream requires one (unlimitedOutputTokens; DEFAULT_MAX_TOKENS when absent). */
  defaultMaxTokens?: number;
}

/** An HTTP request to an upstream, built by an adapter. */
export interface UpstreamHttpRequest {
  /** Full URL. */
  url: string;
  /** Request headers, content-type and auth included. */
  headers: Record<string, string>;
  /** The JSON body text. */
  body: string;
}

/**
 * Converts a stream of upstream SSE events into canonical events. One converter serves one
 * response; it keeps the block bookkeeping the two styles need.
 */
export interface StreamConverter {
  /** Converts one parsed SSE event; returns zero or more canonical events. */
  push(event: SseEvent): StreamChatResponse[];
  /** Called when the upstream body ends; returns the events still owed (closing blocks, message_end). */
  end(): StreamChatResponse[];
  /** True once the upstream signalled a complete answer (`[DONE]` / `message_stop`). */
  readonly complete: boolean;
  /**
   * True once the upstream said how the answer finished (a finish or stop reason). A body that
   * ends cleanly after that is a whole answer even without its end marker (some OpenAI-compatible
   * servers send no `[DONE]`; the official SDKs end such a stream without an error); `end()` then
   * gives what is owed.
   */
  readonly finished: boolean;
}

/**
 * One upstream style as the trio of conversions (request, stream chunk, error) plus the non-stream
 * response. Conversions are pure and never mutate their input: a retry re-runs them.
 */
export interface UpstreamAdapter {
  readonly style: ApiStyle;
  /** Builds the upstream request for a canonical request (from either client style). */
  buildRequest(req: StreamChatRequest, target: UpstreamTarget): UpstreamHttpRequest;
  /** Converts a non-stream upstream JSON body to a Completion. `model` is set to `req.model` (the public id); `cost_usd` is left empty. */
  parseCompletion(body: unknown, req: StreamChatRequest): Completion;
  /** Creates a converter for a streaming upstream response. */
  createStreamConverter(req: StreamChatRequest): StreamConverter;
  /** Converts an upstream error response (status and body text) to the core's error (see core/errors.ts). */
  convertError(status: number, bodyText: string): ConnectError;
}
