import assert from "node:assert/strict";
import { join, resolve } from "node:path";
import { ConfigError, loadConfig } from "../src/config.js";

describe("telemetry configuration", () => {
  it("defaults to chDB under the data dir at nice 10, 30-day bodies, batches of up to 10000 rows every second and a 1 GiB spool", () => {
    assert.deepEqual(loadConfig({ SVC_DATA_DIR: "/tmp/svc-x" }).telemetry, {
      clickhouseUrl: undefined,
      bodyTtlDays: 30,
      batchSize: 10_000,
      flushIntervalMs: 1000,
      spoolDir: join("/tmp/svc-x", "telemetry-spool"),
      spoolMaxBytes: 1024 ** 3,
      engineNice: 10,
    });
  });

  it("reads SVC_CLICKHOUSE_URL and the SVC_TELEMETRY_* settings", () => {
    const t = loadConfig({
      SVC_CLICKHOUSE_URL: "http://default:secret@clickhouse:8123/svc/",
      SVC_TELEMETRY_BODY_TTL_DAYS: "7",
      SVC_TELEMETRY_BATCH_SIZE: "5000",
      SVC_TELEMETRY_FLUSH_INTERVAL_MS: "250",
      SVC_TELEMETRY_SPOOL_DIR: "spool",
      SVC_TELEMETRY_SPOOL_MAX_BYTES: "1048576",
      SVC_TELEMETRY_ENGINE_NICE: "0",
    }).telemetry;
    assert.deepEqual(t, { clickhouseUrl: "http://default:secret@clickhouse:8123/svc", bodyTtlDays: 7, batchSize: 5000, flushIntervalMs: 250, spoolDir: resolve("spool"), spoolMaxBytes: 1048576, engineNice: 0 });
  });

  for (const [name, value] of [
    ["SVC_CLICKHOUSE_URL", "clickhouse:8123"],
    ["SVC_CLICKHOUSE_URL", "tcp://clickhouse:9000"],
    ["SVC_TELEMETRY_BODY_TTL_DAYS", "0"],
    ["SVC_TELEMETRY_BODY_TTL_DAYS", "3651"],
    ["SVC_TELEMETRY_BATCH_SIZE", "100001"],
    ["SVC_TELEMETRY_FLUSH_INTERVAL_MS", "soon"],
    ["SVC_TELEMETRY_FLUSH_INTERVAL_MS", "60001"], // at most 60000, as docs/telemetry.md says
    ["SVC_TELEMETRY_SPOOL_MAX_BYTES", "-5"],
    ["SVC_TELEMETRY_ENGINE_NICE", "20"],
    ["SVC_TELEMETRY_ENGINE_NICE", "-1"],
    ["SVC_TELEMETRY_ENGINE_NICE", "low"],
  ] as const) {
    it(`refuses ${name}=${value}, naming the setting`, () => {
      assert.throws(() => loadConfig({ [name]: value }), (e) => e instanceof ConfigError && e.message.includes(name));
    });
  }
});
