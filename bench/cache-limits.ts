/**
 * The cache and limits benchmark (`npm run bench:cache`): what a cache HIT, a MISS with limits on,
 * and limits alone add to a request, in memory (embedded) and on Redis (cluster), measured side by
 * side in one run against the same gateway with cache and limits off, and against the fake upstream
 * called directly. Open loop at a fixed rate, non-stream; latency is request start to last byte.
 * Each round runs every row in one schedule, interleaved request by request (load.ts `mix`).
 *
 *   BENCH_SECONDS  seconds of requests per row and round, at the whole rate (default 4)
 *   BENCH_ROUNDS   rounds (default 3)    BENCH_RATE  requests per second, all rows together (default 200)
 *   BENCH_QUICK=1  smoke run (1 round of 1 s a row)
 *
 * Targets (printed, never a pass/fail): a HIT answered faster than a direct upstream call; limits
 * add under 0.3 ms p50 in memory. Exit code 1 only when the bench could not run.
 */
import { Redis } from "ioredis";
import { startRedis, type TestRedis } from "../test/support/redis.js";
import type { LoadResult, LoadSpec } from "./load.js";
import { startChild, type Child } from "./proc.js";
import { median, quantile, sortedCopy } from "./stats.js";

const env = process.env;
const quick = env.BENCH_QUICK === "1";
const SECONDS = Number(env.BENCH_SECONDS || (quick ? 1 : 4));
const ROUNDS = Number(env.BENCH_ROUNDS || (quick ? 1 : 3));
const RATE = Number(env.BENCH_RATE || 200);
const PROMPT = "Hello from the svc cache benchmark, please echo this short prompt back.";

interface Variant {
  id: string;
  label: string;
  /** Which process serves it ("inturn": cache on, admission after the key's verdict, Redis only). */
  proc: "direct" | "off" | "on" | "inturn";
  key: "key" | "limitedKey" | "none";
  /** Each request new (a miss) or the same one (a hit after the warm-up). */
  unique: boolean;
}

const VARIANTS: Variant[] = [
  { id: "direct", label: "direct upstream", proc: "direct", key: "none", unique: false },
  { id: "base", label: "gateway, cache and limits off", proc: "off", key: "key", unique: true },
  { id: "limits", label: "limits on, cache off", proc: "off", key: "limitedKey", unique: true },
  { id: "miss", label: "MISS, limits on", proc: "on", key: "limitedKey", unique: true },
  { id: "hit", label: "HIT, limits on", proc: "on", key: "limitedKey", unique: false },
  // On Redis the gateway admits ahead of the key's verdict by default; this row admits in turn.
  { id: "hit-inturn", label: "HIT, limits on, admit in turn", proc: "inturn", key: "limitedKey", unique: false },
];

const ms = (v: number) => (Number.isFinite(v) ? v.toFixed(2) : "-");

/**
 * p50 of one Redis round trip (PING) from a client in this process, open loop at `rate` a second
 * for `seconds`, as the gateway's client meets it at the bench's rate: the least a Redis HIT can
 * add, since it needs at least one (the shared rate-limit count, and the key's record, which must
 * be read every time for a deleted key to fail at once).
 */
