import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import {
  AnalyticsGranularity,
  AnalyticsGroupBy,
  type AnalyticsMetrics,
  AnalyticsMetricsSchema,
  type GetAnalyticsRequest,
  type GetAnalyticsResponse,
  GetAnalyticsResponseSchema,
} from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { LOG_SCAN_MAX_SECONDS, needsLogScan } from "../../stores/clickhouse-analytics.js";
import type { AnalyticsQuery, AnalyticsResult, Dimension, Granularity, Metrics } from "../../stores/telemetry-store.js";
import { apiError, invalidRequest } from "../errors.js";
import { checkId, LIMITS } from "./log-row.js";
import { boundMicros, PAST_LAST_US } from "./micros.js";

const STEP: Record<Granularity, number> = { minute: 60, hour: 3600, day: 86_400 };
/** The longest range per granularity, in buckets (7 days of minutes, 400 of hours, 3660 days). */
const MAX_BUCKETS: Record<Granularity, number> = { minute: 7 * 1440, hour: 400 * 24, day: 3660 };
/** The longest range in words, where buckets of the granularity do not already say it in days. */
const MAX_SPAN_TEXT: Record<Granularity, string | undefined> = { minute: "7 days", hour: "400 days", day: undefined };
/** "a minute", "an hour", "a day". */
const ARTICLE: Record<Granularity, string> = { minute: "a", hour: "an", day: "a" };
/**
 * The range without a `start_time`, in buckets: the last hour of minutes, the last 24 hours, the
 * last 30 days. They end with the bucket that holds the end (`end_time`, else now), so the series
 * is exactly this many whole buckets. This is the one rule for both paths: the management API's
 * /v1/analytics passes on only the times its caller gave, and leaves the rest to it.
 */
export const DEFAULT_BUCKETS: Record<Granularity, number> = { minute: 60, hour: 24, day: 30 };

const granularities: Partial<Record<AnalyticsGranularity, Granularity>> = {
  [AnalyticsGranularity.UNSPECIFIED]: "hour",
  [AnalyticsGranularity.MINUTE]: "minute",
  [AnalyticsGranularity.HOUR]: "hour",
  [AnalyticsGranularity.DAY]: "day",
};

const groupings: Partial<Record<AnalyticsGroupBy, Dimension>> = {
  [AnalyticsGroupBy.MODEL]: "model",
  [AnalyticsGroupBy.USER]: "user",
  [AnalyticsGroupBy.KEY]: "key",
  [AnalyticsGroupBy.STATUS]: "status",
};

/** The longest metadata key the hour and day rollups hold (the migration's `analytics_live_*`). */
export const ROLLUP_METADATA_KEY_CHARS = 64;

/**
 * Why a metadata key cannot be grouped by at this granularity, or undefined: a key longer than any
 * request's can be (LIMITS.metadataKey) never, and one longer than the rollups hold only at
 * `minute`, whose grouped series is read from the logs themselves. Said after the key's name.
 */
export function metadataKeyBeyond(key: string, granularity: Granularity): string | undefined {
  if (key.length > LIMITS.metadataKey) return `must be at most ${LIMITS.metadataKey} characters (the longest a request's metadata key can be).`;
  if (key.length > ROLLUP_METADATA_KEY_CHARS && granularity !== "minute") {
    return `must be at most ${ROLLUP_METADATA_KEY_CHARS} characters at ${granularity} granularity: longer keys are not rolled up (a minute series, read from the logs, groups by keys of up to ${LIMITS.metadataKey}).`;
  }
  return undefined;
}

/**
 * The store query of a GetAnalytics request, checked. Analytics cover live traffic only (test
 * traffic has no rollups, by design), so a test key is refused with 403 rather than answered with
 * another mode's data or with zeros that would look like real figures.
 */
