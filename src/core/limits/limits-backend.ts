import type { ServiceImpl } from "@connectrpc/connect";
import type { LimitsConfig } from "../../config.js";
import type { LimitsService } from "../../gen/svc/limits/v1/limits_service_pb.js";
import { createMemoryLimitsStore, openMemoryLimitsStore } from "../../stores/memory-limits-store.js";
import { createRedisConnection, type RedisTarget } from "../../stores/redis-connection.js";
import { createRedisLimitsStore } from "../../stores/redis-limits-store.js";
import type { RegistryStore } from "../../stores/registry-store.js";
import { effectiveLimits } from "../auth/project-limits.js";
import { createLimitsService } from "./limits-service.js";

/** The LimitsService of this process and how to release what it holds. */
export interface LimitsBackend {
  impl: ServiceImpl<typeof LimitsService>;
  close(): Promise<void>;
}

/** How long start-up waits for Redis before serving anyway (limits then fail open or closed). */
const READY_WAIT_MS = 2_000;

/**
 * Chooses the limits store by deployment mode: Redis, shared by every replica, when `redisUrl` is
 * set (cluster); process memory otherwise (embedded), with the month's spend and the day windows
 * kept in `<dataDir>/limits.json` across restarts when a `dataDir` is given (written within a second
 * of a change and by `close`). An AdmitRequest without limits has them read from the registry.
 */
export async function createLimitsBackend(redisUrl: RedisTarget | undefined, config: LimitsConfig, registry: RegistryStore, dataDir?: string): Promise<LimitsBackend> {
  const deps = {
    failClosed: config.failClosed,
    reservationTtlMs: config.reservationTtlMs,
    resolveLimits: async (projectId: string) => {
      const p = await registry.getProject(projectId);
      return p && effectiveLimits(p.plan, p.limits);
    },
  };
  if (!redisUrl) {
    const store = dataDir === undefined ? createMemoryLimitsStore() : await openMemoryLimitsStore(dataDir);
    return { impl: createLimitsService({ ...deps, store }), close: () => store.close() };
  }
  const conn = createRedisConnection(redisUrl, {
    name: "limits",
    whileDown: config.failClosed ? "refusing live requests of limited projects (SVC_LIMITS_FAIL_CLOSED)" : "admitting requests unlimited (failing open)",
  });
  // Commands fail fast until the connection is ready, so the first requests would find it down.
  await new Promise<void>((resolve) => {
    if (conn.redis.status === "ready") return resolve();
    const timer = setTimeout(resolve, READY_WAIT_MS);
    conn.redis.once("ready", () => {
      clearTimeout(timer);
      resolve();
    });
  });
  const store = createRedisLimitsStore(conn);
  return {
    impl: createLimitsService({ ...deps, store }),
    // The store first: admissions still to be taken back (see createRedisLimitsStore) go if they can.
    close: async () => {
      await store.close();
      await conn.close();
    },
  };
}
