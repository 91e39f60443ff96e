import { bucketOf, DAY, freeAtMs, MINUTE, type WindowName, type WindowShape } from "../core/limits/windows.js";
import { type AdmitInput, type AdmitOutcome, EXPIRE_BATCH, type LimitsStore, type RescindInput, type SettleInput, type Usage } from "./limits-store.js";

/** One sliding window's counters (see src/core/limits/windows.ts). */
interface WindowState {
  /** The oldest bucket still counted. */
  oldest: number;
  total: number;
  /** Count per bucket, in ascending bucket order (buckets only ever grow). */
  counts: Map<number, number>;
}

interface Reservation {
  nano: number;
  expiresAt: number;
  /** A rescindable admission's buckets, by window. */
  counted?: Partial<Record<WindowName, number>>;
}

interface ProjectState {
  minute: WindowState | undefined;
  day: WindowState | undefined;
  users: Map<string, WindowState>;
  /** Outstanding reservations in the order made, so the oldest expire first. */
  reservations: Map<string, Reservation>;
  reserved: number;
  /** Spend by month, `YYYY-MM`. */
  spent: Map<string, number>;
}

interface Check {
  name: WindowName;
  limit: number;
  shape: WindowShape;
  get(): WindowState | undefined;
  set(s: WindowState | undefined): void;
  cur: number;
  total: number;
}

/**
 * Drops the buckets that left the window at bucket `cur` and returns the count still in it. Time
 * never steps back: a clock behind the newest bucket counts as the newest bucket.
 */
function load(c: Check): void {
  const s = c.get();
  if (!s) return;
  const { buckets } = c.shape;
  c.cur = Math.max(c.cur, s.oldest + buckets);
  const lo = c.cur - buckets;
  if (lo - s.oldest > buckets) {
    c.set(undefined);
    return;
  }
  for (const [b, n] of s.counts) {
    if (b >= lo) break;
    s.total -= n;
    s.counts.delete(b);
  }
  s.oldest = Math.max(s.oldest, lo);
  c.total = s.total;
}

function add(c: Check): void {
  let s = c.get();
  if (!s) c.set((s = { oldest: c.cur - c.shape.buckets, total: 0, counts: new Map() }));
  s.counts.set(c.cur, (s.counts.get(c.cur) ?? 0) + 1);
  s.total++;
}

/**
 * The embedded store: the same decisions as the Redis script, in process memory. JavaScript runs
 * one decision at a time, so each is atomic without locks. Idle windows are swept now and then so
 * per-user windows do not pile up.
 */