export function analyticsQueryOf(req: GetAnalyticsRequest, nowMs: number): AnalyticsQuery {
  const projectId = checkId(req.projectId, "project_id");
  if (req.keyMode === KeyMode.TEST) {
    throw apiError(403, "permission_error", "live_key_required", "Analytics cover live traffic only; use a live key.");
  }
  if (req.keyMode !== KeyMode.LIVE) throw invalidRequest("invalid_value", "`key_mode` must be live or test.");
  const granularity = granularities[req.granularity];
  if (!granularity) throw invalidRequest("invalid_value", "`granularity` must be minute, hour or day.");
  const step = STEP[granularity];

  let groupBy: Dimension | undefined;
  if (req.groupBy === AnalyticsGroupBy.METADATA) {
    if (!req.metadataKey) throw invalidRequest("missing_required_field", "`metadata_key` is required to group by metadata.");
    const beyond = metadataKeyBeyond(req.metadataKey, granularity);
    if (beyond) throw invalidRequest("invalid_value", `\`metadata_key\` ${beyond}`);
    groupBy = `metadata.${req.metadataKey}`;
  } else if (req.groupBy !== AnalyticsGroupBy.UNSPECIFIED) {
    groupBy = groupings[req.groupBy];
    if (!groupBy) throw invalidRequest("invalid_value", "`group_by` must be model, user, key, status or metadata.");
  }

  const groupLimit = req.groupLimit === 0 ? 20 : req.groupLimit;
  if (!Number.isInteger(groupLimit) || groupLimit < 1 || groupLimit > 100) throw invalidRequest("invalid_value", "`group_limit` must be 1 to 100.");

  // The range: the end (end_time, else now) rounded up to a bucket boundary; the start given,
  // rounded down to one, else DEFAULT_BUCKETS whole buckets before the rounded end (from the epoch
  // at the earliest: there is no traffic before it). Times count to the microsecond, as log times
  // do (a finer time rounds up to the next one, as ListLogs reads it): `end_time` 10:01:00.0004 is
  // after 10:01 and ends its minute series at 10:02, never cut back to a whole millisecond.
  const stepUs = step * 1_000_000;
  const endUs = req.endTime ? boundMicros(req.endTime, "end_time") : Math.ceil(nowMs * 1000);
  if (!(endUs > 0)) throw invalidRequest("invalid_value", "`end_time` must be after 1970-01-01T00:00:00Z.");
  const toUs = ceilTo(endUs, stepUs);
  // The series' end is answered as a time the API reads back: within the year 9999 (a time in its
  // last bucket would round up to 10000-01-01, which ISO 8601 writes only in its expanded form).
  if (toUs >= PAST_LAST_US) throw invalidRequest("invalid_value", `\`end_time\` is too late: the ${granularity} holding it must end within the year 9999.`);
  const startUs = req.startTime ? boundMicros(req.startTime, "start_time") : Math.max(0, toUs - DEFAULT_BUCKETS[granularity] * stepUs);
  if (!(startUs >= 0)) throw invalidRequest("invalid_value", "`start_time` must not be before 1970-01-01T00:00:00Z.");
  // Compared as given, before rounding: a start after the end is refused even within one bucket.
  if (!(startUs < endUs)) throw invalidRequest("invalid_value", "`start_time` must be before `end_time`.");
  const fromSec = floorTo(startUs, stepUs) / 1_000_000;
  const toSec = toUs / 1_000_000;
  // The maximum is of the range asked for, start to end (docs/management-api.md). The series is
  // rounded out to whole buckets, so a range of the maximum that is not aligned spans one bucket
  // more; a range longer than the maximum is refused, however it is aligned.
  const spanUs = endUs - startUs;
  if (spanUs > MAX_BUCKETS[granularity] * stepUs) {
    const span = MAX_SPAN_TEXT[granularity] ? ` (${MAX_SPAN_TEXT[granularity]})` : "";
    throw invalidRequest("invalid_value", `${ARTICLE[granularity]} ${granularity} series covers at most ${MAX_BUCKETS[granularity]} ${granularity}s${span} from \`start_time\` to \`end_time\`; narrow the range${granularity === "day" ? "" : " or use a coarser granularity"}.`);
  }
  if (needsLogScan(granularity, groupBy) && spanUs > LOG_SCAN_MAX_SECONDS * 1_000_000) {
    throw invalidRequest("invalid_value", "a grouped minute series covers at most 24 hours from `start_time` to `end_time`; use hour granularity for longer ranges.");
  }
  return { projectId, fromSec, toSec, granularity, groupBy, groupLimit };
}

/** `us` rounded down to a multiple of `step` (both whole microseconds; `%` is exact on them). */
const floorTo = (us: number, step: number): number => us - (((us % step) + step) % step);
/** `us` rounded up to a multiple of `step`: kept when it is one. */
const ceilTo = (us: number, step: number): number => (us % step === 0 ? us : floorTo(us, step) + step);

const grains: Record<Granularity, AnalyticsGranularity> = {
  minute: AnalyticsGranularity.MINUTE,
  hour: AnalyticsGranularity.HOUR,
  day: AnalyticsGranularity.DAY,
};

const metricsMessage = (m: Metrics): AnalyticsMetrics =>
  create(AnalyticsMetricsSchema, {
    requests: BigInt(m.requests),
    errors: BigInt(m.errors),
    cacheHits: BigInt(m.cacheHits),
    promptTokens: BigInt(m.promptTokens),
    completionTokens: BigInt(m.completionTokens),
    totalTokens: BigInt(m.promptTokens + m.completionTokens),
    costUsd: m.costUsd,
    latencyP50Ms: m.latencyP50Ms,
    latencyP95Ms: m.latencyP95Ms,
    latencyP99Ms: m.latencyP99Ms,
  });

export function analyticsResponseOf(q: AnalyticsQuery, r: AnalyticsResult): GetAnalyticsResponse {
  return create(GetAnalyticsResponseSchema, {
    startTime: timestampFromMs(q.fromSec * 1000),
    endTime: timestampFromMs(q.toSec * 1000),
    granularity: grains[q.granularity],
    totals: metricsMessage(r.totals),
    groups: r.groups.map((g) => ({ key: g.key, metrics: metricsMessage(g.metrics) })),
    groupsTruncated: r.groupsTruncated,
    buckets: r.buckets.map((b) => ({ time: timestampFromMs(b.timeSec * 1000), group: b.group, metrics: metricsMessage(b.metrics) })),
  });
}
