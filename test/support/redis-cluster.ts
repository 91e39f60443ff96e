import { Redis } from "ioredis";
import { freePort, startRedis, type TestRedis } from "./redis.js";

export interface TestRedisCluster {
  /** Its nodes, each a master holding an equal share of the 16384 slots, in slot order. */
  nodes: TestRedis[];
  /** The URL of node `i` (what SVC_REDIS_URL names: any one node). */
  url(i?: number): string;
  /** The node holding `key`'s slot. */
  nodeOf(key: string): Promise<number>;
  /** Restarts node `i` after a stop, on its port, with the cluster state it saved (nodes.conf). */
  restart(i: number): Promise<void>;
  stop(): Promise<void>;
}

const SLOTS = 16384;

/**
 * Starts a private Redis Cluster of `n` masters (no replicas) on free ports: each a `redis-server`
 * with `cluster-enabled yes`, the slots split between them and the nodes introduced to each other
 * (what `redis-cli --cluster create` does), and resolves once every node says `cluster_state:ok`.
 * A node missing stops the cluster (full coverage), so tests of an outage stop one and restart it;
 * a restarted node has the keys it held.
 */
export async function startRedisCluster(n = 3): Promise<TestRedisCluster> {
  const nodes: TestRedis[] = [];
  const dirs: string[] = [];
  // Each keeps its keys across a restart (AOF: written before each reply, so a SIGKILL loses none).
  // Each node's cluster bus gets a free port of its own: the default, its port + 10000, may be one
  // another server or an outgoing connection already holds.
  const busPorts: number[] = [];
  const settings = (i: number) => ["--cluster-enabled", "yes", "--cluster-config-file", `nodes-${i}.conf`, "--cluster-port", String(busPorts[i]), "--cluster-node-timeout", "2000", "--appendonly", "yes"];
  for (let i = 0; i < n; i++) {
    busPorts.push(await freePort());
    const node = await startRedis(undefined, settings(i), { keepDir: true });
    nodes.push(node);
    dirs.push(node.dir);
  }
  const admin = nodes.map((node) => new Redis(node.url, { lazyConnect: false, maxRetriesPerRequest: 1 }));
  try {
    for (let i = 0; i < n; i++) {
      const from = Math.floor((SLOTS * i) / n);
      const to = Math.floor((SLOTS * (i + 1)) / n) - 1;
      await admin[i]!.call("CLUSTER", "ADDSLOTSRANGE", String(from), String(to));
    }
    for (let i = 1; i < n; i++) await admin[0]!.call("CLUSTER", "MEET", "127.0.0.1", String(nodes[i]!.port), String(busPorts[i]));
    await clusterOk(admin);
  } finally {
    for (const a of admin) a.disconnect();
  }
  const cluster: TestRedisCluster = {
    nodes,
    url: (i = 0) => nodes[i]!.url,
    async nodeOf(key) {
      const probe = new Redis(nodes[0]!.url);
      try {
        const slot = Number(await probe.call("CLUSTER", "KEYSLOT", key));
        return nodes.findIndex((_, i) => slot >= Math.floor((SLOTS * i) / n) && slot <= Math.floor((SLOTS * (i + 1)) / n) - 1);
      } finally {
        probe.disconnect();
      }
    },
    async restart(i) {
      nodes[i] = await startRedis(nodes[i]!.port, settings(i), { keepDir: true, dir: dirs[i] });
      const admin = nodes.map((node) => new Redis(node.url, { maxRetriesPerRequest: 1 }));
      try {
        await clusterOk(admin);
      } finally {
        for (const a of admin) a.disconnect();
      }
    },
    async stop() {
      await Promise.all(nodes.map((node) => node.stop()));
      await Promise.all(nodes.map((node) => node.removeDir()));
    },
  };
  return cluster;
}

/** Waits until every node says the cluster is ok (every slot served, every node known to every other). */
async function clusterOk(admin: Redis[]): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const infos = await Promise.all(admin.map((a) => a.call("CLUSTER", "INFO").then(String, () => "")));
    const known = await Promise.all(admin.map((a) => a.call("CLUSTER", "NODES").then((t) => String(t).trim().split("\n").filter((l) => / connected/.test(l)).length, () => 0)));
    if (infos.every((i) => i.includes("cluster_state:ok")) && known.every((k) => k === admin.length)) return;
    if (Date.now() > deadline) throw new Error(`the Redis Cluster did not come up: ${infos.join(" | ")}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
