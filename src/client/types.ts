/** The JSON shapes of the management API (docs/management-api.md), as the client returns them. */

export interface Page<T> {
  object: "list";
  data: T[];
  has_more: boolean;
  next_cursor: string | null;
}

export interface LogRecord {
  id: string;
  object: "request_log";
  time: string;
  project_id: string;
  key_id: string;
  key_mode: "live" | "test";
  endpoint: string;
  model: string;
  provider: string;
  stream: boolean;
  status: number;
  error: { type: string; code: string } | null;
  cache: "HIT" | "MISS";
  user_id: string | null;
  metadata: Record<string, string>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  cost_usd: string;
  cost_saved_usd: string;
  latency_ms: number;
  ttfb_ms: number;
  upstream_latency_ms: number;
  /** Only in the full record (logs.get), "" when the project does not log bodies. */
  request_body?: string;
  response_body?: string;
}

export type LogPage = Page<LogRecord>;

export interface LogQuery {
  limit?: number;
  cursor?: string;
  start?: Date | string | number;
  end?: Date | string | number;
  model?: string;
  /** An HTTP status (429) or a class ("4xx"). */
  status?: number | string;
  endpoint?: "chat.completions" | "messages";
  cache?: "hit" | "miss";
  userId?: string;
  /** Only logs whose X-Svc-Metadata held all these pairs. */
  metadata?: Record<string, string>;
}

export interface UsageMetrics {
  requests: number;
  errors: number;
  cache_hits: number;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  cost_usd: string;
  latency_ms: { p50: number; p95: number; p99: number };
}

export interface AnalyticsQuery {
  start?: Date | string | number;
  end?: Date | string | number;
  granularity?: "minute" | "hour" | "day";
  /** model, user, key, status, or metadata.<key>. */
  groupBy?: string;
}

export interface AnalyticsResult {
  object: "analytics";
  start: string;
  end: string;
  granularity: "minute" | "hour" | "day";
  group_by: string | null;
  totals: UsageMetrics;
  groups: Array<UsageMetrics & { key: string }>;
  groups_truncated: boolean;
  series: Array<UsageMetrics & { time: string; group?: string }>;
}

export interface PromptRecord {
  object: "prompt";
  name: string;
  version: number;
  description: string;
  created_at: string;
  /** Only from prompts.get. */
  content?: string;
}
