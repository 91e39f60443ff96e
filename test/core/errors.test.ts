import assert from "node:assert/strict";
import { apiError, retryGuidanceOf, toErrorInfo, withoutSecrets, withRetryGuidance } from "../../src/core/errors.js";
import { cutMarked } from "../../src/core/text.js";

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

describe("an upstream's words without the gateway's provider key (withoutSecrets)", () => {
  const key = "AZLEAKCHECK7890abcdef";

  it("redacts the key in the upstream's details (an Anthropic error's object, passed on as sent)", () => {
    const err = withoutSecrets(apiError(400, "invalid_request_error", "upstream_bad_request", "Upstream error: bad", { error_code: "x", key }), key);
    assert.deepEqual(toErrorInfo(err).details, { error_code: "x", key: "[redacted]" });
    assert.equal(toErrorInfo(err).message, "Upstream error: bad");
  });

  it("redacts the start of the key where the message was cut (cutMarked), as the whole key elsewhere", () => {
    for (const text of [`${"x".repeat(485)}${key}`, `${"x".repeat(484)}sk-LEAKCHECK-openai-123`]) {
      const secret = text.endsWith(key) ? key : "sk-LEAKCHECK-openai-123";
      const cut = cutMarked(text, 500);
      const message = toErrorInfo(withoutSecrets(apiError(400, "invalid_request_error", "upstream_bad_request", `Upstream error: ${cut} (more)`), secret)).message;
      assert.ok(!message.includes(secret.slice(0, 6)), message.slice(-60));
      assert.match(message, /x\[redacted\]… \(more\)$/);
    }
    // Text that only happens to end like the key's first few characters is cut the same: harmless.
    const plain = toErrorInfo(withoutSecrets(apiError(400, "invalid_request_error", "upstream_bad_request", `${cutMarked("y".repeat(600), 500)} AZLE…`), key)).message;
    assert.match(plain, /^y{500}… \[redacted\]…$/);
  });
});
