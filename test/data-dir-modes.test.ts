import assert from "node:assert/strict";
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../src/config.js";
import { startServer } from "../src/server.js";
import { Plan } from "../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../src/gen/svc/common/v1/key_mode_pb.js";
import { createAdminClient } from "../src/cli/admin-client.js";
import { eventually, postJson, rawRequest } from "./support/http.js";

const mode = (p: string) => statSync(p).mode & 0o777;

/** Paths under `dir` that group or others may read, write or enter (symbolic links aside). */
function openToOthers(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = lstatSync(p);
    if (st.isSymbolicLink()) continue;
    if (st.mode & 0o077) out.push(`${p} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) out.push(...openToOthers(p));
  }
  return out;
}

/**
 * The embedded data dir holds every project's request logs (bodies included) and the admin token:
 * what the gateway creates there is its user's alone, whatever the umask it was started with.
 */
describe("the embedded data dir's modes: request logs readable by the gateway's user only", function () {
  this.timeout(120_000);
  if (process.platform === "win32") return;
  let root: string;
  let mask: number;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), "svc-modes-"));
    mask = process.umask(0o022); // as a typical login shell leaves it
  });
  afterEach(() => {
    process.umask(mask);
    rmSync(root, { recursive: true, force: true });
  });

  /** Starts the gateway on `dataDir`, logs one request and waits until the engine has it. */
  const serveOneLog = async (dataDir: string) => {
    const running = await startServer(loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: "error", SVC_TELEMETRY_FLUSH_INTERVAL_MS: "20" }), { demo: true });
    try {
      const admin = createAdminClient({ server: running.grpcUrl, token: running.adminToken });
      const { project } = await admin.createProject({ name: "modes", plan: Plan.PRO });
      const key = (await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE })).secret;
      assert.equal((await postJson(`${running.gatewayUrl}/v1/chat/completions`, key, { model: "chat-4o", messages: [{ role: "user", content: "a secret body" }] })).status, 200);
      await eventually(async () => (await rawRequest(`${running.managementUrl}/v1/logs`, { method: "GET", headers: { authorization: `Bearer ${key}` } })).json().data?.length === 1, 20_000, "the log stored");
    } finally {
      await running.close();
    }
  };

  it("creates a missing data dir 0700, and telemetry/ and telemetry-spool/ in it, with nothing in them open to others", async () => {
    const dataDir = join(root, "a", "data");
    await serveOneLog(dataDir);
    assert.equal(mode(dataDir), 0o700);
    assert.equal(mode(join(dataDir, "telemetry")), 0o700);
    assert.equal(mode(join(dataDir, "telemetry-spool")), 0o700);
    assert.ok(readdirSync(join(dataDir, "telemetry")).length > 0, "the engine wrote its files");
    assert.deepEqual(openToOthers(dataDir), []);
  });

  it("leaves an existing data dir's own mode as it is, and makes the gateway's telemetry/ 0700 (as an earlier release left it: 0755)", async () => {
    const dataDir = join(root, "mine");
    mkdirSync(dataDir, { mode: 0o750 });
    chmodSync(dataDir, 0o750);
    mkdirSync(join(dataDir, "telemetry"), { mode: 0o755 });
    chmodSync(join(dataDir, "telemetry"), 0o755);
    await serveOneLog(dataDir);
    assert.equal(mode(dataDir), 0o750, "the operator's choice");
    assert.equal(mode(join(dataDir, "telemetry")), 0o700);
    assert.ok(existsSync(join(dataDir, "registry.json")));
  });
});
