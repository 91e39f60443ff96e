import assert from "node:assert/strict";
import { ConnectError } from "@connectrpc/connect";
import { createCacheService, MAX_CACHE_TTL_SECONDS } from "../../../src/core/cache/cache-service.js";
import { createDirectClient } from "../../../src/core/direct-client.js";
import { toErrorInfo } from "../../../src/core/errors.js";
import { CacheService } from "../../../src/gen/svc/cache/v1/cache_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import type { CacheStore } from "../../../src/stores/cache-store.js";
import { createMemoryCacheStore } from "../../../src/stores/memory-cache-store.js";
import { captureLog } from "../../support/log-capture.js";

const payload = new TextEncoder().encode("a serialized Completion");
const cacheKey = "0123456789abcdef0123456789abcdef";
const live = { projectId: "proj_a", keyMode: KeyMode.LIVE, cacheKey };

function setup(opts: { defaultTtlSeconds?: number; maxEntryBytes?: number; store?: CacheStore } = {}) {
  const clock = { t: 1_700_000_000_000 };
  const store = opts.store ?? createMemoryCacheStore({ maxBytes: 1 << 20, now: () => clock.t });
  const impl = createCacheService({ store, defaultTtlSeconds: opts.defaultTtlSeconds ?? 3600, maxEntryBytes: opts.maxEntryBytes ?? 1 << 16 });
  return { clock, cache: createDirectClient(CacheService, impl) };
}

const rejectsWith = (p: Promise<unknown>, code: string) =>
  assert.rejects(p, (e) => e instanceof ConnectError && toErrorInfo(e).status === 400 && toErrorInfo(e).code === code);

describe("CacheService", () => {
  it("returns a stored answer and its cost", async () => {
    const { cache } = setup();
    assert.equal((await cache.getEntry(live)).hit, false);
    assert.equal((await cache.putEntry({ ...live, payload, costUsd: "0.000125" })).stored, true);
    const res = await cache.getEntry(live);
    assert.equal(res.hit, true);
    assert.deepEqual(res.payload, payload);
    assert.equal(res.costUsd, "0.000125");
  });

  it("keeps projects apart, and test keys apart from live keys", async () => {
    const { cache } = setup();
    await cache.putEntry({ ...live, payload, costUsd: "1" });
    assert.equal((await cache.getEntry({ ...live, projectId: "proj_b" })).hit, false);
    assert.equal((await cache.getEntry({ ...live, keyMode: KeyMode.TEST })).hit, false);
  });

  it("keeps an entry stored with ttl_seconds 0 for the configured default", async () => {
    const { cache, clock } = setup({ defaultTtlSeconds: 600 });
    await cache.putEntry({ ...live, payload, costUsd: "1", ttlSeconds: 0 });
    clock.t += 599_000;
    assert.equal((await cache.getEntry(live)).hit, true);
    clock.t += 1_000;
    assert.equal((await cache.getEntry(live)).hit, false);
  });

  it("keeps an entry for the TTL it names, cut to the maximum", async () => {
    const { cache, clock } = setup();
    await cache.putEntry({ ...live, payload, costUsd: "1", ttlSeconds: 5 });
    await cache.putEntry({ ...live, cacheKey: "f".repeat(32), payload, costUsd: "1", ttlSeconds: 2_000_000_000 });
    clock.t += 5_000;
    assert.equal((await cache.getEntry(live)).hit, false);
    clock.t += MAX_CACHE_TTL_SECONDS * 1000 - 5_001;
    assert.equal((await cache.getEntry({ ...live, cacheKey: "f".repeat(32) })).hit, true);
    clock.t += 1;
    assert.equal((await cache.getEntry({ ...live, cacheKey: "f".repeat(32) })).hit, false);
  });

  it("does not store an answer over the entry size limit, and says so", async () => {
    const { cache } = setup({ maxEntryBytes: 10 });
    assert.equal((await cache.putEntry({ ...live, payload, costUsd: "1" })).stored, false);
    assert.equal((await cache.getEntry(live)).hit, false);
  });

  it("refuses malformed requests", async () => {
    const { cache } = setup();
    await rejectsWith(cache.getEntry({ ...live, projectId: "" }), "missing_required_field");
    await rejectsWith(cache.getEntry({ ...live, projectId: "proj}:x" }), "invalid_value");
    await rejectsWith(cache.getEntry({ ...live, keyMode: KeyMode.UNSPECIFIED }), "invalid_value");
    await rejectsWith(cache.getEntry({ ...live, cacheKey: "" }), "missing_required_field");
    await rejectsWith(cache.getEntry({ ...live, cacheKey: "short" }), "invalid_value");
    await rejectsWith(cache.putEntry({ ...live, costUsd: "1" }), "missing_required_field");
    await rejectsWith(cache.putEntry({ ...live, payload, costUsd: "$1" }), "invalid_value");
    await rejectsWith(cache.putEntry({ ...live, payload, costUsd: "1", ttlSeconds: -1 }), "invalid_value");
  });

  it("answers a miss and drops the write when the store fails, logging once", async () => {
    const broken: CacheStore = {
      get: () => Promise.reject(new Error("store broke")),
      put: () => Promise.reject(new Error("store broke")),
    };
    const { cache } = setup({ store: broken });
    const lines = await captureLog(async () => {
      for (let i = 0; i < 3; i++) {
        assert.equal((await cache.getEntry(live)).hit, false);
        assert.equal((await cache.putEntry({ ...live, payload, costUsd: "1" })).stored, false);
      }
    });
    assert.equal(lines.filter((l) => l.includes("cache store failed")).length, 1);
  });
});
