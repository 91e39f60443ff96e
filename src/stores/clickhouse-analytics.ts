import type { AnalyticsQuery, AnalyticsResult, Dimension, Granularity, Metrics } from "./telemetry-store.js";

/** Runs a query with parameters and returns its rows (the store's, which maps outages). */
export type Select = <R>(query: string, params: Record<string, unknown>) => Promise<R[]>;

const ROLLUP: Record<Granularity, string> = { minute: "analytics_live_1m", hour: "analytics_live_1h", day: "analytics_live_1d" };

/** The per-minute rollup holds project totals only: minute series grouped by anything scan the logs. */
export const needsLogScan = (granularity: Granularity, dim: Dimension | undefined): boolean => granularity === "minute" && dim !== undefined;

/** The log column of each rollup dimension, for the log scan. */
const LOG_VALUE: Record<Exclude<Dimension, `metadata.${string}`>, string> = {
  model: "toString(model)",
  user: "user_id",
  key: "key_id",
  status: "toString(status)",
};

/** The longest range a grouped minute series may ask for, in seconds (rounded out to whole minutes, its scan may cover one more). */
export const LOG_SCAN_MAX_SECONDS = 24 * 3600;

const ROLLUP_METRICS = `sum(requests) AS m_requests, sum(errors) AS m_errors, sum(cache_hits) AS m_cache_hits,
  sum(prompt_tokens) AS m_prompt_tokens, sum(completion_tokens) AS m_completion_tokens,
  toString(sum(cost_usd)) AS m_cost_usd, quantilesMerge(0.5, 0.95, 0.99)(latency_ms) AS m_latency`;

const LOG_METRICS = `count() AS m_requests, countIf(status >= 400 OR error_type != '') AS m_errors, countIf(cache = 'HIT') AS m_cache_hits,
  sum(toUInt64(prompt_tokens)) AS m_prompt_tokens, sum(toUInt64(completion_tokens)) AS m_completion_tokens,
  toString(sum(toDecimal128(cost_usd, 12))) AS m_cost_usd, quantiles(0.5, 0.95, 0.99)(latency_ms) AS m_latency`;

/**
 * Analytics of live traffic from the rollups (`analytics_live_1m/1h/1d`, see the migration's
 * comments), or for a grouped minute series, from a bounded scan of the logs. Few queries, each
 * reading one project's rows of one dimension: in chDB a query's reads cost more than its work.
 */
