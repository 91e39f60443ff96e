import type { Redis } from "ioredis";
import type { WindowName } from "../core/limits/windows.js";
import { log } from "../logger.js";
import { type AdmitInput, type AdmitOutcome, type LimitsStore, type RescindInput, type SettleInput, StoreUnavailableError, type Usage } from "./limits-store.js";
import { admitLua, rescindLua, settleLua, usageLua } from "./redis-limits-lua.js";
import { isWriteRefusal, type RedisConnection } from "./redis-connection.js";

/**
 * The cluster limits store. Every key of a project shares the hash tag `{svc:lim:<project>}`, so
 * the one script per decision runs on Redis Cluster too (all its keys are on one shard):
 *
 *   {svc:lim:<p>}:m            minute window (hash of one-second buckets)
 *   {svc:lim:<p>}:d            day window (hash of one-minute buckets)
 *   {svc:lim:<p>}:u:<user>     a user's minute window
 *   {svc:lim:<p>}:spend:<YYYY-MM>  nano-dollars spent in the month (string, INCRBY)
 *   {svc:lim:<p>}:rz / :rh     outstanding admissions: ids by expiry (zset), amounts (hash; the
 *                              buckets each was counted in as field `<id>:c`)
 *
 * Every key expires on its own once idle. Scripts go through defineCommand, which sends EVALSHA
 * and falls back to EVAL on NOSCRIPT (a restarted or flushed Redis).
 *
 * An admission whose call fails after it may have been sent (it timed out on a stalled Redis, the
 * connection dropped) was answered as if Redis were down, yet Redis may still run it when it
 * resumes: counted, and its worst case reserved for the reservation's TTL with nobody to settle
 * it. So every admission is recorded with the buckets it was counted in (only a `rescindable` one
 * may be taken back by Rescind), and such a failed one is queued to be taken back (the rescind
 * script, allowed any admission) once Redis answers again. One connection runs its commands in
 * order, so the take-back runs after the late admission; one that never ran is taken back as a
 * no-op, and a take-back sent twice does nothing the second time. A Rescind that fails (an
 * admission made ahead of a key's verdict, which the verdict did not keep) is queued the same way,
 * allowed only what Rescind is.
 *
 * A settle that could not be sent (Redis down, or refusing writes) is owed, not lost: it is queued
 * and sent once Redis answers again, so the month is charged what its requests cost during the
 * outage (the settle script charges a reservation that expired meanwhile all the same). One that
 * failed after it was sent may have run, and is not sent again (it would charge twice).
 */
export interface RedisLimitsOptions {
  /**
   * Windows and reservation expiry follow Redis's clock (TIME), one clock for every replica, so
   * replicas whose clocks differ cannot stretch a window. Tests turn it off to drive time.
   */
  serverClock?: boolean;
  /** How long a month's spend is kept, in seconds (for `svc projects show`). */
  spendTtlSeconds?: number;
  /** Most failed admissions waiting to be taken back (default TAKE_BACK_MAX); later ones are not. */
  takeBackMax?: number;
  /** Most settles waiting to be sent once Redis answers again (default OWED_MAX); later ones are not charged. */
  owedMax?: number;
}

/** Failed admissions kept to be taken back; past this (a long stall under heavy load) they are dropped, and count until their reservations expire. */
export const TAKE_BACK_MAX = 10_000;

/** Settles kept to be sent once Redis answers again; past this (a long outage under heavy load) they are dropped, said once. */
export const OWED_MAX = 100_000;

/** How often queued take-backs are tried while Redis has not answered again. */
const TAKE_BACK_INTERVAL_MS = 1_000;

/** Take-backs sent together (pipelined on the connection). */
const TAKE_BACK_BATCH = 100;

interface TakeBack {
  projectId: string;
  userId: string;
  reservationId: string;
  /** The admission's clock (Redis's own clock unless `serverClock` is off). */
  nowMs: number;
  /** Whether any admission is taken back (a failed admission's), or only a rescindable one (a failed Rescind's). */
  any: boolean;
}

/** A settle that could not be sent. */
interface Owed {
  projectId: string;
  reservationId: string;
  month: string;
  costNano: number;
}

type Reply = [number, number, number, number, number, number, string | null];

type ScriptedRedis = Redis & {
  svcLimAdmit(...args: Array<string | number>): Promise<Reply>;
  svcLimSettle(...args: Array<string | number>): Promise<number>;
  svcLimRescind(...args: Array<string | number>): Promise<number>;
  svcLimUsage(...args: Array<string | number>): Promise<[number, number, string, string]>;
};

const windowNames: Record<number, WindowName | undefined> = { 1: "minute", 2: "day", 3: "user_minute", 4: "month" };

const tag = (projectId: string) => `{svc:lim:${projectId}}`;

