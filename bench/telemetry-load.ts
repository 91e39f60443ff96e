/**
 * What request logging costs the gateway process at a fixed request rate: the gateway child (chDB
 * embedded, default settings) driven at BENCH_RATE (200/s) for BENCH_SECONDS (10) with a new prompt
 * each request; prints the gateway process's CPU (all threads, chDB's included) per request and in %
 * of a core, then again for the same idle time after the load (background merges).
 *   npm run build && node dist/bench/telemetry-load.js
 */
import type { LoadResult, LoadSpec } from "./load.js";
import { cpuDelta, startChild } from "./proc.js";

const RATE = Number(process.env.BENCH_RATE || 200);
const SECONDS = Number(process.env.BENCH_SECONDS || 10);
const fake = await startChild("fake upstream", "./fake-upstream.ts");
const gateway = await startChild("gateway", "./gateway-target.ts", { env: { BENCH_UPSTREAM: fake.info.url as string, SVC_LOG_LEVEL: "warn" }, execArgv: process.env.BENCH_CPU_PROF ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [] });
const load = await startChild("load generator", "./load.ts");
try {
  const spec: LoadSpec = {
    origin: gateway.info.url as string,
    path: "/v1/chat/completions",
    headers: { "content-type": "application/json", "x-svc-api-key": String(gateway.info.key) },
    body: JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content: "Hello from the telemetry load bench {{n}}" }] }),
    stream: false,
    mode: "rate",
    rate: RATE,
    concurrency: 64,
    seconds: SECONDS,
    unique: true,
  };
  await new Promise((r) => setTimeout(r, 2000)); // the store opens and migrates in the background
  const c0 = await gateway.cpu();
  const res = await load.call<LoadResult>("run", spec);
  const c1 = await gateway.cpu();
  await new Promise((r) => setTimeout(r, SECONDS * 1000));
  const c2 = await gateway.cpu();
  const during = cpuDelta(c0, c1);
  const after = cpuDelta(c1, c2);
  console.log(`${res.ok} requests at ${RATE}/s (p50 ${res.latP50.toFixed(2)} ms, p99 ${res.latP99.toFixed(2)} ms, ${res.errors} errors)`);
  console.log(`gateway CPU during the load: ${((during.us / 1000 / during.wallMs) * 100).toFixed(0)}% of a core, ${(during.us / Math.max(1, res.ok)).toFixed(0)} µs per request`);
  console.log(`gateway CPU in the ${SECONDS} s after it: ${((after.us / 1000 / after.wallMs) * 100).toFixed(0)}% of a core`);
} finally {
  await Promise.all([load.stop(), gateway.stop(), fake.stop()]);
}
