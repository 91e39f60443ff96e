import { makeDir } from "./make-dir.js";
import { ClickHouseLogLevel, createClient, type ClickHouseClient } from "@clickhouse/client";
import { TelemetryUnavailableError } from "./telemetry-store.js";

/** A ClickHouse client of either engine and how to release it. */
export interface ClickHouseHandle {
  client: ClickHouseClient;
  /** "clickhouse" (a server, over HTTP) or "chdb" (in process). */
  engine: "clickhouse" | "chdb";
  /** True once this client no longer reaches the engine (it moved to another address): a new one is opened. */
  stale?(): boolean;
  close(): Promise<void>;
}

/**
 * A client of a ClickHouse server over HTTP(S). The URL may carry credentials and the database
 * (`http://user:pass@host:8123/db`); `password` (the embedded engine's, chdb-process.ts) is sent as
 * the default user's. Nothing is sent until the first query.
 */
export function connectClickHouseServer(url: string, opts: { requestTimeoutMs?: number; password?: string } = {}): ClickHouseHandle {
  const client = createClient({
    url,
    ...(opts.password !== undefined ? { username: "default", password: opts.password } : {}),
    request_timeout: opts.requestTimeoutMs ?? 10_000,
    max_open_connections: 4,
    application: "svc-gateway",
    // The writer logs an outage once, and readers answer 503: the client's per-request error log
    // would repeat it for every retry.
    log: { level: ClickHouseLogLevel.OFF },
  });
  return { client, engine: "clickhouse", close: () => client.close() };
}

/**
 * Opens chDB, the embedded ClickHouse engine, on a data directory, behind the same
 * `@clickhouse/client` interface as a server: chDB's Node package ships a Connection
 * (`chdb/connection`) that the client's `connection` option accepts, so every query, insert and
 * query parameter goes through the client exactly as over HTTP.
 *
 * chDB is an optional dependency (its native library is ~550 MB): when it is not installed, or
 * when this process already has chDB open on another directory (libchdb binds one data directory
 * per process), this throws TelemetryUnavailableError and the caller treats it as an outage.
 */
export async function openChdb(dir: string): Promise<ClickHouseHandle> {
  type ChdbConnectionModule = { createChdbConnection(opts: { path: string }): unknown };
  type ChdbModule = { drainPending(): Promise<void> };
  let connectionModule: ChdbConnectionModule;
  let rootModule: ChdbModule;
  try {
    connectionModule = (await import("chdb/connection")) as unknown as ChdbConnectionModule;
    rootModule = (await import("chdb")) as unknown as ChdbModule;
  } catch (e) {
    throw new TelemetryUnavailableError("chDB is not installed (the optional dependency `chdb`); install it or set SVC_CLICKHOUSE_URL", { cause: e });
  }
  await makeDir(dir);
  let connection: unknown;
  try {
    connection = connectionModule.createChdbConnection({ path: dir });
  } catch (e) {
    throw new TelemetryUnavailableError(`cannot open chDB on ${dir}: ${(e as Error).message}`, { cause: e });
  }
  // The Connection type chDB implements is @clickhouse/client-common's, the one the client bundles.
  const client = createClient({ connection: connection as never });
  return {
    client,
    engine: "chdb",
    async close() {
      await client.close();
      // Frees the process's chDB slot for good, so another directory can be opened after this.
      await rootModule.drainPending();
    },
  };
}
