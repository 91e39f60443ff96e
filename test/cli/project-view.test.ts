import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { projectDetailJson, projectDetailText } from "../../src/cli/project-view.js";
import { Plan, ProjectSchema } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { GetUsageResponseSchema } from "../../src/gen/svc/limits/v1/limits_service_pb.js";

describe("svc projects show: the usage line", () => {
  const usage = (requestsLastMinute: number) => create(GetUsageResponseSchema, { month: "2026-11", spentUsd: "0.5", reservedUsd: "0", requestsLastMinute, requestsLastDay: 1 });
  const project = (effectiveLimits: object) => create(ProjectSchema, { id: "proj_x", name: "x", plan: Plan.FREE, effectiveLimits });
  const text = (requestsLastMinute: number) =>
    projectDetailText(projectDetailJson(project({ requestsPerMinute: 60, requestsPerDay: 1000 }), { usage: usage(requestsLastMinute) }));

  it("counts requests in the right number", () => {
    assert.match(text(1), /: spent 0\.5 USD \(0 reserved by running requests\); 1 request in the last minute, 1 in the last day$/);
    assert.match(text(0), /; 0 requests in the last minute, 1 in the last day$/);
    assert.match(text(2), /; 2 requests in the last minute, 1 in the last day$/);
  });

  it("says what the limits do not count rather than showing it as 0: a window without its limit, spend without any limit or cap", () => {
    const none = projectDetailJson(project({}), { usage: usage(3) });
    assert.deepEqual(none.usage, { month: "2026-11", spent_usd: null, reserved_usd: null, requests_last_minute: null, requests_last_day: null });
    assert.match(projectDetailText(none), /2026-11: spend not counted here \(no limit or cap set: each request's cost is in the logs and analytics\); requests in the last minute not counted \(no limit set\), in the last day not counted \(no limit set\)$/);
    const capOnly = projectDetailJson(project({ monthlySpendCapUsd: "5" }), { usage: usage(3) });
    assert.deepEqual(capOnly.usage, { month: "2026-11", spent_usd: "0.5", reserved_usd: "0", requests_last_minute: null, requests_last_day: null });
    const dayOnly = projectDetailJson(project({ requestsPerDay: 10 }), { usage: usage(3) });
    assert.deepEqual([dayOnly.usage?.requests_last_minute, dayOnly.usage?.requests_last_day], [null, 1]);
  });
});
