/**
 * Where the gateway spends its CPU: runs the gateway child under `node --cpu-prof` against the fake
 * upstream, loads it with the bench's saturation phases (non-stream, then stream) and prints the
 * heaviest functions and files of each phase's window of the profile.
 *
 *   node --import tsx bench/profile-gateway.ts        (BENCH_SECONDS per phase, default 5)
 *   BENCH_PROFILE_KEEP=1 keeps the .cpuprofile (path printed) to open in Chrome DevTools.
 *   BENCH_PROFILE_TARGET=floor profiles the bare pass-through proxy instead, for comparison.
 *   BENCH_PROFILE_HITS=1 sends the same prompt every time: the gateway's cache-hit path.
 *   BENCH_PROFILE_RATE=200 loads at that fixed rate (open loop) instead of saturating.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LoadResult, LoadSpec } from "./load.js";
import { benchLoad } from "./request.js";
import { startChild, type CpuSample } from "./proc.js";

const SECONDS = Number(process.env.BENCH_SECONDS || 5);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY || 32);
const TOP = Number(process.env.BENCH_PROFILE_TOP || 25);
const RATE = Number(process.env.BENCH_PROFILE_RATE || 0);
const phase = RATE > 0 ? `${RATE}/s` : "saturated";

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }>;
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

const dir = mkdtempSync(join(tmpdir(), "svc-bench-prof-"));
const fake = await startChild("fake upstream", "./fake-upstream.ts");
const childEnv = { BENCH_UPSTREAM: fake.info.url as string, SVC_LOG_LEVEL: "warn" };
const which = process.env.BENCH_PROFILE_TARGET === "floor" ? "floor" : "gateway";
const gateway = await startChild(which, which === "floor" ? "./floor-proxy.ts" : "./gateway-target.ts", { env: childEnv, execArgv: ["--cpu-prof", `--cpu-prof-dir=${dir}`, "--expose-gc"] });
const load = await startChild("load generator", "./load.ts");

// Every request a cache miss (the pass-through path), unless BENCH_PROFILE_HITS=1 (the hit path).
const spec = (stream: boolean, seconds: number): LoadSpec =>
  benchLoad(gateway.info.url, String(gateway.info.key ?? ""), { stream, rate: RATE, concurrency: CONCURRENCY, seconds, hits: process.env.BENCH_PROFILE_HITS === "1" });

type Memory = NodeJS.MemoryUsage;
const windows: Array<{ name: string; a: CpuSample; b: CpuSample; res: LoadResult; heap: [Memory, Memory, Memory] }> = [];
for (const stream of [false, true]) {
  await load.call("run", spec(stream, 2)); // warm-up
  const m0 = await gateway.call<Memory>("memory", { gc: true });
  const a = await gateway.cpu();
  const res = await load.call<LoadResult>("run", spec(stream, SECONDS));
  const b = await gateway.cpu();
  // Heap right after the load, then after a full collection: what the load left that young-generation
  // collections could not free (weakly held or long-lived objects are copied, then promoted).
  const m1 = await gateway.call<Memory>("memory");
  const m2 = await gateway.call<Memory>("memory", { gc: true });
  windows.push({ name: `${phase} ${stream ? "stream" : "non-stream"}`, a, b, res, heap: [m0, m1, m2] });
}
await Promise.all([gateway.stop(), load.stop()]);
await fake.stop();

const pid = gateway.proc.pid;
const files = readdirSync(dir).filter((f) => f.includes(`.${pid}.0.`)); // thread 0: the main thread
if (files.length !== 1) throw new Error(`expected one main-thread profile in ${dir}, found ${readdirSync(dir).join(", ")}`);
const profile = JSON.parse(readFileSync(join(dir, files[0]!), "utf8")) as CpuProfile;

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parentOf = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parentOf.set(c, n.id);
const label = (id: number) => {
  const cf = byId.get(id)!.callFrame;
  const url = cf.url.replace(/^.*node_modules\//, "").replace(/^file:\/\/.*?\/(src|bench)\//, "$1/");
  return { fn: `${cf.functionName || "(anonymous)"}  ${url}${url ? `:${cf.lineNumber + 1}` : ""}`, file: areaOf(url, cf.functionName) };
};
function areaOf(url: string, fn: string): string {
  if (!url) return fn.startsWith("(") ? fn : `native: ${fn}`;
  if (url.startsWith("node:")) return url.replace(/^node:(internal\/)?/, "node ").replace(/\/.*$/, "");
  const pkg = /^(@[^/]+\/[^/]+|[^/]+)\//.exec(url);
  if (url.startsWith("src/")) return url;
  return pkg ? pkg[1]! : url;
}

for (const w of windows) {
  const self = new Map<string, number>();
  const area = new Map<string, number>();
  // Inclusive time: each sample counts once for every distinct function of the project on its stack.
  const inclusive = new Map<string, number>();
  let total = 0;
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i]!;
    if (t < w.a.mono || t > w.b.mono) continue;
    const dt = profile.timeDeltas[i + 1] ?? 0; // the time until the next sample is this sample's
    const l = label(profile.samples[i]!);
    if (l.file === "(idle)") continue;
    total += dt;
    self.set(l.fn, (self.get(l.fn) ?? 0) + dt);
    area.set(l.file, (area.get(l.file) ?? 0) + dt);
    const seen = new Set<string>();
    for (let id: number | undefined = profile.samples[i]!; id !== undefined; id = parentOf.get(id)) {
      const f = label(id);
      if (f.file.startsWith("src/") && !seen.has(f.fn)) {
        seen.add(f.fn);
        inclusive.set(f.fn, (inclusive.get(f.fn) ?? 0) + dt);
      }
    }
  }
  const n = w.res.ok + w.res.errors;
  const cpuUs = w.b.user - w.a.user + (w.b.system - w.a.system);
  console.log(`\n== ${which}, ${w.name}: ${w.res.throughput.toFixed(0)} req/s, ${w.res.errors} errors, process CPU ${(cpuUs / n).toFixed(0)} µs/req (all threads), main-thread samples ${(total / n).toFixed(0)} µs/req`);
  const show = (m: Map<string, number>, k: number) =>
    [...m].sort((x, y) => y[1] - x[1]).slice(0, k).map(([name, us]) => `  ${((us / total) * 100).toFixed(1).padStart(5)}%  ${(us / n).toFixed(1).padStart(6)} µs/req  ${name}`).join("\n");
  const mb = (m: Memory) => `${(m.heapUsed / 1e6).toFixed(1)} MB`;
  console.log(`-- heap used: before ${mb(w.heap[0])}, after the load ${mb(w.heap[1])}, after a full GC ${mb(w.heap[2])}`);
  console.log(`-- self time by area (busy main thread = 100%)\n${show(area, 20)}`);
  console.log(`-- self time by function\n${show(self, TOP)}`);
  console.log(`-- inclusive time of the project's functions (with all they call)\n${show(inclusive, TOP)}`);
}
if (process.env.BENCH_PROFILE_KEEP === "1") console.log(`\nprofile kept: ${join(dir, files[0]!)}`);
else rmSync(dir, { recursive: true, force: true });
