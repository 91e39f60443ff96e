import { Cluster, type ClusterOptions, Redis, type RedisOptions } from "ioredis";
import { atMostEvery, log } from "../logger.js";

/**
 * Where the gateway's Redis is: a URL (SVC_REDIS_URL) of a single server, or of one node of a Redis
 * Cluster (`cluster: true`, decided at start: SVC_REDIS_CLUSTER, else what the node says of itself).
 * A cluster's client learns the other nodes from that one and follows slots as they move. Every key
 * the gateway writes carries a hash tag, so each of its scripts and transactions stays on one slot.
 */
export type RedisTarget = string | { url: string; cluster: boolean };

/** The URL of a target. */
export const urlOf = (t: RedisTarget): string => (typeof t === "string" ? t : t.url);
/** Whether a target is a node of a Redis Cluster. */
export const isCluster = (t: RedisTarget): boolean => typeof t !== "string" && t.cluster;

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
   * True while Redis answers but refuses writes (full: `maxmemory` reached; a read-only replica; a
   * failed save), from the first refusal until a write is accepted again. Reads work meanwhile;
   * `up` stays true, and a PING, which a full Redis answers, does not end it.
   */
  readonly writesRefused: boolean;
  /**
   * Records a failed command: the first failure of an outage is logged (once, not per request);
   * later ones are only counted until the connection is back. A write Redis refused (see
   * `writesRefused`) starts that condition instead, logged once too, not an outage.
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
  /** What its user does while Redis refuses writes, for that log line (default: `whileDown`). */
  whileWritesRefused?: string;
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

/** What of SVC_REDIS_URL Redis refused: the database it names, its credentials (wrong, or none given), or the user's right to a command. */
export type RedisRefusal = "database" | "credentials" | "no-credentials" | "permission";

/**
 * Whether a Redis error is the server refusing the URL's settings, not an outage: a SELECT of its
 * database refused (out of range; a Redis Cluster has only 0), its user name or password refused
 * (WRONGPASS, or an AUTH or HELLO refused otherwise), or none given to a Redis that requires one
 * (NOAUTH).
 */
export function redisRefusal(e: unknown): RedisRefusal | undefined {
  const err = e as (Error & { command?: { name?: string } }) | undefined;
  if (err?.name !== "ReplyError") return undefined;
  const command = String(err.command?.name ?? "").toLowerCase();
  if (/^NOAUTH\b/.test(err.message)) return "no-credentials";
  if (/^NOPERM\b/.test(err.message)) return "permission";
  if (/^WRONGPASS\b/.test(err.message) || command === "auth" || command === "hello") return "credentials";
  if (command === "select") return "database";
  return undefined;
}

/**
 * Keeps a connection off database 0 when its URL names another: ioredis reports a refused SELECT
 * of the URL's database (an `error` event) and then goes on to `ready`, on database 0, where every
 * command would read and write another deployment's keys. The connection is dropped instead, before
 * it is ready (no command of its user has been sent on it: they wait for `ready`), and reconnects
 * as after any loss, so it stays down until a SELECT succeeds. Every Redis client of the gateway
 * is made through here or `openRedis`.
 */
export function stayOnConfiguredDb(redis: Redis): Redis {
  redis.on("error", (err: unknown) => {
    const refusal = redisRefusal(err);
    if (refusal === undefined) return;
    // Said as what it is (each connection's outage log says only "unreachable"), once a minute for all.
    if (refusalLogged()) log.warn("redis refuses what SVC_REDIS_URL gives (the database, or the credentials): its connections stay down until it accepts them", { refusal, err: (err as Error).message });
    if (refusal === "database" && redis.status !== "end") redis.disconnect(true);
  });
  return redis;
}

const refusalLogged = atMostEvery(60_000);

/**
 * How often a connection that is up sends a PING. A Redis whose `timeout` setting closes idle
 * connections (300 s in many configurations) would otherwise close those of a quiet gateway, each
 * close an outage: logged, and a request arriving as it happens served without its cache lookup or
 * admitted without its limits (failing open).
 */
export const IDLE_PING_MS = 30_000;

/** Keeps `redis` from going idle long enough for Redis's `timeout` to close it (IDLE_PING_MS). */
export function pingWhileIdle(redis: Redis, everyMs = IDLE_PING_MS): Redis {
  const timer = setInterval(() => {
    if (redis.status === "ready") redis.ping().catch(() => {}); // a failure is the connection's to report
  }, everyMs);
  timer.unref();
  redis.once("end", () => clearInterval(timer));
  return redis;
}

