import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { toErrorInfo } from "../../../src/core/errors.js";
import { admissionError } from "../../../src/facades/gateway/rate-limit-headers.js";
import { AdmitResponseSchema, Decision, LimitWindow } from "../../../src/gen/svc/limits/v1/limits_service_pb.js";

/** A refused admission says which limit, in the right number ("1 request", "60 requests"), codes unchanged. */
describe("rate-limit refusals: their wording", () => {
  for (const [decision, window, limit, code, words] of [
    [Decision.PLAN_LIMITED, LimitWindow.DAY, 1, "rate_limit_exceeded", "The project's limit of 1 request per day is reached. Retry after 5 s."],
    [Decision.PLAN_LIMITED, LimitWindow.MINUTE, 1, "rate_limit_exceeded", "The project's limit of 1 request per minute is reached. Retry after 5 s."],
    [Decision.PLAN_LIMITED, LimitWindow.MINUTE, 60, "rate_limit_exceeded", "The project's limit of 60 requests per minute is reached. Retry after 5 s."],
    [Decision.PLAN_LIMITED, LimitWindow.DAY, 1000, "rate_limit_exceeded", "The project's limit of 1000 requests per day is reached. Retry after 5 s."],
    [Decision.USER_LIMITED, LimitWindow.MINUTE, 1, "user_rate_limit_exceeded", "This user's limit of 1 request per minute (X-Svc-User-Id) is reached. Retry after 5 s."],
    [Decision.USER_LIMITED, LimitWindow.MINUTE, 2, "user_rate_limit_exceeded", "This user's limit of 2 requests per minute (X-Svc-User-Id) is reached. Retry after 5 s."],
  ] as const) {
    it(words, () => {
      const info = toErrorInfo(admissionError(create(AdmitResponseSchema, { decision, window, limit, retryAfterSeconds: 5 })));
      assert.deepEqual([info.status, info.type, info.code, info.message], [429, "rate_limit_error", code, words]);
    });
  }
});

describe("spend-cap refusals: a request that can never fit the cap says so", () => {
  const capped = create(AdmitResponseSchema, { decision: Decision.SPEND_CAPPED, window: LimitWindow.MONTH, retryAfterSeconds: 285140, spendCapUsd: "0.1", spendRemainingUsd: "0.1" });

  it("names its worst case and the whole cap, and says to lower max_tokens, not to wait", () => {
    const info = toErrorInfo(admissionError(capped, "0.16384"));
    assert.deepEqual([info.status, info.code], [429, "spend_cap_exceeded"]);
    assert.match(info.message, /could cost up to \$0\.16384 .*more than the project's whole monthly spend cap of \$0\.1: it cannot fit in any month\. Send a shorter prompt or a lower max_tokens/);
    assert.doesNotMatch(info.message, /Retry after/);
  });

  it("keeps the wait for one that fits the cap once the month's spend allows it", () => {
    const info = toErrorInfo(admissionError({ ...capped, spendRemainingUsd: "0.01" }, "0.05"));
    assert.match(info.message, /would be exceeded by this request \(\$0\.01 left this month.*Retry after 285140 s\./);
  });
});

