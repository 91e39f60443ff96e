import { Readable } from "node:stream";
import { finished } from "node:stream/promises";
import { setImmediate as turn } from "node:timers/promises";
import type { ClickHouseClient } from "@clickhouse/client";
import type { ClickHouseHandle } from "./clickhouse-client.js";
import { queryAnalytics } from "./clickhouse-analytics.js";
import { applyMigrations } from "./clickhouse-migrations.js";
import type { ModeName } from "./registry-store.js";
import {
  type AppliedMigration,
  distinctRows,
  type LogFilter,
  type LogRecord,
  type TelemetryStore,
  TelemetryUnavailableError,
} from "./telemetry-store.js";

export interface ClickHouseTelemetryStoreOptions {
  /** Opens the engine: connectClickHouseServer or openChdb (clickhouse-client.ts). */
  connect: () => Promise<ClickHouseHandle>;
  /** The engine's name before it is open, for logs. */
  engine: string;
  /** Where the migration files are (default: the package's deploy/clickhouse/migrations). */
  migrationsDir?: string;
  /** After a failed connect, calls fail at once for this long before the next try. */
  reconnectDelayMs?: number;
}

// Table names come from these maps only, never from a caller.
const LOGS: Record<ModeName, string> = { live: "request_logs_live", test: "request_logs_test" };
const LIST_COLUMNS = `project_id, toUnixTimestamp64Micro(time) AS time_us, request_id, key_id, endpoint, model, provider,
  stream, status, error_type, error_code, cache, user_id, metadata, prompt_tokens, completion_tokens,
  toString(cost_usd) AS cost_usd, toString(cost_saved_usd) AS cost_saved_usd, latency_ms, ttfb_ms, upstream_latency_ms`;

/**
 * Settings of every log insert. The token makes the engine drop a retried batch whose first
 * attempt landed, in the log table and (deduplicate_blocks_in_dependent_materialized_views) in
 * every rollup its views feed. The writer's batches are small: the views run one after the other,
 * which costs less than starting threads for them. chDB keeps settings for its session, so every
 * insert sets all of them.
 */
const insertSettings = (token: string) => ({
  insert_deduplicate: 1,
  insert_deduplication_token: token,
  deduplicate_blocks_in_dependent_materialized_views: 1,
  parallel_view_processing: 0,
  async_insert: 0,
}) as const;

/**
 * A batch's rows as JSON lines, a slice at a time with a turn of the event loop between slices:
 * encoding a whole batch at once (1500 rows at 1500 requests a second, about 10 ms) would hold up
 * every request waiting behind it.
 */
async function* jsonLines(rows: readonly unknown[], slice = 64): AsyncGenerator<string> {
  for (let i = 0; i < rows.length; i += slice) {
    if (i > 0) await turn();
    let text = "";
    for (const r of rows.slice(i, i + slice)) text += `${JSON.stringify(r)}\n`;
    yield text;
  }
}

/**
 * Engine errors that mean "try again later" rather than "this batch is wrong". A full or failing
 * disk is one: its batches are spooled and written once there is room, not set aside as bad data.
 */
const TRANSIENT = new Set([
  "TIMEOUT_EXCEEDED", "TOO_MANY_PARTS", "MEMORY_LIMIT_EXCEEDED", "TABLE_IS_READ_ONLY", "TOO_MANY_SIMULTANEOUS_QUERIES",
  "NETWORK_ERROR", "SOCKET_TIMEOUT", "ALL_CONNECTION_TRIES_FAILED", "KEEPER_EXCEPTION", "NO_ZOOKEEPER", "UNKNOWN_TABLE",
  "NOT_ENOUGH_SPACE", "CANNOT_WRITE_TO_FILE_DESCRIPTOR", "CANNOT_FSYNC", "CANNOT_OPEN_FILE", "CANNOT_ALLOCATE_MEMORY", "CANNOT_TRUNCATE_FILE",
]);
/** The same, told by the words of an error whose type names no cause (chDB's STD_EXCEPTION of a failed write). */
const NO_ROOM = /not enough space|no space left on device|ENOSPC|disk quota exceeded|read-only file system/i;

/** Whether an error of the engine's means the batch is wrong (refused), rather than the store unable to take it now. */
export const refusedByEngine = (e: unknown): boolean => engineError(e) && !TRANSIENT.has(e.type ?? "") && !NO_ROOM.test(e.message);

/** An error the engine itself answered with (ClickHouseError of either engine: the classes differ). */
const engineError = (e: unknown): e is Error & { code: string; type?: string } => {
  const code = (e as { code?: unknown } | undefined)?.code;
  return e instanceof Error && typeof code === "string" && /^\d+$/.test(code);
};

