import assert from "node:assert/strict";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { Decision } from "../../../src/gen/svc/limits/v1/limits_service_pb.js";
import { replicasOnOneRedis } from "../../support/gateway.js";

describe("cluster mode: the LimitsService of two replicas on one Redis", () => {
  const replicas = replicasOnOneRedis();

  it("shares one window between replicas, with the limits VerifyKey returned", async () => {
    const { a, b } = replicas;
    const { projectId, live } = await a.project(Plan.FREE);
    await a.admin.updateProject({ projectId, limitOverrides: { requestsPerMinute: 7 } });
    const { project } = await b.admin.verifyKey({ secret: live });
    const rs = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).limits.admit({ projectId, limits: project!.effectiveLimits })));
    assert.equal(rs.filter((r) => r.decision === Decision.ALLOWED).length, 7);
    assert.ok(rs.every((r) => !r.degraded));
  });
});
