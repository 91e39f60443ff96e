/**
 * The overhead benchmark (`npm run bench`): the fake upstream alone (direct), a bare pass-through
 * proxy (floor) and the real gateway with auth on (gateway), driven side by side in one run over
 * loopback HTTP, each in its own process, interleaved over rounds. See bench/README.md.
 *
 *   BENCH_SECONDS      seconds per measured phase (default 4)
 *   BENCH_ROUNDS       rounds of direct -> floor -> gateway (default 3)
 *   BENCH_QUICK=1      smoke run (~20 s): 1 round of 1 s phases
 *   BENCH_RATE         open-loop rate, requests per second (default 200)
 *   BENCH_CONCURRENCY  closed-loop connections (default 32)
 *   BENCH_CPU_PROF=dir run the gateway child under --cpu-prof, profiles written to dir
 *   BENCH_GATEWAY_NODE_ARGS  extra node options for the gateway child, space-separated (e.g. V8 heap flags)
 *
 * It reports; it never fails on a number (benchmarks report, tests judge). Exit code 1 only when
 * the bench itself could not run.
 */
import os from "node:os";
import { cpuDelta, startChild, type Child } from "./proc.js";
import type { LoadResult, LoadSpec } from "./load.js";
import { benchChatRequest } from "./request.js";
import { median } from "./stats.js";

const env = process.env;
const quick = env.BENCH_QUICK === "1";
const num = (name: string, fallback: number) => {
  const v = env[name];
  if (v === undefined || v === "") return fallback;
  const n = Number(v);
  if (!(n > 0)) throw new Error(`${name} must be a positive number, got ${JSON.stringify(v)}`);
  return n;
};
const SECONDS = num("BENCH_SECONDS", quick ? 1 : 4);
const ROUNDS = Math.round(num("BENCH_ROUNDS", quick ? 1 : 3));
const RATE = num("BENCH_RATE", 200);
const CONCURRENCY = Math.round(num("BENCH_CONCURRENCY", 32));
/** Warm-up per target and variant before its phases: longer in the first round (JIT, heap sizing). */
const WARMUP_S = quick ? 0.3 : 0.5;
const FIRST_WARMUP_S = quick ? 0.3 : 1.5;

type TargetName = "direct" | "floor" | "gateway";
const TARGETS: TargetName[] = ["direct", "floor", "gateway"];

interface Phase {
  id: string;
  label: string;
  mode: "rate" | "closed";
  stream: boolean;
}
const PHASES: Phase[] = [
  { id: "rate-json", label: `rate ${RATE}/s  non-stream`, mode: "rate", stream: false },
  { id: "rate-sse", label: `rate ${RATE}/s  stream`, mode: "rate", stream: true },
  { id: "sat-json", label: `saturate x${CONCURRENCY} non-stream`, mode: "closed", stream: false },
  { id: "sat-sse", label: `saturate x${CONCURRENCY} stream`, mode: "closed", stream: true },
];

interface Sample {
  load: LoadResult;
  /** CPU µs per completed request of the target process (the fake itself for direct). */
  targetUsPerReq: number;
  /** CPU µs per completed request of the target's child processes (the gateway's embedded telemetry engine). */
  engineUsPerReq: number;
  /** CPU µs per completed request of the fake upstream process (same as target for direct). */
  upstreamUsPerReq: number;
  /** CPU utilisation over the phase, percent of one core: load generator, upstream, target. */
  loadPct: number;
  upstreamPct: number;
  targetPct: number;
}

