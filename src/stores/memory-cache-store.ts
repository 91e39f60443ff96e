import { Lru } from "../core/lru.js";
import type { CacheEntry, CacheStore } from "./cache-store.js";

export interface MemoryCacheOptions {
  /** The byte budget of all entries together (see ENTRY_OVERHEAD_BYTES for what an entry counts). */
  maxBytes: number;
  /**
   * A clock in milliseconds, injectable for tests; by default a monotonic one (`performance.now()`),
   * so a wall clock stepped back or ahead (NTP, a VM restored) neither stretches nor cuts a TTL.
   */
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
 * What an entry costs beyond its payload, key and cost texts: the Map slot, the list node, the entry
 * object, the Uint8Array and ArrayBuffer objects with the buffer's bookkeeping, and the strings'
 * headers, rounded up. Counting it keeps a budget honest when answers are small (a million 10-byte
 * answers are not 10 MB of heap). Measured (V8 heap plus array buffers, after a full collection,
 * 100,000 entries of 400 bytes): about 460 bytes an entry beyond what it holds. The process's
 * resident size grows by more, the allocator's own overhead for each buffer.
 */
export const ENTRY_OVERHEAD_BYTES = 480;

interface Slot extends CacheEntry {
  expiresAt: number;
  size: number;
}

/**
 * The embedded cache: a least-recently-used map under a byte budget, with a TTL per entry. A read
 * makes its entry the most recently used; the least recently used ones are evicted first (core/lru.ts:
 * O(1) whatever the size, where evicting from a Map's insertion order got slower with every eviction
 * once the budget was full). Expired entries are never served; they are dropped when read, and
 * otherwise age out through LRU eviction like any cold entry.
 */
export function createMemoryCacheStore({ maxBytes, now = () => performance.now() }: MemoryCacheOptions): MemoryCacheStore {
  const slots = new Lru<string, Slot>();
  let bytes = 0;

  return {
    async get(key) {
      const slot = slots.get(key);
      if (!slot) return undefined;
      if (now() >= slot.expiresAt) {
        slots.delete(key);
        bytes -= slot.size;
        return undefined;
      }
      return { payload: slot.payload, costUsd: slot.costUsd };
    },

    async put(key, entry, ttlSeconds) {
      // Strings are counted a byte a character: scope keys and costs are ASCII (checked by the service).
      const size = entry.payload.byteLength + key.length + entry.costUsd.length + ENTRY_OVERHEAD_BYTES;
      const old = slots.delete(key);
      if (old) bytes -= old.size;
      if (size > maxBytes) return false;
      // Kept bytes must own exactly their buffer: the caller's array may be a view into a much
      // larger one (a whole gRPC request), which would stay alive, uncounted, as long as the entry.
      // An array that owns its whole buffer (the gateway's own encoding) is handed over as it is.
      const p = entry.payload;
      const payload = p.byteOffset === 0 && p.byteLength === p.buffer.byteLength ? p : new Uint8Array(p);
      slots.set(key, { payload, costUsd: entry.costUsd, expiresAt: now() + ttlSeconds * 1000, size });
      bytes += size;
      while (bytes > maxBytes) bytes -= slots.shift()![1].size;
      return true;
    },

    get entries() {
      return slots.size;
    },
    get bytes() {
      return bytes;
    },
  };
}
