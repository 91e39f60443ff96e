import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { createCacheService } from "../../src/core/cache/cache-service.js";
import { createDirectClient } from "../../src/core/direct-client.js";
import { CacheService } from "../../src/gen/svc/cache/v1/cache_service_pb.js";
import { KeyMode } from "../../src/gen/svc/common/v1/key_mode_pb.js";
import type { CacheStore } from "../../src/stores/cache-store.js";
import { createRedisCacheStore, encodeEntry } from "../../src/stores/redis-cache-store.js";
import { createRedisConnection, type RedisConnection } from "../../src/stores/redis-connection.js";
import { startRedis, type TestRedis } from "../support/redis.js";
import { eventually } from "../support/http.js";
import { captureLog } from "../support/log-capture.js";

const allBytes = Uint8Array.from({ length: 256 }, (_, i) => i);
const cacheKey = "k".repeat(43);

describe("Redis cache store", function () {
  this.timeout(30_000);
  let redis: TestRedis;
  let conn: RedisConnection;
  let store: CacheStore;
  let peek: Redis;

  before(async () => {
    redis = await startRedis();
    conn = createRedisConnection(redis.url, { name: "cache-test" });
    store = createRedisCacheStore(conn);
    await eventually(() => conn.up, 5_000);
    peek = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
  });
  after(async () => {
    peek.disconnect();
    await conn.close();
    await redis.stop();
  });

  it("returns the binary payload and the cost from one value, with the TTL set", async () => {
    await store.put("t:1", { payload: allBytes, costUsd: "0.000125" }, 60);
    assert.deepEqual(await store.get("t:1"), { payload: allBytes, costUsd: "0.000125" });
    const ttl = await peek.ttl("t:1");
    assert.ok(ttl > 55 && ttl <= 60, `ttl ${ttl}`);
    assert.deepEqual(await peek.getBuffer("t:1"), encodeEntry({ payload: allBytes, costUsd: "0.000125" }));
  });

  it("reads a value it cannot decode as a miss, with a warning at most once a minute", async () => {
    await peek.set("t:bad", "not an entry");
    await peek.set("t:short", Buffer.from([1, 200, 48]));
    const fresh = createRedisCacheStore(conn);
    const lines = await captureLog(async () => {
      assert.equal(await fresh.get("t:bad"), undefined);
      assert.equal(await fresh.get("t:short"), undefined);
    });
    const warned = lines.filter((l) => l.includes("could not be read (another format, or damaged)"));
    assert.equal(warned.length, 1, lines.join(""));
    assert.match(warned[0]!, /t:bad/);
  });

  it("reads a key of another type than a string as a miss, not an outage, and stores the fresh answer over it", async () => {
    await peek.hset("t:hash", "f", "v");
    await store.put("t:other", { payload: allBytes, costUsd: "0" }, 60);
    const fresh = createRedisCacheStore(conn);
    const lines = await captureLog(async () => {
      assert.equal(await fresh.get("t:hash"), undefined);
      assert.equal(conn.up, true, "Redis answered: the cache stays on for every other entry");
      assert.deepEqual((await fresh.get("t:other"))?.payload, allBytes);
      assert.equal(await fresh.put("t:hash", { payload: allBytes, costUsd: "0.25" }, 60), true);
    });
    assert.deepEqual(await fresh.get("t:hash"), { payload: allBytes, costUsd: "0.25" });
    assert.equal(lines.filter((l) => l.includes("could not be read (another format, or damaged)")).length, 1, lines.join(""));
    assert.equal(lines.filter((l) => l.includes("redis unreachable")).length, 0, lines.join(""));
  });

  it("stores under the scope key, with the project as the hash tag", async () => {
    const cache = createDirectClient(CacheService, createCacheService({ store, defaultTtlSeconds: 60, maxEntryBytes: 1 << 20 }));
    await cache.putEntry({ projectId: "proj_a", keyMode: KeyMode.TEST, cacheKey, payload: allBytes, costUsd: "1" });
    assert.deepEqual(await peek.keys("svc:cache:*"), [`svc:cache:{proj_a}:test:${cacheKey}`]);
  });

  it("treats a stalled Redis as down until a probe finds it answering again", async () => {
    await store.put("t:stall", { payload: allBytes, costUsd: "0" }, 60);
    const lines = await captureLog(async () => {
      await peek.call("CLIENT", "PAUSE", "1500", "ALL");
      assert.equal(await store.get("t:stall"), undefined); // the command timeout (1 s) ends it
      assert.equal(conn.up, false);
      await eventually(() => conn.up, 5_000);
    });
    assert.deepEqual((await store.get("t:stall"))?.payload, allBytes);
    assert.equal(lines.filter((l) => l.includes("redis unreachable (cache-test)")).length, 1);
    assert.equal(lines.filter((l) => l.includes("redis is back (cache-test)")).length, 1);
  });

  it("serves hits from a full Redis and drops stores, logged once when it fills and once when a write is accepted again (not a PING)", async () => {
    const old = { payload: allBytes, costUsd: "0.5" };
    await store.put("t:full:old", old, 60);
    const lines = await captureLog(async () => {
      await peek.config("SET", "maxmemory", "1"); // full: every write refused, reads answered
      try {
        const end = Date.now() + 3_500; // long enough for several PINGs a second apart
        for (let i = 0; Date.now() < end; i++) {
          assert.deepEqual(await store.get("t:full:old"), old, "a hit is served from a full Redis");
          await store.put(`t:full:${i}`, old, 60);
          assert.equal(await store.get(`t:full:${i}`), undefined, "nothing is stored");
          assert.equal(conn.up, true, "a full Redis is not down");
          assert.equal(conn.writesRefused, true);
          await new Promise((r) => setTimeout(r, 50));
        }
      } finally {
        await peek.config("SET", "maxmemory", "0");
      }
      await eventually(() => !conn.writesRefused, 5_000, "writes accepted again");
    });
    const count = (text: string) => lines.filter((l) => l.includes(text)).length;
    assert.equal(count("redis refuses writes (cache-test)"), 1, lines.join(""));
    assert.match(lines.find((l) => l.includes("redis refuses writes"))!, /OOM/);
    assert.equal(count("redis accepts writes again (cache-test)"), 1, lines.join(""));
    assert.equal(count("redis unreachable"), 0, lines.join(""));
    assert.equal(count("redis is back"), 0, lines.join(""));
    await store.put("t:full:after", old, 60);
    assert.deepEqual(await store.get("t:full:after"), old, "stores again once it has room");
    assert.equal(await peek.exists("svc:write-probe"), 0, "the write probe stores nothing");
  });

  it("answers misses at once while Redis is down, logs once, and recovers when it is back", async () => {
    const cache = createDirectClient(CacheService, createCacheService({ store, defaultTtlSeconds: 60, maxEntryBytes: 1 << 20 }));
    const entry = { projectId: "proj_o", keyMode: KeyMode.LIVE, cacheKey };
    await cache.putEntry({ ...entry, payload: allBytes, costUsd: "0.25" });
    assert.equal((await cache.getEntry(entry)).hit, true);

    const lines = await captureLog(async () => {
      await redis.stop();
      const started = Date.now();
      for (let i = 0; i < 50; i++) {
        const res = await cache.getEntry(entry);
        assert.equal(res.hit, false);
      }
      await cache.putEntry({ ...entry, payload: allBytes, costUsd: "0.25" });
      assert.ok(Date.now() - started < 500, `50 lookups and a write took ${Date.now() - started} ms during the outage`);
      await new Promise((r) => setTimeout(r, 1_500)); // reconnect attempts keep failing meanwhile

      redis = await startRedis(redis.port);
      await eventually(() => conn.up, 10_000);
    });
    assert.equal(lines.filter((l) => l.includes("redis unreachable (cache-test)")).length, 1);
    assert.equal(lines.filter((l) => l.includes("redis is back (cache-test)")).length, 1);

    // The restarted Redis is empty: the next answer is stored and served again, by the same service.
    assert.equal((await cache.getEntry(entry)).hit, false);
    await cache.putEntry({ ...entry, payload: allBytes, costUsd: "0.25" });
    const res = await cache.getEntry(entry);
    assert.equal(res.hit, true);
    assert.deepEqual(res.payload, allBytes);
    assert.equal(res.costUsd, "0.25");
  });
});
