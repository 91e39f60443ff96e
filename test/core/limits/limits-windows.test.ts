import assert from "node:assert/strict";
import { Decision, LimitWindow } from "../../../src/gen/svc/limits/v1/limits_service_pb.js";
import { forEachLimitsBackend, type LimitsUnderTest } from "../../support/limits-backends.js";
import { prng } from "../../support/prng.js";

type Limits = { requestsPerMinute?: number; requestsPerDay?: number; userRequestsPerMinute?: number };

const admit = (s: LimitsUnderTest, limits: Limits, userId = "") => s.limits.admit({ projectId: s.projectId, userId, limits });

async function admitMany(s: LimitsUnderTest, n: number, limits: Limits, userId = "") {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await admit(s, limits, userId));
  return out;
}

const allowed = (rs: Array<{ decision: Decision }>) => rs.filter((r) => r.decision === Decision.ALLOWED).length;

describe("LimitsService rate windows", () => {
  forEachLimitsBackend((backend) => {
    it("admits exactly the minute limit, then rejects with the minute window", async () => {
      const s = await backend.service();
      const rs = await admitMany(s, 6, { requestsPerMinute: 5 });
      assert.deepEqual(rs.slice(0, 5).map((r) => [r.decision, r.remaining]), [[1, 4], [1, 3], [1, 2], [1, 1], [1, 0]]);
      const last = rs[5]!;
      assert.equal(last.decision, Decision.PLAN_LIMITED);
      assert.equal(last.window, LimitWindow.MINUTE);
      assert.equal(last.limit, 5);
      assert.equal(last.remaining, 0);
      assert.equal(last.reservationId, "");
    });

    it("reports the limit, what remains and when the window empties", async () => {
      const s = await backend.service(); // 12:00:00.500: the window empties 61 buckets on, at 12:01:01.000
      const r = await admit(s, { requestsPerMinute: 3 });
      assert.equal(r.window, LimitWindow.MINUTE);
      assert.equal(r.limit, 3);
      assert.equal(r.remaining, 2);
      assert.equal(r.resetSeconds, 61);
      assert.equal(r.retryAfterSeconds, 0);
      assert.match(r.reservationId, /^rsv_2026-11_[0-9A-Za-z]+$/);
    });

    it("keeps rejecting across a minute boundary, and admits when the retry-after has passed", async () => {
      const s = await backend.service({}, Date.UTC(2026, 10, 20, 12, 0, 59, 500));
      await admitMany(s, 5, { requestsPerMinute: 5 });
      s.clock.ms = Date.UTC(2026, 10, 20, 12, 1, 0, 100); // a fixed window would have reset here
      const rejected = await admit(s, { requestsPerMinute: 5 });
      assert.equal(rejected.decision, Decision.PLAN_LIMITED);
      assert.equal(rejected.retryAfterSeconds, 60); // frees at 12:02:00.000
      s.clock.ms = Date.UTC(2026, 10, 20, 12, 1, 59, 999);
      assert.equal((await admit(s, { requestsPerMinute: 5 })).decision, Decision.PLAN_LIMITED);
      s.clock.ms = Date.UTC(2026, 10, 20, 12, 1, 0, 100) + rejected.retryAfterSeconds * 1000;
      assert.equal((await admit(s, { requestsPerMinute: 5 })).decision, Decision.ALLOWED);
    });

    it("never admits more than the limit in any 60 seconds (random arrivals)", async () => {
      const s = await backend.service();
      const rand = prng(42);
      const times: number[] = [];
      for (let i = 0; i < 400; i++) {
        s.clock.ms += Math.floor(rand() * 1500);
        if ((await admit(s, { requestsPerMinute: 10 })).decision === Decision.ALLOWED) times.push(s.clock.ms);
      }
      for (const t of times) assert.ok(times.filter((u) => u > t - 60_000 && u <= t).length <= 10, `more than 10 in the minute before ${t}`);
      assert.ok(times.length >= 40, `only ${times.length} admitted over ~5 minutes`);
    });

    it("frees requests bucket by bucket as they leave the window", async () => {
      const s = await backend.service();
      await admitMany(s, 2, { requestsPerMinute: 4 });
      s.clock.ms += 30_000;
      await admitMany(s, 2, { requestsPerMinute: 4 });
      s.clock.ms += 31_000; // the first two left the window, the last two have not
      const rs = await admitMany(s, 3, { requestsPerMinute: 4 });
      assert.deepEqual(rs.map((r) => r.decision), [Decision.ALLOWED, Decision.ALLOWED, Decision.PLAN_LIMITED]);
    });

    it("starts afresh after a long idle period", async () => {
      const s = await backend.service();
      await admitMany(s, 5, { requestsPerMinute: 5 });
      s.clock.ms += 10 * 60_000;
      const rs = await admitMany(s, 6, { requestsPerMinute: 5 });
      assert.deepEqual(rs.map((r) => r.remaining), [4, 3, 2, 1, 0, 0]);
      assert.equal(rs[5]!.decision, Decision.PLAN_LIMITED);
    });

    it("enforces the day limit over a sliding 24 hours", async () => {
      const s = await backend.service();
      await admitMany(s, 3, { requestsPerDay: 3 });
      s.clock.ms += 23 * 3_600_000;
      const r = await admit(s, { requestsPerDay: 3 });
      assert.equal(r.decision, Decision.PLAN_LIMITED);
      assert.equal(r.window, LimitWindow.DAY);
      assert.ok(r.retryAfterSeconds > 3_500 && r.retryAfterSeconds <= 3_660, String(r.retryAfterSeconds));
      s.clock.ms += r.retryAfterSeconds * 1000;
      assert.equal((await admit(s, { requestsPerDay: 3 })).decision, Decision.ALLOWED);
    });

    it("reports the window that frees last when several reject", async () => {
      const s = await backend.service();
      await admitMany(s, 2, { requestsPerMinute: 2, requestsPerDay: 2 });
      const r = await admit(s, { requestsPerMinute: 2, requestsPerDay: 2 });
      assert.equal(r.window, LimitWindow.DAY);
      assert.ok(r.retryAfterSeconds > 86_000);
    });

    it("reports, of windows with as much left, the one that refills last (an admission and a spend-cap refusal alike)", async () => {
      const s = await backend.service();
      const both = { requestsPerMinute: 2, requestsPerDay: 2 };
      const rs = await admitMany(s, 2, both);
      assert.deepEqual(rs.map((r) => [r.window, r.remaining]), [[LimitWindow.DAY, 1], [LimitWindow.DAY, 0]]);
      assert.ok(rs[1]!.resetSeconds > 86_000, `reset ${rs[1]!.resetSeconds}s: the minute's, though the day is as full`);
      const other = await backend.service();
      await admitMany(other, 1, both);
      const capped = await other.limits.admit({ projectId: other.projectId, limits: { ...both, monthlySpendCapUsd: "0" }, maxCostUsd: "1" });
      assert.equal(capped.decision, Decision.SPEND_CAPPED);
      assert.equal(capped.remaining, 1);
      assert.ok(capped.resetSeconds > 86_000, `reset ${capped.resetSeconds}s`);
    });

    it("limits each user apart from the project's limit", async () => {
      const s = await backend.service();
      const limits = { requestsPerMinute: 600, userRequestsPerMinute: 2 };
      const a = await admitMany(s, 3, limits, "alice");
      assert.deepEqual(a.map((r) => r.decision), [Decision.ALLOWED, Decision.ALLOWED, Decision.USER_LIMITED]);
      assert.equal(a[2]!.window, LimitWindow.USER_MINUTE);
      assert.equal(a[2]!.limit, 2);
      assert.equal((await admit(s, limits, "bob")).decision, Decision.ALLOWED);
      assert.equal((await admit(s, limits)).decision, Decision.ALLOWED); // no user id: no per-user limit
    });

    it("applies the project's limit across all users", async () => {
      const s = await backend.service();
      const limits = { requestsPerMinute: 3, userRequestsPerMinute: 10 };
      for (const u of ["a", "b", "c"]) assert.equal((await admit(s, limits, u)).decision, Decision.ALLOWED);
      const r = await admit(s, limits, "d");
      assert.equal(r.decision, Decision.PLAN_LIMITED);
    });

    it("counts no quota for rejected requests", async () => {
      const s = await backend.service();
      const limits = { requestsPerMinute: 100, userRequestsPerMinute: 1 };
      await admit(s, limits, "alice");
      await admitMany(s, 5, limits, "alice");
      const r = await admit(s, limits, "bob");
      assert.equal(r.window, LimitWindow.USER_MINUTE); // bob's window is the tightest: 0 left
      const plan = await admit(s, { requestsPerMinute: 100 });
      assert.equal(plan.remaining, 100 - 3);
    });

    it("admits everything when no limit is set (enterprise without overrides)", async () => {
      const s = await backend.service();
      const rs = await Promise.all(Array.from({ length: 500 }, () => admit(s, {})));
      assert.equal(allowed(rs), 500);
      assert.equal(rs[0]!.limit, 0);
      assert.equal(rs[0]!.window, LimitWindow.UNSPECIFIED);
    });

    it("admits exactly the limit of 200 concurrent requests", async () => {
      const s = await backend.service();
      const rs = await Promise.all(Array.from({ length: 200 }, () => admit(s, { requestsPerMinute: 60 })));
      assert.equal(allowed(rs), 60);
    });
  });
});
