import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import type { RequestLog } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";

/**
 * A finished request as one debug log line (`SVC_LOG_LEVEL=debug`): what an operator follows a
 * request by, without its bodies (they stay in the request log, and may hold what logs should not).
 */
export const requestSummary = (e: RequestLog): Record<string, unknown> => ({
  requestId: e.requestId,
  projectId: e.projectId,
  keyId: e.keyId,
  keyMode: e.keyMode === KeyMode.TEST ? "test" : "live",
  endpoint: e.endpoint,
  model: e.model,
  provider: e.provider,
  stream: e.stream,
  status: e.status,
  ...(e.errorCode ? { errorType: e.errorType, errorCode: e.errorCode } : {}),
  cache: e.cache,
  ...(e.userId ? { userId: e.userId } : {}),
  promptTokens: e.promptTokens,
  completionTokens: e.completionTokens,
  costUsd: e.costUsd,
  latencyMs: Math.round(e.latencyMs * 100) / 100,
  ttfbMs: Math.round(e.ttfbMs * 100) / 100,
  upstreamLatencyMs: Math.round(e.upstreamLatencyMs * 100) / 100,
});
