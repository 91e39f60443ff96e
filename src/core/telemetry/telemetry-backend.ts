import { join } from "node:path";
import type { ServiceImpl } from "@connectrpc/connect";
import { ConfigError, type TelemetryConfig } from "../../config.js";
import type { TelemetryService } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { log } from "../../logger.js";
import { type SupervisedChdb, superviseChdb } from "../../stores/chdb-process.js";
import { type ClickHouseHandle, connectClickHouseServer } from "../../stores/clickhouse-client.js";
import { createClickHouseTelemetryStore } from "../../stores/clickhouse-telemetry-store.js";
import { createFilePromptStore } from "../../stores/file-prompt-store.js";
import { dirProblem } from "../../stores/make-dir.js";
import type { PromptStore } from "../../stores/prompt-store.js";
import type { RedisTarget } from "../../stores/redis-connection.js";
import { createRedisPromptStore } from "../../stores/redis-prompt-store.js";
import type { TelemetryStore } from "../../stores/telemetry-store.js";
import { openLogSpool } from "./log-spool.js";
import { createLogWriter, type LogWriter } from "./log-writer.js";
import { createTelemetryService } from "./telemetry-service.js";

/** The TelemetryService of this process, its parts, and how to release them. */
export interface TelemetryBackend {
  impl: ServiceImpl<typeof TelemetryService>;
  writer: LogWriter;
  store: TelemetryStore;
  prompts: PromptStore;
  /** Flushes the writer (spooling what the store cannot take), then closes the stores. */
  close(): Promise<void>;
}

/**
 * Chooses the telemetry engine by deployment mode: a ClickHouse server when
 * `SVC_CLICKHOUSE_URL` is set (cluster), chDB under `<dataDir>/telemetry` otherwise (embedded); and
 * the prompt registry beside the other registry data: Redis in cluster mode, a file otherwise.
 *
 * Start-up does not wait for the engine: it is opened and migrated in the background, calls wait
 * for it, and while it cannot be opened logs are spooled and reads answer 503.
 *
 * `checkProject` is how the prompt calls learn that a project exists (the AuthService's GetProject,
 * in server.ts): rejects with 404 `project_not_found` when it does not.
 */
export async function createTelemetryBackend(
  opts: { dataDir: string; redisUrl: RedisTarget | undefined; telemetry: TelemetryConfig },
  checkProject: (projectId: string) => Promise<void>,
): Promise<TelemetryBackend> {
  const { telemetry: config } = opts;
  const url = config.clickhouseUrl;
  // First, before the engine starts: a spool dir that cannot be used stops the server.
  const spool = await openLogSpool(config.spoolDir, { maxBytes: config.spoolMaxBytes }).catch((e: unknown) => {
    throw new ConfigError(`SVC_TELEMETRY_SPOOL_DIR ${config.spoolDir} cannot be used as the log spool: ${dirProblem(e)}`, { cause: e });
  });
  // Embedded: chDB in a supervised child process (stores/chdb-server.ts says why), reached like a server.
  const chdb = url ? undefined : superviseChdb(join(opts.dataDir, "telemetry"), (level, msg) => log[level](msg), { nice: config.engineNice });
  const connectChdb = async (sup: SupervisedChdb): Promise<ClickHouseHandle> => {
    const at = await sup.url();
    // Its engine gone (another will have another port): nothing more is sent to this address,
    // which any local process may have taken by then (what the client sends carries the password).
    const stale = () => sup.currentUrl !== at;
    return { ...connectClickHouseServer(at, { password: sup.password }), engine: "chdb", stale };
  };
  const store = chdb
    ? createClickHouseTelemetryStore({ engine: "chdb", connect: () => connectChdb(chdb) })
    : createClickHouseTelemetryStore({ engine: "clickhouse", connect: async () => connectClickHouseServer(url!) });
  const writer = createLogWriter({ store, spool, batchSize: config.batchSize, flushIntervalMs: config.flushIntervalMs });
  const prompts = opts.redisUrl ? createRedisPromptStore(opts.redisUrl) : await createFilePromptStore(opts.dataDir);
  store.ready().then(
    (applied) => {
      if (applied.length) log.info("telemetry store migrated", { engine: store.engine, applied: applied.map((m) => `${m.version}_${m.name}`) });
    },
    (err: Error) => log.warn("telemetry store not ready: logs are spooled until it is", { engine: store.engine, err: err.message }),
  );
  return {
    impl: createTelemetryService({ store, writer, prompts, checkProject, bodyTtlDays: config.bodyTtlDays }),
    writer,
    store,
    prompts,
    async close() {
      await writer.close();
      await store.close();
      await prompts.close();
      await chdb?.stop();
    },
  };
}
