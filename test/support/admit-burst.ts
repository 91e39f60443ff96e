/**
 * A second process for the concurrency test: connects its own LimitsService to Redis, says
 * "ready", waits for "go" on stdin, fires N concurrent Admits and prints how many were allowed.
 *
 *   node --import tsx test/support/admit-burst.ts REDIS_URL PROJECT_ID N REQUESTS_PER_MINUTE
 */
import { createDirectClient } from "../../src/core/direct-client.js";
import { createLimitsService } from "../../src/core/limits/limits-service.js";
import { Decision, LimitsService } from "../../src/gen/svc/limits/v1/limits_service_pb.js";
import { createRedisConnection } from "../../src/stores/redis-connection.js";
import { createRedisLimitsStore } from "../../src/stores/redis-limits-store.js";
import { connectionUp } from "./limits-backends.js";

const [url, projectId, n, rpm] = process.argv.slice(2) as [string, string, string, string];
const conn = createRedisConnection(url, { name: `burst-${process.pid}` });
await connectionUp(conn);
const limits = createDirectClient(LimitsService, createLimitsService({ store: createRedisLimitsStore(conn) }));
process.stdout.write("ready\n");
await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
const rs = await Promise.all(Array.from({ length: Number(n) }, () => limits.admit({ projectId, limits: { requestsPerMinute: Number(rpm) } })));
process.stdout.write(`${JSON.stringify({ allowed: rs.filter((r) => r.decision === Decision.ALLOWED).length, degraded: rs.filter((r) => r.degraded).length })}\n`);
await conn.close();
