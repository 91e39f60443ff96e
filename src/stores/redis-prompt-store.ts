import { clusterReady, createProbe, execReplies, isWriteRefusal, openRedis, quitRedis, RECONNECT_OPTIONS, type RedisTarget } from "./redis-connection.js";
import { type PromptRecord, type PromptStore, PromptsUnavailableError } from "./prompt-store.js";

/**
 * The cluster prompt registry in Redis. A project's keys share its `{project}` hash tag, so the
 * writes of a put can go in one script on Redis Cluster too.
 *
 *   svc:prompts:{<project>}:names           sorted set of the project's names (all scores 0: by name)
 *   svc:prompts:{<project>}:versions:<name> list of version JSONs, oldest first
 *   svc:prompts:{<project>}:latest          hash: name -> "<version> <JSON of its summary>" (no content)
 *
 * RPUSH answers the list's new length, which is the version number, atomically: two replicas
 * putting the same name at once get versions n and n+1, never the same. A put (one script) touches
 * its own three keys (O(1), O(log names), O(1)), never the other prompts; a listing page reads only
 * its names, and of each its summary, never a content (up to 1 MiB each: a page of a hundred read
 * whole took longer than a call may). A name whose summary is missing or behind its list (put by a
 * release before the summaries) is read from its list, and its summary written then.
 *
 * Reads send plain read commands, never a MULTI or a script: a Redis at its `maxmemory`
 * (noeviction) refuses every command queued in a transaction, reads too, and a script that may
 * write, but answers reads sent on their own. The latest
 * version and its number are read as LLEN, LINDEX -1, LLEN in one pipeline (O(1) each, whatever the
 * history): the lists only grow, so two equal lengths mean no put came in between and the last
 * element is that version. A put in between (rare) has the version at the first length read by its
 * index; a version once stored never changes nor goes.
 */
const kNames = (projectId: string) => `svc:prompts:{${projectId}}:names`;
const kVersions = (projectId: string, name: string) => `svc:prompts:{${projectId}}:versions:${name}`;
const kLatest = (projectId: string) => `svc:prompts:{${projectId}}:latest`;

/** A put: the version, the name, and the summary under its version number. KEYS: versions, names, latest; ARGV: version JSON, name, summary JSON. */
const putLua = `
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], 0, ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], n .. ' ' .. ARGV[3])
return n`;

/** A summary written from the list (a name put before the summaries), unless a put came meanwhile. KEYS: versions, latest; ARGV: name, version, summary JSON. */
const healLua = `
if redis.call('LLEN', KEYS[1]) == tonumber(ARGV[2]) then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[3]) end
return 0`;

type ScriptedRedis = ReturnType<typeof openRedis> & {
  svcPromptPut(versions: string, names: string, latest: string, version: string, name: string, summary: string): Promise<number>;
  svcPromptHeal(versions: string, latest: string, name: string, version: number, summary: string): Promise<number>;
};

/**
 * Longest wait for Redis's answer to a prompt call. One that takes longer fails (503
 * prompts_unavailable) and Redis counts as stalled (a paused or blocked Redis keeps its connection
 * open and answers nothing, so no error would ever come): later calls are refused at once until a
 * PING answers. A put given up on may still be stored once Redis answers, as the README says of a
 * put that failed so: list the versions.
 */
export const PROMPT_CALL_TIMEOUT_MS = 1_000;

interface Latest {
  n: number;
  v: string | null;
}

interface Stored {
  content: string;
  description: string;
  createdAt: number;
}

/** What a listing shows of a version: all but its content. */
type Summary = Omit<Stored, "content">;

/** A version's summary as the latest hash holds it (after its version number). */
const summaryText = (v: Summary): string => JSON.stringify({ description: v.description, createdAt: v.createdAt } satisfies Summary);