async function redisRoundTrip(url: string, rate: number, seconds: number): Promise<number> {
  const redis = new Redis(url, { lazyConnect: true });
  await redis.connect();
  try {
    await redis.ping();
    const times: number[] = [];
    const sent: Array<Promise<void>> = [];
    const start = performance.now();
    for (let i = 0; i < rate * seconds; i++) {
      const due = start + (i * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const t0 = performance.now();
      sent.push(redis.ping().then(() => void times.push(performance.now() - t0)));
    }
    await Promise.all(sent);
    return quantile(sortedCopy(times), 0.5);
  } finally {
    redis.disconnect();
  }
}

async function main(): Promise<void> {
  const children: Child[] = [];
  let redis: TestRedis | undefined;
  try {
    const fake = await startChild("fake upstream", "./fake-upstream.ts");
    children.push(fake);
    const base = { BENCH_UPSTREAM: fake.info.url as string, SVC_LOG_LEVEL: "error" };
    const load = await startChild("load generator", "./load.ts");
    children.push(load);
    // A private redis-server on a free port (as the tests start it); none when it is not installed.
    redis = await startRedis().catch(() => undefined);
    const modes: Array<{ name: string; env: Record<string, string> }> = [{ name: "memory", env: {} }];
    if (redis) modes.push({ name: "redis", env: { BENCH_REDIS_URL: redis.url } });
    else console.log("redis-server not found: the Redis rows are skipped");

    console.log(`svc cache and limits benchmark: ${ROUNDS} round(s) of ${SECONDS} s phases at ${RATE} req/s, non-stream, medians over rounds`);
    const results: Record<string, LoadResult[]> = {};
    const procs: Record<string, Record<string, Child>> = {};
    const roundTrips: number[] = [];
    for (const m of modes) {
      const [off, on] = await Promise.all([
        startChild(`gateway ${m.name} off`, "./gateway-target.ts", { env: { ...base, ...m.env, BENCH_CACHE_OFF: "1" } }),
        startChild(`gateway ${m.name} on`, "./gateway-target.ts", { env: { ...base, ...m.env } }),
      ]);
      children.push(off, on);
      procs[m.name] = { direct: fake, off, on };
      if (m.name === "redis") {
        const inturn = await startChild("gateway redis in turn", "./gateway-target.ts", { env: { ...base, ...m.env, SVC_LIMITS_ADMIT_AHEAD: "0" } });
        children.push(inturn);
        procs[m.name]!.inturn = inturn;
      }
    }
    // Every row of both stores in one open-loop schedule per round, interleaved request by request
    // (load.ts `mix`): request i goes to row i mod n, so the rows share the machine's state and
    // drift, which moved whole 4 s phases against each other by more than the differences measured.
    const rows: Array<{ id: string; label: string; spec: LoadSpec }> = [];
    for (const m of modes) {
      for (const v of VARIANTS) {
        if (v.id === "direct" && m.name !== "memory") continue;
        if (v.proc === "inturn" && m.name !== "redis") continue;
        const target = procs[m.name]![v.proc]!;
        const content = v.unique ? `${PROMPT} {{n}}` : PROMPT;
        rows.push({
          id: v.id === "direct" ? "direct" : `${m.name}:${v.id}`,
          label: `${(v.id === "direct" ? "-" : m.name).padEnd(6)} ${v.label}`,
          spec: {
            origin: target.info.url as string,
            path: "/v1/chat/completions",
            headers: { "content-type": "application/json", ...(v.key === "none" ? {} : { "x-svc-api-key": String(target.info[v.key]) }) },
            body: JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content }] }),
            stream: false,
            mode: "rate",
            concurrency: 16,
            seconds: SECONDS,
            unique: v.unique,
          },
        });
      }
    }
    console.log(`each round: ${rows.length} rows interleaved request by request at ${RATE} req/s in all, ${SECONDS * RATE} requests a row`);
    for (let round = 1; round <= ROUNDS; round++) {
      // Warm-up, a row at a time (a HIT row's first request stores its answer).
      for (const r of rows) await load.call<LoadResult>("run", { ...r.spec, mode: "closed", concurrency: 4, seconds: round === 1 ? 1 : 0.3 });
      const got = await load.call<LoadResult[]>("mix", { specs: rows.map((r) => r.spec), rate: RATE, seconds: SECONDS * rows.length });
      rows.forEach((row, i) => {
        const r = got[i]!;
        (results[row.id] ??= []).push(r);
        console.log(`  round ${round}/${ROUNDS}  ${row.label.padEnd(37)} p50 ${ms(r.latP50)} p99 ${ms(r.latP99)}${r.errors ? `  ! ${r.errors} errors: ${r.errorSamples[0]}` : ""}`);
      });
      if (redis) {
        const rtt = await redisRoundTrip(redis.url, RATE, Math.min(SECONDS, 2));
        roundTrips.push(rtt);
        console.log(`  round ${round}/${ROUNDS}  redis  one round trip (PING)              p50 ${ms(rtt)}`);
      }
    }

    const p50 = (id: string) => median((results[id] ?? []).map((r) => r.latP50));
    const p99 = (id: string) => median((results[id] ?? []).map((r) => r.latP99));
    /** Per-round difference of p50s, median over rounds. */
    const added = (id: string, ref: string) => median((results[id] ?? []).map((r, i) => r.latP50 - (results[ref]?.[i]?.latP50 ?? NaN)));
    console.log("\nLatency, ms (median over rounds)");
    console.log(`${"store".padEnd(7)} ${"phase".padEnd(30)} ${"p50".padStart(6)} ${"p99".padStart(6)}  added p50 vs cache+limits off`);
    console.log(`${"-".padEnd(7)} ${"direct upstream".padEnd(30)} ${ms(p50("direct")).padStart(6)} ${ms(p99("direct")).padStart(6)}`);
    for (const m of modes) {
      for (const v of VARIANTS.slice(1)) {
        const id = `${m.name}:${v.id}`;
        if (!results[id]) continue;
        const add = v.id === "base" ? "" : `${added(id, `${m.name}:base`) >= 0 ? "+" : ""}${ms(added(id, `${m.name}:base`))}`;
        console.log(`${m.name.padEnd(7)} ${v.label.padEnd(30)} ${ms(p50(id)).padStart(6)} ${ms(p99(id)).padStart(6)}  ${add}`);
      }
    }
    console.log("\nTargets (printed only; the exit code does not depend on them)");
    for (const m of modes) {
      // Judged on the per-round difference (both measured in the same interleaved schedule).
      const by = added(`${m.name}:hit`, "direct");
      console.log(`  ${m.name}: HIT p50 ${ms(p50(`${m.name}:hit`))} ms vs direct upstream ${ms(p50("direct"))} ms, ${by >= 0 ? "+" : ""}${ms(by)} ms per round: ${by < 0 ? "MEETS" : "MISSES"} (HIT faster than a direct call)`);
    }
    if (roundTrips.length) {
      // What bounds the Redis row from below, measured in the same run.
      const rtt = median(roundTrips);
      const floor = p50("memory:hit") + rtt;
      console.log(`  redis: one Redis round trip p50 ${ms(rtt)} ms; a Redis HIT needs at least one, so it cannot beat ${ms(floor)} ms (memory HIT + one round trip) here`);
      console.log(`  redis: admitting in turn (SVC_LIMITS_ADMIT_AHEAD=0) adds ${ms(added("redis:hit-inturn", "redis:hit"))} ms p50 to a HIT (per round, side by side)`);
    }
    const lim = added("memory:limits", "memory:base");
    console.log(`  memory: limits add ${ms(lim)} ms p50: ${lim < 0.3 ? "MEETS" : "MISSES"} (under 0.3 ms)`);
    const errors = Object.values(results).flat().reduce((n, r) => n + r.errors, 0);
    console.log(errors ? `\n${errors} requests failed: see the rows marked !` : "\nAll responses were 200 with complete bodies.");
  } finally {
    await Promise.all(children.map((c) => c.stop().catch(() => {})));
    await redis?.stop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
