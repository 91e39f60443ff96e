import type { ServiceImpl } from "@connectrpc/connect";
import type { CacheConfig } from "../../config.js";
import type { CacheService } from "../../gen/svc/cache/v1/cache_service_pb.js";
import { createMemoryCacheStore } from "../../stores/memory-cache-store.js";
import { createRedisCacheStore } from "../../stores/redis-cache-store.js";
import { createRedisConnection, type RedisTarget } from "../../stores/redis-connection.js";
import { createCacheService } from "./cache-service.js";

/** The CacheService of this process and how to release what it holds. */
export interface CacheBackend {
  impl: ServiceImpl<typeof CacheService>;
  close(): Promise<void>;
}

/**
 * Chooses the cache's store by deployment mode: Redis, shared by every replica, when `redisUrl` is
 * set (cluster); process memory under a byte budget otherwise (embedded).
 */
export function createCacheBackend(redisUrl: RedisTarget | undefined, config: CacheConfig): CacheBackend {
  const deps = { defaultTtlSeconds: config.ttlSeconds, maxEntryBytes: config.maxEntryBytes };
  if (!redisUrl) {
    return { impl: createCacheService({ ...deps, store: createMemoryCacheStore({ maxBytes: config.maxBytes }) }), close: async () => {} };
  }
  const conn = createRedisConnection(redisUrl, { name: "cache", whileWritesRefused: "serving hits, storing no answers" });
  return { impl: createCacheService({ ...deps, store: createRedisCacheStore(conn) }), close: () => conn.close() };
}
