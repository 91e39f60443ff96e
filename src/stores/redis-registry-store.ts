import { Redis } from "ioredis";
import type { KeyRecord, ProjectRecord, RegistryStore } from "./registry-store.js";

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
const kProject = (id: string) => `${T}:project:${id}`;
const kProjects = `${T}:projects`;
const kKey = (id: string) => `${T}:key:${id}`;
const kKeys = (projectId: string) => `${T}:keys:${projectId}`;
const kHash = (hash: string) => `${T}:hash:${hash}`;

// KEYS: keys-set, key, hash. ARGV: max keys, created-at, key id, key JSON.
const createKeyScript = `
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], ARGV[3])
return 1`;

// KEYS: key. ARGV: key-set prefix, hash prefix. Returns the deleted key's JSON.
const deleteKeyScript = `
local v = redis.call('GET', KEYS[1])
if not v then return false end
local k = cjson.decode(v)
redis.call('DEL', KEYS[1])
redis.call('ZREM', ARGV[1] .. k.projectId, k.id)
redis.call('DEL', ARGV[2] .. k.hash)
return v`;

type ScriptedRedis = Redis & {
  svcCreateKey(k1: string, k2: string, k3: string, max: number, at: number, id: string, json: string): Promise<number>;
  svcDeleteKey(k1: string, setPrefix: string, hashPrefix: string): Promise<string | null>;
};

export function createRedisRegistryStore(url: string): RegistryStore {
  const redis = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 2 }) as ScriptedRedis;
  // defineCommand sends EVALSHA and falls back to EVAL on NOSCRIPT (a restarted Redis).
  redis.defineCommand("svcCreateKey", { numberOfKeys: 3, lua: createKeyScript });
  redis.defineCommand("svcDeleteKey", { numberOfKeys: 1, lua: deleteKeyScript });

  const parse = <T>(v: string | null): T | undefined => (v === null ? undefined : (JSON.parse(v) as T));

  return {
    async createProject(p) {
      await redis.multi().set(kProject(p.id), JSON.stringify(p)).zadd(kProjects, p.createdAt, p.id).exec();
    },
    async getProject(id) {
      return parse<ProjectRecord>(await redis.get(kProject(id)));
    },
    async listProjects() {
      const ids = await redis.zrange(kProjects, "0", "-1");
      if (!ids.length) return [];
      const values = await redis.mget(ids.map(kProject));
      return values.map((v) => parse<ProjectRecord>(v)).filter((p): p is ProjectRecord => p !== undefined);
    },
    async createKey(k, maxKeys) {
      const ok = await redis.svcCreateKey(kKeys(k.projectId), kKey(k.id), kHash(k.hash), maxKeys, k.createdAt, k.id, JSON.stringify(k));
      return ok === 1;
    },
    async listKeys(projectId) {
      const ids = await redis.zrange(kKeys(projectId), "0", "-1");
      if (!ids.length) return [];
      const values = await redis.mget(ids.map(kKey));
      return values.map((v) => parse<KeyRecord>(v)).filter((k): k is KeyRecord => k !== undefined);
    },
    async deleteKey(id) {
      return parse<KeyRecord>(await redis.svcDeleteKey(kKey(id), `${T}:keys:`, `${T}:hash:`));
    },
    async findKeyByHash(hash) {
      const id = await redis.get(kHash(hash));
      return id === null ? undefined : parse<KeyRecord>(await redis.get(kKey(id)));
    },
    async close() {
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}
