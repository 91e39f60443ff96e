/**
 * The telemetry benchmark (`npm run bench:telemetry`): seeds synthetic request logs into chDB (the
 * embedded engine) and measures what the management API will ask of it.
 *
 *   1. Ingest: BENCH_ROWS logs (default 10 million, over the last 30 days, 10 projects) generated
 *      in the engine (INSERT ... SELECT FROM numbers(), in chunks), through the log table and every
 *      rollup view, as rows/s; then the client path the writer uses (JSON batches through
 *      @clickhouse/client, with the dedupe lookup per batch), as rows/s.
 *   2. Analytics: GetAnalytics for a 30-day hourly series of one project, ungrouped (the target)
 *      and grouped by model and by user, through the TelemetryService in process.
 *   3. Logs: ListLogs pages of 50 (no filter, filtered, metadata filter, a second page by cursor).
 *
 *   BENCH_ROWS         rows seeded (default 10000000; e.g. 500000 for a smoke run)
 *   BENCH_CLIENT_ROWS  rows sent through the client path (default 200000)
 *   BENCH_RUNS         timed runs per query (default 30)
 *   BENCH_DIR          data dir to use (default a temporary one, deleted at the end)
 *
 * Targets on the 2-core dev machine (printed, never a pass/fail): ingest above 100k rows/s,
 * analytics under 100 ms, a logs page under 50 ms (judged at p99). Exit code 1 only when the bench
 * could not run.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { createDirectClient } from "../src/core/direct-client.js";
import { createTelemetryService } from "../src/core/telemetry/telemetry-service.js";
import { KeyMode } from "../src/gen/svc/common/v1/key_mode_pb.js";
import { AnalyticsGranularity, AnalyticsGroupBy, TelemetryService } from "../src/gen/svc/telemetry/v1/telemetry_service_pb.js";
import { openChdb } from "../src/stores/clickhouse-client.js";
import { applyMigrations } from "../src/stores/clickhouse-migrations.js";
import { createClickHouseTelemetryStore } from "../src/stores/clickhouse-telemetry-store.js";
import { createFilePromptStore } from "../src/stores/file-prompt-store.js";
import type { LogRow } from "../src/stores/telemetry-store.js";
import { quantile, sortedCopy } from "./stats.js";

const env = process.env;
const ROWS = Number(env.BENCH_ROWS || 10_000_000);
const CLIENT_ROWS = Number(env.BENCH_CLIENT_ROWS || 200_000);
const RUNS = Number(env.BENCH_RUNS || 30);
const CHUNK = 1_000_000;
/** Rows per block the engine inserts (and every view aggregates) at a time. */
const BLOCK = Number(env.BENCH_BLOCK || 262_144);
const PROJECTS = 10;
const DAY_MS = 86_400_000;

const dir = env.BENCH_DIR || mkdtempSync(join(tmpdir(), "svc-bench-telemetry-"));
const handle = await openChdb(join(dir, "telemetry"));
const ch = handle.client;
const store = createClickHouseTelemetryStore({ engine: "chdb", connect: async () => handle });
const prompts = await createFilePromptStore(dir);
const telemetry = createDirectClient(TelemetryService, createTelemetryService({ store, writer: { record() {} }, prompts, checkProject: async () => {}, bodyTtlDays: 30 }));
const fmt = (n: number) => Math.round(n).toLocaleString("en-US");
const ms = (n: number) => n.toFixed(1);
const verdict = (ok: boolean) => (ok ? "MEETS" : "MISSES");

