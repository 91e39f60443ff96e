import type { CacheEntry, CacheStore } from "./cache-store.js";

export interface MemoryCacheOptions {
  /** The byte budget of all entries together (see ENTRY_OVERHEAD_BYTES for what an entry counts). */
  maxBytes: number;
  /** Milliseconds since the epoch; injectable for tests. */
  now?: () => number;
}

/** The embedded cache plus what a test or a metric wants to read from it. */
export interface MemoryCacheStore extends CacheStore {
  /** Entries held (expired ones included until they are touched or evicted). */
  readonly entries: number;
  /** Bytes counted against the budget. */
  readonly bytes: number;
}

/**
 * What an entry costs beyond its payload, key and cost texts: the Map slot, the entry object, the
 * Uint8Array header and the strings' headers, rounded up. Counting it keeps a budget honest when
 * answers are tiny (a million 10-byte answers are not 10 MB of heap).
 */
export const ENTRY_OVERHEAD_BYTES = 160;

interface Slot extends CacheEntry {
  expiresAt: number;
  size: number;
}

/**
 * The embedded cache: a least-recently-used map under a byte budget, with a TTL per entry. A Map
 * keeps insertion order, so re-inserting an entry on every hit makes the first key the least
 * recently used one, which is evicted first. Expired entries are never served; they are dropped
 * when read, and otherwise age out through LRU eviction like any cold entry.
 */
export function createMemoryCacheStore({ maxBytes, now = Date.now }: MemoryCacheOptions): MemoryCacheStore {
  const slots = new Map<string, Slot>();
  let bytes = 0;

  const drop = (key: string, slot: Slot) => {
    slots.delete(key);
    bytes -= slot.size;
  };

  return {
    async get(key) {
      const slot = slots.get(key);
      if (!slot) return undefined;
      if (now() >= slot.expiresAt) {
        drop(key, slot);
        return undefined;
      }
      slots.delete(key);
      slots.set(key, slot);
      return { payload: slot.payload, costUsd: slot.costUsd };
    },

    async put(key, entry, ttlSeconds) {
      // Strings are counted a byte a character: scope keys and costs are ASCII (checked by the service).
      const size = entry.payload.byteLength + key.length + entry.costUsd.length + ENTRY_OVERHEAD_BYTES;
      const old = slots.get(key);
      if (old) drop(key, old);
      if (size > maxBytes) return;
      // Kept bytes must own exactly their buffer: the caller's array may be a view into a much
      // larger one (a whole gRPC request), which would stay alive, uncounted, as long as the entry.
      // An array that owns its whole buffer (the gateway's own encoding) is handed over as it is.
      const p = entry.payload;
      const payload = p.byteOffset === 0 && p.byteLength === p.buffer.byteLength ? p : new Uint8Array(p);
      slots.set(key, { payload, costUsd: entry.costUsd, expiresAt: now() + ttlSeconds * 1000, size });
      bytes += size;
      if (bytes > maxBytes) {
        for (const [k, slot] of slots) {
          if (bytes <= maxBytes) break;
          drop(k, slot);
        }
      }
    },

    get entries() {
      return slots.size;
    },
    get bytes() {
      return bytes;
    },
  };
}
