import { Redis, type RedisOptions } from "ioredis";
import { log } from "../logger.js";

/**
 * A Redis connection for the hot path (cache, limits): commands fail fast while Redis is down
 * instead of queueing behind a reconnect, so a request never waits on an outage. ioredis keeps
 * reconnecting in the background, so service resumes without a restart.
 */
export interface RedisConnection {
  redis: Redis;
  /** False from the first failed command or lost connection until the connection is back. */
  readonly up: boolean;
  /**
   * Records a failed command: the first failure of an outage is logged (once, not per request);
   * later ones are only counted until the connection is back.
   */
  failed(err: unknown): void;
  /** Commands that failed since start, for metrics and tests. */
  readonly failures: number;
  close(): Promise<void>;
}

export interface RedisConnectionOptions {
  /** Names the user of the connection in log lines, e.g. "cache" or "limits". */
  name: string;
  /** Longest wait for one command before it counts as failed, in milliseconds. */
  commandTimeoutMs?: number;
  /** What its user does meanwhile, for the outage's log line (default "continuing without it"). */
  whileDown?: string;
}

const PROBE_INTERVAL_MS = 1_000;

/**
 * How every Redis connection of the gateway (cache, limits, registry) finds Redis again: a connection
 * attempt gives up after 2 s, and attempts back off to at most 1 s apart and never stop, so each
 * subsystem is back within about a second of Redis answering, all alike (ioredis's own back-off
 * grows to 2 s).
 */
export const RECONNECT_OPTIONS: Readonly<Pick<RedisOptions, "connectTimeout" | "retryStrategy">> = {
  connectTimeout: 2_000,
  retryStrategy: (times) => Math.min(50 * times, 1_000),
};

export function createRedisConnection(url: string, opts: RedisConnectionOptions): RedisConnection {
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: opts.commandTimeoutMs ?? 1_000,
    ...RECONNECT_OPTIONS,
  });
  let up = true;
  let failures = 0;
  let closed = false;
  const back = () => {
    if (up || closed) return;
    up = true;
    log.info(`redis is back (${opts.name})`);
  };
  const down = (err: unknown) => {
    failures++;
    if (closed) return;
    if (up) {
      up = false;
      log.warn(`redis unreachable (${opts.name}): ${opts.whileDown ?? "continuing without it"} until it is back`, { err: String((err as Error)?.message ?? err) });
    }
    // A command that timed out on a connection that stays open (a Redis stalled by a slow command,
    // a network hiccup) brings no "ready" event to end the outage: a PING a second decides instead.
    if (redis.status === "ready") probe();
  };
  const probe = createProbe(redis, back, (err) => down(err));
  redis.on("error", down);
  redis.on("close", () => down(new Error("connection closed")));
  redis.on("ready", back);
  return {
    redis,
    get up() {
      return up && redis.status === "ready";
    },
    failed: down,
    get failures() {
      return failures;
    },
    async close() {
      closed = true;
      redis.removeAllListeners("close");
      // QUIT needs a live connection; while Redis is away only disconnecting ends the reconnect loop.
      if (redis.status !== "ready") return redis.disconnect();
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}

/**
 * Returns a function that PINGs `redis` after a second, one PING at a time however often it is
 * called: `answered` when Redis answers, `failed` when not (which may probe again). For a connection
 * that stays open but answers nothing (a stall), where no "ready" event will say when it is back.
 */
export function createProbe(redis: Redis, answered: () => void, failed: (err: unknown) => void): () => void {
  let probing = false;
  return () => {
    if (probing) return;
    probing = true;
    setTimeout(() => {
      redis.ping().then(
        () => {
          probing = false;
          answered();
        },
        (err: unknown) => {
          probing = false;
          failed(err);
        },
      );
    }, PROBE_INTERVAL_MS).unref();
  };
}
