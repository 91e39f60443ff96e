import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../src/config.js";
import type { ClientTimeouts } from "../../src/client-timeouts.js";
import { startServer, type RunningServer } from "../../src/server.js";
import { createAdminClient } from "../../src/cli/admin-client.js";
import { Plan } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../src/gen/svc/common/v1/key_mode_pb.js";
import { startRedis, type TestRedis } from "./redis.js";
import { TEST_ENGINE } from "./test-engine.js";

export interface TestGateway extends RunningServer {
  /** Creates a project and returns it with a live and a test key value. */
  project(plan?: Plan): Promise<{ projectId: string; live: string; test: string; liveKeyId: string }>;
  admin: ReturnType<typeof createAdminClient>;
}

/**
 * Starts the whole service in-process on free ports with a private data dir and the built-in demo
 * provider as its real HTTP upstream. `env` adds settings (e.g. SVC_REDIS_URL, timeouts).
 */
export async function startTestGateway(env: Record<string, string> = {}, demo = true, clientTimeouts?: Partial<ClientTimeouts>): Promise<TestGateway> {
  const dataDir = mkdtempSync(join(tmpdir(), "svc-test-"));
  const config = loadConfig({
    SVC_GATEWAY_PORT: "0",
    SVC_MANAGEMENT_PORT: "0",
    SVC_GRPC_PORT: "0",
    SVC_DATA_DIR: dataDir,
    SVC_ADMIN_TOKEN: "test-admin-token",
    ...TEST_ENGINE,
    ...env,
  });
  const running = await startServer(config, { demo, clientTimeouts });
  const admin = createAdminClient({ server: running.grpcUrl, token: running.adminToken });
  return {
    ...running,
    admin,
    async project(plan = Plan.PRO) {
      const { project } = await admin.createProject({ name: "test", plan });
      const live = await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
      const test = await admin.createKey({ projectId: project!.id, mode: KeyMode.TEST });
      return { projectId: project!.id, live: live.secret, test: test.secret, liveKeyId: live.key!.id };
    },
    async close() {
      await running.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * One gateway on embedded defaults with a pro project and its keys, started before the enclosing
 * `describe`'s tests and stopped after them. Call it inside a `describe`; read `gw` and `keys` in tests.
 */
export function gatewayWithProject(): { readonly gw: TestGateway; readonly keys: Awaited<ReturnType<TestGateway["project"]>> } {
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  before(async () => {
    gw = await startTestGateway();
    keys = await gw.project();
  });
  after(() => gw.close());
  return {
    get gw() {
      return gw;
    },
    get keys() {
      return keys;
    },
  };
}

/**
 * Two gateway replicas in cluster mode on one private Redis, started before the enclosing
 * `describe`'s tests and stopped after them. Call it inside a `describe`; read `a` and `b` in tests.
 */
export function replicasOnOneRedis(): { readonly a: TestGateway; readonly b: TestGateway; readonly redis: TestRedis } {
  let redis: TestRedis;
  let a: TestGateway;
  let b: TestGateway;
  before(async () => {
    redis = await startRedis();
    a = await startTestGateway({ SVC_REDIS_URL: redis.url });
    b = await startTestGateway({ SVC_REDIS_URL: redis.url });
  });
  after(async () => {
    await a.close();
    await b.close();
    await redis.stop();
  });
  return {
    get a() {
      return a;
    },
    get b() {
      return b;
    },
    get redis() {
      return redis;
    },
  };
}
