import type { ServiceImpl } from "@connectrpc/connect";
import { CacheService } from "../../gen/svc/cache/v1/cache_service_pb.js";
import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import { atMostEvery, log } from "../../logger.js";
import type { CacheStore } from "../../stores/cache-store.js";
import { invalidRequest } from "../errors.js";

export interface CacheDeps {
  store: CacheStore;
  /** The TTL of an entry stored with `ttl_seconds` 0, in seconds. */
  defaultTtlSeconds: number;
  /** Answers larger than this many payload bytes are not stored: one would push out many small ones. */
  maxEntryBytes: number;
}

/** The longest an entry may live, in seconds (30 days): a longer TTL asked for is cut to it. */
export const MAX_CACHE_TTL_SECONDS = 30 * 24 * 3600;

/**
 * The store key of an entry: project and key mode first, so no project ever reads another's
 * entries and test keys never share live ones. `{project}` is a Redis Cluster hash tag, so one
 * project's entries sit on one slot.
 */
export const scopeKeyOf = (projectId: string, mode: "live" | "test", cacheKey: string): string =>
  `svc:cache:{${projectId}}:${mode}:${cacheKey}`;

// Ids are checked so that nothing a caller sends can break out of its scope in the store key
// (a `}` or `:` in a project id would).
const PROJECT_ID = /^[A-Za-z0-9_-]{1,128}$/;
const CACHE_KEY = /^[A-Za-z0-9_-]{16,128}$/;
const COST_USD = /^\d{1,30}(\.\d{1,30})?$/;
const STORE_ERROR_LOG_INTERVAL_MS = 60_000;
// Answers are complete messages: the in-process client passes them on without a create() per call.
const noPayload = new Uint8Array(0);

/**
 * Creates the CacheService implementation over a store. Lookups and writes are best effort: a
 * store that fails makes a lookup a miss and drops a write, and never fails the caller's request.
 * Only malformed requests (a caller's bug) are refused.
 */
export function createCacheService({ store, defaultTtlSeconds, maxEntryBytes }: CacheDeps): ServiceImpl<typeof CacheService> {
  const storeErrorLogged = atMostEvery(STORE_ERROR_LOG_INTERVAL_MS);
  // Stores handle their own outages (the Redis one logs once per outage); anything that still
  // escapes is a bug, logged at most once a minute so that a broken store cannot flood the log.
  const storeFailed = (op: string, err: unknown) => {
    if (!storeErrorLogged()) return;
    log.error("cache store failed: answering without the cache", { op, err: String((err as Error)?.stack ?? err) });
  };

  return {
    async getEntry(req) {
      const key = scopeKeyOf(checkProject(req.projectId), modeOf(req.keyMode), checkCacheKey(req.cacheKey));
      try {
        const entry = await store.get(key);
        if (entry) return { $typeName: "svc.cache.v1.GetEntryResponse", hit: true, payload: entry.payload, costUsd: entry.costUsd };
      } catch (err) {
        storeFailed("get", err);
      }
      return { $typeName: "svc.cache.v1.GetEntryResponse", hit: false, payload: noPayload, costUsd: "" };
    },

    async putEntry(req) {
      const key = scopeKeyOf(checkProject(req.projectId), modeOf(req.keyMode), checkCacheKey(req.cacheKey));
      if (req.payload.byteLength === 0) throw invalidRequest("missing_required_field", "`payload` is required.");
      if (!COST_USD.test(req.costUsd)) throw invalidRequest("invalid_value", "`cost_usd` must be a plain decimal such as 0.000125.");
      if (req.ttlSeconds < 0) throw invalidRequest("invalid_value", "`ttl_seconds` must be 0 (the default) or positive.");
      if (req.payload.byteLength > maxEntryBytes) return { $typeName: "svc.cache.v1.PutEntryResponse", stored: false };
      const ttl = Math.min(req.ttlSeconds || defaultTtlSeconds, MAX_CACHE_TTL_SECONDS);
      let stored = false;
      try {
        stored = await store.put(key, { payload: req.payload, costUsd: req.costUsd }, ttl);
      } catch (err) {
        storeFailed("put", err);
      }
      return { $typeName: "svc.cache.v1.PutEntryResponse", stored };
    },
  };
}

function checkProject(id: string): string {
  if (!id) throw invalidRequest("missing_required_field", "`project_id` is required.");
  if (!PROJECT_ID.test(id)) throw invalidRequest("invalid_value", "`project_id` must be 1 to 128 letters, digits, `_` or `-`.");
  return id;
}

function checkCacheKey(key: string): string {
  if (!key) throw invalidRequest("missing_required_field", "`cache_key` is required.");
  if (!CACHE_KEY.test(key)) throw invalidRequest("invalid_value", "`cache_key` must be a hex or base64url hash of 16 to 128 characters.");
  return key;
}

function modeOf(mode: KeyMode): "live" | "test" {
  if (mode === KeyMode.LIVE) return "live";
  if (mode === KeyMode.TEST) return "test";
  throw invalidRequest("invalid_value", "`key_mode` must be live or test.");
}
