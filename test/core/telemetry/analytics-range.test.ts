import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { analyticsQueryOf } from "../../../src/core/telemetry/analytics-request.js";
import { toErrorInfo } from "../../../src/core/errors.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { AnalyticsGranularity, GetAnalyticsRequestSchema } from "../../../src/gen/svc/telemetry/v1/telemetry_service_pb.js";

/** GetAnalytics reads its times to the microsecond, as ListLogs does: nothing finer is cut to a millisecond. */
describe("analytics range: times to the microsecond", () => {
  const at = (iso: string, nanos = 0): Timestamp => {
    const ms = Date.parse(iso);
    return { $typeName: "google.protobuf.Timestamp", seconds: BigInt(ms / 1000), nanos };
  };
  const query = (granularity: AnalyticsGranularity, startTime?: Timestamp, endTime?: Timestamp) =>
    analyticsQueryOf(create(GetAnalyticsRequestSchema, { projectId: "proj_x", keyMode: KeyMode.LIVE, granularity, startTime, endTime }), Date.parse("2026-11-20T12:00:00Z"));
  const iso = (sec: number) => new Date(sec * 1000).toISOString();

  it("rounds an end a fraction of a millisecond past a boundary up to the next bucket", () => {
    const m = query(AnalyticsGranularity.MINUTE, undefined, at("2026-11-20T10:01:00Z", 400_000));
    assert.equal(iso(m.toSec), "2026-11-20T10:02:00.000Z");
    const h = query(AnalyticsGranularity.HOUR, undefined, at("2026-11-20T10:00:00Z", 1000));
    assert.equal(iso(h.toSec), "2026-11-20T11:00:00.000Z");
    // Finer than a microsecond rounds up to the next one, as ListLogs reads its bounds: still past the boundary.
    const n = query(AnalyticsGranularity.HOUR, undefined, at("2026-11-20T10:00:00Z", 1));
    assert.equal(iso(n.toSec), "2026-11-20T11:00:00.000Z");
    // A boundary is kept.
    const b = query(AnalyticsGranularity.HOUR, undefined, at("2026-11-20T10:00:00Z"));
    assert.equal(iso(b.toSec), "2026-11-20T10:00:00.000Z");
  });

  it("rounds a start just below a boundary down to its own bucket, not the next", () => {
    const q = query(AnalyticsGranularity.MINUTE, at("2026-11-20T10:00:59Z", 999_900_000), at("2026-11-20T10:01:00Z"));
    assert.deepEqual([iso(q.fromSec), iso(q.toSec)], ["2026-11-20T10:00:00.000Z", "2026-11-20T10:01:00.000Z"]);
  });

  it("compares start and end to the microsecond, before rounding", () => {
    assert.doesNotThrow(() => query(AnalyticsGranularity.MINUTE, at("2026-11-20T10:00:59Z", 999_999_000), at("2026-11-20T10:01:00Z")));
    for (const [start, end] of [
      [at("2026-11-20T10:01:00Z", 1000), at("2026-11-20T10:01:00Z", 999)],
      [at("2026-11-20T10:01:00Z", 400_000), at("2026-11-20T10:01:00Z", 400_000)],
    ] as const) {
      assert.throws(() => query(AnalyticsGranularity.MINUTE, start, end), (e: unknown) => toErrorInfo(e).message === "`start_time` must be before `end_time`.");
    }
  });

  it("measures the longest range to the microsecond", () => {
    const start = at("2026-11-01T00:00:00Z");
    assert.doesNotThrow(() => query(AnalyticsGranularity.MINUTE, start, at("2026-11-08T00:00:00Z")));
    assert.throws(() => query(AnalyticsGranularity.MINUTE, start, at("2026-11-08T00:00:00Z", 1000)), (e: unknown) => toErrorInfo(e).message.startsWith("a minute series covers at most"));
  });
});
