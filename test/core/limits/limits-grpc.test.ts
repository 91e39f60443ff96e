import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";

const protoDir = fileURLToPath(new URL("../../../proto", import.meta.url));

const unary = <T>(client: any, method: string, req: object, md: grpc.Metadata): Promise<T> =>
  new Promise((resolve, reject) => client[method](req, md, (err: Error | null, res: T) => (err ? reject(err) : resolve(res))));

describe("LimitsService over gRPC (independent @grpc/grpc-js client loading the .proto files)", () => {
  let gw: TestGateway;

  before(async () => {
    gw = await startTestGateway();
  });
  after(() => gw.close());

  it("admits against the limits it is given, or the project's own when it is given none", async () => {
    const def = protoLoader.loadSync(["svc/limits/v1/limits_service.proto"], { includeDirs: [protoDir], keepCase: true, enums: String, defaults: true, oneofs: true });
    const pkg: any = grpc.loadPackageDefinition(def);
    const md = new grpc.Metadata();
    md.set("authorization", `Bearer ${gw.adminToken}`);
    const limits = new pkg.svc.limits.v1.LimitsService(new URL(gw.grpcUrl).host, grpc.credentials.createInsecure());
    try {
      const { projectId } = await gw.project(Plan.FREE);
      const given = { project_id: projectId, user_id: "u1", limits: { user_requests_per_minute: 1 } };
      const first = await unary<any>(limits, "Admit", given, md);
      assert.equal(first.decision, "DECISION_ALLOWED");
      assert.equal(first.window, "LIMIT_WINDOW_USER_MINUTE");
      const second = await unary<any>(limits, "Admit", given, md);
      assert.equal(second.decision, "DECISION_USER_LIMITED");
      assert.ok(second.retry_after_seconds >= 1);

      const own = await unary<any>(limits, "Admit", { project_id: projectId, max_cost_usd: "0.5" }, md);
      assert.equal(own.decision, "DECISION_ALLOWED");
      assert.equal(own.limit, 60); // the free plan's requests per minute, read from the registry
      await unary(limits, "Settle", { project_id: projectId, reservation_id: own.reservation_id, cost_usd: "0.25" }, md);
      const usage = await unary<any>(limits, "GetUsage", { project_id: projectId }, md);
      assert.equal(usage.spent_usd, "0.25");
    } finally {
      limits.close();
    }
  });
});
