import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { createRedisConnection, type RedisConnection } from "../../src/stores/redis-connection.js";
import { createRedisRegistryStore, REVOKED } from "../../src/stores/redis-registry-store.js";
import { type KeyRecord, type RegistryStore, RegistryUnavailableError } from "../../src/stores/registry-store.js";
import { eventually } from "../support/http.js";
import { captureLog } from "../support/log-capture.js";
import { freePort, startRedis, type TestRedis } from "../support/redis.js";

const key = (id: string, projectId: string, at: number): KeyRecord => ({
  id,
  projectId,
  mode: "live",
  description: "",
  displayPrefix: "svc_sk_live_xxxx…",
  hash: `hash-${id}`,
  createdAt: at,
});

describe("Redis registry store", () => {
  let redis: TestRedis;
  let a: RegistryStore;
  let b: RegistryStore;

  before(async () => {
    redis = await startRedis();
    a = createRedisRegistryStore(redis.url);
    b = createRedisRegistryStore(redis.url); // a second replica
  });
  after(async () => {
    await a.close();
    await b.close();
    await redis.stop();
  });

  it("shares projects and keys between replicas", async () => {
    await a.createProject({ id: "proj_1", name: "one", plan: "pro", createdAt: 1 });
    assert.equal((await b.getProject("proj_1"))?.name, "one");
    assert.ok(await a.createKey(key("key_1", "proj_1", 1), 10));
    const found = await b.findKeyByHash("hash-key_1");
    assert.equal(found?.key.id, "key_1");
    assert.equal(found?.project?.name, "one");
  });

  it("finds a key whose project is gone without its project", async () => {
    await a.createProject({ id: "proj_gone", name: "gone", plan: "pro", createdAt: 5 });
    await a.createKey(key("key_gone", "proj_gone", 5), 10);
    const raw = new Redis(redis.url);
    await raw.del("{svc:reg}:project:proj_gone");
    raw.disconnect();
    const found = await b.findKeyByHash("hash-key_gone");
    assert.equal(found?.key.id, "key_gone");
    assert.equal(found?.project, undefined);
  });

  it("gives the same record objects while the stored ones are unchanged, new ones after a change", async () => {
    await a.createProject({ id: "proj_same", name: "same", plan: "pro", createdAt: 6 });
    await a.createKey(key("key_same", "proj_same", 6), 10);
    const first = await b.findKeyByHash("hash-key_same");
    const again = await b.findKeyByHash("hash-key_same");
    assert.equal(again?.key, first?.key);
    assert.equal(again?.project, first?.project);
    await a.updateProject("proj_same", (p) => ({ ...p, name: "renamed" }));
    const changed = await b.findKeyByHash("hash-key_same");
    assert.equal(changed?.key, first?.key);
    assert.notEqual(changed?.project, first?.project);
    assert.equal(changed?.project?.name, "renamed");
  });

  it("makes a key deleted on one replica unknown on the other at once", async () => {
    await a.createProject({ id: "proj_2", name: "two", plan: "pro", createdAt: 2 });
    await a.createKey(key("key_2", "proj_2", 2), 10);
    assert.equal((await b.deleteKey("key_2"))?.id, "key_2");
    assert.equal(await a.findKeyByHash("hash-key_2"), undefined);
    assert.deepEqual(await a.listKeys("proj_2"), []);
  });

  it("deletes nothing when Redis refuses the delete's publish (a user that lost the channel): the key stays, on every replica", async () => {
    const admin = new Redis(redis.url, { maxRetriesPerRequest: 0 });
    await admin.call("ACL", "SETUSER", "chan", "on", ">chan-pw", "~*", "&*", "+@all");
    const url = redis.url.replace("redis://", "redis://chan:chan-pw@");
    const c = createRedisRegistryStore(url);
    try {
      await c.createProject({ id: "proj_pub", name: "pub", plan: "pro", createdAt: 1000 });
      await c.createKey(key("key_pub", "proj_pub", 1000), 10);
      await admin.call("ACL", "SETUSER", "chan", "resetchannels");
      await assert.rejects(c.deleteKey("key_pub"), /can't publish to the channel/);
      assert.equal((await a.findKeyByHash("hash-key_pub"))?.key.id, "key_pub");
      assert.deepEqual((await a.listKeys("proj_pub")).map((k) => k.id), ["key_pub"]);
    } finally {
      await c.close();
      admin.disconnect();
    }
  });

  it("subscribes to deletes once Redis is there when it was not at start, so a key deleted elsewhere is not served in a later outage", async function () {
    this.timeout(30_000);
    const port = await freePort();
    const late = createRedisRegistryStore(`redis://127.0.0.1:${port}`);
    let r2: TestRedis | undefined;
    let other: RegistryStore | undefined;
    try {
      await new Promise((r) => setTimeout(r, 2_500)); // its first subscribe fails meanwhile
      r2 = await startRedis(port);
      const admin = new Redis(r2.url, { maxRetriesPerRequest: 0 });
      try {
        await eventually(async () => Number(((await admin.call("PUBSUB", "NUMSUB", REVOKED)) as unknown[])[1]) === 1, 10_000, "subscribed once Redis is up");
      } finally {
        admin.disconnect();
      }
      other = createRedisRegistryStore(r2.url);
      await other.createProject({ id: "proj_late", name: "late", plan: "pro", createdAt: 2000 });
      await other.createKey(key("key_late", "proj_late", 2000), 10);
      await eventually(async () => (await late.findKeyByHash("hash-key_late").catch(() => undefined))?.key.id === "key_late", 10_000, "the late replica verifies the key");
      await other.deleteKey("key_late");
      // The delete's message reaches the late replica on its own connection, apart from the
      // delete's reply to `other`: on a busy machine Redis can be killed between writing the two.
      // The guarantee is for deletes made before an outage, so the outage starts after delivery.
      await new Promise((r) => setTimeout(r, 300));
      await r2.stop();
      r2 = undefined;
      await assert.rejects(late.findKeyByHash("hash-key_late"), (e) => e instanceof RegistryUnavailableError);
    } finally {
      await late.close();
      await other?.close();
      await r2?.stop();
    }
  });

  it("forgets the keys it verified when its subscription alone is lost (Redis still answering), so a key deleted before its return is not served in a stall", async function () {
    this.timeout(30_000);
    const c = createRedisRegistryStore(redis.url);
    const admin = new Redis(redis.url, { maxRetriesPerRequest: 0 });
    const numsub = async () => Number(((await admin.call("PUBSUB", "NUMSUB", REVOKED)) as unknown[])[1]);
    const maxclients = ((await admin.call("CONFIG", "GET", "maxclients")) as string[])[1]!;
    try {
      await eventually(async () => (await numsub()) === 3, 10_000, "the third replica subscribed");
      await a.createProject({ id: "proj_sub", name: "sub", plan: "pro", createdAt: 4000 });
      await a.createKey(key("key_sub", "proj_sub", 4000), 10);
      assert.equal((await c.findKeyByHash("hash-key_sub"))?.key.id, "key_sub");
      // The subscribers' connections killed, and kept from coming back (no new connection taken):
      // Redis itself answers the connections that stay.
      const connected = Number(/connected_clients:(\d+)/.exec(String(await admin.call("INFO", "clients")))![1]);
      await admin.call("CONFIG", "SET", "maxclients", String(connected - 3));
      await admin.call("CLIENT", "KILL", "TYPE", "pubsub");
      await new Promise((r) => setTimeout(r, 500));
      await a.deleteKey("key_sub"); // published: nobody hears it
      // Then Redis stalls before the subscription is back: the deleted key is not served from memory.
      await admin.call("CLIENT", "PAUSE", "1500", "ALL");
      await assert.rejects(c.findKeyByHash("hash-key_sub"), (e) => e instanceof RegistryUnavailableError);
    } finally {
      await admin.call("CONFIG", "SET", "maxclients", maxclients);
      await c.close();
      admin.disconnect();
    }
    // Every replica subscribed again.
    const again = new Redis(redis.url, { maxRetriesPerRequest: 0 });
    try {
      await eventually(async () => Number(((await again.call("PUBSUB", "NUMSUB", REVOKED)) as unknown[])[1]) === 2, 10_000, "a and b subscribed again");
    } finally {
      again.disconnect();
    }
  });

  it("lives through its user losing the deleted keys' channel (Redis 7 drops its subscribers): no unhandled rejection, reads go on", async function () {
    this.timeout(30_000);
    const admin = new Redis(redis.url, { maxRetriesPerRequest: 0 });
    await admin.call("ACL", "SETUSER", "revoker", "on", ">rv-pw", "~*", "&*", "+@all");
    const c = createRedisRegistryStore(redis.url.replace("redis://", "redis://revoker:rv-pw@"));
    const numsub = async () => Number(((await admin.call("PUBSUB", "NUMSUB", REVOKED)) as unknown[])[1]);
    const before = await numsub();
    const crashes: unknown[] = [];
    const onRejection = (e: unknown) => crashes.push(e);
    process.on("unhandledRejection", onRejection);
    try {
      await eventually(async () => (await numsub()) === before + 1, 10_000, "subscribed");
      await c.createProject({ id: "proj_rv", name: "rv", plan: "pro", createdAt: 3000 });
      await c.createKey(key("key_rv", "proj_rv", 3000), 10);
      await admin.call("ACL", "SETUSER", "revoker", "resetchannels");
      await eventually(async () => (await numsub()) === before, 10_000, "dropped by Redis");
      await new Promise((r) => setTimeout(r, 1_000)); // its reconnect, and a subscribe refused
      assert.deepEqual(crashes, [], "no unhandled rejection");
      assert.equal((await c.findKeyByHash("hash-key_rv"))?.key.id, "key_rv", "still reads through Redis");
    } finally {
      process.off("unhandledRejection", onRejection);
      await c.close();
      await admin.call("ACL", "DELUSER", "revoker");
      admin.disconnect();
    }
  });

  it("enforces the key limit atomically under concurrent creation", async () => {
    await a.createProject({ id: "proj_3", name: "three", plan: "free", createdAt: 3 });
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).createKey(key(`key_3_${i}`, "proj_3", 3 + i), 2)),
    );
    assert.equal(results.filter(Boolean).length, 2);
    assert.equal((await a.listKeys("proj_3")).length, 2);
  });

  it("lists projects oldest first", async () => {
    const ids = (await b.listProjects()).map((p) => p.id);
    assert.deepEqual(ids.slice(0, 3), ["proj_1", "proj_2", "proj_3"]);
  });

  it("answers keys it verified from memory while Redis is stalled, and reads through again once it answers", async () => {
    await a.createProject({ id: "proj_stall", name: "stall", plan: "pro", createdAt: 9 });
    await a.createKey(key("key_stall", "proj_stall", 9), 10);
    assert.equal((await b.findKeyByHash("hash-key_stall"))?.key.id, "key_stall");
    const raw = new Redis(redis.url);
    try {
      const lines = await captureLog(async () => {
        // A paused Redis keeps the connection open and answers nothing: no error, no "ready".
        await raw.call("CLIENT", "PAUSE", "2500", "ALL");
        let started = Date.now();
        assert.equal((await b.findKeyByHash("hash-key_stall"))?.key.id, "key_stall");
        assert.ok(Date.now() - started < 1_800, `the first read waited ${Date.now() - started} ms (the command timeout is 1 s)`);
        started = Date.now();
        for (let i = 0; i < 20; i++) assert.equal((await b.findKeyByHash("hash-key_stall"))?.project?.name, "stall");
        assert.ok(Date.now() - started < 600, `20 reads of a known key took ${Date.now() - started} ms while stalled`);
        started = Date.now();
        await assert.rejects(b.findKeyByHash("hash-never-seen"), RegistryUnavailableError);
        await assert.rejects(b.createProject({ id: "proj_during_stall", name: "x", plan: "pro", createdAt: 10 }), RegistryUnavailableError);
        await assert.rejects(b.listKeys("proj_stall"), RegistryUnavailableError);
        assert.ok(Date.now() - started < 600, `known to be stalled, an unknown key and admin calls fail at once (took ${Date.now() - started} ms)`);
        // Once Redis answers again, reads go through: a key deleted there is unknown here at once.
        await eventually(async () => {
          await raw.del("{svc:reg}:hash:hash-key_stall");
          return (await b.findKeyByHash("hash-key_stall")) === undefined;
        }, 10_000, "reads go through Redis again");
      });
      assert.equal(lines.filter((l) => l.includes("redis unreachable (registry)")).length, 1, "logged once per outage");
      assert.equal(lines.filter((l) => l.includes("redis is back (registry)")).length, 1);
      assert.equal(await a.getProject("proj_during_stall"), undefined, "a write refused during the stall is not applied after it");
    } finally {
      raw.disconnect();
    }
  });

  it("fails an admin write that reads nothing first within a second on a stalled Redis, nothing of it applied after (it waited until Redis answered)", async () => {
    await a.createProject({ id: "proj_wstall", name: "w", plan: "pro", createdAt: 11 });
    await a.createKey(key("key_wstall", "proj_wstall", 11), 10);
    // Fresh replicas, so none knows of the stall before its write.
    const replicas = [createRedisRegistryStore(redis.url), createRedisRegistryStore(redis.url), createRedisRegistryStore(redis.url)];
    const raw = new Redis(redis.url);
    try {
      await Promise.all(replicas.map((r) => r.getProject("proj_wstall")));
      await captureLog(async () => {
        await raw.call("CLIENT", "PAUSE", "5000", "ALL");
        const started = Date.now();
        const writes = [
          () => replicas[0]!.createProject({ id: "proj_wstall_new", name: "x", plan: "pro", createdAt: 12 }),
          () => replicas[1]!.createKey(key("key_wstall_new", "proj_wstall", 12), 10),
          () => replicas[2]!.deleteKey("key_wstall"),
        ];
        const took = await Promise.all(writes.map(async (w) => {
          await assert.rejects(w(), RegistryUnavailableError);
          return Date.now() - started;
        }));
        assert.ok(took.every((t) => t < 4_000), `the writes failed after ${took.join(", ")} ms (the read timeout is 1 s, the pause 5 s)`);
      });
      await eventually(async () => (await a.listProjects().then(() => true, () => false)), 10_000, "Redis answers again");
      assert.equal(await a.getProject("proj_wstall_new"), undefined, "no project created");
      assert.deepEqual((await a.listKeys("proj_wstall")).map((k) => k.id), ["key_wstall"], "no key created, none deleted");
    } finally {
      raw.disconnect();
      await Promise.all(replicas.map((r) => r.close()));
    }
  });

  it("verifies keys from a full Redis, one never verified too, while admin changes fail: logged once, and once more when a write is accepted again", async () => {
    await a.createProject({ id: "proj_full", name: "full", plan: "pro", createdAt: 13 });
    assert.ok(await a.createKey(key("key_full_known", "proj_full", 13), 10));
    assert.ok(await a.createKey(key("key_full_cold", "proj_full", 14), 10));
    assert.equal((await b.findKeyByHash("hash-key_full_known"))?.key.id, "key_full_known");
    const raw = new Redis(redis.url);
    try {
      const lines = await captureLog(async (sofar) => {
        await raw.config("SET", "maxmemory", "1"); // full: every write refused, reads and PING answered
        const end = Date.now() + 2_500; // long enough for PINGs a second apart
        for (let i = 0; Date.now() < end; i++) {
          // A key this replica never verified is read from Redis: the lookup script only reads.
          if (i === 3) await raw.script("FLUSH"); // and is sent again (EVAL after NOSCRIPT)
          assert.equal((await b.findKeyByHash("hash-key_full_cold"))?.project?.name, "full");
          assert.equal((await b.findKeyByHash("hash-key_full_known"))?.project?.name, "full");
          assert.deepEqual((await b.listKeys("proj_full")).map((k) => k.id), ["key_full_known", "key_full_cold"]);
          await assert.rejects(b.createKey(key("key_full_new", "proj_full", 15), 10), (e) => e instanceof RegistryUnavailableError && e.writesRefused);
          await assert.rejects(b.updateProject("proj_full", (p) => ({ ...p, name: "changed" })), RegistryUnavailableError);
          await assert.rejects(b.createProject({ id: "proj_full2", name: "x", plan: "pro", createdAt: 16 }), RegistryUnavailableError);
          await new Promise((r) => setTimeout(r, 100));
        }
        await raw.config("SET", "maxmemory", "0");
        await eventually(() => sofar.some((l) => l.includes("redis accepts writes again (registry)")), 5_000, "the end logged");
      });
      const count = (text: string) => lines.filter((l) => l.includes(text)).length;
      assert.equal(count("redis refuses writes (registry)"), 1, lines.join(""));
      assert.match(lines.find((l) => l.includes("redis refuses writes"))!, /OOM/);
      assert.equal(count("redis accepts writes again (registry)"), 1, lines.join(""));
      assert.equal(count("redis unreachable"), 0, lines.join(""));
      assert.equal(count("redis is back"), 0, lines.join(""));
      assert.equal((await a.getProject("proj_full"))?.name, "full", "a change refused while full was not applied");
      assert.equal(await a.getProject("proj_full2"), undefined);
      assert.ok(await b.createKey(key("key_full_new", "proj_full", 15), 10), "admin changes work again");
    } finally {
      await raw.config("SET", "maxmemory", "0");
      raw.disconnect();
    }
  });

  it("refuses writes to a read-only Redis as unavailable, and a bug (a record that does not parse, a wrong type) as itself", async () => {
    await a.createProject({ id: "proj_ro", name: "ro", plan: "pro", createdAt: 11 });
    const raw = new Redis(redis.url);
    try {
      await raw.set("{svc:reg}:project:proj_bad", "{not json");
      await assert.rejects(a.getProject("proj_bad"), SyntaxError);
      await raw.set("{svc:reg}:keys:proj_wrongtype", "a string");
      await assert.rejects(a.listKeys("proj_wrongtype"), (e: Error) => !(e instanceof RegistryUnavailableError) && /WRONGTYPE/.test(e.message));
      const lines = await captureLog(async (sofar) => {
        await raw.call("REPLICAOF", "127.0.0.1", "1"); // a replica of nothing: read-only
        await assert.rejects(a.createKey(key("key_ro", "proj_ro", 11), 10), RegistryUnavailableError);
        await assert.rejects(a.createProject({ id: "proj_ro2", name: "ro2", plan: "pro", createdAt: 12 }), RegistryUnavailableError);
        assert.equal((await a.getProject("proj_ro"))?.name, "ro", "reads still go through");
        await raw.call("REPLICAOF", "NO", "ONE");
        assert.ok(await a.createKey(key("key_ro", "proj_ro", 11), 10));
        await eventually(() => sofar.some((l) => l.includes("redis accepts writes again (registry)")), 5_000, "the end logged");
      });
      assert.equal(lines.filter((l) => l.includes("redis refuses writes (registry)")).length, 1, "logged once");
      assert.equal(lines.filter((l) => l.includes("redis accepts writes again (registry)")).length, 1, "its end logged once");
      assert.equal(lines.filter((l) => l.includes("redis unreachable (registry)")).length, 0, "reads still work: no outage");
    } finally {
      await raw.call("REPLICAOF", "NO", "ONE");
      raw.disconnect();
    }
  });
});

