/**
 * The embedded cache's cost per store as it fills and once it is full (every store then evicts):
 * `npm run build && node dist/bench/memory-cache.js`. A store into a full cache should cost about
 * what one into a filling cache does; eviction from a Map's insertion order once made it grow with
 * every eviction (181 µs a store after 1.2 million stores of 400 bytes into 256 MiB, against about
 * 3 µs while filling; core/lru.ts). Prints, never fails on a number.
 *
 *   BENCH_CACHE_MIB    the byte budget (default 256)    BENCH_PAYLOAD   payload bytes (default 400)
 *   BENCH_STORES       stores after the budget is full (default 3 times what fills it)
 */
import { createMemoryCacheStore, ENTRY_OVERHEAD_BYTES } from "../src/stores/memory-cache-store.js";

const MIB = Number(process.env.BENCH_CACHE_MIB || 256);
const PAYLOAD = Number(process.env.BENCH_PAYLOAD || 400);
const store = createMemoryCacheStore({ maxBytes: MIB * 1024 * 1024 });
const key = (i: number) => `svc:cache:{proj_bench0123456789abcd}:live:${i.toString(36).padStart(43, "_")}`;

let i = 0;
/** Stores new entries (each a payload that owns its buffer, as the gateway's encoding gives) for as long as `more()`; µs a store. */
async function stores(more: () => boolean): Promise<{ n: number; us: number }> {
  const t0 = performance.now();
  let n = 0;
  while (more()) {
    const payload = new Uint8Array(PAYLOAD).fill(i & 0xff);
    await store.put(key(i++), { payload, costUsd: "0.000125" }, 3600);
    n++;
  }
  return { n, us: ((performance.now() - t0) * 1000) / n };
}

// Fills until the next store would evict: an entry counts its payload, key and cost plus the overhead.
const entrySize = PAYLOAD + key(0).length + "0.000125".length + ENTRY_OVERHEAD_BYTES;
const filling = await stores(() => store.bytes + entrySize <= MIB * 1024 * 1024);
const full = store.entries;
const count = Number(process.env.BENCH_STORES || 3 * full);
let left = count;
const evicting = await stores(() => left-- > 0);
const hitsT0 = performance.now();
let hits = 0;
for (let k = i - full; k < i; k += 7) if (await store.get(key(k))) hits++;
const hitUs = ((performance.now() - hitsT0) * 1000) / Math.max(1, hits);

console.log(`svc embedded cache: ${MIB} MiB budget, ${PAYLOAD}-byte payloads, ${full} entries when full (Node ${process.version})`);
console.log(`  filling:            ${filling.n} stores, ${filling.us.toFixed(2)} µs a store`);
console.log(`  full (each evicts): ${evicting.n} stores, ${evicting.us.toFixed(2)} µs a store  (${(evicting.us / filling.us).toFixed(2)}x filling)`);
console.log(`  reads of held entries: ${hits}, ${hitUs.toFixed(2)} µs a read`);
console.log(`  heap used ${(process.memoryUsage().heapUsed / 1e6).toFixed(0)} MB, array buffers ${(process.memoryUsage().arrayBuffers / 1e6).toFixed(0)} MB, rss ${(process.memoryUsage().rss / 1e6).toFixed(0)} MB`);
