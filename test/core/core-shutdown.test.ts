import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../src/config.js";
import { createCoreClients } from "../../src/index.js";
import { Plan } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../src/gen/svc/common/v1/key_mode_pb.js";
import { startServer } from "../../src/server.js";
import { createFileRegistryStore } from "../../src/stores/file-registry-store.js";

/**
 * The core port's HTTP/1.1 (Connect, gRPC-Web) at shutdown: a call is either answered or not run.
 * A keep-alive client that sends its next call as the shutdown begins must not have it run with
 * no answer to tell it so (a key created whose secret nobody ever sees).
 */
describe("the core port's HTTP/1.1 calls at shutdown", function () {
  this.timeout(60_000);
  let dir = "";
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), "svc-core-stop-"))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("answers every call it runs; one it does not run fails at the client (unavailable), and nothing it did goes unanswered", async () => {
    const running = await startServer(loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: dir, SVC_ADMIN_TOKEN: "test-admin-token", SVC_LOG_LEVEL: "error" }), { demo: true });
    const { auth } = createCoreClients({ url: running.grpcUrl, adminToken: "test-admin-token", protocol: "connect" });
    const { project } = await auth.createProject({ name: "p", plan: Plan.ENTERPRISE });
    const outcome = new Map<string, string>();
    let n = 0;
    let stop = false;
    const loops = Array.from({ length: 8 }, async () => {
      while (!stop) {
        const description = `k${n++}`;
        try {
          await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE, description });
          outcome.set(description, "answered");
        } catch (e) {
          outcome.set(description, String((e as Error).message));
          return;
        }
      }
    });
    await new Promise((r) => setTimeout(r, 500));
    await running.close();
    stop = true;
    await Promise.all(loops);
    const store = await createFileRegistryStore(dir);
    const made = new Set((await store.listKeys(project!.id)).map((k) => k.description));
    await store.close();
    const failed = [...outcome].filter(([, o]) => o !== "answered");
    assert.ok(failed.length > 0, "calls were in flight at the shutdown");
    for (const [d, o] of outcome) {
      if (o === "answered") assert.ok(made.has(d), `${d}: answered, so kept`);
      else assert.ok(!made.has(d), `${d}: failed at the client (${o}), yet the key was made`);
    }
  });
});
