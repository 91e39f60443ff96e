import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBase62 } from "../../../src/core/ids.js";
import { openLogSpool } from "../../../src/core/telemetry/log-spool.js";
import { createLogWriter, type LogWriter } from "../../../src/core/telemetry/log-writer.js";
import { connectClickHouseServer, openChdb } from "../../../src/stores/clickhouse-client.js";
import { createClickHouseTelemetryStore } from "../../../src/stores/clickhouse-telemetry-store.js";
import type { TelemetryStore } from "../../../src/stores/telemetry-store.js";
import { startTestClickHouse, type TestClickHouse } from "../../support/clickhouse.js";
import { eventually } from "../../support/http.js";
import { allLogs, failingStore, logRow } from "../../support/telemetry.js";

const project = () => `proj_${randomBase62(10)}`;
const ids = (rows: Array<{ request_id: string }>) => rows.map((r) => r.request_id);
const fast = { batchSize: 10, flushIntervalMs: 20, retryMinMs: 20, retryMaxMs: 100 };

/** Waits until the store holds `n` logs of the project (polling its listing). */
async function until(store: TelemetryStore, projectId: string, n: number, ms = 10_000) {
  let count = -1;
  const end = Date.now() + ms;
  while (Date.now() < end) {
    count = (await allLogs(store, projectId).catch(() => [])).length;
    if (count >= n) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`expected ${n} logs, found ${count}`);
}

