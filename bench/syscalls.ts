/**
 * System calls per request: runs a target (BENCH_PROFILE_TARGET=floor|gateway, default gateway)
 * under `strace -c -f` during one saturated non-stream (or BENCH_STREAM=1 stream) phase and prints
 * strace's summary with calls per request. Needs strace; run the built code:
 *   npm run build && node dist/bench/syscalls.js
 * BENCH_RATE=N loads at N req/s (open loop) instead; BENCH_HITS=1 sends the same prompt every time
 * (the cache-hit path).
 */
import { spawn } from "node:child_process";
import type { LoadResult, LoadSpec } from "./load.js";
import { benchLoad } from "./request.js";
import { startChild } from "./proc.js";

const SECONDS = Number(process.env.BENCH_SECONDS || 3);
const stream = process.env.BENCH_STREAM === "1";
const which = process.env.BENCH_PROFILE_TARGET === "floor" ? "floor" : "gateway";
const fake = await startChild("fake upstream", "./fake-upstream.ts");
const target = await startChild(which, which === "floor" ? "./floor-proxy.ts" : "./gateway-target.ts", { env: { BENCH_UPSTREAM: fake.info.url as string, SVC_LOG_LEVEL: "warn" } });
const load = await startChild("load generator", "./load.ts");
const RATE = Number(process.env.BENCH_RATE || 0);
const spec = (seconds: number): LoadSpec =>
  benchLoad(target.info.url, String(target.info.key ?? ""), { stream, rate: RATE, concurrency: 32, seconds, hits: process.env.BENCH_HITS === "1" });
await load.call("run", spec(2));
const strace = spawn("strace", ["-c", "-p", String(target.proc.pid), "-f"], { stdio: ["ignore", "ignore", "pipe"] });
let report = "";
strace.stderr.on("data", (d: Buffer) => (report += d.toString()));
await new Promise((r) => setTimeout(r, 500));
const res = await load.call<LoadResult>("run", spec(SECONDS));
strace.kill("SIGINT");
await new Promise((r) => strace.once("exit", r));
await Promise.all([target.stop(), load.stop()]);
await fake.stop();
const n = res.ok;
console.log(`${which}, ${RATE > 0 ? `${RATE}/s` : "saturated"} ${stream ? "stream" : "non-stream"}: ${n} requests (${Math.round(n / SECONDS)} req/s under strace)`);
for (const line of report.split("\n")) {
  const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+\s+)?(\w+)$/.exec(line);
  console.log(m ? `${line}   ${(Number(m[1]) / n).toFixed(2)}/req` : line);
}
