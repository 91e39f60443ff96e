import assert from "node:assert/strict";
import { ConnectError } from "@connectrpc/connect";
import { toErrorInfo } from "../../../src/core/errors.js";
import { Decision, LimitWindow } from "../../../src/gen/svc/limits/v1/limits_service_pb.js";
import { forEachLimitsBackend, type LimitsUnderTest } from "../../support/limits-backends.js";

const admit = (s: LimitsUnderTest, cap: string, maxCostUsd: string) =>
  s.limits.admit({ projectId: s.projectId, maxCostUsd, limits: { monthlySpendCapUsd: cap } });

const settle = (s: LimitsUnderTest, reservationId: string, costUsd: string) => s.limits.settle({ projectId: s.projectId, reservationId, costUsd });

const rejects400 = async (p: Promise<unknown>, field: string) => {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof ConnectError);
    const info = toErrorInfo(e);
    assert.equal(info.status, 400);
    assert.equal(info.type, "invalid_request_error");
    assert.match(info.message, new RegExp(field));
    return true;
  });
};

describe("LimitsService spend caps", () => {
  forEachLimitsBackend((backend) => {
    it("reserves each request's worst case, so concurrent requests cannot overshoot the cap", async () => {
      const s = await backend.service();
      const rs = await Promise.all(Array.from({ length: 10 }, () => admit(s, "1", "0.4")));
      assert.equal(rs.filter((r) => r.decision === Decision.ALLOWED).length, 2);
      const capped = rs.find((r) => r.decision === Decision.SPEND_CAPPED)!;
      assert.equal(capped.window, LimitWindow.MONTH);
      assert.equal(capped.spendCapUsd, "1");
      assert.equal(capped.spendRemainingUsd, "0.2");
    });

    it("reports the tightest request window on a spend-cap refusal, without counting it", async () => {
      const s = await backend.service();
      const limits = { monthlySpendCapUsd: "1", requestsPerMinute: 5, requestsPerDay: 100 };
      assert.equal((await s.limits.admit({ projectId: s.projectId, maxCostUsd: "0.5", limits })).decision, Decision.ALLOWED);
      const capped = await s.limits.admit({ projectId: s.projectId, maxCostUsd: "0.9", limits });
      assert.equal(capped.decision, Decision.SPEND_CAPPED);
      assert.equal(capped.window, LimitWindow.MONTH);
      assert.equal(capped.limit, 5);
      assert.equal(capped.remaining, 4, "the refused request is not counted");
      assert.ok(capped.resetSeconds > 0 && capped.resetSeconds <= 61, String(capped.resetSeconds));
      assert.ok(capped.retryAfterSeconds > 0, "Retry-After still runs to the month's end");
      const noLimits = await admit(s, "0", "0.1");
      assert.equal(noLimits.decision, Decision.SPEND_CAPPED);
      assert.equal(noLimits.limit, 0, "no request limit applies");
    });

    it("tells a capped client to come back when the UTC month ends", async () => {
      const s = await backend.service({}, Date.UTC(2026, 10, 30, 23, 59, 0));
      const r = await admit(s, "0", "0.000000001");
      assert.equal(r.decision, Decision.SPEND_CAPPED);
      assert.equal(r.retryAfterSeconds, 60);
    });

    it("never refuses a request whose worst case is nothing (a cache hit), with a cap of 0 or one used up; its windows still count it", async () => {
      const s = await backend.service();
      const zero = { monthlySpendCapUsd: "0", requestsPerMinute: 3 };
      const free = (limits: object) => s.limits.admit({ projectId: s.projectId, maxCostUsd: "0", limits });
      const first = await free(zero);
      assert.equal(first.decision, Decision.ALLOWED);
      assert.equal(first.spendCapUsd, "0");
      assert.equal(first.spendRemainingUsd, "0");
      assert.equal((await s.limits.admit({ projectId: s.projectId, maxCostUsd: "", limits: zero })).decision, Decision.ALLOWED, "no worst case given reserves nothing too");
      assert.equal((await s.limits.admit({ projectId: s.projectId, maxCostUsd: "0.000000001", limits: zero })).decision, Decision.SPEND_CAPPED, "anything that costs is stopped by a cap of 0");
      assert.equal((await free(zero)).decision, Decision.ALLOWED);
      const limited = await free(zero);
      assert.equal(limited.decision, Decision.PLAN_LIMITED, "the rate limits still apply, and counted the free ones");

      // A cap used up exactly, and one overspent (a cost settled above its worst case).
      const used = { monthlySpendCapUsd: "1" };
      const r = await admit(s, "1", "1");
      assert.equal(r.decision, Decision.ALLOWED);
      assert.equal((await admit(s, "1", "0.000000001")).decision, Decision.SPEND_CAPPED);
      assert.equal((await free(used)).decision, Decision.ALLOWED, "the cap is all reserved");
      await settle(s, r.reservationId, "1");
      assert.equal((await free(used)).decision, Decision.ALLOWED, "the cap is all spent");
      await settle(s, "", "0.5");
      const over = await free(used);
      assert.equal(over.decision, Decision.ALLOWED, "the cap is overspent");
      assert.equal(over.spendRemainingUsd, "0");
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).reservedUsd, "0", "a hit reserves nothing");
    });

    it("reports the cap and what is left of it after the reservation", async () => {
      const s = await backend.service();
      const r = await admit(s, "12.50", "0.000125");
      assert.equal(r.decision, Decision.ALLOWED);
      assert.equal(r.spendCapUsd, "12.5");
      assert.equal(r.spendRemainingUsd, "12.499875");
    });

    it("replaces the reservation with the real cost at settlement", async () => {
      const s = await backend.service();
      const first = await admit(s, "1", "0.4");
      await admit(s, "1", "0.4");
      assert.equal((await admit(s, "1", "0.4")).decision, Decision.SPEND_CAPPED);
      assert.deepEqual(await settle(s, first.reservationId, "0.1").then((r) => r.recorded), true);
      const third = await admit(s, "1", "0.4");
      assert.equal(third.decision, Decision.ALLOWED);
      assert.equal(third.spendRemainingUsd, "0.1");
      const usage = await s.limits.getUsage({ projectId: s.projectId });
      assert.equal(usage.spentUsd, "0.1");
      assert.equal(usage.reservedUsd, "0.8");
    });

    it("releases a reservation settled at cost 0", async () => {
      const s = await backend.service();
      const r = await admit(s, "1", "1");
      assert.equal((await admit(s, "1", "1")).decision, Decision.SPEND_CAPPED);
      await settle(s, r.reservationId, "0");
      assert.equal((await admit(s, "1", "1")).decision, Decision.ALLOWED);
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).spentUsd, "0");
    });

    it("stops counting a reservation that is never settled once it expires", async () => {
      const s = await backend.service({ reservationTtlMs: 15 * 60_000 });
      await admit(s, "1", "1");
      s.clock.ms += 15 * 60_000 - 1;
      assert.equal((await admit(s, "1", "0.5")).decision, Decision.SPEND_CAPPED);
      s.clock.ms += 1;
      assert.equal((await admit(s, "1", "0.5")).decision, Decision.ALLOWED);
    });

    it("still charges a cost settled after its reservation expired", async () => {
      const s = await backend.service({ reservationTtlMs: 1_000 });
      const r = await admit(s, "1", "0.5");
      s.clock.ms += 5_000;
      await settle(s, r.reservationId, "0.75");
      assert.equal((await admit(s, "1", "0.5")).decision, Decision.SPEND_CAPPED);
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).spentUsd, "0.75");
    });

    it("adds money exactly (0.1 + 0.2 fills a 0.3 cap), rounding sub-nano-dollar costs up", async () => {
      const s = await backend.service();
      const a = await admit(s, "0.3", "0.1");
      const b = await admit(s, "0.3", "0.2");
      assert.equal(b.spendRemainingUsd, "0");
      await settle(s, a.reservationId, "0.1");
      await settle(s, b.reservationId, "0.1999999980001"); // rounds up to 0.199999999
      const c = await admit(s, "0.3", "0.000000001");
      assert.equal(c.decision, Decision.ALLOWED);
      assert.equal((await admit(s, "0.3", "0.0000000001")).decision, Decision.SPEND_CAPPED);
    });

    it("keeps caps in the millions exact to the nano-dollar", async () => {
      const s = await backend.service();
      for (let i = 0; i < 4; i++) await settle(s, "", "999999.999999999");
      await settle(s, "", "999999.999999998"); // spent: 4999999.999999994
      const big = await admit(s, "4999999.999999999", "0.000000004");
      assert.equal(big.spendRemainingUsd, "0.000000001");
      assert.equal((await admit(s, "4999999.999999999", "0.000000001")).decision, Decision.ALLOWED);
      assert.equal((await admit(s, "4999999.999999999", "0.000000001")).decision, Decision.SPEND_CAPPED);
    });

    it("charges each UTC calendar month apart", async () => {
      const s = await backend.service({}, Date.UTC(2026, 10, 30, 23, 59, 59, 0));
      const r = await admit(s, "1", "1");
      await settle(s, r.reservationId, "1");
      assert.equal((await admit(s, "1", "0.000000001")).decision, Decision.SPEND_CAPPED);
      s.clock.ms = Date.UTC(2026, 11, 1, 0, 0, 0, 0);
      const december = await admit(s, "1", "0.000000001");
      assert.equal(december.decision, Decision.ALLOWED);
      assert.match(december.reservationId, /^rsv_2026-12_/);
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).month, "2026-12");
      // A November reservation still settles in December (a request that spanned midnight), into
      // November; a reservation id naming any other month is none Admit gave out lately.
      const late = await settle(s, r.reservationId, "0");
      assert.equal(late.recorded, true);
      await rejects400(settle(s, r.reservationId.replace("2026-11", "2099-01"), "1"), "reservation_id");
      await rejects400(settle(s, r.reservationId.replace("2026-11", "2026-10"), "1"), "reservation_id");
    });

    it("tracks spend when no cap is set", async () => {
      const s = await backend.service();
      const r = await s.limits.admit({ projectId: s.projectId, maxCostUsd: "3" });
      assert.equal(r.spendCapUsd, "");
      await settle(s, r.reservationId, "2.5");
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).spentUsd, "2.5");
    });

    it("charges a settlement without a reservation (a degraded admission) to the current month", async () => {
      const s = await backend.service();
      await settle(s, "", "0.5");
      assert.equal((await admit(s, "0.5", "0.000000001")).decision, Decision.SPEND_CAPPED);
    });

    it("takes amounts above a million dollars: a cost is charged in full up to just above the largest cap", async () => {
      const s = await backend.service();
      const r = await admit(s, "2000000", "1000000.58");
      assert.equal(r.decision, Decision.ALLOWED);
      await settle(s, r.reservationId, "1000000.01");
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).spentUsd, "1000000.01");
      // Beyond any cap: refused by the cap, never by the amount's size.
      assert.equal((await admit(s, "5000000", "99999999")).decision, Decision.SPEND_CAPPED);
      await settle(s, "", "99999999");
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).spentUsd, "6000000.010000001");
    });

    it("refuses malformed money and limits with a 400 naming the field", async () => {
      const s = await backend.service();
      await rejects400(admit(s, "1", "abc"), "max_cost_usd");
      await rejects400(admit(s, "1", "-1"), "max_cost_usd");
      await rejects400(admit(s, "-5", "1"), "monthly_spend_cap_usd");
      await rejects400(s.limits.admit({ projectId: s.projectId, limits: { requestsPerMinute: 0 } }), "requests_per_minute");
      await rejects400(s.limits.admit({ projectId: "", limits: {} }), "project_id");
      await rejects400(settle(s, "not-a-reservation", "1"), "reservation_id");
      await rejects400(settle(s, "", "1e3"), "cost_usd");
    });
  });
});
