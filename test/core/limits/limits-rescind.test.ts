import assert from "node:assert/strict";
import { ConnectError } from "@connectrpc/connect";
import { toErrorInfo } from "../../../src/core/errors.js";
import { Decision } from "../../../src/gen/svc/limits/v1/limits_service_pb.js";
import { forEachLimitsBackend, type LimitsUnderTest } from "../../support/limits-backends.js";

const limits = { requestsPerMinute: 3, requestsPerDay: 5, userRequestsPerMinute: 2, monthlySpendCapUsd: "1" };

const admit = (s: LimitsUnderTest, opts: { userId?: string; maxCostUsd?: string; rescindable?: boolean } = {}) =>
  s.limits.admit({ projectId: s.projectId, userId: opts.userId ?? "", maxCostUsd: opts.maxCostUsd ?? "", rescindable: opts.rescindable ?? true, limits });

const rescind = (s: LimitsUnderTest, reservationId: string, userId = "") => s.limits.rescind({ projectId: s.projectId, userId, reservationId });

describe("LimitsService.Rescind", () => {
  forEachLimitsBackend((backend) => {
    it("takes an admission back from every window it was counted in and releases its reservation", async () => {
      const s = await backend.service();
      const a = await admit(s, { userId: "u", maxCostUsd: "0.4" });
      assert.equal(a.decision, Decision.ALLOWED);
      await admit(s, { userId: "u", maxCostUsd: "0.4" });
      // The user window (2) is full, and the cap has 0.2 left.
      assert.equal((await admit(s, { userId: "u" })).decision, Decision.USER_LIMITED);
      assert.equal((await admit(s, { maxCostUsd: "0.4" })).decision, Decision.SPEND_CAPPED);
      assert.deepEqual(await s.limits.getUsage({ projectId: s.projectId }).then((u) => [u.requestsLastMinute, u.requestsLastDay, u.reservedUsd]), [2, 2, "0.8"]);

      assert.equal((await rescind(s, a.reservationId, "u")).rescinded, true);
      assert.deepEqual(await s.limits.getUsage({ projectId: s.projectId }).then((u) => [u.requestsLastMinute, u.requestsLastDay, u.reservedUsd]), [1, 1, "0.4"]);
      const again = await admit(s, { userId: "u", maxCostUsd: "0.4" });
      assert.equal(again.decision, Decision.ALLOWED);
      assert.equal(again.remaining, 0, "the user window's one free place, and no more");
    });

    it("takes back an admission counted in a user's window only for that user; another user's rescind changes nothing", async () => {
      const s = await backend.service();
      const a = await admit(s, { userId: "alice", maxCostUsd: "0.3" });
      await admit(s, { userId: "bob" });
      assert.equal((await rescind(s, a.reservationId, "bob")).rescinded, false);
      const usage = async () => s.limits.getUsage({ projectId: s.projectId }).then((u) => [u.requestsLastMinute, u.reservedUsd]);
      assert.deepEqual(await usage(), [2, "0.3"], "nothing taken back");
      assert.equal((await admit(s, { userId: "bob" })).decision, Decision.ALLOWED);
      assert.equal((await rescind(s, a.reservationId, "alice")).rescinded, true);
      assert.deepEqual(await usage(), [2, "0"]);
      // Bob's two are still counted (the minute has room): his window was not touched by the wrong rescind.
      assert.equal((await admit(s, { userId: "bob" })).decision, Decision.USER_LIMITED);
    });

    it("does nothing the second time, after a settle, or for an admission that was not rescindable", async () => {
      const s = await backend.service();
      const a = await admit(s);
      const b = await admit(s, { maxCostUsd: "0.1" });
      const c = await admit(s, { maxCostUsd: "0.1", rescindable: false });
      assert.equal((await rescind(s, a.reservationId)).rescinded, true);
      assert.equal((await rescind(s, a.reservationId)).rescinded, false);
      await s.limits.settle({ projectId: s.projectId, reservationId: b.reservationId, costUsd: "0.05" });
      assert.equal((await rescind(s, b.reservationId)).rescinded, false);
      assert.equal((await rescind(s, c.reservationId)).rescinded, false);
      const u = await s.limits.getUsage({ projectId: s.projectId });
      assert.equal(u.requestsLastMinute, 2, "b and c still counted");
      assert.equal(u.reservedUsd, "0.1", "c's reservation still held");
      assert.equal(u.spentUsd, "0.05");
    });

    it("records a rescindable admission that reserves nothing, so it can still be taken back", async () => {
      const s = await backend.service();
      const rs = [await admit(s), await admit(s), await admit(s)];
      assert.ok(rs.every((r) => r.decision === Decision.ALLOWED && r.reservationId !== ""));
      assert.equal((await admit(s)).decision, Decision.PLAN_LIMITED);
      assert.equal((await rescind(s, rs[1]!.reservationId)).rescinded, true);
      assert.equal((await admit(s)).decision, Decision.ALLOWED);
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).reservedUsd, "0");
    });

    it("leaves buckets that have left their window alone, and expired admissions cannot be taken back", async () => {
      const s = await backend.service({ reservationTtlMs: 120_000 });
      const a = await admit(s);
      s.clock.ms += 65_000; // a's second has left the minute window, not the day
      const b = await admit(s);
      assert.equal((await rescind(s, a.reservationId)).rescinded, true);
      let u = await s.limits.getUsage({ projectId: s.projectId });
      assert.deepEqual([u.requestsLastMinute, u.requestsLastDay], [1, 1], "b only; the minute window was not pushed below it");
      s.clock.ms += 120_000; // b's reservation expired
      assert.equal((await rescind(s, b.reservationId)).rescinded, false);
      u = await s.limits.getUsage({ projectId: s.projectId });
      assert.equal(u.requestsLastDay, 1);
    });

    it("refuses a reservation id Admit cannot have returned for the project, in Rescind and Settle, and charges nothing", async () => {
      const s = await backend.service();
      const other = await backend.service();
      const theirs = (await admit(other, { maxCostUsd: "0.1" })).reservationId;
      const mine = (await admit(s, { maxCostUsd: "0.1" })).reservationId;
      // Well-formed, but made up; and another project's: refused, not charged to this one.
      const madeUp = mine.slice(0, -1) + (mine.endsWith("0") ? "1" : "0");
      for (const id of [madeUp, theirs, "rsv_2026-11_ZZZZZZZZZZZZZZZZZZZZ"]) {
        await assert.rejects(s.limits.settle({ projectId: s.projectId, reservationId: id, costUsd: "0.2" }), (e: unknown) => toErrorInfo(e).status === 400 && /not one Admit returned for project/.test(toErrorInfo(e).message));
      }
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).spentUsd, "0");
      // Its own id settles.
      assert.equal((await s.limits.settle({ projectId: s.projectId, reservationId: mine, costUsd: "0.2" })).recorded, true);
      assert.equal((await s.limits.getUsage({ projectId: s.projectId })).spentUsd, "0.2");
      for (const id of ["", "rsv_nope", madeUp, theirs]) {
        await assert.rejects(rescind(s, id), (e: unknown) => {
          assert.ok(e instanceof ConnectError);
          const info = toErrorInfo(e);
          assert.equal(info.status, 400);
          assert.match(info.message, /reservation_id/);
          return true;
        });
      }
    });
  });
});
