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

  it("take back an admission counted before the clock stepped back from where its bucket was moved", async () => {
    for (const [name, store] of [["memory", createMemoryLimitsStore()], ["redis", createRedisLimitsStore(conn, { serverClock: false })]] as const) {
      const clock = { ms: DEFAULT_START + 30_300 };
      const client = createDirectClient(LimitsService, createLimitsService({ store, now: () => clock.ms }));
      const req = { projectId: `rescind-step-${name}`, userId: "u", maxCostUsd: "", rescindable: true, limits: { requestsPerMinute: 2, requestsPerDay: 100, userRequestsPerMinute: 100 } };
      const first = await client.admit(req);
      assert.equal(first.decision, 1, name);
      clock.ms -= 10_300; // ten seconds back
      assert.equal((await client.admit(req)).decision, 1, name);
      clock.ms += 100;
      assert.equal((await client.rescind({ projectId: req.projectId, userId: "u", reservationId: first.reservationId })).rescinded, true, name);
      const usage = await client.getUsage({ projectId: req.projectId });
      assert.equal(usage.requestsLastMinute, 1, `${name}: the admission taken back is no longer counted`);
      assert.equal((await client.admit(req)).decision, 1, `${name}: room for one more`);
    }
  });

  it("keep a window sliding when the clock steps back: a full minute window frees a minute after its admissions, not after the step", async () => {
    for (const [name, store] of [["memory", createMemoryLimitsStore()], ["redis", createRedisLimitsStore(conn, { serverClock: false })]] as const) {
      const clock = { ms: DEFAULT_START };
      const client = createDirectClient(LimitsService, createLimitsService({ store, now: () => clock.ms }));
      const req = { projectId: `step-${name}`, userId: "u", maxCostUsd: "", rescindable: false, limits: { requestsPerMinute: 2, requestsPerDay: 5, userRequestsPerMinute: 2 } };
      assert.equal((await client.admit(req)).decision, 1, name);
      assert.equal((await client.admit(req)).decision, 1, name);
      assert.ok((await client.admit(req)).retryAfterSeconds <= 61, name);
      clock.ms -= 600_000; // ten minutes back
      const refused = await client.admit(req);
      assert.notEqual(refused.decision, 1, name);
      assert.ok(refused.retryAfterSeconds <= 61, `${name}: Retry-After ${refused.retryAfterSeconds} s`);
      clock.ms += 62_000;
      assert.equal((await client.admit(req)).decision, 1, `${name}: free a minute after the admissions`);
      // The day window kept its counts: 3 of 5 now, so 2 more, then refused by the day.
      assert.equal((await client.admit(req)).decision, 1, name);
      clock.ms += 62_000;
      assert.equal((await client.admit(req)).decision, 1, name);
      const day = await client.admit(req);
      assert.equal(day.decision, 2, `${name}: refused by the day window`);
      assert.ok(day.retryAfterSeconds <= 86_461, `${name}: ${day.retryAfterSeconds}`);
    }
  });
});
