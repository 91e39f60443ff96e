/**
 * What the embedded telemetry engine (chDB in its own process) costs in CPU per logged request:
 * inserts batches through the telemetry store as the log writer does (one batch per flush interval,
 * each with its own deduplication token) at a fixed rate of requests per second, and reads the
 * engine process's CPU time from /proc before and after (inserts, merges and every other thread).
 *
 *   npm run build && node dist/bench/telemetry-engine-cpu.js
 *   BENCH_RATE     logged requests per second (default 1500, about the gateway's saturated rate here)
 *   BENCH_SECONDS  measured seconds (default 20, after 5 s of warm-up)
 *   BENCH_FLUSH_MS the writer's flush interval (default 1000, as SVC_TELEMETRY_FLUSH_INTERVAL_MS)
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startChdbProcess } from "../src/stores/chdb-process.js";
import { connectClickHouseServer } from "../src/stores/clickhouse-client.js";
import { createClickHouseTelemetryStore } from "../src/stores/clickhouse-telemetry-store.js";
import type { LogRow } from "../src/stores/telemetry-store.js";
import { logRow } from "../test/support/telemetry.js";

const RATE = Number(process.env.BENCH_RATE || 1500);
const SECONDS = Number(process.env.BENCH_SECONDS || 20);
const FLUSH_MS = Number(process.env.BENCH_FLUSH_MS || 1000);
const WARMUP_S = 5;

/** CPU seconds (user + system, all threads) of a process, from /proc/<pid>/stat. */
const cpuSeconds = (pid: number): number => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
};

const day = 86_400_000;
let n = 0;
/** A log row shaped like the gateway's for the bench's chat request, now (bodies included, the default). */
const row = (): LogRow => {
  n++;
  const now = Date.now();
  return logRow(n, {
    timeMs: now,
    project_id: `proj_bench${n % 3}`,
    request_id: `req_${randomUUID().replaceAll("-", "")}`,
    user_id: `user_${n % 50}`,
    metadata: { team: `t${n % 5}` },
    prompt_tokens: 20,
    completion_tokens: 18,
    cost_usd: "0.000230",
    latency_ms: 1.2,
    ttfb_ms: 1.1,
    upstream_latency_ms: 0.6,
    bodies_expire_at: new Date(now + 30 * day).toISOString().slice(0, 19).replace("T", " "),
    request_body: `{"model":"chat-4o","messages":[{"role":"user","content":"Hello from the svc overhead benchmark, please echo this short prompt back. ${n}"}]}`,
    response_body: `{"id":"chatcmpl-${n}","object":"chat.completion","created":1760000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the svc overhead benchmark, please echo this short prompt back. ${n}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":18,"total_tokens":38}}`,
  });
};

const dir = mkdtempSync(join(tmpdir(), "svc-bench-engine-"));
const engine = await startChdbProcess(dir);
const store = createClickHouseTelemetryStore({ engine: "chdb", connect: async () => ({ ...connectClickHouseServer(engine.url), engine: "chdb" }) });
await store.ready();
if (process.env.BENCH_SQL) {
  const admin = connectClickHouseServer(engine.url);
  for (const q of process.env.BENCH_SQL.split(";").map((x) => x.trim()).filter(Boolean)) await admin.client.command({ query: q });
  await admin.close();
}

const perBatch = Math.max(1, Math.round((RATE * FLUSH_MS) / 1000));
let insertMs = 0;
let inserts = 0;
const run = async (seconds: number) => {
  const end = Date.now() + seconds * 1000;
  let next = Date.now();
  while (Date.now() < end) {
    const batch = Array.from({ length: perBatch }, row);
    const t = performance.now();
    await store.insert("live", batch, randomUUID());
    insertMs += performance.now() - t;
    inserts++;
    next += FLUSH_MS;
    await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
  }
};
await run(WARMUP_S);
insertMs = 0;
inserts = 0;
const c0 = cpuSeconds(engine.pid);
const t0 = performance.now();
await run(SECONDS);
const c1 = cpuSeconds(engine.pid);
const wall = (performance.now() - t0) / 1000;
const rows = inserts * perBatch;
console.log(`telemetry engine (chDB process), ${RATE} logged requests/s in batches of ${perBatch} every ${FLUSH_MS} ms, ${SECONDS} s:`);
console.log(`  engine CPU ${(((c1 - c0) / wall) * 100).toFixed(1)}% of a core = ${(((c1 - c0) * 1e6) / rows).toFixed(0)} µs per logged request`);
console.log(`  insert round trip: mean ${(insertMs / inserts).toFixed(1)} ms`);
await store.close();
await engine.stop();
if (process.env.BENCH_KEEP) console.log(`  kept ${dir}`);
else rmSync(dir, { recursive: true, force: true });