/**
 * A Redis client for `url` that never runs a command on a database other than the URL's (see
 * stayOnConfiguredDb), and pings while idle (pingWhileIdle).
 */
export const openRedis = (target: RedisTarget, options: RedisOptions): Redis =>
  pingWhileIdle(stayOnConfiguredDb(isCluster(target) ? openCluster(urlOf(target), options) : new Redis(urlOf(target), options)));

/**
 * How long a command on a Redis Cluster waits, in all, for a cluster that is moving (a failover, a
 * node down, a slot migrating) before it fails: its retries at these delays, at most MAX_REDIRECTIONS
 * of them. Kept short for the same reason as `enableOfflineQueue: false`: a request is served without
 * the cache, or admitted failing open, rather than held (ioredis's defaults wait up to 1.6 s).
 */
const CLUSTER_RETRY_DELAY_MS = 50;
const MAX_REDIRECTIONS = 4;

/**
 * A client of the Redis Cluster one node of which `url` names, with the options a single server's
 * client would get: the URL's user, password and TLS go to every node's connection, as do the
 * timeouts; reconnecting (the whole cluster, and each node) backs off as RECONNECT_OPTIONS says.
 * Typed as a single server's client: the commands the gateway sends are the same on both, and every
 * one of them names keys of one slot (or none).
 */
function openCluster(url: string, options: RedisOptions): Redis {
  const u = new URL(url);
  const tls = u.protocol === "rediss:";
  const { retryStrategy, enableOfflineQueue: _queue, lazyConnect, ...nodeOptions } = options;
  const clusterOptions: ClusterOptions = {
    // A cluster's client queues commands while it is not ready with no bound (a cluster failing as
    // the gateway started held every admin call for good): it keeps none; those that would wait
    // for a first connection wait for it, bounded, first (`clusterReady`).
    enableOfflineQueue: false,
    lazyConnect,
    clusterRetryStrategy: retryStrategy === undefined ? RECONNECT_OPTIONS.retryStrategy : (retryStrategy as ClusterOptions["clusterRetryStrategy"]),
    clusterNodeRetryStrategy: retryStrategy === null ? undefined : (retryStrategy ?? RECONNECT_OPTIONS.retryStrategy),
    maxRedirections: MAX_REDIRECTIONS,
    retryDelayOnFailover: CLUSTER_RETRY_DELAY_MS,
    retryDelayOnClusterDown: CLUSTER_RETRY_DELAY_MS,
    retryDelayOnTryAgain: CLUSTER_RETRY_DELAY_MS,
    redisOptions: {
      ...nodeOptions,
      ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
      ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
      ...(tls ? { tls: {} } : {}),
    },
  };
  const host = u.hostname.replace(/^\[(.*)\]$/, "$1");
  return new Cluster([{ host, port: Number(u.port || 6379) }], clusterOptions) as unknown as Redis;
}

/** Whether `redis` is a Redis Cluster's client (`openRedis` of a cluster target). */
export const isClusterClient = (redis: Redis): boolean => (redis as unknown) instanceof Cluster;

/** How long a call made before a Redis Cluster's client is first ready waits for it (about what a single server's client's queue gives). */
const CLUSTER_FIRST_READY_WAIT_MS = 2_000;

/**
 * Waits, at most `ms`, for a Redis Cluster's client that is not ready to be (a single server's client
 * has its own queue for that): the commands sent after fail at once if it is still not ready.
 */
export function clusterReady(redis: Redis, ms = CLUSTER_FIRST_READY_WAIT_MS): Promise<void> {
  if (redis.status === "ready" || !isClusterClient(redis)) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      redis.off("ready", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    redis.once("ready", done);
  });
}

/**
 * A TLS error of a certificate the client does not trust (self-signed, a private CA Node does not
 * know, expired, for another host): Node's codes for it.
 */
