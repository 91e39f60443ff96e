import { atMostEvery, log } from "../logger.js";
import type { CacheEntry, CacheStore } from "./cache-store.js";
import type { RedisConnection } from "./redis-connection.js";

/**
 * The cluster cache in Redis: one string per entry, written with SET EX and read with one GET, so a
 * lookup is a single round trip. Keys are the service's scope keys
 * (`svc:cache:{<project>}:<mode>:<hash>`), whose hash tag keeps a project on one Cluster slot.
 *
 * The value holds the cost and the payload together:
 *
 *   byte 0       format version (1)
 *   byte 1       n, the length of the cost text
 *   bytes 2..n+1 the cost in USD, ASCII
 *   the rest     the payload, a serialized svc.proxy.v1.Completion
 *
 * A value in another format (an older or newer replica's) reads as a miss, never as garbage.
 * Redis runs with `maxmemory-policy noeviction` (README, SVC_REDIS_URL): the limits' counters and
 * reservations have TTLs too, so `volatile-lru` would evict them along with cache entries, and
 * loosen the limits; a full Redis refuses writes instead, which this store rides out (below).
 *
 * While the connection is known to be down, nothing is sent: a lookup is a miss at once, without
 * waiting for a command timeout, and a write is dropped. While Redis answers but refuses writes (a
 * full Redis), lookups go on as usual (hits are served) and writes are dropped without being sent.
 * Failures are reported to the connection, which logs once per outage, and once per spell of
 * refused writes.
 */
export function createRedisCacheStore(conn: RedisConnection): CacheStore {
  const unreadableLogged = atMostEvery(UNREADABLE_LOG_INTERVAL_MS);
  /** A value this build cannot read: a miss, stored over by the fresh answer; logged at most once a minute. */
  const unreadable = (key: string): undefined => {
    if (unreadableLogged()) {
      log.warn("a cached entry in Redis could not be read (another format, or damaged): answered as a miss", { key });
    }
    return undefined;
  };
  return {
    async get(key) {
      if (!conn.up) return undefined;
      let value: Buffer | null;
      try {
        value = await conn.redis.getBuffer(key);
      } catch (err) {
        // A key of another type than a string (written by something else, or damaged) is an entry
        // that cannot be read, as a value in another format is: a miss, which the fresh answer's
        // SET replaces; Redis answered, so it is no outage (which would turn every project's
        // cache off for a second, and drop that answer's store).
        if (isWrongType(err)) return unreadable(key);
        conn.failed(err);
        return undefined;
      }
      if (value === null) return undefined;
      return decodeEntry(value) ?? unreadable(key);
    },

    async put(key, entry, ttlSeconds) {
      if (!conn.up || conn.writesRefused) return false;
      try {
        await conn.redis.set(key, encodeEntry(entry), "EX", ttlSeconds);
        return true;
      } catch (err) {
        conn.failed(err);
        return false;
      }
    },
  };
}

/** Redis's reply to a GET of a key holding a hash, list, set...: `WRONGTYPE Operation against a key holding the wrong kind of value`. */
const isWrongType = (err: unknown): boolean => (err as Error)?.name === "ReplyError" && String((err as Error).message).startsWith("WRONGTYPE");

const FORMAT = 1;
const UNREADABLE_LOG_INTERVAL_MS = 60_000;
const HEADER = 2;

/** Cost and payload in one value; the cost must be ASCII of at most 255 characters (the service checks). */
export function encodeEntry(entry: CacheEntry): Buffer {
  const cost = entry.costUsd;
  if (cost.length > 255) throw new Error("the cost text is longer than 255 characters");
  const out = Buffer.allocUnsafe(HEADER + cost.length + entry.payload.byteLength);
  out[0] = FORMAT;
  out[1] = cost.length;
  out.write(cost, HEADER, "latin1");
  out.set(entry.payload, HEADER + cost.length);
  return out;
}

/** The entry in a stored value, or undefined for a value this version cannot read. */
export function decodeEntry(value: Buffer): CacheEntry | undefined {
  if (value.length < HEADER || value[0] !== FORMAT) return undefined;
  const start = HEADER + value[1]!;
  if (value.length < start) return undefined;
  return {
    costUsd: value.toString("latin1", HEADER, start),
    // A plain Uint8Array view of the reply, without a copy.
    payload: new Uint8Array(value.buffer, value.byteOffset + start, value.length - start),
  };
}
