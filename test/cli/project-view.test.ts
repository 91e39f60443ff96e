import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { projectDetailJson, projectDetailText } from "../../src/cli/project-view.js";
import { Plan, ProjectSchema } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { GetUsageResponseSchema } from "../../src/gen/svc/limits/v1/limits_service_pb.js";

describe("svc projects show: the usage line", () => {
  const text = (requestsLastMinute: number) =>
    projectDetailText(projectDetailJson(create(ProjectSchema, { id: "proj_x", name: "x", plan: Plan.FREE }), {
      usage: create(GetUsageResponseSchema, { month: "2026-11", spentUsd: "0", reservedUsd: "0", requestsLastMinute, requestsLastDay: 1 }),
    }));

  it("counts requests in the right number", () => {
    assert.match(text(1), /; 1 request in the last minute, 1 in the last day$/);
    assert.match(text(0), /; 0 requests in the last minute, 1 in the last day$/);
    assert.match(text(2), /; 2 requests in the last minute, 1 in the last day$/);
  });
});
