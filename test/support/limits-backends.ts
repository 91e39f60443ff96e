import type { Client } from "@connectrpc/connect";
import { createDirectClient } from "../../src/core/direct-client.js";
import { createLimitsService, type LimitsDeps } from "../../src/core/limits/limits-service.js";
import { randomBase62 } from "../../src/core/ids.js";
import { LimitsService } from "../../src/gen/svc/limits/v1/limits_service_pb.js";
import { createMemoryLimitsStore } from "../../src/stores/memory-limits-store.js";
import { createRedisConnection, type RedisConnection } from "../../src/stores/redis-connection.js";
import { createRedisLimitsStore } from "../../src/stores/redis-limits-store.js";
import { startRedis, type TestRedis } from "./redis.js";

/** A LimitsService on a fake clock that a test moves by hand. */
export interface LimitsUnderTest {
  limits: Client<typeof LimitsService>;
  clock: { ms: number };
  /** A project id no other test uses. */
  projectId: string;
}

export interface LimitsBackend {
  name: "memory" | "redis";
  /** Builds a fresh service; `startMs` sets the clock (default: 2026-11-20 12:00:00.500 UTC). */
  service(deps?: Partial<Omit<LimitsDeps, "store" | "now">>, startMs?: number): Promise<LimitsUnderTest>;
}

export const DEFAULT_START = Date.UTC(2026, 10, 20, 12, 0, 0, 500);

/** Resolves once the connection is up (commands fail fast until then). */
export async function connectionUp(conn: RedisConnection, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!conn.up) {
    if (Date.now() > end) throw new Error("redis connection did not come up");
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Runs the same tests against both stores: process memory and a private redis-server (its windows
 * on the test's clock rather than Redis's, so the tests can move time).
 */
export function forEachLimitsBackend(body: (b: LimitsBackend) => void): void {
  for (const name of ["memory", "redis"] as const) {
    describe(`(${name} store)`, () => {
      let redis: TestRedis | undefined;
      const conns: RedisConnection[] = [];
      before(async () => {
        if (name === "redis") redis = await startRedis();
      });
      afterEach(async () => {
        for (const c of conns.splice(0)) await c.close();
      });
      after(async () => {
        await redis?.stop();
      });
      body({
        name,
        async service(deps = {}, startMs = DEFAULT_START) {
          const clock = { ms: startMs };
          let store;
          if (name === "memory") {
            store = createMemoryLimitsStore();
          } else {
            const conn = createRedisConnection(redis!.url, { name: "limits-test" });
            conns.push(conn);
            await connectionUp(conn);
            store = createRedisLimitsStore(conn, { serverClock: false });
          }
          const limits = createDirectClient(LimitsService, createLimitsService({ ...deps, store, now: () => clock.ms }));
          return { limits, clock, projectId: `proj_${randomBase62(12)}` };
        },
      });
    });
  }
}
