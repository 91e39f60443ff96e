/**
 * Bench child: the load generator, in its own process so its CPU is not charged to the target.
 * Two modes over an undici keep-alive Pool:
 *   rate   open loop: requests start on a fixed schedule whatever the completions (latency)
 *   closed N connections, each sends its next request when the previous one ends (throughput)
 * and `mix`: several targets interleaved on one open-loop schedule (bench/cache-limits.ts).
 * Every response must be 200 with a complete body (JSON with choices, or SSE ending in [DONE]).
 */
import { Pool } from "undici";
import { serveParent } from "./proc.js";
import { quantile, sortedCopy } from "./stats.js";

export interface LoadSpec {
  origin: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  stream: boolean;
  mode: "rate" | "closed";
  /** Requests per second (rate mode). */
  rate?: number;
  /** Connections (closed mode); the pool size in rate mode. */
  concurrency: number;
  seconds: number;
  /** Replace "{{n}}" in the body with a number new to each request (every request a cache miss). */
  unique?: boolean;
}

export interface LoadResult {
  sent: number;
  ok: number;
  errors: number;
  errorSamples: string[];
  elapsedS: number;
  throughput: number;
  latP50: number;
  latP99: number;
  latMean: number;
  ttfbP50: number;
  ttfbP99: number;
  /** Rate mode: how late the load generator started requests against the schedule (ms, p99). */
  lagP99: number;
  cpuUs: number;
}

const DATA = Buffer.from("data:");
const DONE = Buffer.from("[DONE]");
const CHOICES = Buffer.from('"choices"');

/** One spec's requests and what they measured (a run has one; a mix has one per spec). */
class Target {
  readonly pool: Pool;
  readonly lat: number[] = [];
  readonly ttfb: number[] = [];
  sent = 0;
  errors = 0;
  readonly errorSamples: string[] = [];

  constructor(readonly spec: LoadSpec) {
    this.pool = new Pool(spec.origin, { connections: spec.concurrency, pipelining: 1, keepAliveTimeout: 30_000 });
  }

  #fail(msg: string): void {
    this.errors++;
    if (this.errorSamples.length < 5) this.errorSamples.push(msg);
  }

  async one(): Promise<void> {
    const spec = this.spec;
    this.sent++;
    const body = spec.unique ? spec.body.replace("{{n}}", `${process.pid}-${Date.now()}-${this.sent}`) : spec.body;
    const t0 = performance.now();
    try {
      const res = await this.pool.request({ path: spec.path, method: "POST", headers: spec.headers, body });
      let first = NaN;
      const chunks: Buffer[] = [];
      for await (const c of res.body as AsyncIterable<Buffer>) {
        if (Number.isNaN(first) && c.indexOf(DATA) !== -1) first = performance.now();
        chunks.push(c);
      }
      const t1 = performance.now();
      const got = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      if (res.statusCode !== 200) return this.#fail(`HTTP ${res.statusCode}: ${got.toString("utf8", 0, 200)}`);
      if (spec.stream ? got.lastIndexOf(DONE) === -1 || Number.isNaN(first) : got.indexOf(CHOICES) === -1) {
        return this.#fail(`incomplete body: ${got.toString("utf8", 0, 200)}`);
      }
      this.lat.push(t1 - t0);
      if (spec.stream) this.ttfb.push(first - t0);
    } catch (e) {
      this.#fail(String((e as Error)?.message ?? e));
    }
  }

  result(elapsedS: number, lag: number[], cpuUs: number): LoadResult {
    const l = sortedCopy(this.lat);
    const f = sortedCopy(this.ttfb);
    const g = sortedCopy(lag);
    return {
      sent: this.sent,
      ok: this.lat.length,
      errors: this.errors,
      errorSamples: this.errorSamples,
      elapsedS,
      throughput: this.lat.length / elapsedS,
      latP50: quantile(l, 0.5),
      latP99: quantile(l, 0.99),
      latMean: this.lat.reduce((a, b) => a + b, 0) / (this.lat.length || 1),
      ttfbP50: quantile(f, 0.5),
      ttfbP99: quantile(f, 0.99),
      lagP99: quantile(g, 0.99),
      cpuUs,
    };
  }
}

/**
 * Open loop: request i of `total` starts at `start + i * interval` whatever the completions, and
 * goes to `send(i)`. Resolves when every request has ended; returns how late each one started.
 */
async function openLoop(rate: number, seconds: number, send: (i: number) => Promise<void>): Promise<{ start: number; lag: number[] }> {
  const interval = 1000 / rate;
  const total = Math.round(seconds * rate);
  const lag: number[] = [];
  const inflight = new Set<Promise<void>>();
  const start = performance.now();
  await new Promise<void>((resolve) => {
    let i = 0;
    const tick = () => {
      const now = performance.now();
      while (i < total && start + i * interval <= now) {
        lag.push(now - (start + i * interval));
        const p = send(i);
        inflight.add(p);
        void p.then(() => inflight.delete(p));
        i++;
      }
      if (i >= total) return resolve();
      setTimeout(tick, Math.max(0, start + i * interval - performance.now()));
    };
    tick();
  });
  await Promise.all(inflight);
  return { start, lag };
}

async function run(spec: LoadSpec): Promise<LoadResult> {
  const t = new Target(spec);
  const cpu0 = process.cpuUsage();
  let start = performance.now();
  let lag: number[] = [];
  if (spec.mode === "closed") {
    const end = start + spec.seconds * 1000;
    const worker = async () => {
      while (performance.now() < end) await t.one();
    };
    await Promise.all(Array.from({ length: spec.concurrency }, worker));
  } else {
    ({ start, lag } = await openLoop(spec.rate!, spec.seconds, () => t.one()));
  }
  const elapsedS = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await t.pool.close();
  return t.result(elapsedS, lag, cpu.user + cpu.system);
}

/**
 * Several targets on one open-loop schedule, interleaved: request i goes to spec i mod n, so every
 * target meets the machine in the same state (its drift and the other work on it are shared
 * request by request, not phase by phase). `rate` and `seconds` are the whole schedule's; each
 * spec's own rate and mode are ignored. One result per spec, in order.
 */
async function mix(args: { specs: LoadSpec[]; rate: number; seconds: number }): Promise<LoadResult[]> {
  const targets = args.specs.map((s) => new Target(s));
  const n = targets.length;
  const cpu0 = process.cpuUsage();
  const { start, lag } = await openLoop(args.rate, args.seconds, (i) => targets[i % n]!.one());
  const elapsedS = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await Promise.all(targets.map((t) => t.pool.close()));
  return targets.map((t) => t.result(elapsedS, lag, cpu.user + cpu.system));
}

serveParent({ run, mix }).ready({});
