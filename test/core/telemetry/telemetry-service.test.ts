import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { createDirectClient } from "../../../src/core/direct-client.js";
import { retryGuidanceOf, toErrorInfo } from "../../../src/core/errors.js";
import { randomBase62 } from "../../../src/core/ids.js";
import { createTelemetryService } from "../../../src/core/telemetry/telemetry-service.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { AnalyticsGranularity, AnalyticsGroupBy, type RequestLog, TelemetryService } from "../../../src/gen/svc/telemetry/v1/telemetry_service_pb.js";
import { createClickHouseTelemetryStore } from "../../../src/stores/clickhouse-telemetry-store.js";
import { createFilePromptStore } from "../../../src/stores/file-prompt-store.js";
import { TelemetryUnavailableError } from "../../../src/stores/telemetry-store.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { captureLog } from "../../support/log-capture.js";
import { T0 } from "../../support/telemetry.js";

const protoDir = fileURLToPath(new URL("../../../proto", import.meta.url));
const unary = <T>(client: any, method: string, req: object, md: grpc.Metadata): Promise<T> =>
  new Promise((resolve, reject) => client[method](req, md, (err: Error | null, res: T) => (err ? reject(err) : resolve(res))));

/** Rejects with the spec's error of that status and code. */
const refuses = (p: Promise<unknown>, status: number, code: string) =>
  assert.rejects(p, (e) => {
    const info = toErrorInfo(e);
    assert.deepEqual([info.status, info.code], [status, code], info.message);
    return true;
  });