const UNTRUSTED_CERT = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER/;
const untrustedCertificate = (e: unknown): boolean => {
  const code = (e as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && UNTRUSTED_CERT.test(code);
};

/** What the gateway needs of its Redis user beyond SELECT, checked at start (`checkRedisSettings`). */
export interface RedisNeeds {
  /** The channel the registry publishes deleted keys on and every replica subscribes to. */
  channel?: string;
}

/**
 * Runs, on a connection `checkRedisSettings` made, one harmless call of each command the gateway
 * needs beyond plain reads and writes: its scripts (EVAL, EVALSHA) and, with `needs.channel`,
 * PUBLISH and SUBSCRIBE on that channel (an ACL user of Redis 7 has no channel unless granted:
 * `acl-pubsub-default resetchannels`). Resolves with Redis's NOPERM refusal, or undefined.
 */
async function missingRight(redis: Redis, needs: RedisNeeds): Promise<Error | undefined> {
  const calls: Array<() => Promise<unknown>> = [
    () => redis.eval("return 1", 0),
    // A script Redis does not have: NOSCRIPT, when the user may run EVALSHA at all.
    () => redis.evalsha("0000000000000000000000000000000000000000", 0),
  ];
  if (needs.channel !== undefined) {
    const channel = needs.channel;
    // An empty message names no key: every subscriber forgets nothing.
    calls.push(() => redis.publish(channel, ""), () => redis.subscribe(channel));
  }
  for (const call of calls) {
    try {
      await call();
    } catch (e) {
      if (redisRefusal(e) === "permission") return e as Error;
    }
  }
  return undefined;
}

/** What `inspectRedis` learnt of SVC_REDIS_URL at start. */
export interface RedisInspection {
  /** Why Redis refuses the URL's settings, a message naming the setting; undefined: accepted, or not reached. */
  refused?: string;
  /** Whether the server is a node of a Redis Cluster (`cluster_enabled:1`); undefined: not reached. */
  cluster?: boolean;
}

/**
 * Connects to `url` once, at start, to check what only Redis can judge of it: the database it names,
 * the credentials it gives, the user's right to the commands and the channel the gateway uses
 * (`needs`), and, for `rediss://`, that the server's certificate is trusted. `refused` is a message
 * naming `setting` when Redis refuses any (a configuration error: retrying would not help, and a
 * connection carrying on would use database 0, or fail every request); undefined when it accepts
 * them or cannot be reached within `waitMs` (an outage, which the connections ride out as at any
 * other time). It also asks whether the server is a Redis Cluster node (`cluster`).
 */
export async function inspectRedis(url: string, setting: string, waitMs = 3_000, needs: RedisNeeds = {}): Promise<RedisInspection> {
  const redis = new Redis(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, connectTimeout: RECONNECT_OPTIONS.connectTimeout, retryStrategy: () => null, commandTimeout: waitMs });
  let cluster: boolean | undefined;
  try {
    const refused = await new Promise<{ what: RedisRefusal | "certificate"; err: Error } | undefined>((resolve) => {
      const timer = setTimeout(() => resolve(undefined), waitMs);
      const done = (v: { what: RedisRefusal | "certificate"; err: Error } | undefined) => {
        clearTimeout(timer);
        resolve(v);
      };
      redis.on("error", (err: Error) => {
        const what = untrustedCertificate(err) ? "certificate" : redisRefusal(err);
        if (what) done({ what, err });
      });
      redis.on("ready", () => {
        // Asked first: SUBSCRIBE (missingRight) leaves the connection able to run nothing else.
        clusterEnabled(redis)
          .then((c) => (cluster = c))
          .then(() => missingRight(redis, needs))
          .then((err) => done(err && { what: "permission", err }), () => done(undefined));
      });
      redis.on("end", () => done(undefined));
      redis.connect().catch(() => {});
    });
    if (!refused) return { cluster };
    return { refused: refusalMessage(url, setting, refused.what, refused.err, needs), cluster };
  } finally {
    redis.disconnect();
  }
}

/** `inspectRedis`'s refusal alone. */
export const checkRedisSettings = async (url: string, setting: string, waitMs = 3_000, needs: RedisNeeds = {}): Promise<string | undefined> =>
  (await inspectRedis(url, setting, waitMs, needs)).refused;

/** Whether the server says it is a Redis Cluster node; undefined when it does not say (no answer, or a user refused INFO). */
async function clusterEnabled(redis: Redis): Promise<boolean | undefined> {
  try {
    return /^cluster_enabled:1\b/m.test(await redis.info("cluster"));
  } catch {
    return undefined;
  }
}

