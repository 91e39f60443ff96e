import assert from "node:assert/strict";
import { createDirectClient } from "../../src/core/direct-client.js";
import { createLimitsService } from "../../src/core/limits/limits-service.js";
import { LimitsService } from "../../src/gen/svc/limits/v1/limits_service_pb.js";
import { createMemoryLimitsStore } from "../../src/stores/memory-limits-store.js";
import { createRedisConnection, type RedisConnection } from "../../src/stores/redis-connection.js";
import { createRedisLimitsStore } from "../../src/stores/redis-limits-store.js";
import { connectionUp, DEFAULT_START } from "../support/limits-backends.js";
import { startRedis, type TestRedis } from "../support/redis.js";
import { prng } from "../support/prng.js";

describe("memory and Redis limits stores", () => {
  let redis: TestRedis;
  let conn: RedisConnection;
  before(async () => {
    redis = await startRedis();
    conn = createRedisConnection(redis.url, { name: "limits-agree" });
    await connectionUp(conn);
  });
  after(async () => {
    await conn.close();
    await redis.stop();
  });

  it("decide a random mix of admissions, settlements, rescinds and time alike", async () => {
    const clock = { ms: DEFAULT_START };
    const make = (store: Parameters<typeof createLimitsService>[0]["store"]) =>
      createDirectClient(LimitsService, createLimitsService({ store, now: () => clock.ms, reservationTtlMs: 90_000 }));
    const mem = make(createMemoryLimitsStore());
    const red = make(createRedisLimitsStore(conn, { serverClock: false }));
    const rand = prng(11);
    const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)]!;
    const limits = { requestsPerMinute: 8, requestsPerDay: 40, userRequestsPerMinute: 3, monthlySpendCapUsd: "3.5" };
    const open: Array<[string, string, string]> = [];
    const seen = new Set<string>();
    for (let i = 0; i < 600; i++) {
      // Now and then the clock steps back (NTP, a VM restored), by minutes or by seconds.
      clock.ms += rand() < 0.02 ? -pick([3_000, 90_000, 600_000, 7_200_000]) : pick([0, 0, 0, 0, 10, 400, 1_000, 5_000, 30_000, 700_000]);
      if (open.length && rand() < 0.3) {
        const [a, b, userId] = open.splice(Math.floor(rand() * open.length), 1)[0]!;
        if (rand() < 0.4) {
          // Taken back instead of settled; one that was not rescindable stays counted.
          const [m, r] = [await mem.rescind({ projectId: "p", userId, reservationId: a }), await red.rescind({ projectId: "p", userId, reservationId: b })];
          assert.deepEqual(r, m, `step ${i}`);
          seen.add(`rescinded ${m.rescinded}`);
          continue;
        }
        const cost = pick(["0", "0.01", "0.2", "0.333333333333"]);
        await mem.settle({ projectId: "p", reservationId: a, costUsd: cost });
        await red.settle({ projectId: "p", reservationId: b, costUsd: cost });
        continue;
      }
      const req = { projectId: "p", userId: pick(["", "", "u1", "u2"]), maxCostUsd: pick(["", "0.05", "0.3"]), rescindable: rand() < 0.5, limits };
      const [m, r] = [await mem.admit(req), await red.admit(req)];
      const view = (x: typeof m) => ({ ...x, reservationId: x.reservationId !== "" });
      assert.deepEqual(view(r), view(m), `step ${i}`);
      seen.add(`${m.decision}/${m.window}`);
      if (m.reservationId) open.push([m.reservationId, r.reservationId, req.userId]);
    }
    // Every kind of decision came up: allowed, minute, day, user and spend refusals.
    assert.ok(["1/1", "2/1", "2/2", "3/3", "4/4", "rescinded true", "rescinded false"].every((k) => seen.has(k)), [...seen].join(" "));
    const [mu, ru] = [await mem.getUsage({ projectId: "p" }), await red.getUsage({ projectId: "p" })];
    assert.deepEqual(ru, mu);
  });

  it("never age counts faster than the clock went forward, whatever it does: back and forth by seconds, back by minutes (moving windows back with the clock admitted several times the limit)", async () => {
    for (const [name, store] of [["memory", createMemoryLimitsStore()], ["redis", createRedisLimitsStore(conn, { serverClock: false })]] as const) {
      let real = DEFAULT_START;
      let offset = 0;
      const client = createDirectClient(LimitsService, createLimitsService({ store, now: () => real + offset }));
      const req = { projectId: `flap-${name}`, userId: "", maxCostUsd: "", rescindable: false, limits: { requestsPerMinute: 10 } };
      const admitted: number[] = [];
      for (let i = 0; i < 3_000; i++) {
        real += 100;
        // The clock flaps by 5 s every second, and once steps back ten minutes.
        offset = i === 1_500 ? -600_000 : i > 1_500 ? -600_000 + (Math.floor(i / 10) % 2) * 5_000 : (Math.floor(i / 10) % 2) * 5_000;
        if ((await client.admit(req)).decision === 1) admitted.push(real);
      }
      // A clock stepped forward ages every count by the step (a few seconds here: at most one extra
      // window's worth); one stepped back holds the window. Nothing ages counts more than that.
      assert.ok(admitted.length <= 10 * (300 / 60 + 1), `${name}: ${admitted.length} admitted in 300 s at 10 a minute`);
      assert.ok(admitted.length >= 30, `${name}: ${admitted.length} admitted in 300 s`);
    }
  });
});
