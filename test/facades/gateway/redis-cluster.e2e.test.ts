import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import OpenAI from "openai";
import { ConfigError, loadConfig } from "../../../src/config.js";
import { startServer } from "../../../src/server.js";
import { inspectRedis } from "../../../src/stores/redis-connection.js";
import { eventually, postJson } from "../../support/http.js";
import { captureLog } from "../../support/log-capture.js";
import { startRedis } from "../../support/redis.js";
import { startRedisCluster, type TestRedisCluster } from "../../support/redis-cluster.js";
import { startSvcServe, type SvcServe } from "../../support/svc-cli.js";

let n = 0;
const chat = (content = `cluster ${Date.now()} ${++n}`) => ({ model: "chat-4o-mini", messages: [{ role: "user", content }] });
const noCache = { "X-Svc-Cache-Control": "no-cache" };
const TOKEN = "redis-cluster-admin-token";

/** The keys each node of the cluster holds. */
const keysByNode = async (cluster: TestRedisCluster): Promise<string[][]> =>
  Promise.all(
    cluster.nodes.map(async (node) => {
      const r = new Redis(node.url, { maxRetriesPerRequest: 1 });
      try {
        return await r.keys("*");
      } finally {
        r.disconnect();
      }
    }),
  );

/**
 * SVC_REDIS_URL naming a node of a Redis Cluster (three masters, the slots split between them): the
 * gateway uses a cluster client, so every key it writes goes to the node holding its slot. Each of
 * the two gateway processes is given a different node.
 */