export function createMemoryLimitsStore(): LimitsStore {
  const projects = new Map<string, ProjectState>();
  let calls = 0;

  const stateOf = (id: string): ProjectState => {
    let p = projects.get(id);
    if (!p) projects.set(id, (p = { minute: undefined, day: undefined, users: new Map(), reservations: new Map(), reserved: 0, spent: new Map() }));
    return p;
  };

  const expire = (p: ProjectState, nowMs: number) => {
    let n = 0;
    for (const [id, r] of p.reservations) {
      if (r.expiresAt > nowMs || n++ >= EXPIRE_BATCH) break;
      p.reserved -= r.nano;
      p.reservations.delete(id);
    }
  };

  const sweep = (nowMs: number) => {
    const stale = (s: WindowState | undefined, w: WindowShape) => s !== undefined && s.oldest + 2 * w.buckets < bucketOf(nowMs, w);
    for (const p of projects.values()) {
      if (stale(p.minute, MINUTE)) p.minute = undefined;
      if (stale(p.day, DAY)) p.day = undefined;
      for (const [u, s] of p.users) if (stale(s, MINUTE)) p.users.delete(u);
    }
  };

  return {
    async admit(input: AdmitInput): Promise<AdmitOutcome> {
      const now = input.nowMs;
      if (++calls % 10_000 === 0) sweep(now);
      const p = stateOf(input.projectId);
      const checks: Check[] = [];
      const check = (name: WindowName, limit: number | undefined, shape: WindowShape, get: () => WindowState | undefined, set: (s: WindowState | undefined) => void) => {
        if (limit !== undefined) checks.push({ name, limit, shape, get, set, cur: bucketOf(now, shape), total: 0 });
      };
      check("minute", input.minuteLimit, MINUTE, () => p.minute, (s) => (p.minute = s));
      check("day", input.dayLimit, DAY, () => p.day, (s) => (p.day = s));
      if (input.userId) {
        const u = input.userId;
        check("user_minute", input.userMinuteLimit, MINUTE, () => p.users.get(u), (s) => (s ? p.users.set(u, s) : p.users.delete(u)));
      }
      for (const c of checks) load(c);
      expire(p, now);

      let worst: AdmitOutcome | undefined;
      const reject = (o: AdmitOutcome) => {
        if (!worst || o.retryAfterMs > worst.retryAfterMs) worst = o;
      };
      for (const c of checks) {
        if (c.total < c.limit) continue;
        const s = c.get()!;
        const counts = [...s.counts];
        const newest = counts.at(-1)?.[0] ?? c.cur;
        const { bucketMs, buckets } = c.shape;
        reject({ allowed: false, window: c.name, limit: c.limit, remaining: 0, resetMs: (newest + buckets + 1) * bucketMs - now, retryAfterMs: freeAtMs(counts, c.total, c.limit, c.shape) - now, spendRemainingNano: undefined });
      }
      let spendRemainingNano: number | undefined;
      if (input.capNano !== undefined) {
        const room = input.capNano - (p.spent.get(input.month) ?? 0) - p.reserved;
        // A request whose worst case is nothing (a cache hit, a model priced 0) cannot spend past
        // the cap, so the cap never refuses it, even one at 0 or used up; its windows still apply.
        if (input.worstNano > 0 && input.worstNano > room) {
          const wait = input.monthEndMs - now;
          reject({ allowed: false, window: "month", limit: 0, remaining: 0, resetMs: wait, retryAfterMs: wait, spendRemainingNano: Math.max(room, 0) });
        }
        spendRemainingNano = room - input.worstNano;
      }
      if (worst) {
        // A spend-cap refusal still tells the client where its request limits stand (this request
        // not counted): the tightest request window's counters, as an admission would report them.
        if (worst.window === "month") {
          for (const c of checks) {
            const remaining = Math.max(c.limit - c.total, 0);
            if (worst.limit === 0 || remaining < worst.remaining) {
              worst = { ...worst, limit: c.limit, remaining, resetMs: (c.cur + c.shape.buckets + 1) * c.shape.bucketMs - now };
            }
          }
        }
        return worst;
      }

      let tight: AdmitOutcome = { allowed: true, window: undefined, limit: 0, remaining: 0, resetMs: 0, retryAfterMs: 0, spendRemainingNano };
      const counted: Partial<Record<WindowName, number>> | undefined = input.rescindable ? {} : undefined;
      for (const c of checks) {
        add(c);
        if (counted) counted[c.name] = c.cur;
        const remaining = c.limit - c.total - 1;
        if (tight.window === undefined || remaining < tight.remaining) {
          tight = { ...tight, window: c.name, limit: c.limit, remaining, resetMs: (c.cur + c.shape.buckets + 1) * c.shape.bucketMs - now };
        }
      }
      if (input.worstNano > 0 || input.rescindable) {
        p.reservations.set(input.reservationId, { nano: input.worstNano, expiresAt: now + input.reservationTtlMs, counted });
        p.reserved += input.worstNano;
      }
      return tight;
    },

    async rescind(input: RescindInput): Promise<boolean> {
      const p = stateOf(input.projectId);
      expire(p, input.nowMs);
      const r = p.reservations.get(input.reservationId);
      if (!r?.counted) return false;
      p.reserved -= r.nano;
      p.reservations.delete(input.reservationId);
      // A bucket that has left its window was dropped when the window moved past it. One left at 0
      // stays in the map, which keeps its keys in ascending order.
      const uncount = (s: WindowState | undefined, b: number | undefined) => {
        const n = b === undefined ? undefined : s?.counts.get(b);
        if (!n) return;
        s!.counts.set(b!, n - 1);
        s!.total--;
      };
      uncount(p.minute, r.counted.minute);
      uncount(p.day, r.counted.day);
      uncount(p.users.get(input.userId), r.counted.user_minute);
      return true;
    },

    async settle(input: SettleInput): Promise<void> {
      const p = stateOf(input.projectId);
      const r = p.reservations.get(input.reservationId);
      if (r) {
        p.reserved -= r.nano;
        p.reservations.delete(input.reservationId);
      }
      if (input.costNano > 0) p.spent.set(input.month, (p.spent.get(input.month) ?? 0) + input.costNano);
    },

    async usage(projectId: string, month: string, nowMs: number): Promise<Usage> {
      const p = stateOf(projectId);
      expire(p, nowMs);
      const count = (shape: WindowShape, get: () => WindowState | undefined, set: (s: WindowState | undefined) => void) => {
        const c: Check = { name: "minute", limit: 0, shape, get, set, cur: bucketOf(nowMs, shape), total: 0 };
        load(c);
        return c.total;
      };
      return {
        minuteCount: count(MINUTE, () => p.minute, (s) => (p.minute = s)),
        dayCount: count(DAY, () => p.day, (s) => (p.day = s)),
        spentNano: p.spent.get(month) ?? 0,
        reservedNano: p.reserved,
      };
    },

    async close() {
      projects.clear();
    },
  };
}
