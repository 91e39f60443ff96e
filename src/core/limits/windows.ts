/**
 * The sliding rate windows, shared by the memory store and the Redis store's Lua script so the two
 * cannot drift apart.
 *
 * A window of `buckets` sub-buckets of `bucketMs` counts admissions per bucket. A decision at time t
 * counts the bucket t falls in and the `buckets` whole buckets before it: the span counted,
 * [start of bucket(t) - buckets x bucketMs, t], is never shorter than the window, so any
 * window-long interval ending at an admission lies inside the span that admission checked, and no
 * window-long interval ever holds more than the limit. The price is up to one bucket of extra
 * memory: a minute may count up to 61 s of history, a day up to 24 h 1 min. Counters and a running
 * total keep each decision O(1); expired buckets are dropped as time passes.
 *
 * A fixed window (reset on the minute) would admit 2N around a boundary; a sliding log (one entry a
 * request) is exact too but keeps 100,000 entries for a pro project's day.
 */
export interface WindowShape {
  bucketMs: number;
  buckets: number;
}

export const MINUTE: WindowShape = { bucketMs: 1_000, buckets: 60 };
export const DAY: WindowShape = { bucketMs: 60_000, buckets: 1_440 };

/** Which limit a decision is about; mirrors svc.limits.v1.LimitWindow. */
export type WindowName = "minute" | "day" | "user_minute" | "month";

/** The bucket an instant falls in. */
export const bucketOf = (nowMs: number, w: WindowShape): number => Math.floor(nowMs / w.bucketMs);

/**
 * When a window stops rejecting, given its buckets oldest first: the first bucket b after which
 * fewer than `limit` admissions remain counted frees its share at (b + buckets + 1) x bucketMs.
 */
export function freeAtMs(counts: Array<[bucket: number, count: number]>, total: number, limit: number, w: WindowShape): number {
  const need = total - limit + 1;
  let acc = 0;
  for (const [b, c] of counts) {
    acc += c;
    if (acc >= need) return (b + w.buckets + 1) * w.bucketMs;
  }
  // A limit of 0 never frees; report the whole window from the newest bucket.
  const newest = counts.at(-1)?.[0] ?? 0;
  return (newest + w.buckets + 1) * w.bucketMs;
}

/** UTC calendar month of an instant, `YYYY-MM`: the period a spend cap applies to. */
export function monthOf(nowMs: number): string {
  const d = new Date(nowMs);
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, "0")}`;
}

/** The first instant of the next UTC month: when a spend cap's month ends. */
export function monthEndMs(nowMs: number): number {
  const d = new Date(nowMs);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}
