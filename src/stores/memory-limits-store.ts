import { rename } from "node:fs/promises";
import { join } from "node:path";
import { bucketOf, DAY, freeAtMs, MINUTE, monthOf, type WindowName, type WindowShape } from "../core/limits/windows.js";
import { log } from "../logger.js";
import { createJsonFileWriter, readJsonFile } from "./json-file.js";
import { type AdmitInput, type AdmitOutcome, EXPIRE_BATCH, type LimitsStore, RESERVED_RETRY_MS, type RescindInput, type SettleInput, type Usage } from "./limits-store.js";

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
  /** The user whose window it was counted in, when it was. */
  user?: string;
}

interface ProjectState {
  minute: WindowState | undefined;
  day: WindowState | undefined;
  users: Map<string, WindowState>;
  /** Outstanding reservations in expiry order (the order made, unless the clock stepped back), so the first to expire go first. */
  reservations: Map<string, Reservation>;
  /** The latest expiry of a reservation made: one made later that expires before it is out of order. */
  latestExpiry: number;
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
 * never steps back: a clock behind the newest bucket counts as the newest bucket. A window is so
 * never counted short, whatever a clock does; the price of a clock stepped back (NTP, a VM
 * restored) is a full window held for as long as the step (docs/limits.md). Moving the window back
 * with the clock was tried: a clock going back and forth by a few seconds then aged every count
 * by each step forward, and admitted several times the limit.
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

/** The embedded limits' snapshot, in the data dir. */
export const LIMITS_SNAPSHOT_FILE = "limits.json";

/** How soon after a change the snapshot is written: the most a crash can lose. */
export const DEFAULT_PERSIST_DELAY_MS = 1_000;

/**
 * What of a project survives a restart: its spend in the current month and its day window. Minute
 * windows (the project's and each user's) start empty again, and reservations are never kept: a
 * request cut off by the restart must not hold part of the cap.
 */
interface ProjectSnapshot {
  /** Nano-dollars spent, by month `YYYY-MM`. */
  spent?: Record<string, number>;
  /** The day window: its oldest bucket counted and its non-empty buckets, ascending. */
  day?: { oldest: number; counts: Array<[bucket: number, count: number]> };
}

export interface LimitsSnapshot {
  version: 1;
  /** The newest clock reading the store had seen when the snapshot was taken. */
  savedAtMs: number;
  projects: Record<string, ProjectSnapshot>;
}

export interface MemoryLimitsPersistence {
  /** The snapshot file, written whole (a temporary file renamed over it). */
  path: string;
  /** How soon after a change it is written (default DEFAULT_PERSIST_DELAY_MS). */
  delayMs?: number;
  /** The state to start from. */
  initial?: LimitsSnapshot;
}

/**
 * Whether a window with `remaining` left, refilled in `resetMs`, is the one to report over `than`:
 * less left, or as much left and refilled later (its reset is when that much is back: a minute
 * and a day window both at 0 report the day's).
 */
const tighter = (remaining: number, resetMs: number, than: AdmitOutcome): boolean =>
  remaining < than.remaining || (remaining === than.remaining && resetMs > than.resetMs);

const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** `v` as a snapshot; throws, saying what is wrong, when it is not one. */
export function checkLimitsSnapshot(v: unknown): LimitsSnapshot {
  const fail = (why: string): never => {
    throw new Error(why);
  };
  if (!isObject(v) || v.version !== 1) fail("it is not a version 1 limits snapshot");
  const snap = v as unknown as LimitsSnapshot;
  if (!isCount(snap.savedAtMs)) fail("`savedAtMs` is not a time");
  if (!isObject(snap.projects)) fail("`projects` is not an object");
  for (const [id, p] of Object.entries(snap.projects as Record<string, unknown>)) {
    if (!isObject(p)) fail(`project ${id} is not an object`);
    const { spent, day } = p as ProjectSnapshot;
    if (spent !== undefined) {
      if (!isObject(spent)) fail(`project ${id}'s \`spent\` is not an object`);
      for (const [m, n] of Object.entries(spent)) if (!/^\d{4}-\d{2}$/.test(m) || !isCount(n)) fail(`project ${id}'s spend in ${JSON.stringify(m)} is not a month's nano-dollars`);
    }
    if (day !== undefined) {
      if (!isObject(day) || !isCount(day.oldest) || !Array.isArray(day.counts)) fail(`project ${id}'s day window is not one`);
      let prev = -1;
      for (const e of day.counts) {
        if (!Array.isArray(e) || e.length !== 2 || !isCount(e[0]) || !isCount(e[1]) || e[0] <= prev) fail(`project ${id}'s day window does not hold buckets in ascending order`);
        prev = e[0];
      }
    }
  }
  return snap;
}

/**
 * The embedded store persisted to `<dataDir>/limits.json` (see createMemoryLimitsStore). A file that
 * cannot be read or is not a snapshot does not stop the start: it is logged, moved aside to
 * `limits.json.unreadable` for inspection, and the store starts empty.
 */
export async function openMemoryLimitsStore(dataDir: string, opts: { delayMs?: number; now?: () => number } = {}): Promise<LimitsStore> {
  const path = join(dataDir, LIMITS_SNAPSHOT_FILE);
  let initial: LimitsSnapshot | undefined;
  try {
    const data = await readJsonFile<unknown>(path);
    if (data !== undefined) initial = checkLimitsSnapshot(data);
  } catch (e) {
    const aside = `${path}.unreadable`;
    const moved = await rename(path, aside).then(() => true, () => false);
    log.warn("the limits snapshot cannot be read; starting with no spend this month and no day counts", {
      path,
      err: (e as Error).message,
      ...(moved ? { movedTo: aside } : {}),
    });
  }
  if (initial) {
    const future = fromTheFuture(initial, (opts.now ?? Date.now)());
    if (future) {
      log.warn("the limits snapshot was saved later than now (the clock stepped back, or the data dir comes from a machine whose clock is ahead): its day counts and the spend of months after this one are dropped, so no project is refused until the clock catches up", { path, savedAt: new Date(initial.savedAtMs).toISOString() });
      initial = future;
    }
  }
  return createMemoryLimitsStore({ path, delayMs: opts.delayMs, initial });
}

/** How far ahead of this clock a snapshot may be saved before it is taken for another clock's (a second, rounded up). */
const CLOCK_SLACK_MS = 60_000;

/**
 * A snapshot saved later than `nowMs` (beyond CLOCK_SLACK_MS), cut back to what this clock can
 * count from: without its day windows (their newest bucket would hold the window, and refuse a
 * project for as long as the clocks differ) and the spend of months after `nowMs`'s; undefined
 * when it is not from the future.
 */
export function fromTheFuture(snap: LimitsSnapshot, nowMs: number): LimitsSnapshot | undefined {
  if (snap.savedAtMs <= nowMs + CLOCK_SLACK_MS) return undefined;
  const month = monthOf(nowMs);
  const projects: LimitsSnapshot["projects"] = {};
  for (const [id, p] of Object.entries(snap.projects)) {
    const spent = Object.fromEntries(Object.entries(p.spent ?? {}).filter(([m]) => m <= month));
    projects[id] = Object.keys(spent).length ? { spent } : {};
  }
  return { version: 1, savedAtMs: nowMs, projects };
}

/**
 * The embedded store: the same decisions as the Redis script, in process memory. JavaScript runs
 * one decision at a time, so each is atomic without locks. Idle windows are swept now and then so
 * per-user windows do not pile up.
 *
 * With `persist`, what must outlive a restart (each project's spend in the current month and its
 * day window) is written to `persist.path` at most `delayMs` after a change, off the request path
 * (one write at a time, whole, the newest state each time), and on `close`. A crash loses at most
 * the changes of the last `delayMs`.
 */
export function createMemoryLimitsStore(persist?: MemoryLimitsPersistence): LimitsStore {
  const projects = new Map<string, ProjectState>();
  let calls = 0;

  const stateOf = (id: string): ProjectState => {
    let p = projects.get(id);
    if (!p) projects.set(id, (p = { minute: undefined, day: undefined, users: new Map(), reservations: new Map(), latestExpiry: 0, reserved: 0, spent: new Map() }));
    return p;
  };

  /** The newest clock reading seen, the snapshot's `savedAtMs`. */
  let latestMs = 0;
  /**
   * The last clock reading: which month is current when a snapshot is taken. Not the newest: after
   * a clock stepped back across a month's end, that month is the later one, and the spend of the
   * month the clock is in again would be left out of every snapshot, and lost at a restart.
   */
  let lastMs = 0;
  const seen = (nowMs: number) => {
    if (nowMs > latestMs) latestMs = nowMs;
    lastMs = nowMs;
  };
  if (persist?.initial) {
    latestMs = lastMs = persist.initial.savedAtMs;
    for (const [id, s] of Object.entries(persist.initial.projects)) {
      const p = stateOf(id);
      for (const [m, n] of Object.entries(s.spent ?? {})) p.spent.set(m, n);
      if (s.day) {
        const counts = new Map(s.day.counts);
        let total = 0;
        for (const n of counts.values()) total += n;
        p.day = { oldest: s.day.oldest, total, counts };
      }
    }
  }

  const writer = persist && createJsonFileWriter(persist.path);
  const delayMs = persist?.delayMs ?? DEFAULT_PERSIST_DELAY_MS;
  let timer: NodeJS.Timeout | undefined;
  let dirty = false;
  let closed = false;
  let failing = false;

  const snapshot = (): LimitsSnapshot => {
    // Months before the current one are never read again (usage and admissions ask for the current
    // month), so they are not kept.
    const month = monthOf(lastMs);
    const out: Record<string, ProjectSnapshot> = {};
    for (const [id, p] of projects) {
      const s: ProjectSnapshot = {};
      for (const [m, n] of p.spent) if (m >= month && n > 0) (s.spent ??= {})[m] = n;
      if (p.day && p.day.total > 0) s.day = { oldest: p.day.oldest, counts: [...p.day.counts].filter(([, n]) => n > 0) };
      if (s.spent || s.day) out[id] = s;
    }
    return { version: 1, savedAtMs: latestMs, projects: out };
  };

  const save = async (final: boolean): Promise<void> => {
    timer = undefined;
    if (!writer || !dirty) return;
    dirty = false;
    try {
      await writer.write(snapshot());
      if (failing) log.info("the limits snapshot is written again", { path: persist.path });
      failing = false;
    } catch (e) {
      dirty = true;
      if (final) log.warn("the limits snapshot could not be written at shutdown; the spend and day counts since it was last written are lost", { path: persist.path, err: String(e) });
      else if (!failing) log.warn("the limits snapshot cannot be written; retrying", { path: persist.path, err: String(e) });
      failing = true;
      schedule();
    }
  };
  const schedule = () => {
    if (timer || !writer || closed) return;
    timer = setTimeout(() => void save(false), delayMs);
    timer.unref();
  };
  /** State that a restart must keep changed: it is written within `delayMs`. */
  const changed = () => {
    dirty = true;
    schedule();
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
      seen(now);
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
        const unspent = input.capNano - (p.spent.get(input.month) ?? 0);
        const room = unspent - p.reserved;
        // A request whose worst case is nothing (a cache hit, a model priced 0) cannot spend past
        // the cap, so the cap never refuses it, even one at 0 or used up; its windows still apply.
        if (input.worstNano > 0 && input.worstNano > room) {
          // Refused for what requests in flight hold, which they settle soon: retry in seconds.
          const wait = input.worstNano > unspent ? input.monthEndMs - now : RESERVED_RETRY_MS;
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
            // A window with nothing counted is fully replenished now.
            const resetMs = c.total > 0 ? (c.cur + c.shape.buckets + 1) * c.shape.bucketMs - now : 0;
            if (worst.limit === 0 || tighter(remaining, resetMs, worst)) worst = { ...worst, limit: c.limit, remaining, resetMs };
          }
        }
        return worst;
      }

