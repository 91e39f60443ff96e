import { type Cluster, Redis } from "ioredis";
import { Lru } from "../core/lru.js";
import { atMostEvery, log } from "../logger.js";
import { clusterReady, createProbe, execReplies, isCluster, isSlotMoving, isWriteRefusal, openRedis, quitRedis, RECONNECT_OPTIONS, type RedisTarget, stayOnConfiguredDb, urlOf, watchWrites } from "./redis-connection.js";
import { type KeyRecord, type KeyWithProject, type ProjectRecord, type RegistryStore, RegistryUnavailableError } from "./registry-store.js";

/**
 * The cluster registry in Redis. Every key shares the `{svc:reg}` hash tag so the one Lua script
 * that needs several of them (create a key within the plan's limit) runs on Redis Cluster too.
 *
 *   {svc:reg}:project:<id>    project JSON
 *   {svc:reg}:projects        sorted set of project ids by creation time
 *   {svc:reg}:key:<id>        key JSON
 *   {svc:reg}:keys:<project>  sorted set of a project's key ids by creation time
 *   {svc:reg}:hash:<sha256>   key id, for verification
 */
const T = "{svc:reg}";
/** The channel a deleted key's hash is published on (deleteKeyScript), which every replica subscribes to and forgets it. */
export const REVOKED = `${T}:revoked`;
const kProject = (id: string) => `${T}:project:${id}`;
const kProjects = `${T}:projects`;
const kKey = (id: string) => `${T}:key:${id}`;
const kKeys = (projectId: string) => `${T}:keys:${projectId}`;
const kHash = (hash: string) => `${T}:hash:${hash}`;

// KEYS: keys-set, key, hash, project. ARGV: max keys, created-at, key id, key JSON, the project's
// JSON the limit was read from ("": the limit does not depend on it). 1 created, 0 at the limit,
// -1 the project changed since it was read.
const createKeyScript = `
if ARGV[5] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[5] then return -1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], ARGV[3])
return 1`;

// KEYS: key. ARGV: key-set prefix, hash prefix, the revocations channel (the deleted key's hash is
// published there: every replica forgets its copy). Returns the deleted key's JSON. The publish
// comes before any write: Redis does not undo a script's writes when a later command fails, so a
// user refused the channel (an ACL user without it) would have deleted the key unheard of, every
// other replica keeping its copy for its next outage, and the delete reported as failed.
const deleteKeyScript = `
local v = redis.call('GET', KEYS[1])
if not v then return false end
local k = cjson.decode(v)
redis.call('PUBLISH', ARGV[3], k.hash)
redis.call('DEL', KEYS[1])
redis.call('ZREM', ARGV[1] .. k.projectId, k.id)
redis.call('DEL', ARGV[2] .. k.hash)
return v`;

// KEYS: project, its keys-set. ARGV: the JSON read, the JSON to write, the number of keys read.
// Writes only if nobody changed the project or its keys since the read: 1 written, 0 changed
// meanwhile, -1 gone.
const replaceProjectScript = `
local v = redis.call('GET', KEYS[1])
if not v then return -1 end
if v ~= ARGV[1] then return 0 end
if redis.call('ZCARD', KEYS[2]) ~= tonumber(ARGV[3]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1`;

// KEYS: hash. ARGV: key prefix, project prefix. Verification in one round trip: the key's JSON and
// its project's JSON (nil when the project is gone), or nil when no key has this hash. The key and
// project keys are not in KEYS, but they share the hash tag, so they are in the same cluster slot.
// While that slot moves between Redis Cluster nodes (resharding) the records it reads may already
// be on the other node, where an undeclared key is not followed: a key found by its hash whose
// record is not here is answered {'', id}, and its records are then read by name (findKeyByHash),
// which follows the move; a key is never refused for a record that is only elsewhere.
const findKeyScript = `
local id = redis.call('GET', KEYS[1])
if not id then return false end
local k = redis.call('GET', ARGV[1] .. id)
if not k then return {'', id} end
return {k, redis.call('GET', ARGV[2] .. cjson.decode(k).projectId)}`;

type ScriptedRedis = Redis & {
  svcReplaceProject(k1: string, k2: string, before: string, after: string, keyCount: number): Promise<number>;
  svcCreateKey(k1: string, k2: string, k3: string, k4: string, max: number, at: number, id: string, json: string, projectJson: string): Promise<number>;
  svcDeleteKey(k1: string, setPrefix: string, hashPrefix: string, revokedChannel: string): Promise<string | null>;
  svcFindKey(k1: string, keyPrefix: string, projectPrefix: string): Promise<[string, string | null] | null>;
};