/**
 * The telemetry store over ClickHouse SQL, for both engines: a server through @clickhouse/client
 * over HTTP, or chDB in process through the same client (clickhouse-client.ts). Every value goes in
 * as a query parameter (`{name:Type}`); only table names, chosen from fixed maps, are spliced.
 *
 * The engine is opened, and migrations applied, on first use; a failure is an outage
 * (TelemetryUnavailableError) and the next call after `reconnectDelayMs` tries again, so a server
 * that is down at start, or a chDB directory this process cannot take yet, heals by itself. A
 * handle that reports itself stale (the embedded engine restarted on another port) is replaced by
 * a new one on the next call.
 */
export function createClickHouseTelemetryStore(opts: ClickHouseTelemetryStoreOptions): TelemetryStore {
  let handle: ClickHouseHandle | undefined;
  let opening: Promise<ClickHouseHandle> | undefined;
  let lastFailure: { at: number; err: TelemetryUnavailableError } | undefined;
  let closed = false;
  let engine = opts.engine;
  let migrated: AppliedMigration[] = [];

  const open = async (): Promise<ClickHouseHandle> => {
    let h: ClickHouseHandle | undefined;
    try {
      h = await opts.connect();
      migrated = await applyMigrations(h.client, opts.migrationsDir);
      return h;
    } catch (e) {
      await h?.close().catch(() => {});
      throw unavailable(e, "cannot open the telemetry store");
    }
  };

  const client = async (): Promise<ClickHouseClient> => {
    if (closed) throw new TelemetryUnavailableError("the telemetry store is closed");
    if (handle?.stale?.()) {
      // Calls still on the old client fail as the outage they are; the next ones reach the new address.
      void handle.close().catch(() => {});
      handle = undefined;
    }
    if (handle) return handle.client;
    if (!opening) {
      if (lastFailure && Date.now() - lastFailure.at < (opts.reconnectDelayMs ?? 1_000)) throw lastFailure.err;
      opening = open().then(
        (h) => {
          handle = h;
          engine = h.engine;
          lastFailure = undefined;
          return h;
        },
        (err: TelemetryUnavailableError) => {
          lastFailure = { at: Date.now(), err };
          throw err;
        },
      ).finally(() => {
        opening = undefined;
      });
    }
    return (await opening).client;
  };

  /** Runs a call on the engine; errors that are not the engine's judgement of the query are outages. */
  const run = async <T>(fn: (c: ClickHouseClient) => Promise<T>): Promise<T> => {
    const c = await client();
    try {
      return await fn(c);
    } catch (e) {
      if (refusedByEngine(e)) throw e;
      throw unavailable(e, "the telemetry store failed");
    }
  };

  const select = <R>(query: string, params: Record<string, unknown>): Promise<R[]> =>
    run(async (c) => (await c.query({ query, query_params: params, format: "JSONEachRow" })).json<R>());

  return {
    get engine() {
      return engine;
    },

    async ready() {
      await client();
      return migrated;
    },

    async insert(mode, rows, token) {
      const unique = distinctRows(rows);
      if (unique.length === 0) return 0;
      // No lookup of ids already stored: a retry must send the very batch its first attempt sent.
      // An attempt cut off mid-insert may have landed in the log table and not in every rollup
      // (the views' inserts are not atomic with it); the same rows under the same token are
      // dropped where they landed and inserted where they did not.
      await run(async (c) => {
        const r = await c.exec({ query: `INSERT INTO ${LOGS[mode]} FORMAT JSONEachRow`, values: Readable.from(jsonLines(unique)), clickhouse_settings: insertSettings(token) });
        r.stream.resume();
        await finished(r.stream);
      });
      return unique.length;
    },

    async listLogs(q) {
      const params: Record<string, unknown> = { project: q.projectId };
      const where = [`project_id = {project:String}`, ...filterSql(q.filter, params)];
      if (q.after) {
        params.cursor_us = q.after.timeUs;
        params.cursor_id = q.after.requestId;
        where.push(`time <= fromUnixTimestamp64Micro({cursor_us:Int64}, 'UTC')`);
        where.push(`(time, request_id) < (fromUnixTimestamp64Micro({cursor_us:Int64}, 'UTC'), {cursor_id:String})`);
      }
      // One row past the page says whether there is a next one. A duplicate the ReplacingMergeTree
      // has not merged away yet sits next to its twin in this order and is skipped here (cheaper
      // than LIMIT 1 BY in the query); when skipping leaves the page or its one row past short,
      // the rows are read again, twice as many, so that a next page is promised only when it has
      // a log in it.
      for (let fetch = q.limit + 1; ; fetch *= 2) {
        const rows = await select<RawLog>(
          `SELECT ${LIST_COLUMNS} FROM ${LOGS[q.mode]} WHERE ${where.join(" AND ")}
           ORDER BY time DESC, request_id DESC LIMIT {limit:UInt32}`,
          { ...params, limit: fetch },
        );
        const logs: LogRecord[] = [];
        let more = false;
        for (let i = 0; i < rows.length; i++) {
          const r = rows[i]!;
          const prev = rows[i - 1];
          if (prev && prev.request_id === r.request_id && Number(prev.time_us) === Number(r.time_us)) continue;
          if (logs.length === q.limit) {
            more = true;
            break;
          }
          logs.push(toRecord(r, false));
        }
        if (more || rows.length < fetch) return { logs, more };
      }
    },

    async getLog(projectId, mode, requestId) {
      const rows = await select<RawLog>(
        `SELECT ${LIST_COLUMNS}, request_body, response_body FROM ${LOGS[mode]}
         WHERE project_id = {project:String} AND request_id = {id:String} ORDER BY time DESC LIMIT 1`,
        { project: projectId, id: requestId },
      );
      return rows[0] && toRecord(rows[0], true);
    },

    analytics: (q) => queryAnalytics(select, q),

    async close() {
      closed = true;
      const h = handle ?? (await opening?.catch(() => undefined));
      handle = undefined;
      await h?.close();
    },
  };
}

