import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConnectError } from "@connectrpc/connect";
import { createAuthService } from "../../../src/core/auth/auth-service.js";
import { createDirectClient } from "../../../src/core/direct-client.js";
import { toErrorInfo } from "../../../src/core/errors.js";
import { AuthService, LimitField, Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import type { ProjectLimits } from "../../../src/gen/svc/common/v1/project_limits_pb.js";
import { createFileRegistryStore } from "../../../src/stores/file-registry-store.js";
import type { RegistryStore } from "../../../src/stores/registry-store.js";

const plain = (l: ProjectLimits | undefined) => ({
  rpm: l?.requestsPerMinute,
  rpd: l?.requestsPerDay,
  user: l?.userRequestsPerMinute,
  cap: l?.monthlySpendCapUsd,
});

describe("AuthService project limits", () => {
  let dir: string;
  let store: RegistryStore;
  let auth: ReturnType<typeof createDirectClient<typeof AuthService>>;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), "svc-auth-limits-"));
    store = await createFileRegistryStore(dir);
    auth = createDirectClient(AuthService, createAuthService({ store }));
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const project = async (plan: Plan) => (await auth.createProject({ name: "p", plan })).project!;

  const refused = async (p: Promise<unknown>, field: string) => {
    await assert.rejects(p, (e: unknown) => {
      assert.ok(e instanceof ConnectError);
      const info = toErrorInfo(e);
      assert.deepEqual([info.status, info.type, info.code], [400, "invalid_request_error", "invalid_value"]);
      assert.ok(info.message.includes(field), info.message);
      return true;
    });
  };

  it("gives each plan its default limits, enterprise none", async () => {
    assert.deepEqual(plain((await project(Plan.FREE)).effectiveLimits), { rpm: 60, rpd: 1000, user: undefined, cap: undefined });
    assert.deepEqual(plain((await project(Plan.PRO)).effectiveLimits), { rpm: 600, rpd: 100_000, user: undefined, cap: undefined });
    assert.deepEqual(plain((await project(Plan.ENTERPRISE)).effectiveLimits), { rpm: undefined, rpd: undefined, user: undefined, cap: undefined });
  });

  it("sets overrides that replace the plan's defaults", async () => {
    const p = await project(Plan.FREE);
    const { project: updated } = await auth.updateProject({
      projectId: p.id,
      limitOverrides: { requestsPerMinute: 100, userRequestsPerMinute: 5, monthlySpendCapUsd: "12.50" },
    });
    assert.deepEqual(plain(updated!.limitOverrides), { rpm: 100, rpd: undefined, user: 5, cap: "12.5" });
    assert.deepEqual(plain(updated!.effectiveLimits), { rpm: 100, rpd: 1000, user: 5, cap: "12.5" });
  });

  it("gives VerifyKey the project's effective limits, so admission needs no other read", async () => {
    const p = await project(Plan.ENTERPRISE);
    const { secret } = await auth.createKey({ projectId: p.id, mode: KeyMode.LIVE });
    await auth.updateProject({ projectId: p.id, limitOverrides: { requestsPerDay: 5000 } });
    const v = await auth.verifyKey({ secret });
    assert.deepEqual(plain(v.project!.effectiveLimits), { rpm: undefined, rpd: 5000, user: undefined, cap: undefined });
  });

  it("clears an override back to the plan's default and keeps the others", async () => {
    const p = await project(Plan.PRO);
    await auth.updateProject({ projectId: p.id, limitOverrides: { requestsPerMinute: 5, monthlySpendCapUsd: "1" } });
    const { project: cleared } = await auth.updateProject({ projectId: p.id, clearedLimits: [LimitField.REQUESTS_PER_MINUTE] });
    assert.deepEqual(plain(cleared!.limitOverrides), { rpm: undefined, rpd: undefined, user: undefined, cap: "1" });
    assert.equal(cleared!.effectiveLimits!.requestsPerMinute, 600);
  });

  it("changes the plan, keeping overrides", async () => {
    const p = await project(Plan.FREE);
    await auth.updateProject({ projectId: p.id, limitOverrides: { requestsPerMinute: 7 } });
    const { project: up } = await auth.updateProject({ projectId: p.id, plan: Plan.ENTERPRISE });
    assert.equal(up!.plan, Plan.ENTERPRISE);
    assert.deepEqual(plain(up!.effectiveLimits), { rpm: 7, rpd: undefined, user: undefined, cap: undefined });
    assert.equal((await auth.getProject({ projectId: p.id })).project!.plan, Plan.ENTERPRISE);
  });

  it("refuses rate overrides that are not whole numbers in range, naming the field", async () => {
    const p = await project(Plan.FREE);
    await refused(auth.updateProject({ projectId: p.id, limitOverrides: { requestsPerMinute: -1 } }), "limit_overrides.requests_per_minute");
    await refused(auth.updateProject({ projectId: p.id, limitOverrides: { requestsPerMinute: 0 } }), "limit_overrides.requests_per_minute");
    await refused(auth.updateProject({ projectId: p.id, limitOverrides: { requestsPerDay: 2_000_000_000 } }), "limit_overrides.requests_per_day");
    await refused(auth.updateProject({ projectId: p.id, limitOverrides: { userRequestsPerMinute: 1.5 } }), "limit_overrides.user_requests_per_minute");
  });

  it("refuses spend caps that are not non-negative USD amounts in range, naming the field", async () => {
    const p = await project(Plan.FREE);
    for (const cap of ["abc", "-5", "1e6", "5000000.01", "0.0000000001", "", " 5", "5 ", "\t5", "5\n"]) {
      await refused(auth.updateProject({ projectId: p.id, limitOverrides: { monthlySpendCapUsd: cap } }), "limit_overrides.monthly_spend_cap_usd");
    }
  });

  it("refuses a limit both set and cleared, and an unknown plan", async () => {
    const p = await project(Plan.FREE);
    await refused(auth.updateProject({ projectId: p.id, limitOverrides: { requestsPerMinute: 5 }, clearedLimits: [LimitField.REQUESTS_PER_MINUTE] }), "requests_per_minute");
    await refused(auth.updateProject({ projectId: p.id, clearedLimits: [LimitField.UNSPECIFIED] }), "cleared_limits");
    await refused(auth.updateProject({ projectId: p.id, plan: 9 as Plan }), "plan");
  });

  it("leaves a project unchanged after a refused update, and answers 404 for an unknown one", async () => {
    const p = await project(Plan.FREE);
    await auth.updateProject({ projectId: p.id, limitOverrides: { requestsPerMinute: 5, requestsPerDay: -1 } }).catch(() => undefined);
    assert.equal((await auth.getProject({ projectId: p.id })).project!.effectiveLimits!.requestsPerMinute, 60);
    await assert.rejects(auth.updateProject({ projectId: "proj_nope", plan: Plan.PRO }), (e: unknown) => toErrorInfo(e).status === 404);
  });
  it("creates a project with limits and body logging set at once, checked as an update checks them", async () => {
    const { project: p } = await auth.createProject({
      name: "limited",
      plan: Plan.FREE,
      limitOverrides: { requestsPerMinute: 5, userRequestsPerMinute: 2, monthlySpendCapUsd: "1.50" },
      logBodies: false,
    });
    assert.deepEqual(plain(p!.limitOverrides), { rpm: 5, rpd: undefined, user: 2, cap: "1.5" });
    assert.deepEqual(plain(p!.effectiveLimits), { rpm: 5, rpd: 1000, user: 2, cap: "1.5" });
    assert.equal(p!.logBodies, false);
    assert.deepEqual(plain((await auth.getProject({ projectId: p!.id })).project!.limitOverrides), { rpm: 5, rpd: undefined, user: 2, cap: "1.5" });
    // A bad value refuses the whole creation: no project is left without the limits asked for.
    const before = (await auth.listProjects({})).projects.length;
    await refused(auth.createProject({ name: "bad", plan: Plan.FREE, limitOverrides: { requestsPerMinute: 0 } }), "requests_per_minute");
    await refused(auth.createProject({ name: "bad", plan: Plan.FREE, limitOverrides: { monthlySpendCapUsd: "-1" } }), "monthly_spend_cap_usd");
    assert.equal((await auth.listProjects({})).projects.length, before);
    // Without them a project follows its plan and logs bodies, as before.
    const plainProject = (await auth.createProject({ name: "plain", plan: Plan.PRO })).project!;
    assert.deepEqual(plain(plainProject.limitOverrides), { rpm: undefined, rpd: undefined, user: undefined, cap: undefined });
    assert.equal(plainProject.logBodies, true);
  });

  it("refuses a plan that allows fewer keys than the project has, saying how many to delete, and leaves it unchanged", async () => {
    const p = await project(Plan.PRO);
    for (const mode of [KeyMode.LIVE, KeyMode.LIVE, KeyMode.TEST]) await auth.createKey({ projectId: p.id, mode });
    await assert.rejects(auth.updateProject({ projectId: p.id, plan: Plan.FREE, limitOverrides: { requestsPerMinute: 7 } }), (e: unknown) => {
      const info = toErrorInfo(e);
      assert.deepEqual([info.status, info.type, info.code], [403, "permission_error", "key_limit_reached"]);
      assert.match(info.message, /free plan allows 2 keys per project .* has 3; delete 1 key,/);
      return true;
    });
    const kept = (await auth.getProject({ projectId: p.id })).project!;
    assert.equal(kept.plan, Plan.PRO);
    assert.equal(kept.effectiveLimits!.requestsPerMinute, 600);
    // A plan with room for the keys is taken, with other changes; after a deletion, so is free.
    await auth.updateProject({ projectId: p.id, plan: Plan.ENTERPRISE });
    await auth.updateProject({ projectId: p.id, plan: Plan.PRO, limitOverrides: { requestsPerDay: 50 } });
    const { keys } = await auth.listKeys({ projectId: p.id });
    await auth.deleteKey({ keyId: keys[0]!.id });
    const { project: free } = await auth.updateProject({ projectId: p.id, plan: Plan.FREE });
    assert.equal(free!.plan, Plan.FREE);
  });
});