      let tight: AdmitOutcome = { allowed: true, window: undefined, limit: 0, remaining: 0, resetMs: 0, retryAfterMs: 0, spendRemainingNano };
      const counted: Partial<Record<WindowName, number>> | undefined = input.rescindable ? {} : undefined;
      for (const c of checks) {
        add(c);
        if (c.name === "day") changed();
        if (counted) counted[c.name] = c.cur;
        const remaining = c.limit - c.total - 1;
        const resetMs = (c.cur + c.shape.buckets + 1) * c.shape.bucketMs - now;
        if (tight.window === undefined || tighter(remaining, resetMs, tight)) tight = { ...tight, window: c.name, limit: c.limit, remaining, resetMs };
      }
      if (input.worstNano > 0 || input.rescindable) {
        const expiresAt = now + input.reservationTtlMs;
        p.reservations.set(input.reservationId, { nano: input.worstNano, expiresAt, counted, ...(counted?.user_minute !== undefined ? { user: input.userId } : {}) });
        // Kept in expiry order, which `expire` relies on: only a clock stepped back breaks it.
        if (expiresAt < p.latestExpiry) p.reservations = new Map([...p.reservations].sort(([, a], [, b]) => a.expiresAt - b.expiresAt));
        else p.latestExpiry = expiresAt;
        p.reserved += input.worstNano;
      }
      return tight;
    },

    async rescind(input: RescindInput): Promise<boolean> {
      seen(input.nowMs);
      const p = stateOf(input.projectId);
      expire(p, input.nowMs);
      const r = p.reservations.get(input.reservationId);
      if (!r?.counted) return false;
      // Another user than the one it was counted for: not this caller's admission to take back.
      if (r.user !== undefined && r.user !== input.userId) return false;
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
      if (r.counted.day !== undefined) changed();
      uncount(p.users.get(input.userId), r.counted.user_minute);
      return true;
    },

    async settle(input: SettleInput): Promise<void> {
      seen(input.nowMs);
      const p = stateOf(input.projectId);
      const r = p.reservations.get(input.reservationId);
      if (r) {
        p.reserved -= r.nano;
        p.reservations.delete(input.reservationId);
      }
      if (input.costNano > 0) {
        p.spent.set(input.month, (p.spent.get(input.month) ?? 0) + input.costNano);
        changed();
      }
    },

    async usage(projectId: string, month: string, nowMs: number): Promise<Usage> {
      seen(nowMs);
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

    /** Writes the snapshot (when persisted) and empties the store; later changes are not written. */
    async close() {
      if (timer) clearTimeout(timer);
      closed = true;
      if (writer) {
        // A write under way first: one that fails leaves the state dirty for this last one.
        await writer.idle().catch(() => {});
        await save(true);
      }
      projects.clear();
    },
  };
}
