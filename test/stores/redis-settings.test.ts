import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { ConfigError, loadConfig } from "../../src/config.js";
import { startServer } from "../../src/server.js";
import { checkRedisSettings, createRedisConnection, pingWhileIdle } from "../../src/stores/redis-connection.js";
import { createRedisPromptStore } from "../../src/stores/redis-prompt-store.js";
import { createRedisRegistryStore, REVOKED } from "../../src/stores/redis-registry-store.js";
import { eventually } from "../support/http.js";
import { captureLog } from "../support/log-capture.js";
import { freePort, startRedis, type TestRedis } from "../support/redis.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A database or credentials Redis refuses are settings to fix, not an outage to ride out: ioredis
 * reports a refused SELECT and then carries on in database 0, another deployment's keys.
 */
describe("the database and credentials SVC_REDIS_URL gives", function () {
  this.timeout(60_000);
  let plain: TestRedis;
  let guarded: TestRedis;

  before(async () => {
    plain = await startRedis();
    guarded = await startRedis(undefined, ["--requirepass", "s3cret-pw"]);
    const admin = new Redis(guarded.port, "127.0.0.1", { password: "s3cret-pw", maxRetriesPerRequest: 0 });
    try {
      await admin.call("ACL", "SETUSER", "nosel", "on", ">sel-pw", "~*", "+@all", "-select");
      // As an ACL user is made on Redis 7 (acl-pubsub-default resetchannels): no channel.
      await admin.call("ACL", "SETUSER", "nochan", "on", ">chan-pw", "~*", "+@all");
      await admin.call("ACL", "SETUSER", "noscript", "on", ">script-pw", "~*", "&*", "+@all", "-eval", "-evalsha");
      await admin.call("ACL", "SETUSER", "full", "on", ">full-pw", "~*", "&*", "+@all");
    } finally {
      admin.disconnect();
    }
  });
  after(async () => {
    await plain?.stop();
    await guarded?.stop();
  });

  it("are refused at start when Redis refuses them, naming the setting and never the password", async () => {
    const hostOf = (r: TestRedis) => `127.0.0.1:${r.port}`;
    for (const [url, says] of [
      [`redis://${hostOf(plain)}/99`, /^Redis refuses database 99 that SVC_REDIS_URL names \(ERR DB index is out of range\)/],
      [`redis://:wrong-pw@${hostOf(guarded)}/1`, /^Redis refuses the user name or password that SVC_REDIS_URL gives \(WRONGPASS/],
      [`redis://nobody:s3cret-pw@${hostOf(guarded)}`, /^Redis refuses the user name or password that SVC_REDIS_URL gives \(WRONGPASS/],
      [`redis://${hostOf(guarded)}/2`, /^Redis requires a password and SVC_REDIS_URL gives none \(NOAUTH/],
      [`redis://${hostOf(guarded)}`, /^Redis requires a password and SVC_REDIS_URL gives none \(NOAUTH/],
      // A user the ACL allows no SELECT: the user's rights, not the database, are to fix.
      [`redis://nosel:sel-pw@${hostOf(guarded)}/4`, /^Redis refuses the user that SVC_REDIS_URL gives a command or channel it needs \(NOPERM/],
      // Its scripts (rate limits, key deletes) and the deleted keys' channel: every request would
      // fail, or a deleted key stay known to the other replicas.
      [`redis://noscript:script-pw@${hostOf(guarded)}`, /^Redis refuses the user that SVC_REDIS_URL gives a command or channel it needs \(NOPERM.*'eval'/],
      [`redis://nochan:chan-pw@${hostOf(guarded)}`, new RegExp(`^Redis refuses the user that SVC_REDIS_URL gives a command or channel it needs \\(NOPERM.*channel.*\\).*\`&${REVOKED.replace(/[{}]/g, "\\$&")}\``)],
    ] as const) {
      const message = await checkRedisSettings(url, "SVC_REDIS_URL", undefined, { channel: REVOKED });
      assert.match(message ?? "accepted", says, url);
      assert.ok(!message!.includes("pw"), message);
    }
    for (const url of [`redis://${hostOf(plain)}/15`, `redis://${hostOf(plain)}`, `redis://:s3cret-pw@${hostOf(guarded)}/3`, `redis://full:full-pw@${hostOf(guarded)}/2`]) {
      assert.equal(await checkRedisSettings(url, "SVC_REDIS_URL", undefined, { channel: REVOKED }), undefined, url);
    }
    // Unreachable is an outage, ridden out as at any other time: no refusal, and no long wait.
    const started = Date.now();
    assert.equal(await checkRedisSettings(`redis://127.0.0.1:${await freePort()}/99`, "SVC_REDIS_URL"), undefined);
    assert.ok(Date.now() - started < 2_000, `${Date.now() - started} ms`);

    const dir = mkdtempSync(join(tmpdir(), "svc-redis-db-"));
    try {
      const config = loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: dir, SVC_LOG_LEVEL: "error", SVC_REDIS_URL: `redis://${hostOf(plain)}/99` });
      await assert.rejects(startServer(config), (e: Error) => e instanceof ConfigError && e.message.startsWith("Redis refuses database 99 that SVC_REDIS_URL names"));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("stop the start when Redis's TLS certificate is not trusted (rediss://), saying how to trust it; NODE_EXTRA_CA_CERTS's CA is", async function () {
    const dir = mkdtempSync(join(tmpdir(), "svc-redis-tls-"));
    let tls: TestRedis | undefined;
    try {
      const made = spawnSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], { stdio: "ignore" });
      if (made.status !== 0) this.skip(); // no openssl
      const port = await freePort();
      try {
        tls = await startRedis(await freePort(), ["--tls-port", String(port), "--tls-cert-file", join(dir, "cert.pem"), "--tls-key-file", join(dir, "key.pem"), "--tls-auth-clients", "no"]);
      } catch {
        this.skip(); // a redis-server built without TLS
      }
      const url = `rediss://127.0.0.1:${port}`;
      assert.match((await checkRedisSettings(url, "SVC_REDIS_URL")) ?? "accepted", /^Redis's TLS certificate is not trusted \(self.signed certificate.*?\): give Node the CA that signed it \(NODE_EXTRA_CA_CERTS=/);
      // The same check in a process that trusts the certificate (Node reads NODE_EXTRA_CA_CERTS as it starts).
      const script = `import { checkRedisSettings } from "./src/stores/redis-connection.ts"; console.log(JSON.stringify(await checkRedisSettings(${JSON.stringify(url)}, "SVC_REDIS_URL") ?? "accepted"));`;
      const trusted = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, "cert.pem") }, encoding: "utf8", timeout: 30_000 });
      assert.equal(trusted.stdout.trim(), '"accepted"', trusted.stderr);
    } finally {
      await tls?.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("stay open on a Redis that closes idle connections (its `timeout` setting): a connection pings while idle", async () => {
    const idle = await startRedis(undefined, ["--timeout", "1"]);
    const quiet = new Redis(idle.url, { maxRetriesPerRequest: 0 });
    const pinging = pingWhileIdle(new Redis(idle.url, { maxRetriesPerRequest: 0 }), 300);
    const closes = { quiet: 0, pinging: 0 };
    quiet.on("close", () => closes.quiet++);
    pinging.on("close", () => closes.pinging++);
    try {
      await Promise.all([quiet.ping(), pinging.ping()]);
      await sleep(3_500); // Redis checks idle clients about ten times a second
      assert.ok(closes.quiet > 0, "Redis closes a connection idle past its timeout");
      assert.equal(closes.pinging, 0, "one that pings is never idle that long");
    } finally {
      quiet.disconnect();
      pinging.disconnect();
      await idle.stop();
    }
  });

  it("keep every connection down, never on database 0, while a Redis that restarted refuses the database", async () => {
    const redis = await startRedis();
    const url = `${redis.url}/5`;
    let current = redis;
    const registry = createRedisRegistryStore(url);
    const prompts = createRedisPromptStore(url);
    const cache = createRedisConnection(url, { name: "db-test" });
    try {
      await eventually(() => cache.up, 5_000);
      await registry.createProject({ id: "proj_db5", name: "five", plan: "pro", createdAt: 1 });
      // Restarted with fewer databases (an edited redis.conf): SELECT 5 is refused on every reconnect.
      await current.stop();
      current = await startRedis(redis.port, ["--databases", "2"]);
      const lines = await captureLog(async () => {
        await sleep(500);
        // Each waits in its client's queue, for a connection that never becomes ready, and fails.
        const write = registry.createProject({ id: "proj_db0", name: "zero", plan: "pro", createdAt: 2 }).then(
          () => "written",
          () => "refused",
        );
        const put = prompts.put({ projectId: "proj_db5", name: "p", content: "c", description: "", createdAt: 2 }).then(
          () => "written",
          () => "refused",
        );
        await cache.redis.set("cache-key", "v").catch(() => {});
        await sleep(2_500);
        assert.equal(cache.up, false, "the cache's connection stays down");
        await assert.rejects(registry.getProject("proj_db5"));
        assert.deepEqual(await Promise.all([write, put]), ["refused", "refused"]);
      });
      assert.equal(lines.filter((l) => l.includes("redis is back")).length, 0, lines.join(""));
      // Said as a refusal, not only as "unreachable", once for all the connections.
      const refusals = lines.filter((l) => l.includes("redis refuses what SVC_REDIS_URL gives"));
      assert.equal(refusals.length, 1, lines.join(""));
      assert.match(refusals[0]!, /DB index is out of range/);
      const peek = new Redis(current.url, { maxRetriesPerRequest: 0 });
      try {
        assert.equal(await peek.dbsize(), 0, `database 0 holds ${JSON.stringify(await peek.keys("*"))}`);
      } finally {
        peek.disconnect();
      }

      // With the database there again, every connection is back, on it.
      await current.stop();
      current = await startRedis(redis.port);
      await eventually(() => cache.up, 10_000);
      await eventually(async () => (await registry.createProject({ id: "proj_back", name: "back", plan: "pro", createdAt: 3 }).then(() => true, () => false)), 10_000);
      const check = new Redis(current.url, { maxRetriesPerRequest: 0 });
      try {
        assert.equal(await check.dbsize(), 0, "nothing in database 0");
        await check.select(5);
        assert.ok((await check.dbsize()) > 0, "written to database 5");
      } finally {
        check.disconnect();
      }
    } finally {
      await cache.close();
      await registry.close();
      await prompts.close();
      await current.stop();
    }
  });
});
