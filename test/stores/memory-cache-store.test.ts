import assert from "node:assert/strict";
import { createMemoryCacheStore, ENTRY_OVERHEAD_BYTES } from "../../src/stores/memory-cache-store.js";

const bytes = (n: number, fill = 1) => new Uint8Array(n).fill(fill);
/** What an entry of `payload` bytes under a one-character key with cost "0" counts against the budget. */
const sizeOf = (payload: number) => payload + 1 + 1 + ENTRY_OVERHEAD_BYTES;

describe("memory cache store", () => {
  it("returns what was stored, with its cost", async () => {
    const store = createMemoryCacheStore({ maxBytes: 10_000 });
    await store.put("k", { payload: bytes(3, 7), costUsd: "0.5" }, 60);
    const got = await store.get("k");
    assert.deepEqual(got, { payload: bytes(3, 7), costUsd: "0.5" });
    assert.equal(await store.get("other"), undefined);
  });

  it("never serves an entry past its TTL, and frees it", async () => {
    let t = 1_000_000;
    const store = createMemoryCacheStore({ maxBytes: 10_000, now: () => t });
    await store.put("k", { payload: bytes(10), costUsd: "0" }, 60);
    t += 59_999;
    assert.ok(await store.get("k"));
    t += 1;
    assert.equal(await store.get("k"), undefined);
    assert.equal(store.entries, 0);
    assert.equal(store.bytes, 0);
  });

  it("times a TTL on a monotonic clock: the wall clock stepped back does not keep an entry longer", async () => {
    const wall = Date.now;
    let offset = 0;
    Date.now = () => wall() + offset;
    try {
      const store = createMemoryCacheStore({ maxBytes: 10_000 });
      await store.put("k", { payload: bytes(10), costUsd: "0" }, 1);
      offset = -3_600_000; // the wall clock an hour back
      await new Promise((r) => setTimeout(r, 1_100));
      assert.equal(await store.get("k"), undefined);
    } finally {
      Date.now = wall;
    }
  });

  it("evicts the least recently used entries to stay within the byte budget", async () => {
    const store = createMemoryCacheStore({ maxBytes: 3 * sizeOf(100) });
    for (const k of ["a", "b", "c", "d"]) await store.put(k, { payload: bytes(100), costUsd: "0" }, 60);
    assert.equal(await store.get("a"), undefined);
    assert.ok(await store.get("b"));
    assert.equal(store.entries, 3);
    assert.equal(store.bytes, 3 * sizeOf(100));
  });

  it("counts payload bytes, not entries: one large entry pushes out several small ones", async () => {
    const store = createMemoryCacheStore({ maxBytes: 4 * sizeOf(100) });
    for (const k of ["a", "b", "c", "d"]) await store.put(k, { payload: bytes(100), costUsd: "0" }, 60);
    await store.put("e", { payload: bytes(250), costUsd: "0" }, 60);
    assert.deepEqual(await Promise.all(["a", "b", "c", "d", "e"].map(async (k) => (await store.get(k)) !== undefined)), [false, false, true, true, true]);
    assert.ok(store.bytes <= 4 * sizeOf(100));
  });

  it("moves an entry that is read to the most recently used end", async () => {
    const store = createMemoryCacheStore({ maxBytes: 3 * sizeOf(100) });
    for (const k of ["a", "b", "c"]) await store.put(k, { payload: bytes(100), costUsd: "0" }, 60);
    assert.ok(await store.get("a"));
    await store.put("d", { payload: bytes(100), costUsd: "0" }, 60);
    assert.ok(await store.get("a"));
    assert.equal(await store.get("b"), undefined);
  });

  it("replaces an entry under the same key without counting it twice", async () => {
    const store = createMemoryCacheStore({ maxBytes: 10_000 });
    await store.put("k", { payload: bytes(100), costUsd: "0" }, 60);
    await store.put("k", { payload: bytes(50, 2), costUsd: "1" }, 60);
    assert.equal(store.entries, 1);
    assert.equal(store.bytes, sizeOf(50));
    assert.deepEqual(await store.get("k"), { payload: bytes(50, 2), costUsd: "1" });
  });

  it("does not store an entry larger than the whole budget, and keeps the others", async () => {
    const store = createMemoryCacheStore({ maxBytes: 1_000 });
    await store.put("a", { payload: bytes(10), costUsd: "0" }, 60);
    await store.put("b", { payload: bytes(1_000), costUsd: "0" }, 60);
    assert.equal(await store.get("b"), undefined);
    assert.ok(await store.get("a"));
  });

  it("keeps its own copy of the payload, not a view of the caller's buffer", async () => {
    const store = createMemoryCacheStore({ maxBytes: 10_000 });
    const whole = bytes(1_000, 9);
    await store.put("k", { payload: whole.subarray(0, 4), costUsd: "0" }, 60);
    whole.fill(0);
    const got = await store.get("k");
    assert.deepEqual(got?.payload, bytes(4, 9));
    assert.equal(got?.payload.buffer.byteLength, 4);
  });

  it("copies a Buffer view too (Buffer's own slice() would not), and takes over an array that owns its whole buffer", async () => {
    const store = createMemoryCacheStore({ maxBytes: 10_000 });
    const pool = Buffer.alloc(1_000, 7);
    await store.put("view", { payload: pool.subarray(10, 14), costUsd: "0" }, 60);
    pool.fill(0);
    assert.deepEqual((await store.get("view"))?.payload, bytes(4, 7));
    const own = bytes(8, 3);
    await store.put("own", { payload: own, costUsd: "0" }, 60);
    assert.equal((await store.get("own"))?.payload, own);
  });
});