export function createRedisPromptStore(target: RedisTarget): PromptStore {
  // No retries: while Redis is unreachable a call fails at once (503 prompts_unavailable), as an
  // admin call to the registry does, rather than after ioredis's retries (10-15 s) as an internal
  // error. Only the first connection's calls wait for it (the server may be asked before it is
  // up); once it has been up, a call made while it is down is refused without being sent.
  const redis = openRedis(target, { ...RECONNECT_OPTIONS, maxRetriesPerRequest: 0 }) as ScriptedRedis;
  // defineCommand sends EVALSHA and falls back to EVAL on NOSCRIPT (a restarted Redis).
  redis.defineCommand("svcPromptPut", { numberOfKeys: 3, lua: putLua });
  redis.defineCommand("svcPromptHeal", { numberOfKeys: 2, lua: healLua });
  let beenUp = false;
  let stalled = false;
  let closed = false;
  const probe: () => void = createProbe(
    redis,
    () => (stalled = false),
    () => {
      if (!closed) probe();
    },
  );
  redis.on("ready", () => (beenUp = true));
  redis.on("error", () => {}); // the registry's connection logs outages; calls here fail and say why
  const record = (projectId: string, name: string, version: number, v: string): PromptRecord => ({ projectId, name, version, ...(JSON.parse(v) as Stored) });
  /**
   * `fn`, with a failure that is not Redis's own reply (connection lost, offline) as
   * PromptsUnavailableError, and so a write Redis refused (full, a read-only replica: nothing of it
   * was applied).
   */
  const call = async <T>(fn: () => Promise<T>): Promise<T> => {
    if (beenUp && redis.status !== "ready") throw new PromptsUnavailableError(`redis is unreachable (${redis.status})`);
    if (stalled) throw new PromptsUnavailableError(`redis is not answering (it did not answer a call within ${PROMPT_CALL_TIMEOUT_MS} ms)`);
    // A Redis Cluster's client keeps no queue: a call made before it is first ready waits for it here.
    if (redis.status !== "ready") await clusterReady(redis);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        if (redis.status === "ready" && !closed) {
          stalled = true;
          probe();
        }
        reject(new PromptsUnavailableError(`redis did not answer within ${PROMPT_CALL_TIMEOUT_MS} ms`));
      }, PROMPT_CALL_TIMEOUT_MS);
    });
    try {
      return await Promise.race([fn(), late]);
    } catch (e) {
      if (e instanceof PromptsUnavailableError) throw e;
      if (isWriteRefusal(e)) {
        // A transaction's refusal is EXECABORT; why is in the refused command's own error.
        const why = ((e as { previousErrors?: Error[] }).previousErrors ?? [e as Error]).map((p) => p.message).find((m) => !m.startsWith("EXECABORT"));
        throw new PromptsUnavailableError(`redis refused the write: ${why ?? (e as Error).message}`, { cause: e, writesRefused: true });
      }
      if ((e as Error)?.name === "ReplyError") throw e;
      throw new PromptsUnavailableError(`redis is unreachable: ${(e as Error)?.message ?? e}`, { cause: e });
    } finally {
      clearTimeout(timer);
    }
  };

  /** Each list's length and last element, as a pair (see the top): `v` null for an empty list. */
  const latest = async (keys: string[]): Promise<Latest[]> => {
    const res = execReplies(await keys.reduce((p, k) => p.llen(k).lindex(k, -1).llen(k), redis.pipeline()).exec());
    const out = keys.map((_, i): Latest => ({ n: Number(res[3 * i]), v: Number(res[3 * i]) === 0 ? null : (res[3 * i + 1] as string | null) }));
    const grown = keys.flatMap((_, i) => (out[i]!.n > 0 && Number(res[3 * i + 2]) !== out[i]!.n ? [i] : []));
    if (grown.length) {
      const again = execReplies(await grown.reduce((p, i) => p.lindex(keys[i]!, out[i]!.n - 1), redis.pipeline()).exec());
      grown.forEach((i, j) => (out[i]!.v = again[j] as string | null));
    }
    return out;
  };

  const store: PromptStore = {
    async put(p) {
      const stored: Stored = { content: p.content, description: p.description, createdAt: p.createdAt };
      const length = await redis.svcPromptPut(kVersions(p.projectId, p.name), kNames(p.projectId), kLatest(p.projectId), JSON.stringify(stored), p.name, summaryText(p));
      return { ...p, version: Number(length) };
    },
    async get(projectId, name, version) {
      const k = kVersions(projectId, name);
      if (version !== undefined) {
        const v = await redis.lindex(k, version - 1);
        return v === null ? undefined : record(projectId, name, version, v);
      }
      const [{ n, v }] = (await latest([k])) as [Latest];
      return v === null ? undefined : record(projectId, name, n, v);
    },
    async list(projectId, { after, limit }) {
      // Only the page's names, by name (all scores are 0, so the set sorts by name, bytewise, which
      // for prompt names, ASCII, is JavaScript's order too): a page reads `limit` + 1 names and the
      // latest version of `limit`, not the whole project.
      const names = await redis.zrangebylex(kNames(projectId), after ? `(${after}` : "-", "+", "LIMIT", 0, limit + 1);
      const page = names.slice(0, limit);
      if (page.length === 0) return { prompts: [], more: false };
      // Each name's summary between two reads of its list's length: equal lengths mean no put came
      // in between, so a summary of that version is the latest's.
      const res = execReplies(await page.reduce((p, n) => p.llen(kVersions(projectId, n)).hget(kLatest(projectId), n).llen(kVersions(projectId, n)), redis.pipeline()).exec());
      const prompts: Array<Omit<PromptRecord, "content"> | undefined> = page.map((name, i) => {
        const n = Number(res[3 * i]);
        const text = res[3 * i + 1] as string | null;
        if (n === 0 || n !== Number(res[3 * i + 2]) || text === null) return undefined;
        const space = text.indexOf(" ");
        if (Number(text.slice(0, space)) !== n) return undefined;
        return { projectId, name, version: n, ...(JSON.parse(text.slice(space + 1)) as Summary) };
      });
      // The others (a put raced the reads, or a name put before the summaries): read from their lists.
      const behind = page.flatMap((name, i) => (prompts[i] === undefined ? [i] : []));
      if (behind.length) {
        const last = await latest(behind.map((i) => kVersions(projectId, page[i]!)));
        behind.forEach((i, j) => {
          const { n: version, v } = last[j]!;
          if (v === null) return; // a name is added with its first version, in one script: not seen
          const { content: _, ...summary } = record(projectId, page[i]!, version, v);
          prompts[i] = summary;
          // Written for the next listing; a Redis refusing writes (full) lists as before.
          redis.svcPromptHeal(kVersions(projectId, page[i]!), kLatest(projectId), page[i]!, version, summaryText(summary)).catch(() => {});
        });
      }
      return { prompts: prompts.filter((p) => p !== undefined), more: names.length > limit };
    },
    close: () => quitRedis(redis),
  };
  return {
    put: (p) => call(() => store.put(p)),
    get: (projectId, name, version) => call(() => store.get(projectId, name, version)),
    list: (projectId, page) => call(() => store.list(projectId, page)),
    close: () => {
      closed = true;
      return store.close();
    },
  };
}
