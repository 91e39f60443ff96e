/**
 * A/B of two gateways side by side in one run: saturated phases alternate between them (A B, then
 * B A, ...), so the machine's drift hits both alike. On this machine the same build reads ±30%
 * between whole bench runs, which hides a change of a few percent; alternating phases does not.
 *
 *   npm run build && node dist/bench/ab.js
 *   BENCH_AB_BASE=dir        B is the gateway-target.js of another build's dist/bench (e.g. a
 *                            worktree of the previous commit, built); default: this build for both
 *   BENCH_AB_ARGS_A / _B     extra node options for A / B, space-separated (e.g. V8 flags)
 *   BENCH_AB_ENV_A / _B      extra environment for A / B, space-separated NAME=VALUE pairs (e.g.
 *                            the gateway child's settings: BENCH_AB_ENV_B="BENCH_CACHE_OFF=1")
 *   BENCH_ROUNDS             rounds (default 6), BENCH_SECONDS per phase (default 3)
 *   BENCH_AB_GAP_MS          a pause before each phase (default 0): longer than the flush interval
 *                            keeps one gateway's log inserts out of the other's phase (for p99)
 *   BENCH_STREAM=1           stream requests instead of non-stream
 *   BENCH_CONCURRENCY        closed-loop connections (default 32)
 *   BENCH_HITS=1             the same prompt every time: the cache-hit path instead of the miss path
 *   BENCH_RATE=N             open loop at N req/s instead of saturating: compares p50 and p99 latency too
 *
 * Prints per-round throughput (or p50 latency) and CPU µs per request of each, and the medians of B / A.
 */
import { resolve } from "node:path";
import { cpuDelta, startChild, type Child } from "./proc.js";
import type { LoadResult, LoadSpec } from "./load.js";
import { benchLoad } from "./request.js";
import { median } from "./stats.js";

const env = process.env;
const ROUNDS = Number(env.BENCH_ROUNDS || 6);
const SECONDS = Number(env.BENCH_SECONDS || 3);
/** A pause before each phase, so the other gateway's last log flush (and its engine's insert) lands outside it. */
const GAP_MS = Number(env.BENCH_AB_GAP_MS || 0);
const CONCURRENCY = Number(env.BENCH_CONCURRENCY || 32);
const stream = env.BENCH_STREAM === "1";
const hits = env.BENCH_HITS === "1";
const RATE = Number(env.BENCH_RATE || 0);
const args = (v: string | undefined) => (v ?? "").split(" ").filter(Boolean);
const envOf = (v: string | undefined): Record<string, string> =>
  Object.fromEntries(args(v).map((pair) => {
    const eq = pair.indexOf("=");
    if (eq < 1) throw new Error(`BENCH_AB_ENV_*: expected NAME=VALUE, got '${pair}'`);
    return [pair.slice(0, eq), pair.slice(eq + 1)];
  }));

const children: Child[] = [];
try {
  const fake = await startChild("fake upstream", "./fake-upstream.ts");
  children.push(fake);
  const childEnv = { BENCH_UPSTREAM: fake.info.url as string, SVC_LOG_LEVEL: env.SVC_LOG_LEVEL ?? "warn" };
  const bScript = env.BENCH_AB_BASE ? resolve(env.BENCH_AB_BASE, "gateway-target.js") : "./gateway-target.ts";
  const [a, b, load] = await Promise.all([
    startChild("gateway A", "./gateway-target.ts", { env: { ...childEnv, ...envOf(env.BENCH_AB_ENV_A) }, execArgv: args(env.BENCH_AB_ARGS_A) }),
    startChild("gateway B", bScript, { env: { ...childEnv, ...envOf(env.BENCH_AB_ENV_B) }, execArgv: args(env.BENCH_AB_ARGS_B) }),
    startChild("load generator", "./load.ts"),
  ]);
  children.push(a, b, load);
  console.log(`A: this build ${env.BENCH_AB_ARGS_A ?? ""} ${env.BENCH_AB_ENV_A ?? ""}`);
  console.log(`B: ${env.BENCH_AB_BASE ? bScript : "this build"} ${env.BENCH_AB_ARGS_B ?? ""} ${env.BENCH_AB_ENV_B ?? ""}`);
  const how = RATE > 0 ? `${RATE} req/s` : `saturated (x${CONCURRENCY})`;
  console.log(`${ROUNDS} rounds of ${SECONDS} s ${how} ${stream ? "stream" : "non-stream"} ${hits ? "cache-hit" : "cache-miss"} phases, alternating.\n`);

  const spec = (g: Child, seconds: number): LoadSpec =>
    benchLoad(g.info.url as string, g.info.key as string, { stream, rate: RATE, concurrency: CONCURRENCY, seconds, hits });
  for (const g of [a, b]) await load.call("run", spec(g, 2)); // warm-up

  type Row = { rps: number; p50: number; p99: number; cpu: number; engine: number };
  const rows: Record<"A" | "B", Row[]> = { A: [], B: [] };
  for (let round = 1; round <= ROUNDS; round++) {
    const order: Array<["A" | "B", Child]> = round % 2 ? [["A", a], ["B", b]] : [["B", b], ["A", a]];
    const line: string[] = [];
    for (const [name, g] of order) {
      if (GAP_MS > 0) await new Promise((r) => setTimeout(r, GAP_MS));
      const c0 = await g.cpu();
      const res = await load.call<LoadResult>("run", spec(g, SECONDS));
      const d = cpuDelta(c0, await g.cpu());
      const n = Math.max(1, res.ok + res.errors);
      rows[name].push({ rps: res.throughput, p50: res.latP50, p99: res.latP99, cpu: d.us / n, engine: d.childrenUs / n });
      const speed = RATE > 0 ? `p50 ${res.latP50.toFixed(3)} p99 ${res.latP99.toFixed(2)} ms` : `${res.throughput.toFixed(0).padStart(5)} req/s`;
      line.push(`${name} ${speed} ${(d.us / n).toFixed(0).padStart(4)} (+${(d.childrenUs / n).toFixed(0)}) µs/req${res.errors ? ` ! ${res.errors} errors` : ""}`);
    }
    console.log(`  round ${round}  ${line.join("   ")}`);
  }
  const ratio = (f: (r: Row) => number) => median(rows.A.map((r, i) => f(rows.B[i]!) / f(r)));
  const med = (name: "A" | "B", f: (r: Row) => number) => median(rows[name].map(f));
  const speed = (name: "A" | "B") => (RATE > 0 ? `p50 ${med(name, (r) => r.p50).toFixed(3)} p99 ${med(name, (r) => r.p99).toFixed(2)} ms` : `${med(name, (r) => r.rps).toFixed(0)} req/s`);
  console.log(`\nmedian  A ${speed("A")} ${med("A", (r) => r.cpu).toFixed(0)} µs/req   B ${speed("B")} ${med("B", (r) => r.cpu).toFixed(0)} µs/req`);
  const speedRatio = RATE > 0 ? `p50 latency ${ratio((r) => r.p50).toFixed(3)}, p99 ${ratio((r) => r.p99).toFixed(3)}` : `throughput ${ratio((r) => r.rps).toFixed(3)}`;
  console.log(`B / A per round, median: ${speedRatio}, gateway CPU per request ${ratio((r) => r.cpu).toFixed(3)}`);
} finally {
  await Promise.all(children.map((c) => c.stop().catch(() => {})));
}