/** How soon a Redis Cluster's subscription to deletes moves to another node once the one it was on is lost (and not back). */
const SUBSCRIBER_MOVE_MS = 500;

/** While the deleted keys' channel is refused, how often it is asked for again. */
const SUBSCRIBE_RETRY_MS = 30_000;
const subscribeRefusalLogged = atMostEvery(60_000);

/** How many verified keys (and their projects) are remembered for an outage; the least recently used go first. */
const KNOWN_GOOD_MAX = 10_000;

/** A record read from Redis with the JSON it was read from. */
interface Known<V> {
  text: string;
  value: V;
}

/** Longest wait for a read; one that takes longer counts as Redis stalled. */
const READ_TIMEOUT_MS = 1_000;

/** A read given up on: Redis did not answer within READ_TIMEOUT_MS. */
class ReadTimeout extends Error {}

/**
 * Redis's refusals that pass: a Redis loading its data or busy with a script, a replica not yet
 * promoted, a full or read-only one (those that refuse writes only are told apart first, see
 * `call`). Any other reply (a wrong type, a script's error) is a bug.
 */
const PASSING_REPLY = /^(?:LOADING|BUSY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|READONLY|OOM|MISCONF|NOREPLICAS)\b/;

/**
 * Whether a failed command means Redis is unavailable rather than a bug: every failure that is not
 * Redis's reply (connection lost, retries used up, offline) and the replies that pass. A transaction
 * refused as a whole (EXECABORT) is judged by the refusals of its commands.
 */
function isOutage(e: unknown): boolean {
  const err = e as (Error & { previousErrors?: unknown[] }) | undefined;
  if (err?.name !== "ReplyError") return true;
  if (err.message.startsWith("EXECABORT")) return (err.previousErrors ?? []).some((p) => PASSING_REPLY.test((p as Error)?.message ?? ""));
  return PASSING_REPLY.test(err.message);
}