describe("Redis registry store while Redis is down", () => {
  let redis: TestRedis;
  let store: RegistryStore;

  before(async () => {
    redis = await startRedis();
    store = createRedisRegistryStore(redis.url);
  });
  after(async () => {
    await store.close();
    await redis.stop();
  });

  it("fails an unknown key and every admin call with RegistryUnavailableError, at once once the outage is known, and works again when Redis is back", async () => {
    await store.createProject({ id: "proj_d", name: "d", plan: "pro", createdAt: 1 });
    const lines = await captureLog(async () => {
      await redis.stop();
      // The first call may meet a connection not yet known to be lost: it fails all the same.
      await assert.rejects(store.findKeyByHash("hash-unknown"), RegistryUnavailableError);
      const started = Date.now();
      await assert.rejects(store.findKeyByHash("hash-unknown"), RegistryUnavailableError);
      await assert.rejects(store.getProject("proj_d"), RegistryUnavailableError);
      await assert.rejects(store.listProjects(), RegistryUnavailableError);
      await assert.rejects(store.createProject({ id: "proj_e", name: "e", plan: "pro", createdAt: 2 }), RegistryUnavailableError);
      await assert.rejects(store.updateProject("proj_d", (p) => ({ ...p, name: "changed" })), RegistryUnavailableError);
      await assert.rejects(store.createKey(key("key_d", "proj_d", 3), 10), RegistryUnavailableError);
      await assert.rejects(store.listKeys("proj_d"), RegistryUnavailableError);
      await assert.rejects(store.deleteKey("key_d"), RegistryUnavailableError);
      assert.ok(Date.now() - started < 600, `calls during a known outage took ${Date.now() - started} ms`);
    });
    assert.equal(lines.filter((l) => l.includes("redis unreachable (registry)")).length, 1, "logged once per outage");
    redis = await startRedis(redis.port);
    await eventually(async () => store.listProjects().then(() => true, () => false), 10_000, "Redis to be back");
    await store.createProject({ id: "proj_f", name: "f", plan: "pro", createdAt: 4 });
    assert.deepEqual((await store.listProjects()).map((p) => p.id), ["proj_f"], "nothing refused during the outage was applied");
  });
});

