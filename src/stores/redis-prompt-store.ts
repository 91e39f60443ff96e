import { openRedis, quitRedis, RECONNECT_OPTIONS } from "./redis-connection.js";
import { type PromptRecord, type PromptStore, PromptsUnavailableError } from "./prompt-store.js";

/**
 * The cluster prompt registry in Redis. A project's keys share its `{project}` hash tag, so the
 * two writes of a put can go in one MULTI on Redis Cluster too.
 *
 *   svc:prompts:{<project>}:names           sorted set of the project's names (all scores 0: by name)
 *   svc:prompts:{<project>}:versions:<name> list of version JSONs, oldest first
 *
 * RPUSH answers the list's new length, which is the version number, atomically: two replicas
 * putting the same name at once get versions n and n+1, never the same. A put touches its own two
 * keys (O(1) and O(log names)), never the other prompts; a listing page reads only its names.
 */
const kNames = (projectId: string) => `svc:prompts:{${projectId}}:names`;
const kVersions = (projectId: string, name: string) => `svc:prompts:{${projectId}}:versions:${name}`;

interface Stored {
  content: string;
  description: string;
  createdAt: number;
}

export function createRedisPromptStore(url: string): PromptStore {
  // No retries: while Redis is unreachable a call fails at once (503 prompts_unavailable), as an
  // admin call to the registry does, rather than after ioredis's retries (10-15 s) as an internal
  // error. Only the first connection's calls wait for it (the server may be asked before it is
  // up); once it has been up, a call made while it is down is refused without being sent.
  const redis = openRedis(url, { ...RECONNECT_OPTIONS, maxRetriesPerRequest: 0 });
  let beenUp = false;
  redis.on("ready", () => (beenUp = true));
  redis.on("error", () => {}); // the registry's connection logs outages; calls here fail and say why
  const record = (projectId: string, name: string, version: number, v: string): PromptRecord => ({ projectId, name, version, ...(JSON.parse(v) as Stored) });
  /** `fn`, with a failure that is not Redis's own reply (connection lost, offline) as PromptsUnavailableError. */
  const call = async <T>(fn: () => Promise<T>): Promise<T> => {
    if (beenUp && redis.status !== "ready") throw new PromptsUnavailableError(`redis is unreachable (${redis.status})`);
    try {
      return await fn();
    } catch (e) {
      if ((e as Error)?.name === "ReplyError") throw e;
      throw new PromptsUnavailableError(`redis is unreachable: ${(e as Error)?.message ?? e}`, { cause: e });
    }
  };

  const store: PromptStore = {
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
    async list(projectId, { after, limit }) {
      // Only the page's names, by name (all scores are 0, so the set sorts by name, bytewise, which
      // for prompt names, ASCII, is JavaScript's order too): a page reads `limit` + 1 names and the
      // latest version of `limit`, not the whole project.
      const names = await redis.zrangebylex(kNames(projectId), after ? `(${after}` : "-", "+", "LIMIT", 0, limit + 1);
      const page = names.slice(0, limit);
      if (page.length === 0) return { prompts: [], more: false };
      const tx = redis.multi();
      for (const n of page) tx.lindex(kVersions(projectId, n), -1).llen(kVersions(projectId, n));
      const res = (await tx.exec())!;
      const prompts = page.map((n, i) => {
        const { content: _, ...summary } = record(projectId, n, Number(res[2 * i + 1]![1]), res[2 * i]![1] as string);
        return summary;
      });
      return { prompts, more: names.length > limit };
    },
    close: () => quitRedis(redis),
  };
  return {
    put: (p) => call(() => store.put(p)),
    get: (projectId, name, version) => call(() => store.get(projectId, name, version)),
    list: (projectId, page) => call(() => store.list(projectId, page)),
    close: () => store.close(),
  };
}