describe("TelemetryService", function () {
  this.timeout(30_000);
  let gw: TestGateway;
  let grpcClient: any;
  let md: grpc.Metadata;
  // Set before the tests: a project of the registry, as a log recorded over the network must name.
  let projectId = "";

  const log = (n: number, over: Partial<Omit<RequestLog, "$typeName" | "$unknown">> = {}) => ({
    requestId: `req_${randomBase62(24)}`,
    time: timestampFromMs(T0 + n * 60_000),
    projectId,
    keyId: "key_1",
    keyMode: KeyMode.LIVE,
    endpoint: "/v1/chat/completions",
    model: n % 2 ? "chat-4o" : "chat-4o-mini",
    provider: "openai",
    status: 200,
    cache: "MISS",
    userId: `user_${n % 3}`,
    metadata: { team: n % 2 ? "red" : "blue" },
    promptTokens: 10,
    completionTokens: 20,
    costUsd: "0.0001",
    costSavedUsd: "0",
    latencyMs: 50 + n,
    ttfbMs: 5,
    upstreamLatencyMs: 40,
    requestBody: `{"n":${n}}`,
    responseBody: "{}",
    ...over,
  });

  before(async () => {
    gw = await startTestGateway({ SVC_TELEMETRY_FLUSH_INTERVAL_MS: "20" });
    projectId = (await gw.project()).projectId;
    // The engine opens in the background at start (seconds on a busy machine): the first test's
    // second is for the write path, not for that.
    await gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageSize: 1 });
    const def = protoLoader.loadSync(["svc/telemetry/v1/telemetry_service.proto"], { includeDirs: [protoDir], keepCase: true, enums: String, defaults: true, longs: String });
    const pkg: any = grpc.loadPackageDefinition(def);
    grpcClient = new pkg.svc.telemetry.v1.TelemetryService(new URL(gw.grpcUrl).host, grpc.credentials.createInsecure());
    md = new grpc.Metadata();
    md.set("authorization", `Bearer ${gw.adminToken}`);
  });
  after(async () => {
    grpcClient?.close();
    await gw?.close();
  });

  const listAll = async (req: object = {}) => (await gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageSize: 1000, ...req })).logs;

  it("records through the in-process client and lists the log within a second, fields intact", async () => {
    const l = log(1);
    await gw.telemetry.recordRequest({ log: l });
    const end = Date.now() + 1000;
    let logs = await listAll();
    while (logs.length === 0 && Date.now() < end) logs = await listAll();
    assert.equal(logs.length, 1, "visible within a second");
    const got = logs[0]!;
    assert.equal(got.requestId, l.requestId);
    assert.equal(timestampMs(got.time!), T0 + 60_000);
    assert.deepEqual([got.model, got.userId, got.costUsd, got.latencyMs, got.metadata], [l.model, l.userId, "0.0001", 51, { team: "red" }]);
    assert.equal(got.requestBody, "", "listings leave bodies out");
    const full = await gw.telemetry.getLog({ projectId, keyMode: KeyMode.LIVE, requestId: l.requestId });
    assert.equal(full.log!.requestBody, '{"n":1}');
  });

  it("serves the same logs and analytics over gRPC as in process", async () => {
    const l = log(2);
    const snake = Object.fromEntries(Object.entries(l).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v]));
    await unary(grpcClient, "RecordRequest", { log: { ...snake, time: { seconds: String(T0 / 1000 + 120), nanos: 0 }, key_mode: "KEY_MODE_LIVE" } }, md);
    await new Promise((r) => setTimeout(r, 300));
    const remote = await unary<any>(grpcClient, "ListLogs", { project_id: projectId, key_mode: "KEY_MODE_LIVE", page_size: 1000 }, md);
    assert.deepEqual(remote.logs.map((x: any) => x.request_id), (await listAll()).map((x) => x.requestId));
    const range = { startTime: timestampFromMs(T0), endTime: timestampFromMs(T0 + 3600_000), granularity: AnalyticsGranularity.HOUR };
    const local = await gw.telemetry.getAnalytics({ projectId, keyMode: KeyMode.LIVE, ...range });
    const viaGrpc = await unary<any>(grpcClient, "GetAnalytics", { project_id: projectId, key_mode: "KEY_MODE_LIVE", start_time: { seconds: String(T0 / 1000) }, end_time: { seconds: String(T0 / 1000 + 3600) }, granularity: "ANALYTICS_GRANULARITY_HOUR" }, md);
    assert.equal(local.totals!.requests, 2n);
    assert.equal(viaGrpc.totals.requests, "2");
  });

  it("pages with tokens, keeps filters, and refuses a token of another listing", async () => {
    for (let n = 10; n < 17; n++) await gw.telemetry.recordRequest({ log: log(n) });
    await new Promise((r) => setTimeout(r, 300));
    const filter = { model: "chat-4o-mini" }; // n = 2 (the gRPC test's), 10, 12, 14 and 16
    const seen: string[] = [];
    let pageToken = "";
    do {
      const page = await gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageSize: 3, pageToken, ...filter });
      seen.push(...page.logs.map((x) => x.model));
      pageToken = page.nextPageToken;
      if (pageToken) await refuses(gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageSize: 3, pageToken }), 400, "invalid_page_token");
    } while (pageToken);
    assert.deepEqual(seen, Array(5).fill("chat-4o-mini"));
    await refuses(gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageToken: "garbage" }), 400, "invalid_page_token");
  });

  it("answers analytics totals equal to the sum of what was recorded, grouped on request", async () => {
    const all = await listAll();
    const r = await gw.telemetry.getAnalytics({
      projectId, keyMode: KeyMode.LIVE, startTime: timestampFromMs(T0), endTime: timestampFromMs(T0 + 86_400_000),
      granularity: AnalyticsGranularity.DAY, groupBy: AnalyticsGroupBy.METADATA, metadataKey: "team",
    });
    assert.equal(r.totals!.requests, BigInt(all.length));
    assert.equal(r.totals!.totalTokens, BigInt(all.length * 30));
    assert.equal(r.totals!.costUsd, `0.${String(all.length).padStart(4, "0")}`, "exact decimal: 0.0001 each");
    const byTeam = Object.fromEntries(r.groups.map((g) => [g.key, Number(g.metrics!.requests)]));
    assert.deepEqual(byTeam, { red: all.filter((l) => l.metadata.team === "red").length, blue: all.filter((l) => l.metadata.team === "blue").length });
  });

  it("accepts a maximal range that is not aligned to the granularity", async () => {
    const end = T0 + 90_500; // not on a minute
    const r = await gw.telemetry.getAnalytics({
      projectId, keyMode: KeyMode.LIVE, granularity: AnalyticsGranularity.MINUTE, groupBy: AnalyticsGroupBy.MODEL,
      startTime: timestampFromMs(end - 86_400_000), endTime: timestampFromMs(end),
    });
    assert.equal(timestampMs(r.endTime!) - timestampMs(r.startTime!), 86_400_000 + 60_000, "rounded out to whole minutes");
  });

  it("refuses a range longer than the granularity's maximum, aligned or not, by as little as a bucket", async () => {
    const DAY = 86_400_000;
    const start = Date.UTC(2026, 0, 1); // aligned to every granularity
    for (const [granularity, groupBy, max, step] of [
      [AnalyticsGranularity.MINUTE, AnalyticsGroupBy.UNSPECIFIED, 7 * DAY, 60_000],
      [AnalyticsGranularity.MINUTE, AnalyticsGroupBy.MODEL, DAY, 60_000],
      [AnalyticsGranularity.HOUR, AnalyticsGroupBy.UNSPECIFIED, 400 * DAY, 3_600_000],
      [AnalyticsGranularity.DAY, AnalyticsGroupBy.UNSPECIFIED, 3660 * DAY, DAY],
    ] as const) {
      const ask = (from: number, span: number) =>
        gw.telemetry.getAnalytics({ projectId, keyMode: KeyMode.LIVE, granularity, groupBy, startTime: timestampFromMs(from), endTime: timestampFromMs(from + span) });
      const r = await ask(start, max);
      assert.equal(timestampMs(r.endTime!) - timestampMs(r.startTime!), max, "the maximum, aligned: exactly that many buckets");
      await refuses(ask(start, max + step), 400, "invalid_value");
      await refuses(ask(start + 1000, max + 1000), 400, "invalid_value");
    }
  });

  it("defaults the range per granularity: 60 minutes, 24 hours or 30 days of whole buckets, the last one holding the end", async () => {
    const HOUR = 3_600_000;
    const DAY = 24 * HOUR;
    const end = Date.UTC(2026, 10, 20, 12, 34, 56, 789); // on no bucket boundary
    for (const [granularity, step, buckets, toMs] of [
      [AnalyticsGranularity.MINUTE, 60_000, 60, Date.UTC(2026, 10, 20, 12, 35)],
      [AnalyticsGranularity.HOUR, HOUR, 24, Date.UTC(2026, 10, 20, 13)],
      [AnalyticsGranularity.UNSPECIFIED, HOUR, 24, Date.UTC(2026, 10, 20, 13)],
      [AnalyticsGranularity.DAY, DAY, 30, Date.UTC(2026, 10, 21)],
    ] as const) {
      const r = await gw.telemetry.getAnalytics({ projectId, keyMode: KeyMode.LIVE, granularity, endTime: timestampFromMs(end) });
      assert.equal(timestampMs(r.endTime!), toMs, `${AnalyticsGranularity[granularity]}: the end rounded up`);
      assert.equal(timestampMs(r.startTime!), toMs - buckets * step, `${AnalyticsGranularity[granularity]}: ${buckets} whole buckets`);
      // Without an end: the same count of buckets, ending with the one that holds now.
      const before = Date.now();
      const n = await gw.telemetry.getAnalytics({ projectId, keyMode: KeyMode.LIVE, granularity });
      const [from, to] = [timestampMs(n.startTime!), timestampMs(n.endTime!)];
      assert.equal(to - from, buckets * step);
      assert.ok(to >= before && to - step <= Date.now(), `${AnalyticsGranularity[granularity]}: the last bucket holds now`);
    }
  });

  it("refuses a start after its end, even within one bucket", async () => {
    const at = Date.UTC(2026, 10, 20, 12, 30);
    await refuses(
      gw.telemetry.getAnalytics({ projectId, keyMode: KeyMode.LIVE, granularity: AnalyticsGranularity.HOUR, startTime: timestampFromMs(at + 60_000), endTime: timestampFromMs(at) }),
      400,
      "invalid_value",
    );
    await refuses(gw.telemetry.getAnalytics({ projectId, keyMode: KeyMode.LIVE, startTime: timestampFromMs(at), endTime: timestampFromMs(at) }), 400, "invalid_value");
  });

  it("refuses a time bound outside the years 1 to 9999 or with nanos out of range, on ListLogs and GetAnalytics (no wrong rows, no 500)", async () => {
    const t = gw.telemetry;
    const far = { seconds: 10n ** 13n, nanos: 0 };
    for (const bound of [{ startTime: far }, { endTime: far }, { startTime: { seconds: -(10n ** 13n), nanos: 0 } }, { endTime: { seconds: 10n ** 15n, nanos: 0 } }, { startTime: { seconds: 1n, nanos: -1 } }, { endTime: { seconds: 1n, nanos: 1_000_000_000 } }]) {
      await refuses(t.listLogs({ projectId, keyMode: KeyMode.LIVE, ...bound }), 400, "invalid_value");
      await refuses(t.getAnalytics({ projectId, keyMode: KeyMode.LIVE, granularity: AnalyticsGranularity.DAY, ...bound }), 400, "invalid_value");
    }
    // The last second of the year 9999 is read, and lists what is before it.
    const all = await t.listLogs({ projectId, keyMode: KeyMode.LIVE, endTime: { seconds: 253_402_300_799n, nanos: 999_999_999 } });
    assert.ok(all.logs.length > 0);
  });

  it("refuses bad requests with the spec's errors", async () => {
    const t = gw.telemetry;
    await refuses(t.recordRequest({}), 400, "missing_required_field");
    await refuses(t.recordRequest({ log: log(1, { requestId: "" }) }), 400, "missing_required_field");
    await refuses(t.recordRequest({ log: log(1, { keyMode: KeyMode.UNSPECIFIED }) }), 400, "invalid_value");
    await refuses(t.recordRequest({ log: log(1, { costUsd: "1e-5" }) }), 400, "invalid_value");
    await refuses(t.listLogs({ projectId, keyMode: KeyMode.LIVE, pageSize: 1001 }), 400, "invalid_value");
    await refuses(t.listLogs({ projectId, keyMode: KeyMode.LIVE, statusClass: "6xx" }), 400, "invalid_value");
    await refuses(t.listLogs({ projectId, keyMode: KeyMode.LIVE, cache: "MAYBE" }), 400, "invalid_value");
    await refuses(t.getLog({ projectId, keyMode: KeyMode.LIVE, requestId: "req_unknown" }), 404, "log_not_found");
    await refuses(t.getLog({ projectId: "proj_other", keyMode: KeyMode.LIVE, requestId: (await listAll())[0]!.requestId }), 404, "log_not_found");
    await refuses(t.getAnalytics({ projectId, keyMode: KeyMode.TEST }), 403, "live_key_required");
    await refuses(t.getAnalytics({ projectId, keyMode: KeyMode.LIVE, groupBy: AnalyticsGroupBy.METADATA }), 400, "missing_required_field");
    await refuses(t.getAnalytics({ projectId, keyMode: KeyMode.LIVE, granularity: AnalyticsGranularity.MINUTE, startTime: timestampFromMs(T0), endTime: timestampFromMs(T0 + 8 * 86_400_000) }), 400, "invalid_value");
    await refuses(t.getAnalytics({ projectId, keyMode: KeyMode.LIVE, granularity: AnalyticsGranularity.MINUTE, groupBy: AnalyticsGroupBy.USER, startTime: timestampFromMs(T0), endTime: timestampFromMs(T0 + 2 * 86_400_000) }), 400, "invalid_value");
    await refuses(t.getAnalytics({ projectId, keyMode: KeyMode.LIVE, groupLimit: 101 }), 400, "invalid_value");
  });

  it("keeps versioned prompts per project", async () => {
    const t = gw.telemetry;
    // Prompts are filed under projects that exist (the logs above need none).
    const { projectId: own } = await gw.project();
    const { projectId: other } = await gw.project();
    const v1 = await t.putPrompt({ projectId: own, name: "greeting", content: "Hello {{name}}", description: "first" });
    const v2 = await t.putPrompt({ projectId: own, name: "greeting", content: "Hi {{name}}" });
    await t.putPrompt({ projectId: own, name: "apology", content: "Sorry" });
    assert.deepEqual([v1.prompt!.version, v2.prompt!.version], [1, 2]);
    assert.equal((await t.getPrompt({ projectId: own, name: "greeting" })).prompt!.content, "Hi {{name}}");
    assert.equal((await t.getPrompt({ projectId: own, name: "greeting", version: 1 })).prompt!.description, "first");
    const listed = await t.listPrompts({ projectId: own });
    assert.deepEqual(listed.prompts.map((p) => [p.name, p.version, p.content]), [["apology", 1, ""], ["greeting", 2, ""]]);
    const page1 = await t.listPrompts({ projectId: own, pageSize: 1 });
    const page2 = await t.listPrompts({ projectId: own, pageSize: 1, pageToken: page1.nextPageToken });
    assert.deepEqual([page1.prompts[0]!.name, page2.prompts[0]!.name, page2.nextPageToken], ["apology", "greeting", ""]);
    // Only a token this listing returned: not a made-up one (the name "apology" in base64url, or
    // base64 with padding), not another project's, not a log listing's.
    await refuses(t.listPrompts({ projectId: own, pageToken: Buffer.from("apology").toString("base64url") }), 400, "invalid_page_token");
    await refuses(t.listPrompts({ projectId: own, pageToken: "enp6eg==" }), 400, "invalid_page_token");
    await refuses(t.listPrompts({ projectId: own, pageToken: "enp6eg" }), 400, "invalid_page_token");
    await refuses(t.listPrompts({ projectId: own, pageToken: "garbage" }), 400, "invalid_page_token");
    await refuses(t.listPrompts({ projectId: other, pageToken: page1.nextPageToken }), 400, "invalid_page_token");
    const logToken = (await gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageSize: 1 })).nextPageToken;
    assert.ok(logToken);
    await refuses(t.listPrompts({ projectId: own, pageToken: logToken }), 400, "invalid_page_token");
    await refuses(gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageToken: page1.nextPageToken }), 400, "invalid_page_token");
    await refuses(t.getPrompt({ projectId: other, name: "greeting" }), 404, "prompt_not_found");
    await refuses(t.getPrompt({ projectId: own, name: "greeting", version: 3 }), 404, "prompt_not_found");
    await refuses(t.putPrompt({ projectId: own, name: "../etc", content: "x" }), 400, "invalid_value");
    await refuses(t.putPrompt({ projectId: own, name: "empty", content: "" }), 400, "missing_required_field");
    // A description is printed by `svc prompts list`, as key descriptions are: no control characters.
    for (const description of ["two\nlines", "\u001b[31mred", "tab\there", "\u202eabc"]) {
      await refuses(t.putPrompt({ projectId: own, name: "described", content: "x", description }), 400, "invalid_value");
    }
    await refuses(t.putPrompt({ projectId: own, name: "described", content: "x", description: "d".repeat(1025) }), 400, "invalid_value");
    await t.putPrompt({ projectId: own, name: "described", content: "x", description: "plain, with é and emoji 🙂" });
    // 1024 characters, counted as a person does: an emoji is one, not its two UTF-16 units (2048
    // units here were refused as too long).
    const emoji = await t.putPrompt({ projectId: own, name: "described", content: "x", description: "🙂".repeat(1024) });
    assert.equal(emoji.prompt!.description, "🙂".repeat(1024));
    await t.putPrompt({ projectId: own, name: "described", content: "x", description: `${"é".repeat(512)}${"𝄞".repeat(512)}` });
    await refuses(t.putPrompt({ projectId: own, name: "described", content: "x", description: "🙂".repeat(1025) }), 400, "invalid_value");
    await refuses(t.putPrompt({ projectId: own, name: "described", content: "x", description: `${"d".repeat(1024)}🙂` }), 400, "invalid_value");
  });

  it("refuses a project that does not exist on every prompt call, as CreateKey does", async () => {
    const t = gw.telemetry;
    await refuses(t.putPrompt({ projectId: "proj_nope", name: "a", content: "x" }), 404, "project_not_found");
    await refuses(t.getPrompt({ projectId: "proj_nope", name: "a" }), 404, "project_not_found");
    await refuses(t.listPrompts({ projectId: "proj_nope" }), 404, "project_not_found");
    // Over gRPC too: NOT_FOUND, with the spec's error in the trailers.
    const err = await unary(grpcClient, "PutPrompt", { project_id: "proj_nope", name: "a", content: "x" }, md).then(
      () => assert.fail("stored"),
      (e: grpc.ServiceError) => e,
    );
    assert.equal(err.code, grpc.status.NOT_FOUND);
    assert.match(err.details, /proj_nope/);
  });

  it("answers 503 telemetry_unavailable with Retry-After while the store cannot be reached, logging the outage once and its end once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-prompts-"));
    let down = true;
    const unreachable = createClickHouseTelemetryStore({ engine: "clickhouse", connect: () => Promise.reject(new TelemetryUnavailableError("down")) });
    // Down, then back with an empty listing.
    const store = { ...unreachable, listLogs: async () => (down ? Promise.reject(new TelemetryUnavailableError("down")) : { logs: [], more: false }) };
    const lines = await captureLog(async () => {
      const t = createDirectClient(TelemetryService, createTelemetryService({ store, writer: { record() {} }, prompts: await createFilePromptStore(dir), checkProject: async () => {}, bodyTtlDays: 30 }));
      for (let i = 0; i < 5; i++) {
        const err = await t.listLogs({ projectId, keyMode: KeyMode.LIVE }).then(() => assert.fail("read"), (e: unknown) => e);
        assert.deepEqual([toErrorInfo(err).status, toErrorInfo(err).code], [503, "telemetry_unavailable"]);
        assert.deepEqual(retryGuidanceOf(err), { "retry-after": "1" });
      }
      down = false;
      await t.listLogs({ projectId, keyMode: KeyMode.LIVE });
      await t.listLogs({ projectId, keyMode: KeyMode.LIVE });
      const t2 = createDirectClient(TelemetryService, createTelemetryService({ store: unreachable, writer: { record() {} }, prompts: await createFilePromptStore(dir), checkProject: async () => {}, bodyTtlDays: 30 }));
      await refuses(t2.getAnalytics({ projectId, keyMode: KeyMode.LIVE }), 503, "telemetry_unavailable");
      await t2.recordRequest({ log: log(1) }); // recording never waits on the store
    });
    assert.equal(lines.filter((l) => l.includes("telemetry reads failing")).length, 2, "once per outage: the first service's, then the second's");
    assert.equal(lines.filter((l) => l.includes("telemetry reads are back")).length, 1);
    rmSync(dir, { recursive: true, force: true });
  });
});
