import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ClickHouseClient } from "@clickhouse/client";
import { utcMicrosText } from "../../src/core/telemetry/micros.js";
import { connectClickHouseServer, openChdb } from "../../src/stores/clickhouse-client.js";
import { createClickHouseTelemetryStore } from "../../src/stores/clickhouse-telemetry-store.js";
import type { ModeName } from "../../src/stores/registry-store.js";
import { type LogRow, type TelemetryStore, TelemetryUnavailableError } from "../../src/stores/telemetry-store.js";
import { startTestClickHouse, type TestClickHouse } from "./clickhouse.js";

/** 2026-11-20 12:00:00 UTC: the tests' clock. */
export const T0 = Date.UTC(2026, 10, 20, 12, 0, 0);

/** A stored log row: request `n` of project `proj_a` at T0 + n seconds, unless overridden. */
export function logRow(n: number, over: Partial<LogRow> & { timeMs?: number } = {}): LogRow {
  const { timeMs, ...rest } = over;
  const ms = timeMs ?? T0 + n * 1000;
  return {
    project_id: "proj_a",
    time: utcMicrosText(ms * 1000),
    request_id: `req_${String(n).padStart(6, "0")}`,
    key_id: "key_1",
    endpoint: "/v1/chat/completions",
    model: "chat-4o",
    provider: "openai",
    stream: false,
    status: 200,
    error_type: "",
    error_code: "",
    cache: "MISS",
    user_id: "",
    metadata: {},
    prompt_tokens: 10,
    completion_tokens: 5,
    cost_usd: "0.000125",
    cost_saved_usd: "0",
    latency_ms: 100,
    ttfb_ms: 10,
    upstream_latency_ms: 90,
    bodies_expire_at: utcMicrosText((ms + 30 * 86_400_000) * 1000).slice(0, 19),
    request_body: `{"n":${n}}`,
    response_body: "{}",
    ...rest,
  };
}

/** A telemetry store on one engine, and its teardown. */
export interface EngineUnderTest {
  name: "chdb" | "clickhouse";
  store: TelemetryStore;
  /** Opens another store on the same data (chDB: after closing `store`). */
  reopen(): Promise<TelemetryStore>;
  /** Runs a statement on the engine under `store`, beside the store (to break it on purpose). */
  sql(statement: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * Runs the same tests on both engines: chDB in this process (a data dir under the OS temp dir), and
 * a ClickHouse server over HTTP (support/clickhouse.ts: SVC_TEST_CLICKHOUSE_URL, or chDB behind the
 * HTTP interface in a child process). Each engine's `describe` gets fresh, empty data.
 */
export function forEachEngine(body: (e: () => EngineUnderTest) => void): void {
  describe("(chDB, embedded)", () => {
    let dir: string;
    let current: EngineUnderTest;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), "svc-chdb-test-"));
      let client: ClickHouseClient | undefined;
      const open = () =>
        createClickHouseTelemetryStore({
          engine: "chdb",
          connect: async () => {
            const h = await openChdb(dir);
            client = h.client;
            return h;
          },
        });
      let store = open();
      await store.ready();
      current = {
        name: "chdb",
        get store() {
          return store;
        },
        async sql(statement) {
          await client!.command({ query: statement });
        },
        async reopen() {
          await store.close();
          store = open();
          return store;
        },
        close: () => store.close(),
      };
    });
    after(async () => {
      await current.close();
      rmSync(dir, { recursive: true, force: true });
    });
    body(() => current);
  });

  describe("(ClickHouse server, over HTTP)", () => {
    let ch: TestClickHouse;
    let current: EngineUnderTest;
    const stores: TelemetryStore[] = [];
    before(async function () {
      this.timeout(60_000);
      ch = await startTestClickHouse();
      const open = () => {
        const s = createClickHouseTelemetryStore({ engine: "clickhouse", connect: async () => connectClickHouseServer(ch.url) });
        stores.push(s);
        return s;
      };
      const store = open();
      await store.ready();
      const admin = connectClickHouseServer(ch.url);
      current = { name: "clickhouse", store, reopen: async () => open(), sql: async (query) => void (await admin.client.command({ query })), close: () => admin.close() };
    });
    after(async () => {
      await current?.close();
      for (const s of stores) await s.close();
      await ch?.stop();
    });
    body(() => current);
  });
}

/**
 * A store whose inserts can be made to fail, in front of a real one: `down` fails them as an outage
 * would (nothing written); `landThenFail` writes the batch and then reports a failure, as a timeout
 * after the engine committed does. `inserted` lists the request ids of every insert that landed, in
 * order.
 */
export function failingStore(inner: TelemetryStore): TelemetryStore & { down: boolean; landThenFail: boolean; inserted: string[]; calls: number } {
  const s = {
    down: false,
    landThenFail: false,
    inserted: [] as string[],
    calls: 0,
    get engine() {
      return inner.engine;
    },
    async insert(mode: ModeName, rows: LogRow[], token: string) {
      s.calls++;
      if (s.down) throw new TelemetryUnavailableError("injected outage");
      const n = await inner.insert(mode, rows, token);
      s.inserted.push(...rows.map((r) => r.request_id));
      if (s.landThenFail) throw new TelemetryUnavailableError("injected failure after the write landed");
      return n;
    },
    listLogs: inner.listLogs.bind(inner),
    getLog: inner.getLog.bind(inner),
    analytics: inner.analytics.bind(inner),
    ready: inner.ready.bind(inner),
    close: inner.close.bind(inner),
  };
  return s;
}

/** Every log of a project and mode, newest first, paging through ListLogs-style queries. */
export async function allLogs(store: TelemetryStore, projectId: string, mode: ModeName = "live") {
  return (await store.listLogs({ projectId, mode, filter: {}, limit: 100_000 })).logs;
}