export function createRedisRegistryStore(target: RedisTarget): RegistryStore {
  // No command timeout: an admin write that timed out would still be applied once Redis answers,
  // behind the caller's back (a key created after its creator was told it failed). Only reads, which
  // change nothing, are given up on (`read` below). It reconnects as the cache's and the limits'
  // connections do, so a key never verified is served as soon as they are back.
  const options = { ...RECONNECT_OPTIONS, lazyConnect: false, maxRetriesPerRequest: 2 };
  const redis = openRedis(target, options) as ScriptedRedis;
  // Requests must keep flowing while Redis is unreachable (cache and limits step aside too): the
  // keys and projects this replica verified last are served from memory until Redis is back. A key
  // cannot be deleted during the outage either, so this only ever serves what was valid when Redis
  // was last reachable. Logged once per outage. Everything else (a key not verified before, every
  // admin call) fails with RegistryUnavailableError: at once while the outage is known, so nothing
  // waits on it and no write is queued to be applied later behind its caller's back.
  //
  // The same copies keep a record that reads back unchanged the same object, so the auth service's
  // per-record messages (built once per record object) are not rebuilt on every request.
  const knownKeys = new Lru<string, Known<KeyRecord>>();
  const knownProjects = new Lru<string, Known<ProjectRecord>>();
  // A key deleted on any replica is published by the delete's own script, and every replica forgets
  // its copy when it hears of it: an outage that starts after a delete finds no copy of the deleted
  // key anywhere. A subscription that was interrupted may have missed deletes: on its return, every
  // copy is forgotten (each is read again from Redis at its next use).
  // New copies of keys are kept only while subscribed: a replica that is not hearing of deletes
  // (its subscription failed: Redis down as it started, the channel refused, or lost with its
  // connection) keeps none, so serves none a delete made meanwhile in an outage; those it had stay
  // for an outage of the whole Redis, and are forgotten when the subscription alone was lost
  // (forgetUnlessOutage). The subscription is made here, not by ioredis on its own after
  // a reconnect (autoResubscribe): a refusal of that one was an unhandled rejection, which ended
  // the process (Redis 7 drops the subscribers of a user whose channel is taken away). It is asked
  // for at each connection, and every SUBSCRIBE_RETRY_MS while refused.
  // On a Redis Cluster the subscription is made on one node, through a client of its own (a
  // PUBLISH, the delete script's too, reaches every node's subscribers): first the node
  // SVC_REDIS_URL names, and, when the one subscribed on is lost, another the cluster's client
  // reaches (the others take deletes meanwhile), within SUBSCRIBER_MOVE_MS. The copies kept are
  // cleared once subscribed again, as after any loss of the subscription.
  const clusterTarget = isCluster(target);
  const subscriberAt = (url: string) => stayOnConfiguredDb(new Redis(url, { ...options, autoResubscribe: false }));
  let revocations = clusterTarget ? subscriberAt(urlOf(target)) : stayOnConfiguredDb(redis.duplicate({ autoResubscribe: false }));
  let heardBefore = false;
  let subscribed = false;
  let subscribing = false;
  const subscribe = () => {
    const on = revocations;
    if (subscribing || subscribed || closed || on.status !== "ready") return;
    subscribing = true;
    on.subscribe(REVOKED).then(
      () => {
        if (on !== revocations) return;
        subscribed = true;
        knownKeys.clear(); // none is kept unsubscribed; cleared all the same, should one race in
      },
      (e: unknown) => {
        if (subscribeRefusalLogged()) log.warn("redis: cannot subscribe to deleted keys' channel; no newly verified key is kept for an outage until it can (asked again every 30 s and at each reconnect)", { channel: REVOKED, err: String((e as Error)?.message ?? e) });
      },
    ).finally(() => {
      subscribing = false;
      // Moved to another node meanwhile (moveSubscription): that one is asked now, not in 30 s.
      if (on !== revocations) subscribe();
    });
  };
  /** Moves a cluster's subscription to a node the cluster's client has a connection to, when the one it was on is still lost. */
  const moveSubscription = () => {
    if (closed || revocations.status === "ready" || !clusterTarget) return;
    const nodes = (redis as unknown as Cluster).nodes("all").filter((n) => n.status === "ready");
    const node = nodes[Math.floor(Math.random() * nodes.length)];
    if (!node) return void setTimeout(moveSubscription, SUBSCRIBER_MOVE_MS).unref();
    const u = new URL(urlOf(target));
    const host = String(node.options.host ?? "127.0.0.1");
    u.host = `${host.includes(":") ? `[${host}]` : host}:${node.options.port ?? 6379}`;
    revocations.removeAllListeners();
    revocations.on("error", () => {});
    revocations.disconnect();
    revocations = watchRevocations(subscriberAt(u.toString()));
  };
  const watchRevocations = (conn: Redis): Redis => {
    conn.on("error", () => {}); // the registry's own connection reports outages
    conn.on("ready", () => {
      if (heardBefore) knownKeys.clear();
      heardBefore = true;
      subscribe();
    });
    conn.on("close", () => {
      const was = subscribed;
      subscribed = false;
      if (was) forgetUnlessOutage();
      if (clusterTarget) setTimeout(moveSubscription, SUBSCRIBER_MOVE_MS).unref();
    });
    conn.on("message", (_channel: string, hash: string) => void knownKeys.delete(hash));
    return conn;
  };
  /**
   * The subscription lost: when Redis itself still answers (only the subscriber's connection went:
   * killed, its output buffer over Redis's limit, a network fault of its own), deletes can be made
   * that this replica does not hear, so its copies are forgotten now, not at the subscription's
   * return: a stall or outage before then would serve them, a key deleted meanwhile among them.
   * When Redis does not answer, this is an outage of the whole Redis (no delete can be made
   * meanwhile), which the copies are kept for.
   */
  const forgetUnlessOutage = () => {
    if (closed || stalled || redis.status !== "ready") return;
    timed(() => call(() => redis.ping())).then(
      () => {
        if (!subscribed) knownKeys.clear();
      },
      () => {},
    );
  };
  watchRevocations(revocations);
  const resubscribe = setInterval(subscribe, SUBSCRIBE_RETRY_MS);
  resubscribe.unref();
  /** Remembers the record read as `text` (null: none), reusing the remembered one when it is unchanged. */
  const remember = <V>(m: Lru<string, Known<V>>, k: string, text: string | null): V | undefined => {
    const was = m.get(k);
    if (was !== undefined && was.text === text) return was.value;
    m.delete(k);
    if (text === null) return undefined;
    if (!subscribed && (m as unknown) === knownKeys) return JSON.parse(text) as V;
    if (m.size >= KNOWN_GOOD_MAX) m.shift();
    const value = JSON.parse(text) as V;
    m.set(k, { text, value });
    return value;
  };
  // An outage is a lost connection (ioredis reconnects, and "ready" ends it) or a stall: a read
  // that timed out on a connection that stays open (a Redis paused or blocked by a slow command)
  // brings no event at all, so while stalled a PING a second decides when Redis answers again.
  // Either way reads of known keys are answered from memory at once, not after a timeout each.
  let outage = false;
  let stalled = false;
  let closed = false;
  const down = (e: unknown) => {
    if (outage) return;
    outage = true;
    log.warn("redis unreachable (registry): serving keys verified before the outage until it is back", { err: String((e as Error)?.message ?? e) });
  };
  const back = () => {
    if (redis.status !== "ready" || stalled) return;
    if (outage) log.info("redis is back (registry)");
    outage = false;
  };
  const probe: () => void = createProbe(
    redis,
    () => {
      stalled = false;
      back();
    },
    () => {
      if (!closed) probe();
    },
  );
  redis.on("error", down);
  redis.on("ready", back);
  // A Redis that answers but refuses writes (full, read-only) is no outage: keys are still read
  // (verification is a read-only script, which Redis 7 runs when full), only admin changes fail.
  // It is logged once, and ends when a write probe is accepted, not when a PING answers.
  const writes = watchWrites(redis, "registry", "verifying keys as usual, admin changes fail");
  /**
   * Runs Redis commands, refused at once while Redis is known to be lost (until "ready") or stalled
   * (until a PING answers): nothing is sent then, so nothing can be applied later. A failure that
   * means an outage becomes RegistryUnavailableError (and starts the outage, logged once); any
   * other is a bug and stays as it is. Only the commands go through here, never what is done with
   * their replies, so a record that does not parse is not taken for an outage. A write Redis
   * refused (full, read-only: nothing of it was applied) fails the same way but is no outage.
   */
  async function call<T>(commands: () => Promise<T>): Promise<T> {
    if (stalled || (outage && redis.status !== "ready")) throw new RegistryUnavailableError("redis is unreachable");
    // A Redis Cluster's client keeps no queue: a call made before it is first ready waits for it here.
    if (redis.status !== "ready") await clusterReady(redis);
    try {
      return await commands();
    } catch (e) {
      if (isWriteRefusal(e)) {
        if (!closed) writes.refused(e);
        throw new RegistryUnavailableError(`redis refused a write: ${(e as Error)?.message ?? e}`, { cause: e, writesRefused: true });
      }
      // A slot on the move (resharding): this call fails, as in an outage, but Redis is there.
      if (isSlotMoving(e)) throw new RegistryUnavailableError(`redis failed: ${(e as Error)?.message ?? e}`, { cause: e });
      if (!isOutage(e)) throw e;
      if (!closed) {
        down(e);
        // A refusal on a connection that stays up (LOADING, BUSY) brings no "ready" to end it.
        if (redis.status === "ready") probe();
      }
      throw new RegistryUnavailableError(`redis failed: ${(e as Error)?.message ?? e}`, { cause: e });
    }
  }
  /**
   * A read, which changes nothing and so may be given up on: after READ_TIMEOUT_MS it fails with
   * RegistryUnavailableError, and on a connection that stays open Redis counts as stalled.
   */
  async function timed<R>(load: () => Promise<R>): Promise<R> {
    let timer: NodeJS.Timeout | undefined;
    try {
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new ReadTimeout(`redis did not answer within ${READ_TIMEOUT_MS} ms`)), READ_TIMEOUT_MS);
      });
      return await Promise.race([load(), late]);
    } catch (e) {
      if (!(e instanceof ReadTimeout)) throw e;
      if (redis.status === "ready" && !closed) {
        stalled = true;
        down(e);
        probe();
      }
      throw new RegistryUnavailableError(e.message, { cause: e });
    } finally {
      clearTimeout(timer);
    }
  }
  /** Reads through Redis when it is up; from the known-good copy when it is not. */
  async function read<V, R>(m: Lru<string, Known<V>>, k: string, fallback: (v: V) => R, load: () => Promise<R | undefined>): Promise<R | undefined> {
    const known = m.get(k);
    if ((redis.status !== "ready" || stalled) && known) return fallback(known.value);
    try {
      return await timed(load);
    } catch (e) {
      if (known) return fallback(known.value);
      throw e;
    }
  }
  // defineCommand sends EVALSHA and falls back to EVAL on NOSCRIPT (a restarted Redis).
  redis.defineCommand("svcCreateKey", { numberOfKeys: 4, lua: createKeyScript });
  redis.defineCommand("svcDeleteKey", { numberOfKeys: 1, lua: deleteKeyScript });
  redis.defineCommand("svcReplaceProject", { numberOfKeys: 2, lua: replaceProjectScript });
  redis.defineCommand("svcFindKey", { numberOfKeys: 1, lua: findKeyScript });

  const parse = <T>(v: string | null): T | undefined => (v === null ? undefined : (JSON.parse(v) as T));
  /**
   * A read of the registry's slot before a write that reads nothing first: a stalled Redis (its
   * connection open, nothing answered) fails it within READ_TIMEOUT_MS, nothing sent, where the
   * write itself, never given up on (see `options`), would wait until Redis answered.
   */
  const answering = () => timed(() => call(() => redis.exists(kProjects)));

  return {
    async createProject(p) {
      await answering();
      await call(() => redis.multi().set(kProject(p.id), JSON.stringify(p)).zadd(kProjects, p.createdAt, p.id).exec());
    },
    async getProject(id) {
      return read(knownProjects, id, (p) => p, async () => remember(knownProjects, id, await call(() => redis.get(kProject(id)))));
    },
    async updateProject(id, change) {
      // Optimistic: read, change, write if unchanged; a concurrent update, or a key created or
      // deleted meanwhile, makes it try again.
      for (let attempt = 0; attempt < 20; attempt++) {
        const [before, keyCount] = await timed(() => call(async () => {
          const [project, keyCount] = execReplies(await redis.multi().get(kProject(id)).zcard(kKeys(id)).exec());
          return [project as string | null, Number(keyCount)] as const;
        }));
        if (before === null) return undefined;
        const next = change(JSON.parse(before) as ProjectRecord, keyCount);
        const done = await call(() => redis.svcReplaceProject(kProject(id), kKeys(id), before, JSON.stringify(next), keyCount));
        if (done === 1) {
          if (knownProjects.has(id)) remember(knownProjects, id, JSON.stringify(next));
          return next;
        }
        if (done === -1) return undefined;
      }
      throw new Error(`project ${id} kept changing; update not applied`);
    },
    async listProjects() {
      const values = await timed(() => call(async () => {
        const ids = await redis.zrange(kProjects, "0", "-1");
        return ids.length ? redis.mget(ids.map(kProject)) : [];
      }));
      return values.map((v) => parse<ProjectRecord>(v)).filter((p): p is ProjectRecord => p !== undefined);
    },
    async createKey(k, maxKeys) {
      // With a limit that depends on the project, the key is written only while the project is as
      // read (a plan changed meanwhile makes it read again).
      for (let attempt = 0; attempt < 20; attempt++) {
        let max: number;
        let read = "";
        if (typeof maxKeys === "number") {
          max = maxKeys;
          await answering();
        } else {
          const text = await timed(() => call(() => redis.get(kProject(k.projectId))));
          if (text === null) return false;
          max = maxKeys(JSON.parse(text) as ProjectRecord);
          read = text;
        }
        const done = await call(() => redis.svcCreateKey(kKeys(k.projectId), kKey(k.id), kHash(k.hash), kProject(k.projectId), max, k.createdAt, k.id, JSON.stringify(k), read));
        if (done !== -1) return done === 1;
      }
      throw new Error(`project ${k.projectId} kept changing; key not created`);
    },
    async listKeys(projectId) {
      const values = await timed(() => call(async () => {
        const ids = await redis.zrange(kKeys(projectId), "0", "-1");
        return ids.length ? redis.mget(ids.map(kKey)) : [];
      }));
      return values.map((v) => parse<KeyRecord>(v)).filter((k): k is KeyRecord => k !== undefined);
    },
    async deleteKey(id) {
      await answering();
      const k = parse<KeyRecord>(await call(() => redis.svcDeleteKey(kKey(id), `${T}:keys:`, `${T}:hash:`, REVOKED)));
      if (k) knownKeys.delete(k.hash);
      return k;
    },
    async findKeyByHash(hash) {
      const withProject = (key: KeyRecord): KeyWithProject => ({ key, project: knownProjects.get(key.projectId)?.value });
      return read(knownKeys, hash, withProject, async () => {
        let found = await call(() => redis.svcFindKey(kHash(hash), `${T}:key:`, `${T}:project:`));
        if (found && found[0] === "") {
          const text = await call(() => redis.get(kKey(found![1]!)));
          found = text === null ? null : [text, null];
        }
        if (found && found[1] === null) {
          const [text] = found;
          found = [text, await call(() => redis.get(kProject((JSON.parse(text) as KeyRecord).projectId)))];
        }
        const key = remember(knownKeys, hash, found ? found[0] : null);
        if (!found || !key) return undefined;
        return { key, project: remember(knownProjects, key.projectId, found[1]) };
      });
    },
    async close() {
      closed = true;
      writes.close();
      clearInterval(resubscribe);
      revocations.disconnect();
      // A Redis known to be stalled would not answer a QUIT either: no wait for it then.
      if (stalled) return redis.disconnect();
      await quitRedis(redis);
    },
  };
}
