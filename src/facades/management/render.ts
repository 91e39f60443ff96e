import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import type { AnalyticsMetrics, GetAnalyticsResponse, Prompt, RequestLog } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { AnalyticsGranularity } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { isoMicros } from "../../core/telemetry/micros.js";

/** The JSON shapes of the management API (documented in docs/management-api.md). */

const iso = (t: Timestamp | undefined): string | null => (t ? new Date(timestampMs(t)).toISOString() : null);
const round = (ms: number) => Math.round(ms * 1000) / 1000;

/** A log record; `full` adds the request and response bodies (GET /v1/logs/{id}). */
export function logJson(l: RequestLog, full: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: l.requestId,
    object: "request_log",
    time: l.time ? isoMicros(l.time) : null,
    project_id: l.projectId,
    key_id: l.keyId,
    key_mode: l.keyMode === KeyMode.TEST ? "test" : "live",
    endpoint: l.endpoint,
    model: l.model,
    provider: l.provider,
    stream: l.stream,
    status: l.status,
    error: l.errorCode ? { type: l.errorType, code: l.errorCode } : null,
    cache: l.cache,
    user_id: l.userId || null,
    metadata: l.metadata,
    usage: { prompt_tokens: l.promptTokens, completion_tokens: l.completionTokens, total_tokens: l.promptTokens + l.completionTokens },
    cost_usd: l.costUsd || "0",
    cost_saved_usd: l.costSavedUsd || "0",
    latency_ms: round(l.latencyMs),
    ttfb_ms: round(l.ttfbMs),
    upstream_latency_ms: round(l.upstreamLatencyMs),
  };
  if (full) {
    out.request_body = l.requestBody;
    out.response_body = l.responseBody;
  }
  return out;
}

function metricsJson(m: AnalyticsMetrics | undefined): Record<string, unknown> {
  return {
    requests: Number(m?.requests ?? 0),
    errors: Number(m?.errors ?? 0),
    cache_hits: Number(m?.cacheHits ?? 0),
    prompt_tokens: Number(m?.promptTokens ?? 0),
    completion_tokens: Number(m?.completionTokens ?? 0),
    total_tokens: Number(m?.totalTokens ?? 0),
    cost_usd: m?.costUsd || "0",
    latency_ms: { p50: round(m?.latencyP50Ms ?? 0), p95: round(m?.latencyP95Ms ?? 0), p99: round(m?.latencyP99Ms ?? 0) },
  };
}

const granularityNames: Partial<Record<AnalyticsGranularity, string>> = {
  [AnalyticsGranularity.MINUTE]: "minute",
  [AnalyticsGranularity.HOUR]: "hour",
  [AnalyticsGranularity.DAY]: "day",
};

export function analyticsJson(a: GetAnalyticsResponse, groupBy: string | null): Record<string, unknown> {
  return {
    object: "analytics",
    start: iso(a.startTime),
    end: iso(a.endTime),
    granularity: granularityNames[a.granularity] ?? null,
    group_by: groupBy,
    totals: metricsJson(a.totals),
    groups: a.groups.map((g) => ({ key: g.key, ...metricsJson(g.metrics) })),
    groups_truncated: a.groupsTruncated,
    series: a.buckets.map((b) => ({ time: iso(b.time), ...(groupBy ? { group: b.group } : {}), ...metricsJson(b.metrics) })),
  };
}

/** A prompt version; `withContent` false for list entries. */
export function promptJson(p: Prompt, withContent: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = { object: "prompt", name: p.name, version: p.version, description: p.description, created_at: iso(p.createTime) };
  if (withContent) out.content = p.content;
  return out;
}