try {
  await applyMigrations(ch);
  const nowMs = Math.floor(Date.now() / 60_000) * 60_000;
  const fromMs = nowMs - 30 * DAY_MS;
  console.log(`telemetry bench: chDB at ${dir}, ${fmt(ROWS)} rows over 30 days, ${PROJECTS} projects`);

  // 1a. Server-side ingest: the engine generates the rows; every view runs on every block.
  const seedStarted = performance.now();
  for (let start = 0; start < ROWS; start += CHUNK) {
    const count = Math.min(CHUNK, ROWS - start);
    await ch.command({
      query: `INSERT INTO request_logs_live
        SELECT
          concat('proj_bench_', toString(number % ${PROJECTS})) AS project_id,
          fromUnixTimestamp64Milli(toInt64(${fromMs} + intDiv(number * ${30 * DAY_MS}, ${ROWS})), 'UTC') AS time,
          concat('req_', lower(hex(sipHash128(number)))) AS request_id,
          concat('key_', toString(number % 20)) AS key_id,
          ['/v1/chat/completions', '/v1/messages'][number % 2 + 1] AS endpoint,
          ['chat-4o', 'chat-4o-mini', 'chat-4', 'assistant-3-5-sonnet-20241022', 'assistant-3-haiku-20240307'][number % 5 + 1] AS model,
          ['openai', 'anthropic'][number % 2 + 1] AS provider,
          number % 3 = 0 AS stream,
          [200, 200, 200, 200, 200, 200, 200, 200, 429, 500][number % 10 + 1] AS status,
          if(status = 200, '', 'api_error') AS error_type,
          if(status = 200, '', 'upstream_error') AS error_code,
          if(number % 4 = 0, 'HIT', 'MISS') AS cache,
          concat('user_', toString(intDiv(number, 7) % 1000)) AS user_id,
          map('env', ['prod', 'staging'][number % 2 + 1], 'team', concat('team_', toString(number % 7))) AS metadata,
          100 + number % 900 AS prompt_tokens,
          50 + number % 400 AS completion_tokens,
          toDecimal64((100 + number % 900) * 0.0000025, 12) AS cost_usd,
          toDecimal64(0, 12) AS cost_saved_usd,
          50 + (sipHash64(number) % 2000) AS latency_ms,
          20 AS ttfb_ms,
          45 AS upstream_latency_ms,
          toDateTime(time) + INTERVAL 30 DAY AS bodies_expire_at,
          concat('{"model":"chat-4o","messages":[{"role":"user","content":"hello number ', toString(number), '"}]}') AS request_body,
          '{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Echo"}}]}' AS response_body
        FROM numbers(${start}, ${count})`,
      clickhouse_settings: {
        insert_deduplication_token: `bench-seed-${start}`,
        parallel_view_processing: 1,
        min_insert_block_size_rows: String(BLOCK),
        max_insert_block_size: String(BLOCK),
      },
    });
    process.stdout.write(`\r  seeded ${fmt(start + count)} rows`);
  }
  const seedSeconds = (performance.now() - seedStarted) / 1000;
  const ingest = ROWS / seedSeconds;
  console.log(`\r  ingest (server-side, logs + rollups): ${fmt(ROWS)} rows in ${seedSeconds.toFixed(1)} s = ${fmt(ingest)} rows/s: ${verdict(ingest > 100_000)} (above 100k rows/s)`);

  // 1b. The writer's path: JSON batches through the client, each with its dedupe lookup.
  const batch = 1000;
  const clientStarted = performance.now();
  for (let i = 0; i < CLIENT_ROWS; i += batch) {
    const rows: LogRow[] = [];
    for (let j = i; j < Math.min(i + batch, CLIENT_ROWS); j++) {
      const t = new Date(nowMs - CLIENT_ROWS + j).toISOString().slice(0, 23).replace("T", " ");
      rows.push({
        project_id: "proj_bench_client", time: t, request_id: `req_client_${j}`, key_id: "key_1", endpoint: "/v1/chat/completions",
        model: "chat-4o", provider: "openai", stream: false, status: 200, error_type: "", error_code: "", cache: "MISS",
        user_id: `user_${j % 100}`, metadata: { env: "prod" }, prompt_tokens: 120, completion_tokens: 80, cost_usd: "0.0011",
        cost_saved_usd: "0", latency_ms: 300 + (j % 500), ttfb_ms: 40, upstream_latency_ms: 280, bodies_expire_at: t.slice(0, 19),
        request_body: `{"model":"chat-4o","messages":[{"role":"user","content":"hello ${j}"}]}`, response_body: '{"choices":[]}',
      });
    }
    await store.insert("live", rows, `bench-client-${i}`);
  }
  const clientRate = CLIENT_ROWS / ((performance.now() - clientStarted) / 1000);
  console.log(`  ingest (client batches of ${batch}, the writer's path): ${fmt(CLIENT_ROWS)} rows = ${fmt(clientRate)} rows/s`);

  // Background merges of the seeded parts would perturb the timings: let them settle (at most 60 s).
  const settleEnd = Date.now() + 60_000;
  while (Date.now() < settleEnd) {
    const [m] = await (await ch.query({ query: "SELECT count() AS n FROM system.merges", format: "JSONEachRow" })).json<{ n: number | string }>();
    if (Number(m?.n ?? 0) === 0) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  const parts = await (await ch.query({
    query: "SELECT table, count() AS parts, sum(rows) AS rows FROM system.parts WHERE active AND database = currentDatabase() GROUP BY table ORDER BY table",
    format: "JSONEachRow",
  })).json<{ table: string; parts: number; rows: number }>();
  console.log(`  after merges: ${parts.map((p) => `${p.table} ${fmt(Number(p.rows))} rows/${p.parts} parts`).join(", ")}`);

  const timed = async (label: string, fn: (i: number) => Promise<unknown>, target: number) => {
    await fn(0); // warm
    const xs: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const t = performance.now();
      await fn(i + 1);
      xs.push(performance.now() - t);
    }
    const s = sortedCopy(xs);
    const p50 = quantile(s, 0.5);
    const p99 = quantile(s, 0.99);
    console.log(`  ${label}: p50 ${ms(p50)} ms, p99 ${ms(p99)} ms: ${verdict(p99 < target)} (under ${target} ms)`);
  };

  // 2. Analytics: a 30-day hourly series of one project (1M logs at the default size).
  const project = (i: number) => `proj_bench_${i % PROJECTS}`;
  const range = { keyMode: KeyMode.LIVE, startTime: timestampFromMs(nowMs - 30 * DAY_MS), endTime: timestampFromMs(nowMs), granularity: AnalyticsGranularity.HOUR };
  const series = await telemetry.getAnalytics({ projectId: project(0), ...range });
  console.log(`analytics (GetAnalytics, 30 days hourly, ${series.buckets.length} buckets, ${fmt(Number(series.totals!.requests))} requests of one project):`);
  await timed("ungrouped", (i) => telemetry.getAnalytics({ projectId: project(i), ...range }), 100);
  await timed("grouped by model", (i) => telemetry.getAnalytics({ projectId: project(i), ...range, groupBy: AnalyticsGroupBy.MODEL }), 100);
  await timed("grouped by user (1000 users, top 20)", (i) => telemetry.getAnalytics({ projectId: project(i), ...range, groupBy: AnalyticsGroupBy.USER }), 100);
  await timed("grouped by metadata team, daily", (i) => telemetry.getAnalytics({ projectId: project(i), ...range, granularity: AnalyticsGranularity.DAY, groupBy: AnalyticsGroupBy.METADATA, metadataKey: "team" }), 100);

  // 3. Logs pages of 50, newest first.
  console.log("logs (ListLogs, pages of 50):");
  const list = (i: number, extra: object = {}) => telemetry.listLogs({ projectId: project(i), keyMode: KeyMode.LIVE, pageSize: 50, ...extra });
  await timed("first page", (i) => list(i), 50);
  await timed("model + status class filter", (i) => list(i, { model: "assistant-3-haiku-20240307", statusClass: "5xx" }), 50);
  await timed("metadata team=team_3", (i) => list(i, { metadata: { team: "team_3" } }), 50);
  await timed("user filter", (i) => list(i, { userId: `user_${i % 1000}` }), 50);
  await timed("a filter nothing matches (scans the project)", (i) => list(i, { model: "chat-4", status: 500 }), 50);
  const tokens = await Promise.all(Array.from({ length: PROJECTS }, async (_, i) => (await list(i)).nextPageToken));
  await timed("second page (cursor)", (i) => list(i, { pageToken: tokens[i % PROJECTS] }), 50);
  const ids = (await list(0)).logs.map((l) => l.requestId);
  await timed("one log by id (GetLog)", (i) => telemetry.getLog({ projectId: project(0), keyMode: KeyMode.LIVE, requestId: ids[i % ids.length]! }), 50);
} catch (e) {
  console.error(e);
  process.exitCode = 1;
} finally {
  await store.close();
  if (!env.BENCH_DIR) rmSync(dir, { recursive: true, force: true });
}