async function main(): Promise<void> {
  const started = performance.now();
  const children: Child[] = [];
  const stopAll = () => Promise.all(children.map((c) => c.stop().catch(() => {})));
  process.once("SIGINT", () => void stopAll().then(() => process.exit(130)));
  try {
    const fake = await startChild("fake upstream", "./fake-upstream.ts");
    children.push(fake);
    const upstream = fake.info.url as string;
    const childEnv = { BENCH_UPSTREAM: upstream, SVC_LOG_LEVEL: env.SVC_LOG_LEVEL ?? "warn" };
    const profArgs = env.BENCH_CPU_PROF ? ["--cpu-prof", `--cpu-prof-dir=${env.BENCH_CPU_PROF}`] : [];
    profArgs.push(...(env.BENCH_GATEWAY_NODE_ARGS ?? "").split(" ").filter(Boolean));
    const [floor, gateway, load] = await Promise.all([
      startChild("floor proxy", "./floor-proxy.ts", { env: childEnv }),
      startChild("gateway", "./gateway-target.ts", { env: childEnv, execArgv: profArgs }),
      startChild("load generator", "./load.ts"),
    ]);
    children.push(floor, gateway, load);

    const procOf: Record<TargetName, Child> = { direct: fake, floor, gateway };
    const key = gateway.info.key as string;
    // Every request new: the gateway's cache (on, as by default) looks up, misses and stores each
    // one, so the pass-through path is what is measured, never a cached answer.
    const specBase = (t: TargetName, stream: boolean) => benchChatRequest(procOf[t].info.url as string, key, stream);

    printHeader();
    const samples: Record<TargetName, Record<string, Sample[]>> = { direct: {}, floor: {}, gateway: {} };
    for (let round = 1; round <= ROUNDS; round++) {
      for (const t of TARGETS) {
        const target = procOf[t];
        // Warm-up: JIT, connection pools (ours and the target's), not recorded.
        for (const stream of [false, true]) {
          const w = await load.call<LoadResult>("run", { ...specBase(t, stream), mode: "closed", concurrency: 8, seconds: round === 1 ? FIRST_WARMUP_S : WARMUP_S } satisfies LoadSpec);
          if (w.errors) console.log(`  ! ${t} warm-up (${stream ? "stream" : "non-stream"}): ${w.errors} errors, e.g. ${w.errorSamples[0]}`);
        }
        for (const ph of PHASES) {
          const spec: LoadSpec = {
            ...specBase(t, ph.stream),
            mode: ph.mode,
            rate: RATE,
            concurrency: ph.mode === "closed" ? CONCURRENCY : 64,
            seconds: SECONDS,
          };
          const [u0, t0] = await Promise.all([fake.cpu(), target.cpu()]);
          const res = await load.call<LoadResult>("run", spec);
          const [u1, t1] = await Promise.all([fake.cpu(), target.cpu()]);
          const up = cpuDelta(u0, u1);
          const tg = cpuDelta(t0, t1);
          const n = Math.max(1, res.ok + res.errors);
          const s: Sample = {
            load: res,
            targetUsPerReq: tg.us / n,
            engineUsPerReq: tg.childrenUs / n,
            upstreamUsPerReq: up.us / n,
            loadPct: (res.cpuUs / 1000 / (res.elapsedS * 1000)) * 100,
            upstreamPct: (up.us / 1000 / up.wallMs) * 100,
            targetPct: (tg.us / 1000 / tg.wallMs) * 100,
          };
          (samples[t][ph.id] ??= []).push(s);
          const flag = res.errors ? `  ! ${res.errors} errors` : "";
          const extra = ph.mode === "rate" ? `p50 ${ms(res.latP50)} p99 ${ms(res.latP99)}${ph.stream ? ` ttfb p50 ${ms(res.ttfbP50)}` : ""}` : `${res.throughput.toFixed(0)} req/s`;
          console.log(`  round ${round}/${ROUNDS}  ${t.padEnd(7)} ${ph.label.padEnd(24)} ${extra.padEnd(34)} cpu ${s.targetUsPerReq.toFixed(0)} µs/req${flag}`);
        }
      }
    }
    report(samples);
    console.log(`\nTotal bench time ${((performance.now() - started) / 1000).toFixed(0)} s.`);
  } finally {
    await stopAll();
  }
}

const ms = (x: number) => (Number.isNaN(x) ? "-" : x.toFixed(2));
const signed = (x: number, digits = 2) => (Number.isNaN(x) ? "-" : `${x >= 0 ? "+" : ""}${x.toFixed(digits)}`);

