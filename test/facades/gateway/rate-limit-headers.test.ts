import assert from "node:assert/strict";
import { rateLimitHeaders } from "../../../src/facades/gateway/rate-limit-headers.js";
import { Decision } from "../../../src/gen/svc/limits/v1/limits_service_pb.js";
import { ApiStyle } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { forEachLimitsBackend } from "../../support/limits-backends.js";

const at = (iso: string) => Date.parse(iso);

/**
 * The reset headers against the store's own decisions, on a clock the test moves: Anthropic's
 * `anthropic-ratelimit-requests-reset` must name the first second at or after the window really
 * frees (a request then passes, one a moment before it does not), never a second later.
 */
describe("rate-limit reset headers", () => {
  forEachLimitsBackend((backend) => {
    it("name the second the window frees: the first request at that instant passes", async () => {
      // rpm 1, a request at 11:36:44.751: counted in bucket 44, the window frees at 11:37:45.000.
      const s = await backend.service({}, at("2026-11-23T11:36:44.751Z"));
      const limits = { requestsPerMinute: 1 };
      const admit = () => s.limits.admit({ projectId: s.projectId, limits });
      const first = await admit();
      assert.equal(first.decision, Decision.ALLOWED);
      assert.equal(rateLimitHeaders(first, ApiStyle.MESSAGES, s.clock.ms)["anthropic-ratelimit-requests-reset"], "2026-11-23T11:37:45Z");
      for (const t of ["11:36:50.000", "11:37:44.170", "11:37:44.930", "11:37:44.999"]) {
        s.clock.ms = at(`2026-11-23T${t}Z`);
        const r = await admit();
        assert.equal(r.decision, Decision.PLAN_LIMITED, t);
        assert.equal(rateLimitHeaders(r, ApiStyle.MESSAGES, s.clock.ms)["anthropic-ratelimit-requests-reset"], "2026-11-23T11:37:45Z", t);
      }
      s.clock.ms = at("2026-11-23T11:37:45.000Z");
      const next = await admit();
      assert.equal(next.decision, Decision.ALLOWED, "the instant the header named");
      // Counted in bucket 45: the window frees at 11:38:46.000, 61 s on (one bucket past the minute).
      const h = rateLimitHeaders(next, ApiStyle.MESSAGES, s.clock.ms + 20);
      assert.equal(h["anthropic-ratelimit-requests-reset"], "2026-11-23T11:38:46Z");
      assert.equal(rateLimitHeaders(next, ApiStyle.CHAT_COMPLETIONS, s.clock.ms + 20)["x-ratelimit-reset-requests"], "1m1s");
    });

    it("read now when nothing is counted in the window (a spend-cap refusal before any request)", async () => {
      const s = await backend.service({}, at("2026-11-23T11:36:44.600Z"));
      const limits = { requestsPerMinute: 5, monthlySpendCapUsd: "0" };
      const r = await s.limits.admit({ projectId: s.projectId, maxCostUsd: "0.01", limits });
      assert.equal(r.decision, Decision.SPEND_CAPPED);
      assert.deepEqual([r.limit, r.remaining, r.resetSeconds], [5, 5, 0]);
      assert.equal(rateLimitHeaders(r, ApiStyle.MESSAGES, s.clock.ms)["anthropic-ratelimit-requests-reset"], "2026-11-23T11:36:45Z");
      assert.equal(rateLimitHeaders(r, ApiStyle.CHAT_COMPLETIONS, s.clock.ms)["x-ratelimit-reset-requests"], "0s");
      // With one request counted, the reset is that request's: 61 buckets on.
      assert.equal((await s.limits.admit({ projectId: s.projectId, maxCostUsd: "0", limits })).decision, Decision.ALLOWED);
      const counted = await s.limits.admit({ projectId: s.projectId, maxCostUsd: "0.01", limits });
      assert.deepEqual([counted.decision, counted.remaining, counted.resetSeconds], [Decision.SPEND_CAPPED, 4, 61]);
      assert.equal(rateLimitHeaders(counted, ApiStyle.MESSAGES, s.clock.ms)["anthropic-ratelimit-requests-reset"], "2026-11-23T11:37:45Z");
    });
  });
});
