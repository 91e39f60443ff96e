import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { analyticsQueryOf } from "../../../src/core/telemetry/analytics-request.js";
import { toErrorInfo } from "../../../src/core/errors.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { AnalyticsGranularity, GetAnalyticsRequestSchema } from "../../../src/gen/svc/telemetry/v1/telemetry_service_pb.js";

/** The refusal of a range longer than the granularity allows reads as English, codes unchanged. */
describe("analytics range refusals: their wording", () => {
  const DAY = 86_400_000;
  const start = Date.UTC(2026, 0, 1);
  for (const [granularity, span, words] of [
    [AnalyticsGranularity.MINUTE, 8 * DAY, "a minute series covers at most 10080 minutes (7 days) from"],
    [AnalyticsGranularity.HOUR, 401 * DAY, "an hour series covers at most 9600 hours (400 days) from"],
    [AnalyticsGranularity.DAY, 3661 * DAY, "a day series covers at most 3660 days from"],
  ] as const) {
    it(`${AnalyticsGranularity[granularity]}: "${words}"`, () => {
      const req = create(GetAnalyticsRequestSchema, { projectId: "proj_x", keyMode: KeyMode.LIVE, granularity, startTime: timestampFromMs(start), endTime: timestampFromMs(start + span) });
      assert.throws(() => analyticsQueryOf(req, start + span), (e: unknown) => {
        const info = toErrorInfo(e);
        assert.deepEqual([info.status, info.type, info.code], [400, "invalid_request_error", "invalid_value"]);
        assert.ok(info.message.startsWith(words), info.message);
        return true;
      });
    });
  }
});