describe("log writer", function () {
  this.timeout(60_000);
  const dirs: string[] = [];
  const tmp = (prefix: string) => {
    const d = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(d);
    return d;
  };
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  describe("over chDB with injected failures", () => {
    let inner: TelemetryStore;
    let writers: LogWriter[];
    before(async () => {
      const dir = tmp("svc-writer-chdb-");
      inner = createClickHouseTelemetryStore({ engine: "chdb", connect: () => openChdb(dir) });
      await inner.ready();
    });
    beforeEach(() => {
      writers = [];
    });
    afterEach(async () => {
      for (const w of writers) await w.close();
    });
    after(() => inner.close());

    const writerOn = async (store: TelemetryStore, spoolDir = tmp("svc-spool-")) => {
      const w = createLogWriter({ store, spool: await openLogSpool(spoolDir, { maxBytes: 1 << 30 }), ...fast });
      writers.push(w);
      return w;
    };

    it("writes recorded logs in batches, off the caller's path", async () => {
      const p = project();
      const w = await writerOn(inner);
      const started = performance.now();
      for (let i = 0; i < 25; i++) w.record("live", logRow(i, { project_id: p }));
      assert.ok(performance.now() - started < 50, "record only queues");
      await until(inner, p, 25);
      assert.equal(w.stats.written, 25);
    });

    it("stores and counts once a request id recorded twice in one batch", async () => {
      const p = project();
      const w = await writerOn(inner);
      const twice = logRow(1, { project_id: p });
      // The same request id in another project is another request.
      const q = project();
      for (const r of [twice, logRow(2, { project_id: p }), twice, logRow(1, { project_id: q })]) w.record("live", r);
      await w.flush();
      assert.equal(w.stats.written, 3);
      const day = (projectId: string) => ({ projectId, fromSec: 0, toSec: 2 ** 31, granularity: "day" as const, groupLimit: 10 });
      assert.equal((await inner.analytics(day(p))).totals.requests, 2, "counted once in the rollups");
      assert.equal((await inner.analytics(day(q))).totals.requests, 1);
    });

    it("inserts once per flush interval under steady traffic, not once per insert's duration", async () => {
      // Every insert here takes about as long as the engine's do (tens of ms); rows keep coming.
      // A writer that drained its queue until empty would insert back to back, a few rows each.
      const p = project();
      const store = failingStore(inner);
      const slow = { ...store, insert: async (...a: Parameters<TelemetryStore["insert"]>) => (await new Promise((r) => setTimeout(r, 40)), store.insert(...a)) };
      const w = createLogWriter({ store: slow as TelemetryStore, spool: await openLogSpool(tmp("svc-spool-"), { maxBytes: 1 << 30 }), batchSize: 1000, flushIntervalMs: 500 });
      writers.push(w);
      const started = Date.now();
      let n = 0;
      while (Date.now() - started < 2000) {
        w.record("live", logRow(n++, { project_id: p }));
        await new Promise((r) => setTimeout(r, 5));
      }
      await w.flush();
      await until(inner, p, n);
      assert.ok(store.calls <= 7, `${store.calls} inserts for ${n} rows in 2 s at one flush per 500 ms`);
      assert.equal(w.stats.written, n);
    });

    it("spools while the store is down, then replays everything once, in order", async () => {
      const p = project();
      const store = failingStore(inner);
      store.down = true;
      const spoolDir = tmp("svc-spool-");
      const w = await writerOn(store, spoolDir);
      const rows = Array.from({ length: 35 }, (_, i) => logRow(i, { project_id: p }));
      for (const r of rows.slice(0, 20)) w.record("live", r);
      await eventually(() => w.stats.spooled === 20, 5000, "20 spooled");
      assert.equal(w.stats.outage, true);
      assert.ok(w.stats.failures > 0);
      assert.ok(readdirSync(spoolDir).some((f) => f.endsWith(".jsonl")));
      // Logs recorded during the outage join the spool behind the older ones.
      for (const r of rows.slice(20)) w.record("live", r);
      await eventually(() => w.stats.spooled === 35, 5000, "35 spooled");
      store.down = false;
      await until(inner, p, 35);
      assert.deepEqual(store.inserted.filter((id) => rows.some((r) => r.request_id === id)), ids(rows), "replayed in the order recorded");
      assert.deepEqual(ids(await allLogs(inner, p)), ids(rows).reverse());
      assert.equal(w.stats.outage, false);
      assert.equal(w.stats.replayed, 35);
      await eventually(() => w.stats.spoolBatches === 0, 5000, "empty spool");
      assert.deepEqual(readdirSync(spoolDir).filter((f) => f.endsWith(".jsonl")), []);
    });

    it("never stores a batch twice when a write lands but reports a failure", async () => {
      const p = project();
      const store = failingStore(inner);
      store.landThenFail = true;
      const w = await writerOn(store);
      for (let i = 0; i < 10; i++) w.record("live", logRow(i, { project_id: p }));
      await eventually(() => w.stats.spooled === 10, 5000, "spooled after the ambiguous failure");
      store.landThenFail = false;
      await eventually(() => w.stats.spoolBatches === 0, 5000, "replayed");
      assert.equal((await allLogs(inner, p)).length, 10);
      const range = { projectId: p, fromSec: 0, toSec: 2 ** 31, granularity: "day" as const, groupLimit: 10 };
      assert.equal((await inner.analytics(range)).totals.requests, 10, "counted once in the rollups");
    });

    it("flushes on close, and spools on close when the store is down; the next writer replays", async () => {
      const p = project();
      const w1 = await writerOn(inner);
      for (let i = 0; i < 7; i++) w1.record("test", logRow(i, { project_id: p }));
      await w1.close();
      assert.equal((await allLogs(inner, p, "test")).length, 7, "close() wrote the partial batch");

      const store = failingStore(inner);
      store.down = true;
      const spoolDir = tmp("svc-spool-");
      const w2 = await writerOn(store, spoolDir);
      for (let i = 7; i < 12; i++) w2.record("test", logRow(i, { project_id: p }));
      await w2.close();
      assert.equal(w2.stats.spooled, 5);
      w2.record("test", logRow(99, { project_id: p }));
      assert.equal(w2.stats.dropped, 1, "a log after close is counted, not thrown");

      const w3 = await writerOn(inner, spoolDir); // the next start, on the same spool
      await eventually(() => w3.stats.replayed === 5, 5000, "replayed by the next writer");
      assert.equal((await allLogs(inner, p, "test")).length, 12);
    });

    it("sets aside a batch the store keeps refusing, and goes on with the rest", async () => {
      const p = project();
      const spoolDir = tmp("svc-spool-");
      const w = await writerOn(inner, spoolDir);
      w.record("live", { ...logRow(1, { project_id: p }), cost_usd: "not a number" }); // the engine refuses it
      await eventually(() => w.stats.rejected === 1, 10_000, "set aside");
      w.record("live", logRow(2, { project_id: p }));
      await until(inner, p, 1);
      assert.deepEqual(readdirSync(join(spoolDir, "rejected")).length, 1);
    });
  });

  describe("over a ClickHouse server that is down at first and killed mid-load", () => {
    let ch: TestClickHouse;
    let store: TelemetryStore;
    before(async () => {
      ch = await startTestClickHouse({ started: false });
      store = createClickHouseTelemetryStore({ engine: "clickhouse", connect: async () => connectClickHouseServer(ch.url, { requestTimeoutMs: 2000 }), reconnectDelayMs: 50 });
    });
    after(async () => {
      await store.close();
      await ch.stop();
    });

    it("records every request exactly once, in order, across the outages", async function () {
      if (process.env.SVC_TEST_CLICKHOUSE_URL) this.skip(); // cannot kill a real server
      const p = project();
      const w = createLogWriter({ store, spool: await openLogSpool(tmp("svc-spool-"), { maxBytes: 1 << 30 }), ...fast });
      const rows = Array.from({ length: 300 }, (_, i) => logRow(i, { project_id: p }));
      // Unreachable from the start: everything is spooled.
      for (const r of rows.slice(0, 100)) w.record("live", r);
      await eventually(() => w.stats.spooled === 100, 5000, "spooled while unreachable");
      await ch.start();
      // Load continues while the spool drains; then the server is killed mid-load, and comes back.
      for (const r of rows.slice(100, 200)) {
        w.record("live", r);
        await new Promise((res) => setTimeout(res, 5));
      }
      await eventually(() => w.stats.replayed >= 100, 15_000, "the spool replayed once the server is up");
      await ch.kill();
      for (const r of rows.slice(200)) {
        w.record("live", r);
        await new Promise((res) => setTimeout(res, 1));
      }
      await ch.start();
      await eventually(() => w.stats.queued === 0 && w.stats.spoolBatches === 0 && !w.stats.outage, 15_000, "drained after the restart");
      await w.close();
      assert.deepEqual(ids(await allLogs(store, p)), ids(rows).reverse(), "each exactly once, newest first");
      const range = { projectId: p, fromSec: 0, toSec: 2 ** 31, granularity: "day" as const, groupLimit: 10 };
      assert.equal((await store.analytics(range)).totals.requests, 300);
    });
  });
});