export function createRedisLimitsStore(conn: RedisConnection, opts: RedisLimitsOptions = {}): LimitsStore {
  const redis = conn.redis as ScriptedRedis;
  redis.defineCommand("svcLimAdmit", { numberOfKeys: 6, lua: admitLua });
  redis.defineCommand("svcLimSettle", { numberOfKeys: 3, lua: settleLua });
  redis.defineCommand("svcLimRescind", { numberOfKeys: 5, lua: rescindLua });
  redis.defineCommand("svcLimUsage", { numberOfKeys: 5, lua: usageLua });
  const serverClock = opts.serverClock ?? true;
  const spendTtl = opts.spendTtlSeconds ?? 400 * 86_400;
  const clock = (nowMs: number) => (serverClock ? -1 : nowMs);
  const opt = (n: number | undefined) => (n === undefined ? -1 : n);

  const takeBackMax = opts.takeBackMax ?? TAKE_BACK_MAX;
  /** Failed admissions to take back once Redis answers again, oldest first. */
  let pending: TakeBack[] = [];
  /** The take-backs of one spell (from the first queued until the queue is empty), for one log line. */
  let spell = { queued: 0, undone: 0, dropped: 0 };
  const owedMax = opts.owedMax ?? OWED_MAX;
  /** Settles not sent while Redis was down, oldest first. */
  let owed: Owed[] = [];
  /** The settles of one outage, for one log line: queued, dropped past the bound, and lost (failed again after being sent). */
  let owedSpell = { queued: 0, dropped: 0, lost: 0 };
  let flushing: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;

  /**
   * Fails fast during an outage: the connection logs it once and probes for its end. Every script
   * may write (even a usage read drops buckets that left their window), so while Redis refuses
   * writes (a full Redis) the store is unavailable too, as during an outage, until the
   * connection's write probe is accepted. `sentFailed` learns of a failure after the command was
   * handed to the connection (it may still run), except a write Redis refused (nothing ran);
   * `notSent` learns that nothing of it ran.
   */
  async function call<T>(fn: () => Promise<T>, sentFailed?: () => void, notSent?: () => void): Promise<T> {
    if (!conn.up || conn.writesRefused) {
      notSent?.();
      throw new StoreUnavailableError(conn.up ? "redis refuses writes" : "redis is unreachable");
    }
    let r: T;
    try {
      r = await fn();
    } catch (err) {
      conn.failed(err);
      if (isWriteRefusal(err)) notSent?.();
      else sentFailed?.();
      throw new StoreUnavailableError(`redis failed: ${(err as Error)?.message ?? err}`);
    }
    // Redis answers again: what waits to be taken back or charged goes now, behind what was sent before.
    if (pending.length > 0 || owed.length > 0) void flush();
    return r;
  }

  /** Queues a settle that could not be sent; bounded, and logged once an outage, not per request. */
  function owe(input: SettleInput): void {
    if (owed.length >= owedMax) {
      if (owedSpell.dropped++ === 0) {
        log.warn(`redis limits: more than ${owedMax} settles could not be sent while Redis was down; later ones are not charged to their months`);
      }
      return;
    }
    owed.push({ projectId: input.projectId, reservationId: input.reservationId, month: input.month, costNano: input.costNano });
    owedSpell.queued++;
    timer ??= setInterval(() => void flush(), TAKE_BACK_INTERVAL_MS).unref();
  }

  const settleScript = (o: Owed) => {
    const t = tag(o.projectId);
    return redis.svcLimSettle(`${t}:rz`, `${t}:rh`, `${t}:spend:${o.month}`, o.reservationId, o.costNano, spendTtl);
  };

  /**
   * Queues a failed admission, or a failed Rescind (`any` false: it takes back only what Rescind
   * may), to be taken back; bounded, and logged once a spell, not per request.
   */
  function takeBack(input: AdmitInput | RescindInput, any: boolean): void {
    if (pending.length >= takeBackMax) {
      if (spell.dropped++ === 0) {
        log.warn(`redis limits: more than ${takeBackMax} admissions failed or could not be rescinded while Redis did not answer; later ones are not taken back if Redis ran them (they count until their reservations expire)`);
      }
      return;
    }
    pending.push({ projectId: input.projectId, userId: input.userId, reservationId: input.reservationId, nowMs: input.nowMs, any });
    spell.queued++;
    timer ??= setInterval(() => void flush(), TAKE_BACK_INTERVAL_MS).unref();
  }

  const rescindScript = (tb: RescindInput, any: boolean) => {
    const t = tag(tb.projectId);
    return redis.svcLimRescind(`${t}:m`, `${t}:d`, `${t}:u:${tb.userId}`, `${t}:rz`, `${t}:rh`, tb.reservationId, clock(tb.nowMs), any ? 1 : 0);
  };

  /**
   * Sends the queued take-backs while Redis answers, a batch at a time; one that fails stays queued
   * (it may have run: a second run does nothing). Logs the spell once the queue is empty. Then the
   * owed settles, the same way, except that one that failed after it was sent is dropped (it may
   * have run, and a second run would charge twice).
   */
  function flush(): Promise<void> {
    flushing ??= (async () => {
      await flushTakeBacks();
      await flushOwed();
      if (pending.length === 0 && owed.length === 0 && timer) {
        clearInterval(timer);
        timer = undefined;
      }
    })().finally(() => (flushing = undefined));
    return flushing;
  }

  async function flushOwed(): Promise<void> {
    while (owed.length > 0 && conn.up && !conn.writesRefused) {
      const batch = owed.slice(0, TAKE_BACK_BATCH);
      const keep = new Set<Owed>();
      const done = await Promise.allSettled(batch.map((o) => call(() => settleScript(o), () => owedSpell.lost++, () => keep.add(o))));
      const gone = new Set(batch.filter((o) => !keep.has(o)));
      owed = owed.filter((o) => !gone.has(o));
      if (done.some((d) => d.status === "rejected")) break;
    }
    if (owed.length === 0 && owedSpell.queued > 0) {
      const { queued, dropped, lost } = owedSpell;
      log.info(`redis limits: ${queued} settles could not be sent while Redis was down; charged now`, { ...(dropped ? { notCharged: dropped } : {}), ...(lost ? { failedAgain: lost } : {}) });
      owedSpell = { queued: 0, dropped: 0, lost: 0 };
    }
  }

  async function flushTakeBacks(): Promise<void> {
    while (pending.length > 0 && conn.up && !conn.writesRefused) {
      const batch = pending.slice(0, TAKE_BACK_BATCH);
      const done = await Promise.allSettled(batch.map((tb) => call(() => rescindScript(tb, tb.any))));
      const sent = new Set<TakeBack>();
      done.forEach((d, i) => {
        if (d.status === "rejected") return;
        sent.add(batch[i]!);
        if (d.value === 1) spell.undone++;
      });
      pending = pending.filter((tb) => !sent.has(tb));
      if (sent.size < batch.length) break;
    }
    if (pending.length === 0) {
      if (spell.queued > 0) {
        log.info(`redis limits: ${spell.queued} admissions failed or could not be rescinded while Redis did not answer; taken back now (${spell.undone} had run)`, spell.dropped ? { notTakenBack: spell.dropped } : {});
      }
      spell = { queued: 0, undone: 0, dropped: 0 };
    }
  }

  return {
    async admit(input: AdmitInput): Promise<AdmitOutcome> {
      const t = tag(input.projectId);
      const r = await call(() =>
        redis.svcLimAdmit(
          `${t}:m`, `${t}:d`, `${t}:u:${input.userId}`, `${t}:spend:${input.month}`, `${t}:rz`, `${t}:rh`,
          clock(input.nowMs),
          opt(input.minuteLimit),
          opt(input.dayLimit),
          input.userId ? opt(input.userMinuteLimit) : -1,
          opt(input.capNano),
          input.worstNano,
          input.reservationId,
          input.reservationTtlMs,
          input.monthEndMs,
          // Every admission is recorded with its buckets, so one that fails here can be taken back.
          input.rescindable ? 1 : 2,
        ),
        () => takeBack(input, true),
      );
      return {
        allowed: r[0] === 1,
        window: windowNames[r[1]],
        limit: r[2],
        remaining: r[3],
        resetMs: r[4],
        retryAfterMs: r[5],
        spendRemainingNano: r[6] === null ? undefined : Number(r[6]),
      };
    },

    async settle(input: SettleInput): Promise<void> {
      await call(() => settleScript(input), undefined, () => owe(input));
    },

    async rescind(input: RescindInput): Promise<boolean> {
      // One that fails (not sent, or sent and unanswered) is queued and sent again once Redis
      // answers: a rescind that ran already does nothing the second time.
      const queue = () => takeBack(input, false);
      const r = await call(() => rescindScript(input, false), queue, queue);
      return r === 1;
    },

    async usage(projectId: string, month: string, nowMs: number): Promise<Usage> {
      const t = tag(projectId);
      const [minuteCount, dayCount, spent, reserved] = await call(() =>
        redis.svcLimUsage(`${t}:m`, `${t}:d`, `${t}:spend:${month}`, `${t}:rz`, `${t}:rh`, clock(nowMs)),
      );
      return { minuteCount, dayCount, spentNano: Number(spent), reservedNano: Number(reserved) };
    },

    async close() {
      // Take-backs and settles still queued go now if Redis answers. The connection is the caller's (it may be
      // shared); closing it is theirs too.
      if (timer) clearInterval(timer);
      timer = undefined;
      if (pending.length > 0 || owed.length > 0) await flush();
      if (timer) clearInterval(timer);
      timer = undefined;
    },
  };
}
