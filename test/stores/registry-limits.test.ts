import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { createFileRegistryStore } from "../../src/stores/file-registry-store.js";
import { createRedisRegistryStore } from "../../src/stores/redis-registry-store.js";
import type { ProjectRecord, RegistryStore } from "../../src/stores/registry-store.js";
import { createAuthService } from "../../src/core/auth/auth-service.js";
import { createDirectClient } from "../../src/core/direct-client.js";
import { toErrorInfo } from "../../src/core/errors.js";
import { AuthService, Plan } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../src/gen/svc/common/v1/key_mode_pb.js";
import { startRedis, type TestRedis } from "../support/redis.js";

/** A project as stored before limits existed: no `limits` field. */
const oldRecord: ProjectRecord = { id: "proj_old", name: "old", plan: "free", createdAt: 1 };

interface Backend {
  name: string;
  setup(): Promise<void>;
  teardown(): Promise<void>;
  /** A fresh store over the same data, as a restarted process (or another replica) would open it. */
  open(): Promise<RegistryStore>;
  /** Writes a record the way an older version stored it. */
  writeOld(p: ProjectRecord): Promise<void>;
}

let dir = "";
let redis: TestRedis | undefined;

const backends: Backend[] = [
  {
    name: "file",
    setup: async () => void (dir = mkdtempSync(join(tmpdir(), "svc-reg-limits-"))),
    teardown: async () => rmSync(dir, { recursive: true, force: true }),
    open: () => createFileRegistryStore(dir),
    writeOld: async (p) => writeFileSync(join(dir, "registry.json"), JSON.stringify({ version: 1, projects: [p], keys: [] })),
  },
  {
    name: "redis",
    setup: async () => void (redis = await startRedis()),
    teardown: async () => redis!.stop(),
    open: async () => createRedisRegistryStore(redis!.url),
    writeOld: async (p) => {
      const r = new Redis(redis!.url);
      await r.multi().set(`{svc:reg}:project:${p.id}`, JSON.stringify(p)).zadd("{svc:reg}:projects", p.createdAt, p.id).exec();
      await r.quit();
    },
  },
];

for (const b of backends) {
  describe(`${b.name} registry store: project limits`, () => {
    const opened: RegistryStore[] = [];
    const open = async () => {
      const s = await b.open();
      opened.push(s);
      return s;
    };
    beforeEach(() => b.setup());
    afterEach(async () => {
      for (const s of opened.splice(0)) await s.close();
      await b.teardown();
    });

    it("loads records stored before limits existed", async () => {
      await b.writeOld(oldRecord);
      const store = await open();
      assert.deepEqual(await store.getProject("proj_old"), oldRecord);
      const updated = await store.updateProject("proj_old", (p) => ({ ...p, limits: { requestsPerMinute: 9 } }));
      assert.equal(updated?.limits?.requestsPerMinute, 9);
    });

    it("persists plan and limit overrides across a reopen", async () => {
      const store = await open();
      await store.createProject({ ...oldRecord, id: "proj_kept" });
      await store.updateProject("proj_kept", (p) => ({ ...p, plan: "enterprise", limits: { requestsPerDay: 5, monthlySpendCapUsd: "12.5" } }));
      await store.close();
      opened.pop();
      const again = await open();
      const p = await again.getProject("proj_kept");
      assert.equal(p?.plan, "enterprise");
      assert.deepEqual(p?.limits, { requestsPerDay: 5, monthlySpendCapUsd: "12.5" });
    });

    it("answers undefined when updating a project that does not exist", async () => {
      const store = await open();
      assert.equal(await store.updateProject("proj_none", (p) => p), undefined);
    });

    it("applies concurrent updates one after the other, losing none", async () => {
      const a = await open();
      // Redis: a second replica; file: one process per data dir, so the same store.
      const c = b.name === "redis" ? await open() : a;
      await a.createProject({ ...oldRecord, id: "proj_race" });
      const fields = ["requestsPerMinute", "requestsPerDay", "userRequestsPerMinute"] as const;
      await Promise.all(fields.map((f, i) => (i % 2 ? a : c).updateProject("proj_race", (p) => ({ ...p, limits: { ...p.limits, [f]: i + 1 } }))));
      const p = await a.getProject("proj_race");
      assert.deepEqual(p?.limits, { requestsPerMinute: 1, requestsPerDay: 2, userRequestsPerMinute: 3 });
    });

    it("never leaves a project with more keys than its plan allows when keys are created while its plan is lowered", async () => {
      const a = await open();
      const c = b.name === "redis" ? await open() : a;
      const authA = createDirectClient(AuthService, createAuthService({ store: a }));
      const authC = createDirectClient(AuthService, createAuthService({ store: c }));
      for (let round = 0; round < 15; round++) {
        const { project } = await authA.createProject({ name: `race${round}`, plan: Plan.PRO });
        const projectId = project!.id;
        await authA.createKey({ projectId, mode: KeyMode.LIVE });
        // Keys created on both replicas while one of them moves the project to free (2 keys).
        const results = await Promise.allSettled([
          ...Array.from({ length: 4 }, (_, i) => (i % 2 ? authA : authC).createKey({ projectId, mode: KeyMode.LIVE })),
          (round % 2 ? authA : authC).updateProject({ projectId, plan: Plan.FREE }),
        ]);
        for (const r of results) if (r.status === "rejected") assert.equal(toErrorInfo(r.reason).code, "key_limit_reached", String(r.reason));
        const plan = (await authA.getProject({ projectId })).project!.plan;
        const keys = (await authA.listKeys({ projectId })).keys.length;
        assert.ok(keys <= (plan === Plan.FREE ? 2 : 10), `round ${round}: ${keys} keys on plan ${Plan[plan]}`);
      }
    });
  });
}