function printHeader(): void {
  const cpus = os.cpus();
  console.log("svc gateway overhead benchmark");
  console.log(`Node ${process.version}, ${process.platform} ${process.arch}, ${cpus.length} CPUs (availableParallelism ${os.availableParallelism()}), ${cpus[0]?.model ?? "unknown CPU"}`);
  console.log(
    `${ROUNDS} round(s), each: direct -> floor -> gateway, ${PHASES.length} phases x ${SECONDS} s per target (after ${FIRST_WARMUP_S * 2} s warm-up in round 1, ${WARMUP_S * 2} s later); medians over rounds.` +
      (quick ? "  [BENCH_QUICK smoke run: too short to quote]" : ""),
  );
  console.log(`Request: POST /v1/chat/completions model chat-4o; stream = "stream": true with 10 pieces. Fake upstream, target and load generator run in separate processes.`);
  console.log("NOTE: figures are ratios measured side by side in one run on this machine; absolute numbers move with the machine and its load.\n");
}

function report(samples: Record<TargetName, Record<string, Sample[]>>): void {
  const med = (t: TargetName, ph: string, f: (s: Sample) => number) => median(samples[t][ph]!.map(f));
  const errorsOf = (t: TargetName, ph: string) => samples[t][ph]!.reduce((a, s) => a + s.load.errors, 0);
  /** Per-round f(target) - f(direct) (or ratio), then the median over rounds: drift hits both alike. */
  const perRound = (ph: string, f: (round: number) => number) => median(samples.direct[ph]!.map((_, i) => f(i)));

  console.log("\nResults per target (median over rounds)");
  const head = ["phase", "target", "req/s", "p50 ms", "p99 ms", "ttfb p50", "ttfb p99", "errors", "target cpu µs/req", "upstream cpu µs/req", "cpu% load/up/target"];
  const rows: string[][] = [];
  for (const ph of PHASES) {
    for (const t of TARGETS) {
      const e = errorsOf(t, ph.id);
      rows.push([
        ph.label,
        t,
        med(t, ph.id, (s) => s.load.throughput).toFixed(0),
        ms(med(t, ph.id, (s) => s.load.latP50)),
        ms(med(t, ph.id, (s) => s.load.latP99)),
        ph.stream ? ms(med(t, ph.id, (s) => s.load.ttfbP50)) : "",
        ph.stream ? ms(med(t, ph.id, (s) => s.load.ttfbP99)) : "",
        e ? `${e} !` : "0",
        med(t, ph.id, (s) => s.targetUsPerReq).toFixed(0) + (t === "direct" ? " (fake)" : t === "gateway" ? ` + ${med(t, ph.id, (s) => s.engineUsPerReq).toFixed(0)}` : ""),
        med(t, ph.id, (s) => s.upstreamUsPerReq).toFixed(0),
        [med(t, ph.id, (s) => s.loadPct), med(t, ph.id, (s) => s.upstreamPct), t === "direct" ? NaN : med(t, ph.id, (s) => s.targetPct)]
          .map((x) => (Number.isNaN(x) ? "-" : x.toFixed(0)))
          .join("/"),
      ]);
    }
  }
  table(head, rows, [0, 1]);

  const idx = (t: TargetName, ph: string, i: number) => samples[t][ph]![i]!;
  const pct = (t: TargetName, ph: string) => perRound(ph, (i) => (idx(t, ph, i).load.throughput / idx("direct", ph, i).load.throughput) * 100);
  const added = (t: TargetName, ph: string, f: (r: LoadResult) => number) => perRound(ph, (i) => f(idx(t, ph, i).load) - f(idx("direct", ph, i).load));
  const gMinusF = (ph: string, f: (r: LoadResult) => number) => perRound(ph, (i) => f(idx("gateway", ph, i).load) - f(idx("floor", ph, i).load));
  const p50 = (r: LoadResult) => r.latP50;
  const p99 = (r: LoadResult) => r.latP99;
  const f50 = (r: LoadResult) => r.ttfbP50;
  const f99 = (r: LoadResult) => r.ttfbP99;

  console.log("\nOverhead vs direct (each figure: per-round difference or ratio, median over rounds)");
  const o: string[][] = [];
  for (const [ph, what] of [["sat-json", "non-stream"], ["sat-sse", "stream"]] as const) {
    o.push([`saturation throughput, % of direct (${what})`, `${pct("floor", ph).toFixed(1)}%`, `${pct("gateway", ph).toFixed(1)}%`, `${signed(pct("gateway", ph) - pct("floor", ph), 1)} pts`]);
  }
  for (const [ph, what] of [["rate-json", "non-stream"], ["rate-sse", "stream, whole body"]] as const) {
    o.push([`added latency p50 ms (${what})`, signed(added("floor", ph, p50)), signed(added("gateway", ph, p50)), signed(gMinusF(ph, p50))]);
    o.push([`added latency p99 ms (${what})`, signed(added("floor", ph, p99)), signed(added("gateway", ph, p99)), signed(gMinusF(ph, p99))]);
  }
  o.push(["stream first-byte added p50 ms", signed(added("floor", "rate-sse", f50)), signed(added("gateway", "rate-sse", f50)), signed(gMinusF("rate-sse", f50))]);
  o.push(["stream first-byte added p99 ms", signed(added("floor", "rate-sse", f99)), signed(added("gateway", "rate-sse", f99)), signed(gMinusF("rate-sse", f99))]);
  const cpu = (t: TargetName, ph: string) => med(t, ph, (s) => s.targetUsPerReq);
  const cpuDiff = (ph: string) => perRound(ph, (i) => idx("gateway", ph, i).targetUsPerReq - idx("floor", ph, i).targetUsPerReq);
  for (const [ph, what] of [["rate-json", `non-stream, ${RATE}/s`], ["rate-sse", `stream, ${RATE}/s`], ["sat-json", "non-stream, saturated"], ["sat-sse", "stream, saturated"]] as const) {
    o.push([`CPU µs per request, target process (${what})`, cpu("floor", ph).toFixed(0), cpu("gateway", ph).toFixed(0), signed(cpuDiff(ph), 0)]);
  }
  for (const [ph, what] of [["rate-json", `non-stream, ${RATE}/s`], ["sat-json", "non-stream, saturated"]] as const) {
    o.push([`CPU µs per request, telemetry engine process (${what})`, "", med("gateway", ph, (s) => s.engineUsPerReq).toFixed(0), ""]);
  }
  table(["metric", "floor", "gateway", "gateway - floor"], o, [0]);

  console.log("\nTargets (printed only; the exit code does not depend on them)");
  const verdict = (ok: boolean) => (ok ? "MEETS" : "MISSES");
  const gJson = pct("gateway", "sat-json");
  const gSse = pct("gateway", "sat-sse");
  const dP50 = gMinusF("rate-json", p50);
  const dF50 = gMinusF("rate-sse", f50);
  const t: string[][] = [
    ["saturation throughput >= 40% of direct (floor measured ~59%), non-stream", `gateway ${gJson.toFixed(1)}% (floor ${pct("floor", "sat-json").toFixed(1)}%)`, verdict(gJson >= 40)],
    ["saturation throughput >= 40% of direct (floor measured ~59%), stream", `gateway ${gSse.toFixed(1)}% (floor ${pct("floor", "sat-sse").toFixed(1)}%)`, verdict(gSse >= 40)],
    ["added p50 within 0.5 ms of the floor's (non-stream)", `gateway - floor ${signed(dP50)} ms`, verdict(dP50 <= 0.5)],
    ["stream first-byte added p50 within 0.5 ms of the floor's", `gateway - floor ${signed(dF50)} ms`, verdict(dF50 <= 0.5)],
  ];
  table(["target", "measured", ""], t, [0, 1]);

  const flagged: string[] = [];
  for (const tg of TARGETS) {
    for (const ph of PHASES) {
      samples[tg][ph.id]!.forEach((s, i) => {
        if (s.load.errors) flagged.push(`  ! ${tg} ${ph.label} round ${i + 1}: ${s.load.errors} of ${s.load.sent} failed, e.g. ${s.load.errorSamples.join(" | ")}`);
      });
    }
  }
  const lagged = Math.max(...TARGETS.flatMap((tg) => ["rate-json", "rate-sse"].flatMap((ph) => samples[tg][ph]!.map((s) => s.load.lagP99))));
  console.log(flagged.length ? `\nFLAGGED phases (their figures include failed requests):\n${flagged.join("\n")}` : "\nAll responses were 200 with complete bodies (0 errors).");
  console.log(`Open-loop schedule: the load generator started requests at most ${lagged.toFixed(2)} ms late (p99, worst phase).`);
}

function table(head: string[], rows: string[][], leftCols: number[]): void {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (leftCols.includes(i) ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join("  ");
  console.log(line(head));
  console.log(w.map((n) => "-".repeat(n)).join("  "));
  for (const r of rows) console.log(line(r));
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