function refusalMessage(url: string, setting: string, what: RedisRefusal | "certificate", err: Error, needs: RedisNeeds): string {
  const why = err.message;
  const u = new URL(url);
  if (what === "certificate") {
    return `Redis's TLS certificate is not trusted (${why}): give Node the CA that signed it (NODE_EXTRA_CA_CERTS=/path/to/ca.pem in the gateway's environment), or use a certificate Node's CAs trust`;
  }
  if (what === "permission") {
    const channel = needs.channel === undefined ? "" : ` and the channel ${needs.channel} (\`&${needs.channel}\`: Redis 7 gives an ACL user no channel unless granted)`;
    return `Redis refuses the user that ${setting} gives a command or channel it needs (${why}): grant that user the gateway's commands (\`+@all\`, or at least SELECT, the read and write commands, EVAL, EVALSHA, SCRIPT, PUBLISH and SUBSCRIBE) on every key (\`~*\`)${channel}, or use another user`;
  }
  // Redis asked before it was given the password (the client selects the database first) says
  // NOAUTH even when the URL has one: then the password is what it refuses.
  if (what === "no-credentials" && u.password !== "") what = "credentials";
  if (what === "database") {
    const db = u.pathname.replace(/^\//, "") || u.searchParams.get("db");
    return `Redis refuses database ${db} that ${setting} names (${why}): name one it has, from 0 to its \`databases\` setting less one (0-15 by default; a Redis Cluster has only 0), or none for 0`;
  }
  if (what === "credentials") return `Redis refuses the user name or password that ${setting} gives (${why}): correct them (redis://:password@host:port for the default user, redis://user:password@host:port for an ACL user)`;
  return `Redis requires a password and ${setting} gives none (${why}): add it (redis://:password@host:port for the default user, redis://user:password@host:port for an ACL user)`;
}

/** Longest wait at shutdown for Redis to answer a QUIT; one that answers at all does in a millisecond. */
export const QUIT_WAIT_MS = 250;

/**
 * Closes a Redis client at shutdown, for every connection of the gateway: QUIT, so Redis answers
 * what was sent before it, but never waiting more than `waitMs` for that answer. A stalled Redis (a
 * `SIGSTOP`, a slow command, a network that drops packets) keeps the connection open and answers
 * nothing, so an unbounded QUIT held the shutdown until Redis woke, past the README's bound
 * ("Shutdown"). QUIT needs a live connection: while Redis is away only disconnecting ends
 * ioredis's reconnect loop, and it ends a QUIT left unanswered too.
 */
export async function quitRedis(redis: Redis, waitMs = QUIT_WAIT_MS): Promise<void> {
  if (redis.status === "ready") {
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)));
    await Promise.race([redis.quit().then(() => {}, () => {}), gaveUp]);
    clearTimeout(timer);
  }
  if (redis.status !== "end") redis.disconnect();
}

export function createRedisConnection(target: RedisTarget, opts: RedisConnectionOptions): RedisConnection {
  const redis = openRedis(target, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: opts.commandTimeoutMs ?? 1_000,
    ...RECONNECT_OPTIONS,
  });
  let up = true;
  let failures = 0;
  let closed = false;
  const writes = watchWrites(redis, opts.name, opts.whileWritesRefused ?? opts.whileDown ?? "continuing without its writes");
  const back = () => {
    if (up || closed) return;
    up = true;
    log.info(`redis is back (${opts.name})`);
  };
  const down = (err: unknown) => {
    failures++;
    if (closed) return;
    if (isWriteRefusal(err)) return writes.refused(err);
    // One slot on the move (a Redis Cluster resharding it): its commands fail a while, the rest
    // of Redis is there. Only the failed command's request goes without (fails open, or closed).
    if (isSlotMoving(err)) {
      if (slotMovingLogged()) log.info(`redis: a slot is being moved between Redis Cluster nodes (${opts.name}); requests whose keys are in it go without until it has moved`, { err: String((err as Error)?.message ?? err) });
      return;
    }
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
    get writesRefused() {
      return writes.refusing;
    },
    failed: down,
    get failures() {
      return failures;
    },
    async close() {
      closed = true;
      writes.close();
      redis.removeAllListeners("close");
      await quitRedis(redis);
    },
  };
}

/**
 * Returns a function that PINGs `redis` after a second, one PING at a time however often it is
 * called: `answered` when Redis answers, `failed` when not (which may probe again). For a connection
 * that stays open but answers nothing (a stall), where no "ready" event will say when it is back.
 * A Redis Cluster's client stays ready while a node is down (its other nodes answer a PING, and say
 * CLUSTERDOWN to every command while the cluster fails), so there the probe asks every master
 * instead: `answered` once each answers and says the cluster is ok (`clusterServes`).
 */
