/**
 * Bench child: the real gateway with auth on, started the way test/support/gateway.ts starts it, its
 * providers pointed at the fake upstream. Reports a live key of an enterprise project.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAdminClient } from "../src/cli/admin-client.js";
import { loadConfig } from "../src/config.js";
import { Plan } from "../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../src/gen/svc/common/v1/key_mode_pb.js";
import { startServer } from "../src/server.js";
import { serveParent } from "./proc.js";

const upstream = process.env.BENCH_UPSTREAM;
if (!upstream) throw new Error("BENCH_UPSTREAM is required");

const dataDir = mkdtempSync(join(tmpdir(), "svc-bench-"));
const config = loadConfig({
  SVC_GATEWAY_PORT: "0",
  SVC_MANAGEMENT_PORT: "0",
  SVC_GRPC_PORT: "0",
  SVC_DATA_DIR: dataDir,
  SVC_ADMIN_TOKEN: "bench-admin-token",
  SVC_OPENAI_BASE_URL: `${upstream}/v1`,
  SVC_OPENAI_API_KEY: "bench",
  SVC_ANTHROPIC_BASE_URL: upstream,
  SVC_ANTHROPIC_API_KEY: "bench",
});
const running = await startServer(config, { demo: false });
const admin = createAdminClient({ server: running.grpcUrl, token: running.adminToken });
const { project } = await admin.createProject({ name: "bench", plan: Plan.ENTERPRISE });
const live = await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE });

serveParent({}, async () => {
  await running.close();
  rmSync(dataDir, { recursive: true, force: true });
}).ready({ url: running.gatewayUrl, key: live.secret });