export async function queryAnalytics(select: Select, q: AnalyticsQuery): Promise<AnalyticsResult> {
  const dim = q.groupBy;
  const params: Record<string, unknown> = { project: q.projectId, from: q.fromSec, to: q.toSec, group_limit: q.groupLimit + 1 };
  const rollupWhere = `project_id = {project:String} AND bucket >= toDateTime({from:UInt32}, 'UTC') AND bucket < toDateTime({to:UInt32}, 'UTC')`;
  const table = ROLLUP[q.granularity];
  // Every query here costs its reads more than its work: few and small, so one query answers
  // the series and its totals together (GROUPING SETS; grouping() = 1 marks the totals row).
  if (!dim) {
    const rows = await select<RawMetrics & { t: number; g: string; total: number }>(
      `SELECT toUnixTimestamp(bucket) AS t, '' AS g, grouping(bucket) AS total, ${ROLLUP_METRICS} FROM ${table}
       WHERE ${rollupWhere} AND dim = '' GROUP BY GROUPING SETS ((bucket), ()) ORDER BY total, bucket`,
      params,
    );
    const totals = rows.find((r) => Number(r.total) === 1);
    return { totals: metricsOf(totals), groups: [], groupsTruncated: false, buckets: rows.filter((r) => Number(r.total) !== 1).map(bucketOf) };
  }

  if (needsLogScan(q.granularity, dim)) {
    // FINAL folds a duplicate not yet merged away: a scan reads logs, not what the views counted.
    params.from_ms = q.fromSec * 1000;
    params.to_ms = q.toSec * 1000;
    let where = `project_id = {project:String} AND time >= fromUnixTimestamp64Milli({from_ms:Int64}, 'UTC') AND time < fromUnixTimestamp64Milli({to_ms:Int64}, 'UTC')`;
    let value: string;
    if (!dim.startsWith("metadata.")) {
      value = LOG_VALUE[dim as keyof typeof LOG_VALUE];
    } else {
      params.meta_key = dim.slice("metadata.".length);
      value = "metadata[{meta_key:String}]";
      where += " AND mapContains(metadata, {meta_key:String})";
    }
    const totalsP = select<RawMetrics>(`SELECT ${ROLLUP_METRICS} FROM ${table} WHERE ${rollupWhere} AND dim = ''`, params);
    const groups = await select<RawMetrics & { g: string }>(
      `SELECT ${value} AS g, ${LOG_METRICS} FROM request_logs_live FINAL WHERE ${where}
       GROUP BY g ORDER BY m_requests DESC, g LIMIT {group_limit:UInt32}`,
      params,
    );
    const totals = (await totalsP)[0];
    const seriesSql = `SELECT toUnixTimestamp(toStartOfMinute(time)) AS t, ${value} AS g, ${LOG_METRICS} FROM request_logs_live FINAL
       WHERE ${where} AND ${value} IN {groups:Array(String)} GROUP BY t, g ORDER BY t, g`;
    const truncated = groups.length > q.groupLimit;
    if (truncated) groups.length = q.groupLimit;
    params.groups = groups.map((g) => g.g);
    const series = groups.length === 0 ? [] : await select<RawMetrics & { t: number; g: string }>(seriesSql, params);
    return {
      totals: metricsOf(totals),
      groups: groups.map((g) => ({ key: g.g, metrics: metricsOf(g) })),
      groupsTruncated: truncated,
      buckets: series.map(bucketOf),
    };
  }

  params.dim = dim;
  // Rank the groups on their request counts alone (no latency states to merge), then read the
  // top ones' series, their totals and the project's totals in one query.
  const ranked = await select<{ g: string }>(
    `SELECT value AS g, sum(requests) AS r FROM ${table} WHERE ${rollupWhere} AND dim = {dim:String}
     GROUP BY value ORDER BY r DESC, g LIMIT {group_limit:UInt32}`,
    params,
  );
  const truncated = ranked.length > q.groupLimit;
  params.groups = ranked.slice(0, q.groupLimit).map((r) => r.g);
  const rows = await select<RawMetrics & { d: string; g: string; t: number; total: number }>(
    `SELECT dim AS d, value AS g, toUnixTimestamp(bucket) AS t, grouping(bucket) AS total, ${ROLLUP_METRICS} FROM ${table}
     WHERE ${rollupWhere} AND (dim = '' OR (dim = {dim:String} AND value IN {groups:Array(String)}))
     GROUP BY GROUPING SETS ((dim, value, bucket), (dim, value)) ORDER BY t, g`,
    params,
  );
  const groupTotals = new Map<string, RawMetrics>();
  const buckets: AnalyticsResult["buckets"] = [];
  let projectTotals: RawMetrics | undefined;
  for (const r of rows) {
    if (r.d === "") {
      if (Number(r.total) === 1) projectTotals = r;
    } else if (Number(r.total) === 1) {
      groupTotals.set(r.g, r);
    } else {
      buckets.push(bucketOf(r));
    }
  }
  return {
    totals: metricsOf(projectTotals),
    groups: (params.groups as string[]).map((g) => ({ key: g, metrics: metricsOf(groupTotals.get(g)) })),
    groupsTruncated: truncated,
    buckets,
  };
}

interface RawMetrics {
  m_requests: number | string;
  m_errors: number | string;
  m_cache_hits: number | string;
  m_prompt_tokens: number | string;
  m_completion_tokens: number | string;
  m_cost_usd: string;
  m_latency: Array<number | null> | null;
}

const ms = (v: number | null | undefined) => (typeof v === "number" && Number.isFinite(v) ? Math.round(v * 1000) / 1000 : 0);

function metricsOf(r: RawMetrics | undefined): Metrics {
  const requests = Number(r?.m_requests ?? 0);
  const latency = requests > 0 ? r?.m_latency ?? [] : [];
  return {
    requests,
    errors: Number(r?.m_errors ?? 0),
    cacheHits: Number(r?.m_cache_hits ?? 0),
    promptTokens: Number(r?.m_prompt_tokens ?? 0),
    completionTokens: Number(r?.m_completion_tokens ?? 0),
    costUsd: r?.m_cost_usd ?? "0",
    latencyP50Ms: ms(latency[0]),
    latencyP95Ms: ms(latency[1]),
    latencyP99Ms: ms(latency[2]),
  };
}

const bucketOf = (r: RawMetrics & { t: number | string; g: string }): AnalyticsResult["buckets"][number] => ({
  timeSec: Number(r.t),
  group: r.g,
  metrics: metricsOf(r),
});

