import type { Redis } from "ioredis";
import type { WindowName } from "../core/limits/windows.js";
import { type AdmitInput, type AdmitOutcome, type LimitsStore, type RescindInput, type SettleInput, StoreUnavailableError, type Usage } from "./limits-store.js";
import { admitLua, rescindLua, settleLua, usageLua } from "./redis-limits-lua.js";
import type { RedisConnection } from "./redis-connection.js";

/**
 * The cluster limits store. Every key of a project shares the hash tag `{svc:lim:<project>}`, so
 * the one script per decision runs on Redis Cluster too (all its keys are on one shard):
 *
 *   {svc:lim:<p>}:m            minute window (hash of one-second buckets)
 *   {svc:lim:<p>}:d            day window (hash of one-minute buckets)
 *   {svc:lim:<p>}:u:<user>     a user's minute window
 *   {svc:lim:<p>}:spend:<YYYY-MM>  nano-dollars spent in the month (string, INCRBY)
 *   {svc:lim:<p>}:rz / :rh     outstanding reservations: ids by expiry (zset), amounts (hash; a
 *                              rescindable admission's buckets as field `<id>:c`)
 *
 * Every key expires on its own once idle. Scripts go through defineCommand, which sends EVALSHA
 * and falls back to EVAL on NOSCRIPT (a restarted or flushed Redis).
 */
export interface RedisLimitsOptions {
  /**
   * Windows and reservation expiry follow Redis's clock (TIME), one clock for every replica, so
   * replicas whose clocks differ cannot stretch a window. Tests turn it off to drive time.
   */
  serverClock?: boolean;
  /** How long a month's spend is kept, in seconds (for `svc projects show`). */
  spendTtlSeconds?: number;
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

  /**
   * Fails fast during an outage: the connection logs it once and probes for its end. Every script
   * may write (even a usage read drops buckets that left their window), so while Redis refuses
   * writes (a full Redis) the store is unavailable too, as during an outage, until the
   * connection's write probe is accepted.
   */
  async function call<T>(fn: () => Promise<T>): Promise<T> {
    if (!conn.up) throw new StoreUnavailableError("redis is unreachable");
    if (conn.writesRefused) throw new StoreUnavailableError("redis refuses writes");
    try {
      return await fn();
    } catch (err) {
      conn.failed(err);
      throw new StoreUnavailableError(`redis failed: ${(err as Error)?.message ?? err}`);
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
          input.rescindable ? 1 : 0,
        ),
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
      const t = tag(input.projectId);
      await call(() => redis.svcLimSettle(`${t}:rz`, `${t}:rh`, `${t}:spend:${input.month}`, input.reservationId, input.costNano, spendTtl));
    },

    async rescind(input: RescindInput): Promise<boolean> {
      const t = tag(input.projectId);
      const r = await call(() => redis.svcLimRescind(`${t}:m`, `${t}:d`, `${t}:u:${input.userId}`, `${t}:rz`, `${t}:rh`, input.reservationId, clock(input.nowMs)));
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
      // The connection is the caller's (it may be shared); closing it is theirs too.
    },
  };
}
