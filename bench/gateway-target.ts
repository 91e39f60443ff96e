/**
 * Bench child: the real gateway with auth on, started the way test/support/gateway.ts starts it, its
 * providers pointed at the fake upstream. Reports two live keys of enterprise projects: `key`, of a
 * project with no limits set (admission is skipped), and `limitedKey`, of one with every limit and a
 * spend cap set (so each request is admitted, reserved and settled), both far above what a bench sends.
 *   BENCH_REDIS_URL   run in cluster mode on that Redis (registry, cache and limits there)
 *   BENCH_CACHE_OFF=1 switch the response cache off (SVC_CACHE_DISABLED)
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
  ...(process.env.BENCH_REDIS_URL ? { SVC_REDIS_URL: process.env.BENCH_REDIS_URL } : {}),
  ...(process.env.BENCH_CACHE_OFF === "1" ? { SVC_CACHE_DISABLED: "1" } : {}),
  // Telemetry and admission settings pass through, for comparing them (bench/telemetry-load.ts, bench/cache-limits.ts).
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith("SVC_TELEMETRY_") || k.startsWith("SVC_CACHE_") || k === "SVC_CLICKHOUSE_URL" || k === "SVC_LIMITS_ADMIT_AHEAD")),
});
const running = await startServer(config, { demo: false });
const admin = createAdminClient({ server: running.grpcUrl, token: running.adminToken });
const { project } = await admin.createProject({ name: "bench", plan: Plan.ENTERPRISE });
const live = await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
const limited = await admin.createProject({ name: "bench-limited", plan: Plan.ENTERPRISE });
await admin.updateProject({
  projectId: limited.project!.id,
  limitOverrides: { requestsPerMinute: 100_000_000, requestsPerDay: 1_000_000_000, userRequestsPerMinute: 100_000_000, monthlySpendCapUsd: "5000000" },
});
const limitedLive = await admin.createKey({ projectId: limited.project!.id, mode: KeyMode.LIVE });

serveParent({}, async () => {
  await running.close();
  rmSync(dataDir, { recursive: true, force: true });
}).ready({ url: running.gatewayUrl, key: live.secret, limitedKey: limitedLive.secret });
