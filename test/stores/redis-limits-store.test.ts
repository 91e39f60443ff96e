import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { createDirectClient } from "../../src/core/direct-client.js";
import { randomBase62 } from "../../src/core/ids.js";
import { createLimitsService } from "../../src/core/limits/limits-service.js";
import { Decision, LimitsService } from "../../src/gen/svc/limits/v1/limits_service_pb.js";
import { createRedisConnection, type RedisConnection } from "../../src/stores/redis-connection.js";
import { createRedisLimitsStore } from "../../src/stores/redis-limits-store.js";
import { eventually } from "../support/http.js";
import { connectionUp } from "../support/limits-backends.js";
import { startRedis, type TestRedis } from "../support/redis.js";
import { captureLog } from "../support/log-capture.js";

const burst = fileURLToPath(new URL("../support/admit-burst.ts", import.meta.url));

/** Starts the burst script in a child process and resolves once it is connected. */
function startBurst(url: string, projectId: string, n: number, rpm: number) {
  const child = spawn(process.execPath, ["--import", "tsx", burst, url, projectId, String(n), String(rpm)], { stdio: ["pipe", "pipe", "inherit"] });
  let out = "";
  const line = (want: RegExp) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const m = want.exec(out);
        if (m) resolve(m[0]);
      };
      child.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        check();
      });
      child.once("exit", (code) => reject(new Error(`burst exited ${code}: ${out}`)));
      check();
    });
  return { ready: line(/ready\n/), result: line(/\{.*\}\n/).then((l) => JSON.parse(l) as { allowed: number; degraded: number }), go: () => child.stdin!.end("go\n") };
}

