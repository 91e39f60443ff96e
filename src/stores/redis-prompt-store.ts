import { Redis } from "ioredis";
import type { PromptRecord, PromptStore } from "./prompt-store.js";

/**
 * The cluster prompt registry in Redis. A project's keys share its `{project}` hash tag, so the
 * two writes of a put can go in one MULTI on Redis Cluster too.
 *
 *   svc:prompts:{<project>}:names           sorted set of the project's names (all scores 0: by name)
 *   svc:prompts:{<project>}:versions:<name> list of version JSONs, oldest first
 *
 * RPUSH answers the list's new length, which is the version number, atomically: two replicas
 * putting the same name at once get versions n and n+1, never the same.
 */
const kNames = (projectId: string) => `svc:prompts:{${projectId}}:names`;
const kVersions = (projectId: string, name: string) => `svc:prompts:{${projectId}}:versions:${name}`;

interface Stored {
  content: string;
  description: string;
  createdAt: number;
}

export function createRedisPromptStore(url: string): PromptStore {
  const redis = new Redis(url, { maxRetriesPerRequest: 2 });
  redis.on("error", () => {}); // the registry's connection logs outages; calls here fail and say why
  const record = (projectId: string, name: string, version: number, v: string): PromptRecord => ({ projectId, name, version, ...(JSON.parse(v) as Stored) });

  return {
    async put(p) {
      const stored: Stored = { content: p.content, description: p.description, createdAt: p.createdAt };
      const res = await redis.multi().rpush(kVersions(p.projectId, p.name), JSON.stringify(stored)).zadd(kNames(p.projectId), 0, p.name).exec();
      const [err, length] = res![0]!;
      if (err) throw err;
      return { ...p, version: Number(length) };
    },
    async get(projectId, name, version) {
      const k = kVersions(projectId, name);
      if (version !== undefined) {
        const v = await redis.lindex(k, version - 1);
        return v === null ? undefined : record(projectId, name, version, v);
      }
      // The latest and its number together: a put between two separate reads would mismatch them.
      const [[, n], [, v]] = (await redis.multi().llen(k).lindex(k, -1).exec()) as Array<[Error | null, unknown]> as [[null, number], [null, string | null]];
      return v === null ? undefined : record(projectId, name, Number(n), v);
    },
    async list(projectId) {
      const names = await redis.zrange(kNames(projectId), "0", "-1");
      if (names.length === 0) return [];
      const tx = redis.multi();
      for (const n of names) tx.lindex(kVersions(projectId, n), -1).llen(kVersions(projectId, n));
      const res = (await tx.exec())!;
      return names.map((n, i) => record(projectId, n, Number(res[2 * i + 1]![1]), res[2 * i]![1] as string));
    },
    async close() {
      if (redis.status !== "ready") return redis.disconnect();
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}