describe("Redis registry store reconnecting", () => {
  it("backs off between reconnect attempts exactly as the cache's and the limits' connection does, at most 1 s apart", async () => {
    let redis = await startRedis();
    // The stores keep their ioredis clients to themselves: catch them as they connect.
    const made: Redis[] = [];
    const connect = Redis.prototype.connect;
    Redis.prototype.connect = function (this: Redis, ...args: Parameters<Redis["connect"]>) {
      made.push(this);
      return connect.apply(this, args);
    };
    let store: RegistryStore | undefined;
    let conn: RedisConnection | undefined;
    try {
      store = createRedisRegistryStore(redis.url);
      conn = createRedisConnection(redis.url, { name: "cache" });
    } finally {
      Redis.prototype.connect = connect;
    }
    try {
      // The registry's connection, its subscription to deleted keys, and the shared one.
      assert.equal(made.length, 3);
      const [registry, revocations, shared] = made.map((r) => r.options);
      // A 30 s outage is about 35 attempts: ioredis's own back-off is 2 s apart by then.
      const delays = (o: typeof registry) => Array.from({ length: 200 }, (_, i) => o!.retryStrategy!(i + 1));
      assert.deepEqual(delays(registry), delays(shared));
      assert.deepEqual(delays(revocations), delays(shared));
      assert.ok(delays(registry).every((d) => typeof d === "number" && d <= 1_000), "at most 1 s between attempts, never giving up");
      assert.equal(registry!.connectTimeout, shared!.connectTimeout);
      // And it does reconnect: a key is verified again as soon as Redis is back.
      await store.createProject({ id: "proj_r", name: "r", plan: "pro", createdAt: 1 });
      assert.ok(await store.createKey(key("key_r", "proj_r", 1), 10));
      await captureLog(async () => {
        await redis.stop();
        await eventually(() => made[0]!.status !== "ready", 5_000, "the registry to see Redis gone");
        redis = await startRedis(redis.port);
        await eventually(async () => store!.findKeyByHash("hash-key_r").then((k) => k === undefined, () => false), 10_000, "the registry back on the (empty) restarted Redis");
      });
    } finally {
      await store?.close();
      await conn?.close();
      await redis.stop();
    }
  });
});
