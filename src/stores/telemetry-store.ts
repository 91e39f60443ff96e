import type { ModeName } from "./registry-store.js";

/**
 * One request log as stored: the columns of `request_logs_<mode>`, in the shape JSONEachRow inserts
 * take (times as UTC text, costs as decimal text). The writer spools these rows to disk as they are,
 * so a replay inserts exactly what the first attempt would have.
 */
export interface LogRow {
  project_id: string;
  /** UTC, `YYYY-MM-DD HH:MM:SS.ffffff` (fewer fractional digits read as zeros). */
  time: string;
  request_id: string;
  key_id: string;
  endpoint: string;
  model: string;
  provider: string;
  stream: boolean;
  status: number;
  error_type: string;
  error_code: string;
  cache: string;
  user_id: string;
  metadata: Record<string, string>;
  prompt_tokens: number;
  completion_tokens: number;
  /** A plain decimal, at most 12 fractional digits. */
  cost_usd: string;
  cost_saved_usd: string;
  latency_ms: number;
  ttfb_ms: number;
  upstream_latency_ms: number;
  /** UTC, `YYYY-MM-DD HH:MM:SS`: when the bodies are dropped (column TTL). */
  bodies_expire_at: string;
  request_body: string;
  response_body: string;
}

/**
 * The rows of a batch less the repeats of a request (the same project and request id), the first
 * kept: what an insert stores of `rows`.
 */
export function distinctRows(rows: LogRow[]): LogRow[] {
  const seen = new Set<string>();
  return rows.filter((r) => {
    const k = `${r.project_id}\u0000${r.request_id}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

/** A log as read back: a LogRow with its time in epoch microseconds. */
export interface LogRecord extends Omit<LogRow, "time" | "bodies_expire_at"> {
  time_us: number;
}

/** Filters of a log listing; every one set must match. */
export interface LogFilter {
  /** Inclusive, epoch microseconds (log times are whole microseconds). */
  fromUs?: number;
  /** Exclusive, epoch microseconds. */
  toUs?: number;
  model?: string;
  status?: number;
  /** The hundreds digit of the status: 2 for 2xx. */
  statusClass?: number;
  endpoint?: string;
  cache?: string;
  userId?: string;
  metadata?: Array<[key: string, value: string]>;
}

/** Where a page starts: strictly after (older than) this log in newest-first order. */
export interface LogCursor {
  /** Epoch microseconds. */
  timeUs: number;
  requestId: string;
}

export interface ListLogsQuery {
  projectId: string;
  mode: ModeName;
  filter: LogFilter;
  limit: number;
  after?: LogCursor;
}

export type Granularity = "minute" | "hour" | "day";

/** The rollup dimensions; `metadata.<key>` groups by one metadata key. */
export type Dimension = "model" | "user" | "key" | "status" | `metadata.${string}`;

export interface AnalyticsQuery {
  projectId: string;
  /** Inclusive, epoch seconds, aligned to the granularity. */
  fromSec: number;
  /** Exclusive, epoch seconds, aligned to the granularity. */
  toSec: number;
  granularity: Granularity;
  groupBy?: Dimension;
  /** The most groups returned, by requests. */
  groupLimit: number;
}

export interface Metrics {
  requests: number;
  errors: number;
  cacheHits: number;
  promptTokens: number;
  completionTokens: number;
  /** A plain decimal. */
  costUsd: string;
  latencyP50Ms: number;
  latencyP95Ms: number;
  latencyP99Ms: number;
}

export interface AnalyticsResult {
  totals: Metrics;
  groups: Array<{ key: string; metrics: Metrics }>;
  groupsTruncated: boolean;
  /** By time, then group. */
  buckets: Array<{ timeSec: number; group: string; metrics: Metrics }>;
}

/** A migration file applied, or found applied. */
export interface AppliedMigration {
  version: string;
  name: string;
}

/**
 * Where request logs live: a ClickHouse server (cluster mode) or chDB in process (embedded); one SQL
 * serves both (clickhouse-telemetry-store.ts). Live and test logs are separate tables; analytics
 * read the live rollups only.
 *
 * Errors: a store that cannot reach its engine throws TelemetryUnavailableError (the writer spools,
 * readers answer 503); anything else the engine refused comes through as the engine's error.
 */
export interface TelemetryStore {
  /** Which engine: "chdb" or "clickhouse". */
  readonly engine: string;
  /**
   * Inserts one batch of one mode. Request ids repeated within the batch are dropped first. The
   * token makes the engine drop a retry of the batch wherever its first attempt landed (the log
   * table, each rollup) and insert it where it did not, so a retry must pass the same rows and the
   * same token. Returns the number of rows sent.
   */
  insert(mode: ModeName, rows: LogRow[], token: string): Promise<number>;
  /** A page of at most `limit` logs, newest first, without bodies, and whether more follow. */
  listLogs(q: ListLogsQuery): Promise<{ logs: LogRecord[]; more: boolean }>;
  /** One log with its bodies, or undefined. */
  getLog(projectId: string, mode: ModeName, requestId: string): Promise<LogRecord | undefined>;
  /** Totals and series of live traffic, from the rollups. */
  analytics(q: AnalyticsQuery): Promise<AnalyticsResult>;
  /** Connects (if not yet) and applies pending migrations; resolves to those applied by this call. */
  ready(): Promise<AppliedMigration[]>;
  close(): Promise<void>;
}

/** The store's engine cannot be reached (or opened): an outage, not a bad request. */
export class TelemetryUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TelemetryUnavailableError";
  }
}