describe("Redis limits store", function () {
  this.timeout(30_000);
  let redis: TestRedis;
  let conn: RedisConnection;
  let name: string;

  beforeEach(async () => {
    redis = await startRedis();
    name = `limits-${randomBase62(6)}`;
    conn = createRedisConnection(redis.url, { name });
    await connectionUp(conn);
  });
  afterEach(async () => {
    await conn.close();
    await redis.stop();
  });

  const service = (failClosed = false, takeBackMax?: number) =>
    createDirectClient(LimitsService, createLimitsService({ store: createRedisLimitsStore(conn, { takeBackMax }), failClosed }));

  /** Runs `fn` with Redis stopped (SIGSTOP: the connection stays open, nothing answers), then resumes it. */
  async function stalled<T>(fn: () => Promise<T>): Promise<T> {
    process.kill(redis.pid, "SIGSTOP");
    try {
      return await fn();
    } finally {
      process.kill(redis.pid, "SIGCONT");
    }
  }

  it("admits exactly 60 of 200 concurrent requests from two processes at 60/minute", async () => {
    const projectId = `proj_${randomBase62(12)}`;
    const a = startBurst(redis.url, projectId, 100, 60);
    const b = startBurst(redis.url, projectId, 100, 60);
    await Promise.all([a.ready, b.ready]);
    a.go();
    b.go();
    const [ra, rb] = await Promise.all([a.result, b.result]);
    assert.equal(ra.degraded + rb.degraded, 0);
    assert.equal(ra.allowed + rb.allowed, 60);
  });

  it("runs its script again after SCRIPT FLUSH (EVALSHA falls back to EVAL on NOSCRIPT)", async () => {
    const limits = service();
    const projectId = "proj_flush";
    assert.equal((await limits.admit({ projectId, limits: { requestsPerMinute: 2 } })).decision, Decision.ALLOWED);
    const admin = new Redis(redis.url);
    await admin.script("FLUSH");
    await admin.quit();
    const r = await limits.admit({ projectId, limits: { requestsPerMinute: 2 } });
    assert.equal(r.decision, Decision.ALLOWED);
    assert.equal(r.degraded, false);
    assert.equal(r.remaining, 0);
  });

  it("keeps every key of a project under one hash tag, for Redis Cluster", async () => {
    const limits = service();
    const projectId = "proj_tagged";
    const r = await limits.admit({ projectId, userId: "u{1}", maxCostUsd: "1", limits: { requestsPerMinute: 5, requestsPerDay: 5, userRequestsPerMinute: 5 } });
    await limits.settle({ projectId, reservationId: r.reservationId, costUsd: "0.5" });
    await limits.admit({ projectId, maxCostUsd: "1", limits: {} });
    const keys = await conn.redis.keys("*");
    assert.ok(keys.length >= 6, keys.join(" "));
    for (const k of keys) assert.ok(k.startsWith("{svc:lim:proj_tagged}:"), k);
  });

  it("fails open while Redis is down, logs the outage once, and enforces limits again when it is back", async () => {
    const limits = service();
    const req = { projectId: "proj_outage", limits: { requestsPerMinute: 2 } };
    const logs = await captureLog(async () => {
      await redis.stop();
      await eventually(async () => !conn.up, 10_000, "the connection to be down");
      const rs = await Promise.all(Array.from({ length: 20 }, () => limits.admit(req)));
      assert.ok(rs.every((r) => r.decision === Decision.ALLOWED && r.degraded));
      assert.equal((await limits.settle({ projectId: req.projectId, reservationId: "", costUsd: "1" })).recorded, false);
    });
    assert.equal(logs.filter((l) => l.includes("redis unreachable")).length, 1);

    redis = await startRedis(redis.port); // the same address, so the service reconnects by itself
    await eventually(async () => !(await limits.admit(req)).degraded, 10_000, "an admission that is not degraded");
    const after = [await limits.admit(req), await limits.admit(req)];
    assert.deepEqual(after.map((r) => r.decision), [Decision.ALLOWED, Decision.PLAN_LIMITED]);
  });

  it("acts as while Redis is down while it is full, logging that once, and enforces limits again once a write is accepted", async () => {
    for (const failClosed of [false, true]) {
      const limits = service(failClosed);
      const req = { projectId: `proj_full_${failClosed}`, limits: { requestsPerMinute: 2 } };
      const lines = await captureLog(async () => {
        await conn.redis.config("SET", "maxmemory", "1"); // full: every write refused, PING answered
        try {
          const end = Date.now() + 2_500; // long enough for PINGs a second apart
          while (Date.now() < end) {
            const r = await limits.admit(req);
            assert.equal(r.degraded, true);
            assert.equal(r.decision, failClosed ? Decision.UNAVAILABLE : Decision.ALLOWED);
            assert.equal((await limits.settle({ projectId: req.projectId, reservationId: "", costUsd: "1" })).recorded, false);
            await new Promise((r) => setTimeout(r, 50));
          }
        } finally {
          await conn.redis.config("SET", "maxmemory", "0");
        }
        await eventually(async () => !(await limits.admit(req)).degraded, 5_000, "an admission that is not degraded");
      });
      const count = (text: string) => lines.filter((l) => l.includes(text)).length;
      assert.equal(count(`redis refuses writes (${name})`), 1, lines.join(""));
      assert.equal(count(`redis accepts writes again (${name})`), 1, lines.join(""));
      assert.equal(count("redis unreachable"), 0, lines.join(""));
      assert.equal(count("redis is back"), 0, lines.join(""));
      assert.equal((await limits.admit(req)).decision, Decision.ALLOWED);
      assert.equal((await limits.admit(req)).decision, Decision.PLAN_LIMITED, "nothing admitted while full was counted");
    }
  });

  it("charges the settles it could not send while Redis was full or down once Redis answers again, each once", async () => {
    const limits = service();
    const projectId = "proj_owed";
    const lim = { monthlySpendCapUsd: "100" };
    const usage = async () => {
      const u = await limits.getUsage({ projectId });
      return `${u.spentUsd}/${u.reservedUsd}`;
    };
    const admitted = await limits.admit({ projectId, maxCostUsd: "4", limits: lim });
    assert.equal(admitted.decision, Decision.ALLOWED);
    assert.ok(admitted.reservationId);
    const lines = await captureLog(async () => {
      // Full: every write refused. The reservation's settle and a degraded admission's are owed.
      await conn.redis.config("SET", "maxmemory", "1");
      try {
        await eventually(async () => (await limits.admit({ projectId, limits: lim })).degraded === true, 5_000, "a degraded admission");
        assert.equal((await limits.settle({ projectId, reservationId: admitted.reservationId, costUsd: "3" })).recorded, false);
        assert.equal((await limits.settle({ projectId, reservationId: "", costUsd: "2" })).recorded, false);
      } finally {
        await conn.redis.config("SET", "maxmemory", "0");
      }
      await eventually(async () => (await usage().catch(() => "")) === "5/0", 5_000, "the owed settles charged: 5 spent, nothing reserved");
    });
    assert.equal(lines.filter((l) => l.includes("2 settles could not be sent while Redis was down; charged now")).length, 1, lines.join(""));

    // Down: the connection is lost; Redis comes back empty at the same address, and is charged the owed settle.
    await redis.stop();
    await eventually(async () => !conn.up, 10_000, "the connection to be down");
    assert.equal((await limits.settle({ projectId, reservationId: "", costUsd: "1.25" })).recorded, false);
    redis = await startRedis(redis.port);
    await eventually(async () => (await usage().catch(() => "")) === "1.25/0", 10_000, "the owed settle charged once Redis is back");
    // Sent once: a later flush (the queue's timer, a later call) charges nothing more.
    await new Promise((r) => setTimeout(r, 1_200));
    await limits.admit({ projectId, limits: lim });
    assert.equal(await usage(), "1.25/0");
  });

  it("takes back admissions that timed out on a stalled Redis and ran when it resumed: no counts, no reservation (fail open and closed)", async () => {
    for (const failClosed of [false, true]) {
      const limits = service(failClosed);
      const projectId = `proj_stall_${failClosed}`;
      const lim = { requestsPerMinute: 3, requestsPerDay: 10, userRequestsPerMinute: 1, monthlySpendCapUsd: "2" };
      const first = await limits.admit({ projectId, maxCostUsd: "0.6", limits: lim });
      assert.equal(first.decision, Decision.ALLOWED);
      await limits.settle({ projectId, reservationId: first.reservationId, costUsd: "0.1" });
      const lines = await captureLog(async (sofar) => {
        // Longer than the command timeout (1 s): both calls give up, and Redis runs them on SIGCONT.
        const rs = await stalled(() =>
          Promise.all([
            limits.admit({ projectId, userId: "v", maxCostUsd: "0.6", limits: lim }),
            limits.admit({ projectId, maxCostUsd: "0.6", rescindable: true, limits: lim }),
          ]),
        );
        for (const r of rs) {
          assert.equal(r.degraded, true);
          assert.equal(r.decision, failClosed ? Decision.UNAVAILABLE : Decision.ALLOWED);
          assert.equal(r.reservationId, "");
        }
        // Only the first request counted, nothing reserved: what Redis ran late is taken back.
        const usage = async () => {
          const u = await limits.getUsage({ projectId }).catch(() => undefined);
          return u && [u.requestsLastMinute, u.requestsLastDay, u.spentUsd, u.reservedUsd];
        };
        const want = [1, 1, "0.1", "0"];
        let seen: unknown;
        await eventually(async () => JSON.stringify((seen = await usage())) === JSON.stringify(want), 10_000).catch(() => {});
        assert.deepEqual(seen, want, "minute, day, spent, reserved");
      });
      const count = (text: string) => lines.filter((l) => l.includes(text)).length;
      assert.equal(count("redis unreachable"), 1, lines.join(""));
      assert.equal(count("2 admissions failed or could not be rescinded while Redis did not answer; taken back now (2 had run)"), 1, lines.join(""));
      // The window and the cap are as if the stalled requests never came: user v's one, two more in the minute.
      assert.equal((await limits.admit({ projectId, userId: "v", maxCostUsd: "0.6", limits: lim })).decision, Decision.ALLOWED);
      assert.equal((await limits.admit({ projectId, maxCostUsd: "0.6", limits: lim })).decision, Decision.ALLOWED);
      assert.equal((await limits.admit({ projectId, maxCostUsd: "0.6", limits: lim })).decision, Decision.PLAN_LIMITED);
    }
  });

  it("keeps at most takeBackMax admissions to take back, saying once that the rest are not", async () => {
    const limits = service(true, 1);
    const projectId = "proj_stall_cap";
    const lim = { requestsPerMinute: 5 };
    const lines = await captureLog(async (sofar) => {
      await stalled(() => Promise.all([1, 2, 3].map(() => limits.admit({ projectId, limits: lim }))));
      await eventually(async () => sofar.some((l) => l.includes("redis is back")), 10_000, "Redis to answer");
      await eventually(async () => (await limits.getUsage({ projectId })).requestsLastMinute < 3, 3_000, "a take-back");
    });
    const count = (text: string) => lines.filter((l) => l.includes(text)).length;
    assert.equal(count("more than 1 admissions failed or could not be rescinded"), 1, lines.join(""));
    assert.equal(count("1 admissions failed or could not be rescinded while Redis did not answer; taken back now (1 had run)"), 1, lines.join(""));
    // Two were not taken back: they count, as before the fix, until they leave the window.
    assert.equal((await limits.getUsage({ projectId })).requestsLastMinute, 2);
  });

  it("takes back a rescindable admission whose Rescind failed (stalled, or Redis down) once Redis answers again", async () => {
    const limits = service();
    const projectId = "proj_rescind_failed";
    const lim = { requestsPerMinute: 5, monthlySpendCapUsd: "2" };
    const usage = async () => {
      const u = await limits.getUsage({ projectId }).catch(() => undefined);
      return u && `${u.requestsLastMinute}/${u.reservedUsd}`;
    };
    const lines = await captureLog(async () => {
      const stalledOne = await limits.admit({ projectId, maxCostUsd: "0.5", rescindable: true, limits: lim });
      const downOne = await limits.admit({ projectId, maxCostUsd: "0.25", rescindable: true, limits: lim });
      const kept = await limits.admit({ projectId, maxCostUsd: "0.125", limits: lim });
      assert.equal(await usage(), "3/0.875");
      // Sent on a stalled Redis (it runs on SIGCONT, after the command timed out), and not sent at all while the outage is known.
      const r = await stalled(async () => {
        const first = await limits.rescind({ projectId, reservationId: stalledOne.reservationId });
        const second = await limits.rescind({ projectId, reservationId: downOne.reservationId });
        return [first.rescinded, second.rescinded];
      });
      assert.deepEqual(r, [false, false]);
      // Only the admission nobody rescinded is left (Rescind's queue takes back no other), once Redis answers.
      await eventually(async () => (await usage()) !== undefined, 10_000, "Redis to answer");
      assert.equal((await limits.rescind({ projectId, reservationId: kept.reservationId })).rescinded, false);
      let seen: unknown;
      await eventually(async () => (seen = await usage()) === "1/0.125", 10_000).catch(() => {});
      assert.equal(seen, "1/0.125", "minute count / reserved");
    });
    const count = (text: string) => lines.filter((l) => l.includes(text)).length;
    assert.equal(count("2 admissions failed or could not be rescinded while Redis did not answer; taken back now (1 had run)"), 1, lines.join(""));
  });

  it("leaves an admission that was not made rescindable to Rescind, as the memory store does", async () => {
    const limits = service();
    const projectId = "proj_not_rescindable";
    const r = await limits.admit({ projectId, maxCostUsd: "0.5", limits: { requestsPerMinute: 5 } });
    assert.equal((await limits.rescind({ projectId, reservationId: r.reservationId })).rescinded, false);
    const u = await limits.getUsage({ projectId });
    assert.deepEqual([u.requestsLastMinute, u.reservedUsd], [1, "0.5"]);
    await limits.settle({ projectId, reservationId: r.reservationId, costUsd: "0.2" });
    assert.deepEqual(await conn.redis.hgetall(`{svc:lim:${projectId}}:rh`), { total: "0" });
  });

  it("fails closed when configured, with a decision of its own, and recovers without a restart", async () => {
    const limits = service(true);
    const req = { projectId: "proj_closed", limits: { requestsPerMinute: 5 } };
    await redis.stop();
    await eventually(async () => !conn.up, 10_000, "the connection to be down");
    const r = await limits.admit(req);
    assert.equal(r.decision, Decision.UNAVAILABLE);
    assert.equal(r.degraded, true);
    assert.equal(r.retryAfterSeconds, 1);
    await assert.rejects(limits.getUsage({ projectId: req.projectId }), /unreachable/);

    redis = await startRedis(redis.port);
    await eventually(async () => (await limits.admit(req)).decision === Decision.ALLOWED, 10_000, "an admitted request");
  });
});