function filterSql(f: LogFilter, params: Record<string, unknown>): string[] {
  const out: string[] = [];
  if (f.fromUs !== undefined) {
    params.from_us = f.fromUs;
    out.push(`time >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')`);
  }
  if (f.toUs !== undefined) {
    params.to_us = f.toUs;
    out.push(`time < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')`);
  }
  const eq = (column: string, name: string, type: string, v: unknown) => {
    if (v === undefined) return;
    params[name] = v;
    out.push(`${column} = {${name}:${type}}`);
  };
  eq("model", "model", "String", f.model);
  eq("status", "status", "UInt16", f.status);
  eq("intDiv(status, 100)", "status_class", "UInt8", f.statusClass);
  eq("endpoint", "endpoint", "String", f.endpoint);
  eq("cache", "cache", "String", f.cache);
  eq("user_id", "user_id", "String", f.userId);
  (f.metadata ?? []).forEach(([k, v], i) => {
    params[`meta_k${i}`] = k;
    params[`meta_v${i}`] = v;
    // mapContains and has(mapValues) let the bloom-filter indexes skip granules; the last term is
    // the actual pair test.
    out.push(`mapContains(metadata, {meta_k${i}:String}) AND has(mapValues(metadata), {meta_v${i}:String}) AND metadata[{meta_k${i}:String}] = {meta_v${i}:String}`);
  });
  return out;
}

interface RawLog extends Omit<LogRecord, "time_us" | "status" | "prompt_tokens" | "completion_tokens" | "latency_ms" | "ttfb_ms" | "upstream_latency_ms" | "stream"> {
  time_us: number | string;
  status: number | string;
  stream: boolean | number;
  prompt_tokens: number | string;
  completion_tokens: number | string;
  latency_ms: number | string;
  ttfb_ms: number | string;
  upstream_latency_ms: number | string;
}

// 64-bit integers arrive as JSON strings from a server (output_format_json_quote_64bit_integers)
// and as numbers from chDB: Number() reads both.
function toRecord(r: RawLog, bodies: boolean): LogRecord {
  return {
    project_id: r.project_id,
    time_us: Number(r.time_us),
    request_id: r.request_id,
    key_id: r.key_id,
    endpoint: r.endpoint,
    model: r.model,
    provider: r.provider,
    stream: Boolean(r.stream),
    status: Number(r.status),
    error_type: r.error_type,
    error_code: r.error_code,
    cache: r.cache,
    user_id: r.user_id,
    metadata: r.metadata ?? {},
    prompt_tokens: Number(r.prompt_tokens),
    completion_tokens: Number(r.completion_tokens),
    cost_usd: r.cost_usd,
    cost_saved_usd: r.cost_saved_usd,
    latency_ms: Number(r.latency_ms),
    ttfb_ms: Number(r.ttfb_ms),
    upstream_latency_ms: Number(r.upstream_latency_ms),
    request_body: bodies ? r.request_body : "",
    response_body: bodies ? r.response_body : "",
  };
}

function unavailable(e: unknown, what: string): TelemetryUnavailableError {
  if (e instanceof TelemetryUnavailableError) return e;
  return new TelemetryUnavailableError(`${what}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
}
