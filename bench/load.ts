/**
 * Bench child: the load generator, in its own process so its CPU is not charged to the target.
 * Two modes over an undici keep-alive Pool:
 *   rate   open loop: requests start on a fixed schedule whatever the completions (latency)
 *   closed N connections, each sends its next request when the previous one ends (throughput)
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

async function run(spec: LoadSpec): Promise<LoadResult> {
  const pool = new Pool(spec.origin, {
    connections: spec.concurrency,
    pipelining: 1,
    keepAliveTimeout: 30_000,
  });
  const lat: number[] = [];
  const ttfb: number[] = [];
  const lag: number[] = [];
  let sent = 0;
  let errors = 0;
  const errorSamples: string[] = [];
  const fail = (msg: string) => {
    errors++;
    if (errorSamples.length < 5) errorSamples.push(msg);
  };

  const one = async (): Promise<void> => {
    sent++;
    const body = spec.unique ? spec.body.replace("{{n}}", `${process.pid}-${Date.now()}-${sent}`) : spec.body;
    const t0 = performance.now();
    try {
      const res = await pool.request({ path: spec.path, method: "POST", headers: spec.headers, body });
      let first = NaN;
      const chunks: Buffer[] = [];
      for await (const c of res.body as AsyncIterable<Buffer>) {
        if (Number.isNaN(first) && c.indexOf(DATA) !== -1) first = performance.now();
        chunks.push(c);
      }
      const t1 = performance.now();
      const got = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      if (res.statusCode !== 200) return fail(`HTTP ${res.statusCode}: ${got.toString("utf8", 0, 200)}`);
      if (spec.stream ? got.lastIndexOf(DONE) === -1 || Number.isNaN(first) : got.indexOf(CHOICES) === -1) {
        return fail(`incomplete body: ${got.toString("utf8", 0, 200)}`);
      }
      lat.push(t1 - t0);
      if (spec.stream) ttfb.push(first - t0);
    } catch (e) {
      fail(String((e as Error)?.message ?? e));
    }
  };

  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const end = start + spec.seconds * 1000;
  if (spec.mode === "closed") {
    const worker = async () => {
      while (performance.now() < end) await one();
    };
    await Promise.all(Array.from({ length: spec.concurrency }, worker));
  } else {
    const interval = 1000 / spec.rate!;
    const total = Math.round(spec.seconds * spec.rate!);
    const inflight = new Set<Promise<void>>();
    await new Promise<void>((resolve) => {
      let i = 0;
      const tick = () => {
        const now = performance.now();
        while (i < total && start + i * interval <= now) {
          lag.push(now - (start + i * interval));
          const p = one();
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
  }
  const elapsedS = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await pool.close();

  const l = sortedCopy(lat);
  const f = sortedCopy(ttfb);
  const g = sortedCopy(lag);
  return {
    sent,
    ok: lat.length,
    errors,
    errorSamples,
    elapsedS,
    throughput: lat.length / elapsedS,
    latP50: quantile(l, 0.5),
    latP99: quantile(l, 0.99),
    latMean: lat.reduce((a, b) => a + b, 0) / (lat.length || 1),
    ttfbP50: quantile(f, 0.5),
    ttfbP99: quantile(f, 0.99),
    lagP99: quantile(g, 0.99),
    cpuUs: cpu.user + cpu.system,
  };
}

serveParent({ run }).ready({});