export function createProbe(redis: Redis, answered: () => void, failed: (err: unknown) => void): () => void {
  let probing = false;
  const ask = isClusterClient(redis) ? () => clusterServes(redis as unknown as Cluster) : () => redis.ping();
  return () => {
    if (probing) return;
    probing = true;
    setTimeout(() => {
      ask().then(
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

/**
 * Resolves when every master node of the cluster answers within PROBE_INTERVAL_MS and says
 * `cluster_state:ok` (every slot served); rejects otherwise. The masters are the cluster's own
 * at the time: the client's map of the slots is refreshed first, so a master that failed over to
 * its replica is no longer asked (asking it kept an outage going for as long as it stayed down).
 */
async function clusterServes(cluster: Cluster): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`a Redis Cluster node did not answer within ${PROBE_INTERVAL_MS} ms`)), PROBE_INTERVAL_MS)));
  try {
    await Promise.race([new Promise<void>((resolve, reject) => cluster.refreshSlotsCache((err) => (err ? reject(err) : resolve()))), late]);
    const masters = cluster.nodes("master");
    if (masters.length === 0) throw new Error("no Redis Cluster node is known yet");
    const states = await Promise.race([Promise.all(masters.map((m) => m.call("CLUSTER", "INFO"))), late]);
    if (!states.every((s) => /^cluster_state:ok\b/m.test(String(s)))) throw new Error("CLUSTERDOWN the Redis Cluster is not serving every slot");
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Whether a failed command met a Redis Cluster slot being moved (resharding): TRYAGAIN (a
 * multi-key command while the slot's keys are split between two nodes), or ASK / MOVED
 * redirections that outran the client's retries. Not an outage: the other slots are served.
 */
export function isSlotMoving(e: unknown): boolean {
  const message = String((e as Error | undefined)?.message ?? "");
  return /^(?:TRYAGAIN|ASK|MOVED)\b|Last error: (?:ReplyError: )?(?:TRYAGAIN|ASK|MOVED)\b/.test(message);
}

const slotMovingLogged = atMostEvery(60_000);

/**
 * Redis's refusals of a write by a server that still answers: full (`maxmemory` reached under
 * `noeviction`), a read-only replica, a failed save (`stop-writes-on-bgsave-error`), too few
 * replicas. Redis refuses before running the command (a script: at its first write), so nothing of
 * it is applied.
 */
const WRITE_REFUSED = /^(?:OOM|READONLY|MISCONF|NOREPLICAS)\b/;

/** Whether a failed command is Redis refusing a write (a transaction: one of its commands). */
export function isWriteRefusal(e: unknown): boolean {
  const err = e as (Error & { previousErrors?: unknown[] }) | undefined;
  if (err?.name !== "ReplyError") return false;
  if (err.message.startsWith("EXECABORT")) return (err.previousErrors ?? []).some((p) => WRITE_REFUSED.test((p as Error)?.message ?? ""));
  return WRITE_REFUSED.test(err.message);
}

/** The replies of a pipeline or transaction (`exec()`), its first failed command's error thrown. */
export function execReplies(res: Array<[Error | null, unknown]> | null): unknown[] {
  return (res ?? []).map(([err, value]) => {
    if (err) throw err;
    return value;
  });
}

/**
 * The key of the write probe, which nobody writes: `SET key "" XX` is a write to Redis (refused
 * while it is full or read-only) that stores nothing when it is accepted.
 */
export const WRITE_PROBE_KEY = "svc:write-probe";

/** Whether a Redis that answers accepts writes; see `watchWrites`. */
export interface WriteWatch {
  /** True from the first refusal until the probe's write is accepted. */
  readonly refusing: boolean;
  /** Records a refused write: the first of a spell is logged, and a write a second probes for its end. */
  refused(err: unknown): void;
  close(): void;
}

/**
 * Tracks a Redis that answers but refuses writes (see WRITE_REFUSED), as one condition logged once
 * when it starts and once when it ends, not per request. A full Redis answers PING, so only a write
 * can tell that it has room again: once a second a write probe (WRITE_PROBE_KEY) is sent, one at a
 * time, until Redis accepts it. Meanwhile the connection's user sends no writes of its own, so they
 * neither fail one by one nor, succeeding by chance, end the condition only for the next to refuse.
 */
export function watchWrites(redis: Redis, name: string, meanwhile: string): WriteWatch {
  let refusing = false;
  let probing = false;
  let closed = false;
  const probe = () => {
    if (probing || closed) return;
    probing = true;
    setTimeout(() => {
      const again = () => {
        probing = false;
        if (refusing) probe();
      };
      if (closed) return;
      // A connection that is lost has its own outage; the probe waits for it to be back.
      if (redis.status !== "ready") return again();
      redis.set(WRITE_PROBE_KEY, "", "XX").then(() => {
        probing = false;
        if (!refusing || closed) return;
        refusing = false;
        log.info(`redis accepts writes again (${name})`);
      }, again);
    }, PROBE_INTERVAL_MS).unref();
  };
  return {
    get refusing() {
      return refusing;
    },
    refused(err) {
      if (closed) return;
      if (!refusing) {
        refusing = true;
        log.warn(`redis refuses writes (${name}): ${meanwhile} until it accepts them again`, { err: String((err as Error)?.message ?? err) });
      }
      probe();
    },
    close() {
      closed = true;
    },
  };
}
