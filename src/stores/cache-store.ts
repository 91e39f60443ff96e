/** A cached answer as stored. */
export interface CacheEntry {
  /** The answer, a serialized svc.proxy.v1.Completion. Readers must not change it: it may be shared. */
  payload: Uint8Array;
  /** What the answer cost when it was produced, in USD, as a plain decimal. */
  costUsd: string;
}

/**
 * Where cached answers live: process memory (embedded) or Redis (cluster). Keys are whole scope keys
 * (cache-service.ts builds them from project, key mode and request hash), so a store never has to
 * know about scoping. A store is best effort by contract: it never throws for an outage of its
 * backend, it answers a miss and drops the write instead, because a cache must never fail a request.
 */
export interface CacheStore {
  /** The live entry under `scopeKey`, or undefined (none, expired, or the backend unavailable). */
  get(scopeKey: string): Promise<CacheEntry | undefined>;
  /**
   * Stores an entry for `ttlSeconds` (a positive integer), replacing any entry under the key; false
   * when it was dropped (larger than the whole store, or the backend unavailable).
   */
  put(scopeKey: string, entry: CacheEntry, ttlSeconds: number): Promise<boolean>;
}
