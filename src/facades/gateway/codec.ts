import type { Completion, StreamChatResponse } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { ChatRequestBody } from "../../core/proxy/canonical.js";
import type { ErrorInfo } from "../../core/errors.js";

/**
 * The canonical fields a facade codec fills from a client body, as complete messages (who-is-asking
 * fields are set by the facade, `chatRequest()` in core/proxy/canonical.ts).
 */
export type ParsedChatRequest = ChatRequestBody;

/** The request a stream renderer is made for (it reads the model the client named and the extra fields). */
export type RenderedRequest = Partial<ParsedChatRequest>;

/** Renders one streamed answer as SSE text for one client style. */
export interface StreamRenderer {
  /** Returns the SSE text for one canonical event ("" when it maps to nothing). */
  render(event: StreamChatResponse): string;
  /** Returns the SSE text that ends a stream that was cut short by an error after it started. */
  error(info: ErrorInfo): string;
}

/**
 * A client style's wire compatibility: validate and parse a request body into the canonical model,
 * and render canonical answers back. Parsing throws the core's 400 errors (core/errors.ts
 * `invalidRequest`) with a stable code and a message naming the field.
 */
export interface ClientCodec {
  /**
   * The response header the style's provider SDK reads the request id from (its `_request_id`,
   * `requestID` on errors): OpenAI's `x-request-id`, Anthropic's `request-id`. Every response of the
   * surface sends the gateway's request id (X-Svc-Request-Id) under it too.
   */
  readonly requestIdHeader: "x-request-id" | "request-id";
  /** Validates a parsed JSON body and converts it. `body` is whatever JSON.parse returned. */
  parseRequest(body: unknown): ParsedChatRequest;
  /** Renders a whole answer as the style's JSON response object. */
  renderCompletion(completion: Completion): object;
  /**
   * Renders an answer cut short (a stream the upstream broke off, or the client left) in the same
   * shape, its finish reason null when it never came: what the request's log keeps of it.
   */
  renderPartial(completion: Completion): object;
  /** Creates a renderer for one streamed answer of the given request. */
  createStreamRenderer(req: RenderedRequest): StreamRenderer;
}
