import assert from "node:assert/strict";
import { apiError, retryGuidanceOf, toErrorInfo, withRetryGuidance } from "../../src/core/errors.js";

describe("an upstream's retry guidance on an error", () => {
  const upstream429 = () => apiError(429, "rate_limit_error", "upstream_rate_limited", "slow down");

  it("carries retry-after (seconds or an HTTP date), retry-after-ms and x-should-retry", () => {
    const err = withRetryGuidance(upstream429(), {
      "retry-after": "Wed, 21 Oct 2026 07:28:00 GMT",
      "retry-after-ms": "1500.5",
      "x-should-retry": "false",
      "x-ratelimit-reset-requests": "1s",
    });
    assert.deepEqual(retryGuidanceOf(err), { "retry-after": "Wed, 21 Oct 2026 07:28:00 GMT", "retry-after-ms": "1500.5", "x-should-retry": "false" });
    assert.deepEqual(retryGuidanceOf(withRetryGuidance(upstream429(), { "retry-after": "20" })), { "retry-after": "20" });
    assert.equal(toErrorInfo(err).code, "upstream_rate_limited", "the error itself is unchanged");
  });

  it("drops values of any other form, and repeated headers", () => {
    const err = withRetryGuidance(upstream429(), {
      "retry-after": "7; evil=1",
      "retry-after-ms": ["100", "200"],
      "x-should-retry": "maybe",
    });
    assert.equal(retryGuidanceOf(err), undefined);
    assert.equal(retryGuidanceOf(withRetryGuidance(upstream429(), { "retry-after": "-1" })), undefined);
    assert.equal(retryGuidanceOf(new Error("not a ConnectError")), undefined);
    assert.equal(retryGuidanceOf(upstream429()), undefined);
  });
});
