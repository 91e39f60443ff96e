import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import type { Completion, Usage } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { RequestLog } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { arrivalMicros, timestampFromMicros } from "../../core/telemetry/micros.js";
import { cutText } from "../../core/text.js";
import { atMostEvery, log } from "../../logger.js";

/**
 * Bodies longer than this many characters (UTF-16 code units) are logged cut, with a note of how
 * much was left out. The cut never splits a surrogate pair (an emoji): half of one is a lone
 * surrogate, which the log's store refuses.
 */
export const MAX_LOGGED_BODY_CHARS = 256 * 1024;

const cut = (s: string, droppedBefore = 0): string => {
  if (s.length <= MAX_LOGGED_BODY_CHARS && droppedBefore === 0) return s;
  const kept = cutText(s, MAX_LOGGED_BODY_CHARS);
  return `${kept}…[truncated ${s.length - kept.length + droppedBefore} characters]`;
};

/** The largest cost a log holds (Decimal(18, 12): six integer digits). */
export const MAX_LOGGED_COST_USD = "999999.999999999999";
const overflowLogged = atMostEvery(60_000);

/**
 * A cost as its log can hold it: one of a million USD or more (a broken upstream's usage priced at
 * a costly model's prices) is logged as MAX_LOGGED_COST_USD, with a warning at most once a minute,
 * rather than the log refused and lost. The client's X-Svc-Cost says the cost as priced.
 */
function loggable(costUsd: string, requestId: string): string {
  if (!/^\d{7}/.test(costUsd)) return costUsd;
  if (overflowLogged()) {
    log.warn("a request's cost is beyond what its log holds: logged as the most it holds", { requestId, costUsd, logged: MAX_LOGGED_COST_USD });
  }
  return MAX_LOGGED_COST_USD;
}

/**
 * What one gateway request did, gathered as it goes and turned into its log record at the end
 * (issue 4: one record per request, success or error). Times are from the request's arrival.
 */
export class RequestTrace {
  /** Arrival, epoch microseconds; strictly increasing within the process (see micros.ts). */
  readonly startUs = arrivalMicros();
  readonly #t0: number;
  projectId = "";
  keyId = "";
  keyMode = KeyMode.UNSPECIFIED;
  model = "";
  provider = "";
  stream = false;
  status = 200;
  errorType = "";
  errorCode = "";
  cache: "HIT" | "MISS" = "MISS";
  userId = "";
  metadata: Record<string, string> = {};
  promptTokens = 0;
  completionTokens = 0;
  costUsd = "0";
  costSavedUsd = "0";
  #ttfbMs = 0;
  #upstreamStart = 0;
  #upstreamMs = 0;
  requestBody = "";
  responseBody = "";
  /** Characters of the answer not in `responseBody` already (a stream longer than the copy kept of it): counted in its cut's note. */
  responseBodyDropped = 0;

  /** `waitedMs`: how long the request waited for its turn before it was served (pipelined), counted in its latency. */
  constructor(
    readonly requestId: string,
    readonly endpoint: string,
    waitedMs = 0,
  ) {
    this.#t0 = performance.now() - waitedMs;
  }

  /** Marks the first byte of the response as written (once). */
  firstByte(): void {
    if (this.#ttfbMs === 0) this.#ttfbMs = performance.now() - this.#t0;
  }

  upstreamStarted(): void {
    this.#upstreamStart = performance.now();
  }

  upstreamEnded(): void {
    if (this.#upstreamStart) this.#upstreamMs = performance.now() - this.#upstreamStart;
  }

  /** Takes tokens from the answer the client got. */
  answered(c: Completion | undefined): void {
    this.used(c?.usage);
  }

  used(u: Usage | undefined): void {
    this.promptTokens = u?.inputTokens ?? 0;
    this.completionTokens = u?.outputTokens ?? 0;
  }

  /** Records the error the client got; a client that went away (499) is logged as client_closed_request. */
  failed(e: { status: number; type: string; code: string }): void {
    this.status = e.status;
    this.errorType = e.status === 499 ? "client_closed" : e.type;
    this.errorCode = e.status === 499 ? "client_closed_request" : e.code;
  }

  /**
   * Records an error the client got as an event inside a stream already answered with `status`
   * (200): the log keeps the status that was sent, and the error's type and code.
   */
  failedInStream(e: { type: string; code: string }, status: number): void {
    this.status = status;
    this.errorType = e.type;
    this.errorCode = e.code;
  }

  /**
   * The log as a complete message, every field set here (the type checker holds it to the schema):
   * no `create()` walk over the schema on each request.
   */
  toLog(): RequestLog {
    const latencyMs = performance.now() - this.#t0;
    return {
      $typeName: "svc.telemetry.v1.RequestLog",
      requestId: this.requestId,
      time: timestampFromMicros(this.startUs),
      projectId: this.projectId,
      keyId: this.keyId,
      keyMode: this.keyMode,
      endpoint: this.endpoint,
      model: this.model,
      provider: this.provider,
      stream: this.stream,
      status: this.status,
      errorType: this.errorType,
      errorCode: this.errorCode,
      cache: this.cache,
      userId: this.userId,
      metadata: this.metadata,
      promptTokens: this.promptTokens,
      completionTokens: this.completionTokens,
      costUsd: loggable(this.costUsd, this.requestId),
      costSavedUsd: loggable(this.costSavedUsd, this.requestId),
      latencyMs,
      ttfbMs: this.#ttfbMs,
      upstreamLatencyMs: this.#upstreamMs,
      requestBody: cut(this.requestBody),
      responseBody: cut(this.responseBody, this.responseBodyDropped),
    };
  }
}