describe("cluster mode on a Redis Cluster (three masters), two gateway processes", function () {
  this.timeout(120_000);
  let cluster: TestRedisCluster;
  let a: SvcServe;
  let b: SvcServe;

  before(async () => {
    cluster = await startRedisCluster(3);
    const env = (i: number) => ({ SVC_REDIS_URL: cluster.url(i), SVC_ADMIN_TOKEN: TOKEN, SVC_LOG_LEVEL: "info" });
    [a, b] = await Promise.all([startSvcServe(env(0)), startSvcServe(env(2))]);
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await cluster?.stop();
  });

  const project = async (...limits: string[]) => {
    const made = await a.svc("projects", "create", "--name", "cluster", "--plan", "free", ...limits, "--json");
    assert.equal(made.code, 0, made.stderr);
    const projectId = JSON.parse(made.stdout).id as string;
    const key = await a.svc("keys", "create", "--project", projectId, "--mode", "live", "--json");
    assert.equal(key.code, 0, key.stderr);
    return { projectId, secret: JSON.parse(key.stdout).key as string, keyId: JSON.parse(key.stdout).id as string };
  };

  it("serves keys, the cache and prompts made through one process from the other, with the data spread over the nodes", async () => {
    const { projectId, secret } = await project();
    const body = chat();
    const first = await postJson(`${b.gatewayUrl}/v1/chat/completions`, secret, body);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers["x-svc-cache"], "MISS");
    // Through the official SDK, on the other process: the answer stored by the first is a hit.
    const client = new OpenAI({ apiKey: secret, baseURL: `${a.gatewayUrl}/v1`, maxRetries: 0 });
    const { data, response } = await client.chat.completions.create(body as never).withResponse();
    assert.equal(response.headers.get("x-svc-cache"), "HIT");
    assert.equal(response.headers.get("x-svc-cost"), "0");
    assert.equal(data.choices[0]!.message.content, first.json().choices[0].message.content);

    const file = join(mkdtempSync(join(tmpdir(), "svc-cluster-prompt-")), "p.txt");
    writeFileSync(file, "Hello from a cluster");
    try {
      const put = await a.svc("prompts", "put", "greeting", "--project", projectId, "--file", file, "--json");
      assert.equal(put.code, 0, put.stderr);
      const shown = await b.svc("prompts", "show", "greeting", "--project", projectId, "--json");
      assert.equal(shown.code, 0, shown.stderr);
      assert.equal(JSON.parse(shown.stdout).content, "Hello from a cluster");
    } finally {
      rmSync(join(file, ".."), { recursive: true, force: true });
    }

    // Each kind of key on the node of its own slot: the registry's, the limits', the cache's and the
    // prompts' tags are spread over more than one node (a single server's client would have been
    // answered MOVED for all but one node's keys).
    const held = await keysByNode(cluster);
    for (const [i, keys] of held.entries()) {
      for (const k of keys) assert.equal(await cluster.nodeOf(k), i, `${k} is on the node of its slot`);
    }
    assert.ok(held.filter((keys) => keys.length > 0).length >= 2, `keys on one node only: ${JSON.stringify(held)}`);
    assert.ok(held.flat().some((k) => k.startsWith(`svc:cache:{${projectId}}`)), JSON.stringify(held));
    assert.ok(held.flat().some((k) => k.startsWith(`svc:prompts:{${projectId}}`)), JSON.stringify(held));
  });

  it("admits exactly 60 of 200 concurrent requests to a 60/minute project, through both processes", async () => {
    const { secret } = await project();
    const all = await Promise.all(Array.from({ length: 200 }, (_, i) => postJson(`${(i % 2 ? a : b).gatewayUrl}/v1/chat/completions`, secret, chat(), noCache)));
    const statuses = all.map((r) => r.status);
    assert.equal(statuses.filter((s) => s === 200).length, 60, JSON.stringify(statuses));
    assert.equal(statuses.filter((s) => s === 429).length, 140);
    const refused = all.find((r) => r.status === 429)!;
    assert.equal(refused.json().error.code, "rate_limit_exceeded");
    assert.equal(refused.headers["x-ratelimit-remaining-requests"], "0");
  });

  it("refuses on the other process a key deleted through one, on its very next request", async () => {
    const { secret, keyId } = await project();
    assert.equal((await postJson(`${b.gatewayUrl}/v1/chat/completions`, secret, chat())).status, 200); // b knows the key now
    const deleted = await a.svc("keys", "delete", keyId);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal((await postJson(`${b.gatewayUrl}/v1/chat/completions`, secret, chat())).status, 401);
    assert.equal((await postJson(`${a.gatewayUrl}/v1/chat/completions`, secret, chat())).status, 401);
  });

  it("keeps answering while a node is down (the cluster fails: limits open, known keys served), logs it once, and limits again once it is back", async () => {
    // A project whose limits are on the node neither process names (a named node lost takes the
    // deleted-key subscription with it, and the keys kept for an outage: another test's case).
    let made = await project("--rpm", "2");
    while ((await cluster.nodeOf(`{svc:lim:${made.projectId}}`)) !== 1) made = await project("--rpm", "2");
    const { projectId, secret } = made;
    const send = (gw: SvcServe) => postJson(`${gw.gatewayUrl}/v1/chat/completions`, secret, chat(), noCache);
    assert.equal((await send(a)).status, 200);
    assert.equal((await send(b)).status, 200);
    assert.equal((await send(a)).status, 429, "2 a minute");
    const before = [a.logged().length, b.logged().length];
    const victim = await cluster.nodeOf(`{svc:lim:${projectId}}`);
    await cluster.nodes[victim]!.stop();
    try {
      // The cluster notices (node timeout 2 s) and stops serving every slot: the requests go on.
      const end = Date.now() + 6_000;
      while (Date.now() < end) {
        for (const gw of [a, b]) {
          const res = await send(gw);
          assert.ok(res.status === 200 || res.status === 429, `${res.status} ${res.text}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      for (const gw of [a, b]) assert.equal((await send(gw)).status, 200, "failing open while the cluster is down");
    } finally {
      await cluster.restart(victim);
    }
    // Back, with the node's keys (the project's windows among them): refused again.
    await eventually(async () => (await send(a)).status === 429 && (await send(b)).status === 429, 20_000, "the limit counted again once the cluster is back");
    await eventually(() => [a, b].every((gw) => gw.logged().includes("redis is back (limits)")), 5_000, "the end of the outage logged");
    for (const [i, gw] of [a, b].entries()) {
      const lines = gw.logged().slice(before[i]).split("\n");
      for (const what of ["redis unreachable (limits)", "redis is back (limits)"]) {
        assert.equal(lines.filter((l) => l.includes(what)).length, 1, `${what}: once per outage\n${lines.join("\n")}`);
      }
    }
  });
});

describe("cluster mode on a Redis Cluster that is failing as the gateway starts", function () {
  this.timeout(120_000);

  it("refuses admin and prompt calls at once while it fails (they were held for good), and serves them once it is back, with no restart", async () => {
    const cluster = await startRedisCluster(3);
    let gw: SvcServe | undefined;
    try {
      await cluster.nodes[2]!.stop();
      const probe = new Redis(cluster.url(0), { maxRetriesPerRequest: 1 });
      try {
        await eventually(async () => String(await probe.call("CLUSTER", "INFO")).includes("cluster_state:fail"), 15_000, "the cluster to fail");
      } finally {
        probe.disconnect();
      }
      gw = await startSvcServe({ SVC_REDIS_URL: cluster.url(0), SVC_ADMIN_TOKEN: TOKEN, SVC_LOG_LEVEL: "error" });
      for (const args of [["projects", "create", "--name", "down", "--plan", "free"], ["prompts", "list", "--project", "proj_none"]]) {
        const started = Date.now();
        const res = await gw.svc(...args);
        assert.equal(res.code, 1, `${args.join(" ")}: ${res.stdout}${res.stderr}`);
        assert.match(res.stderr, /cannot be reached|unreachable|unavailable/i, args.join(" "));
        assert.ok(Date.now() - started < 8_000, `${args.join(" ")} took ${Date.now() - started} ms`);
      }
      await cluster.restart(2);
      const server = gw;
      await eventually(async () => (await server.svc("projects", "create", "--name", "back", "--plan", "free")).code === 0, 20_000, "a project made once the cluster is back");
    } finally {
      await gw?.stop();
      await cluster.stop();
    }
  });
});

describe("SVC_REDIS_CLUSTER", function () {
  this.timeout(60_000);

  const startWith = async (env: Record<string, string>) => {
    const dir = mkdtempSync(join(tmpdir(), "svc-redis-cluster-setting-"));
    try {
      const config = loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: dir, SVC_LOG_LEVEL: "error", ...env });
      const running = await startServer(config);
      await running.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };

  it("is refused at start when the server contradicts it, and when it is not a switch", async () => {
    const single = await startRedis();
    const cluster = await startRedisCluster(3);
    try {
      assert.deepEqual(await inspectRedis(single.url, "SVC_REDIS_URL"), { cluster: false });
      assert.deepEqual(await inspectRedis(cluster.url(1), "SVC_REDIS_URL"), { cluster: true });
      await assert.rejects(startWith({ SVC_REDIS_URL: single.url, SVC_REDIS_CLUSTER: "1" }), (e: Error) => e instanceof ConfigError && /^SVC_REDIS_CLUSTER=1, but the Redis that SVC_REDIS_URL names is not a Redis Cluster node/.test(e.message));
      await assert.rejects(startWith({ SVC_REDIS_URL: cluster.url(1), SVC_REDIS_CLUSTER: "0" }), (e: Error) => e instanceof ConfigError && /^SVC_REDIS_URL names a node of a Redis Cluster .* SVC_REDIS_CLUSTER=0/.test(e.message));
      assert.throws(() => loadConfig({ SVC_REDIS_URL: single.url, SVC_REDIS_CLUSTER: "cluster" }), (e: Error) => e instanceof ConfigError && /^SVC_REDIS_CLUSTER must be 1, true, yes \(on\) or 0, false, no \(off\), got "cluster"/.test(e.message));
      // A Redis Cluster has database 0 only.
      await assert.rejects(startWith({ SVC_REDIS_URL: `${cluster.url(0)}/2` }), (e: Error) => e instanceof ConfigError && /^Redis refuses database 2 that SVC_REDIS_URL names .*a Redis Cluster has only 0/.test(e.message));
    } finally {
      await single.stop();
      await cluster.stop();
    }
  });

  it("unset, with Redis unreachable at start: used as a single server, said once", async () => {
    const free = await startRedis();
    const url = free.url;
    await free.stop();
    const lines = await captureLog(() => startWith({ SVC_REDIS_URL: url, SVC_LOG_LEVEL: "warn" }));
    assert.equal(lines.filter((l) => l.includes("could not ask Redis at start whether SVC_REDIS_URL names a Redis Cluster node")).length, 1, lines.join(""));
    const quiet = await captureLog(() => startWith({ SVC_REDIS_URL: url, SVC_LOG_LEVEL: "warn", SVC_REDIS_CLUSTER: "0" }));
    assert.equal(quiet.filter((l) => l.includes("could not ask Redis")).length, 0, quiet.join(""));
  });
});
