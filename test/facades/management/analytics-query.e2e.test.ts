import assert from "node:assert/strict";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { AnalyticsGranularity, AnalyticsGroupBy } from "../../../src/gen/svc/telemetry/v1/telemetry_service_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson, rawRequest, type RawResponse } from "../../support/http.js";

/**
 * /v1/analytics and TelemetryService.GetAnalytics are two paths to the same analytics
 * (DESIGN.md): the same default ranges, the same rounding, the same groups.
 */
describe("management API /v1/analytics: the same ranges as GetAnalytics, and how parameters are read", function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  const get = (path: string): Promise<RawResponse> => rawRequest(`${gw.managementUrl}${path}`, { method: "GET", headers: { authorization: `Bearer ${keys.live}` } });

  before(async () => {
    gw = await startTestGateway({ SVC_TELEMETRY_FLUSH_INTERVAL_MS: "20" });
    keys = await gw.project(Plan.PRO);
    const chat = (model: string) => postJson(`${gw.gatewayUrl}/v1/chat/completions`, keys.live, { model, messages: [{ role: "user", content: "count me" }] });
    assert.equal((await chat("chat-4o")).status, 200);
    assert.equal((await chat("no-such-model")).status, 400);
    // Logs are written off the request path: wait for both.
    await eventually(async () => (await get("/v1/analytics")).json().totals.requests === 2, 10_000, "both requests in the analytics");
  });
  after(() => gw.close());

  it("defaults the range as GetAnalytics does for each granularity: 60 minutes, 24 hours, 30 days of whole buckets", async () => {
    const HOUR = 3_600_000;
    for (const [granularity, grain, step, buckets] of [
      ["minute", AnalyticsGranularity.MINUTE, 60_000, 60],
      ["hour", AnalyticsGranularity.HOUR, HOUR, 24],
      [undefined, AnalyticsGranularity.HOUR, HOUR, 24],
      ["day", AnalyticsGranularity.DAY, 24 * HOUR, 30],
    ] as const) {
      // Asked within one minute, both answer the same range (retried if a minute passed meanwhile).
      for (;;) {
        const minute = Math.floor(Date.now() / 60_000);
        const http = await get(`/v1/analytics${granularity ? `?granularity=${granularity}` : ""}`);
        const core = await gw.telemetry.getAnalytics({ projectId: keys.projectId, keyMode: KeyMode.LIVE, granularity: grain });
        if (Math.floor(Date.now() / 60_000) !== minute) continue;
        assert.equal(http.status, 200, http.text);
        const a = http.json();
        assert.deepEqual([a.start, a.end], [new Date(timestampMs(core.startTime!)).toISOString(), new Date(timestampMs(core.endTime!)).toISOString()], String(granularity));
        assert.equal(Date.parse(a.end) - Date.parse(a.start), buckets * step, `${granularity}: ${buckets} buckets`);
        assert.ok(Date.parse(a.end) > Date.now() - step && Date.parse(a.end) - step <= Date.now(), `${granularity}: the last bucket holds now`);
        break;
      }
    }
  });

  it("defaults the start from a given end as GetAnalytics does, rounding the end up to a bucket", async () => {
    const a = (await get("/v1/analytics?granularity=hour&end=2026-11-20T12:34:56Z")).json();
    assert.deepEqual([a.start, a.end], ["2026-11-19T13:00:00.000Z", "2026-11-20T13:00:00.000Z"]);
    const m = (await get("/v1/analytics?granularity=minute&end=2026-11-20T12:00:00Z")).json();
    assert.deepEqual([m.start, m.end], ["2026-11-20T11:00:00.000Z", "2026-11-20T12:00:00.000Z"]);
  });

  it("refuses a start after its end even within one bucket, in this API's terms", async () => {
    const res = await get("/v1/analytics?granularity=hour&start=2026-11-20T12:40:00Z&end=2026-11-20T12:30:00Z");
    assert.equal(res.status, 400);
    assert.equal(res.json().error.code, "invalid_parameter");
    assert.match(res.json().error.message, /'start' must be before 'end'/);
  });

  it("reads the enumerated values of granularity and group_by without regard to case, and keeps a metadata key as given", async () => {
    const lower = (await get("/v1/analytics?granularity=hour&group_by=model")).json();
    const upper = await get("/v1/analytics?granularity=HOUR&group_by=MODEL");
    assert.equal(upper.status, 200, upper.text);
    assert.equal(upper.json().group_by, "model");
    assert.equal(upper.json().granularity, "hour");
    assert.deepEqual(upper.json().groups, lower.groups);
    const meta = await get("/v1/analytics?group_by=Metadata.Team");
    assert.equal(meta.status, 200, meta.text);
    assert.equal(meta.json().group_by, "metadata.Team");
    // Names that are not enumerated values are refused, whatever an object has by inheritance.
    for (const bad of ["colour", "constructor", "toString"]) {
      const res = await get(`/v1/analytics?group_by=${bad}`);
      assert.equal(res.status, 400, bad);
      assert.equal(res.json().error.code, "invalid_parameter");
    }
  });

  it("groups a minute series by a metadata key longer than the rollups hold, and says at hour and day why it cannot", async () => {
    // A project of its own: the other cases count this project's two requests.
    const own = await gw.project(Plan.PRO);
    const get = (path: string): Promise<RawResponse> => rawRequest(`${gw.managementUrl}${path}`, { method: "GET", headers: { authorization: `Bearer ${own.live}` } });
    const long = "k".repeat(65);
    const longest = "m".repeat(256);
    const sent = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, own.live, { model: "chat-4o", messages: [{ role: "user", content: "long keys" }] }, { "X-Svc-Metadata": JSON.stringify({ [long]: "blue", [longest]: "red" }) });
    assert.equal(sent.status, 200, sent.text);
    for (const [key, value] of [[long, "blue"], [longest, "red"]]) {
      // The minute series is read from the logs themselves, which keep keys of up to 256 characters.
      await eventually(async () => {
        const res = await get(`/v1/analytics?granularity=minute&group_by=metadata.${key}`);
        assert.equal(res.status, 200, res.text);
        return res.json().groups.some((g: { key: string; requests: number }) => g.key === value && g.requests === 1);
      }, 10_000, `a minute series grouped by a ${key.length}-character key`);
      const core = await gw.telemetry.getAnalytics({ projectId: own.projectId, keyMode: KeyMode.LIVE, granularity: AnalyticsGranularity.MINUTE, groupBy: AnalyticsGroupBy.METADATA, metadataKey: key });
      assert.deepEqual(core.groups.map((g) => g.key), [value]);
      for (const granularity of ["hour", "day"]) {
        const res = await get(`/v1/analytics?granularity=${granularity}&group_by=metadata.${key}`);
        assert.equal(res.status, 400, res.text);
        assert.equal(res.json().error.code, "invalid_parameter");
        assert.match(res.json().error.message, new RegExp(`at most 64 characters at ${granularity} granularity.*minute series`));
      }
    }
    // Longer than any request's key: refused at every granularity, on both paths.
    const res = await get(`/v1/analytics?granularity=minute&group_by=metadata.${"x".repeat(257)}`);
    assert.equal(res.status, 400, res.text);
    assert.match(res.json().error.message, /at most 256 characters/);
    await assert.rejects(gw.telemetry.getAnalytics({ projectId: own.projectId, keyMode: KeyMode.LIVE, granularity: AnalyticsGranularity.MINUTE, groupBy: AnalyticsGroupBy.METADATA, metadataKey: "x".repeat(257) }), /at most 256 characters/);
    await assert.rejects(gw.telemetry.getAnalytics({ projectId: own.projectId, keyMode: KeyMode.LIVE, granularity: AnalyticsGranularity.DAY, groupBy: AnalyticsGroupBy.METADATA, metadataKey: long }), /at most 64 characters at day granularity/);
  });

  it("reads start and end to the microsecond, as /v1/logs does, before rounding them to buckets", async () => {
    // Both within the same millisecond of the end: cut to milliseconds, the start was not before it.
    const close = await get("/v1/analytics?granularity=minute&start=2026-11-20T10:00:59.9999Z&end=2026-11-20T10:01:00Z");
    assert.equal(close.status, 200, close.text);
    assert.deepEqual([close.json().start, close.json().end], ["2026-11-20T10:00:00.000Z", "2026-11-20T10:01:00.000Z"]);
    for (const [query, end] of [
      ["granularity=minute&end=2026-11-20T10:01:00.0004Z", "2026-11-20T10:02:00.000Z"],
      ["granularity=hour&end=2026-11-20T10:00:00.000001Z", "2026-11-20T11:00:00.000Z"],
      // More than six digits round up to the next microsecond: past the boundary still.
      ["granularity=hour&end=2026-11-20T10:00:00.0000001Z", "2026-11-20T11:00:00.000Z"],
      ["granularity=hour&end=2026-11-20T10:00:00.000000Z", "2026-11-20T10:00:00.000Z"],
    ] as const) {
      const res = await get(`/v1/analytics?${query}`);
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json().end, end, query);
    }
    const equal = await get("/v1/analytics?granularity=minute&start=2026-11-20T10:01:00.0004Z&end=2026-11-20T10:01:00.0004Z");
    assert.equal(equal.status, 400, equal.text);
    assert.match(equal.json().error.message, /'start' must be before 'end'/);
    // The series' end is a time the API reads back: within the year 9999, never "+010000-...".
    const last = await get("/v1/analytics?granularity=day&end=9999-12-31T00:00:00Z");
    assert.equal(last.status, 200, last.text);
    assert.equal(last.json().end, "9999-12-31T00:00:00.000Z");
    for (const g of ["day", "hour", "minute"]) {
      const late = await get(`/v1/analytics?granularity=${g}&end=9999-12-31T23:59:59.999Z`);
      assert.equal(late.status, 400, late.text);
      assert.match(late.json().error.message, /year 9999/);
    }
  });

  it("reads milliseconds since the epoch of any number of digits, down to 0, and refuses what is neither form naming both", async () => {
    const day = await get("/v1/analytics?granularity=day&start=0&end=86400000");
    assert.equal(day.status, 200, day.text);
    assert.deepEqual([day.json().start, day.json().end, day.json().totals.requests], ["1970-01-01T00:00:00.000Z", "1970-01-02T00:00:00.000Z", 0]);
    const ms = await get("/v1/analytics?granularity=minute&start=1000&end=61000");
    assert.equal(ms.status, 200, ms.text);
    assert.deepEqual([ms.json().start, ms.json().end], ["1970-01-01T00:00:00.000Z", "1970-01-01T00:02:00.000Z"]);
    // Without a start, the default range stops at the epoch rather than refusing the request.
    const early = await get("/v1/analytics?granularity=hour&end=1");
    assert.equal(early.status, 200, early.text);
    assert.deepEqual([early.json().start, early.json().end], ["1970-01-01T00:00:00.000Z", "1970-01-01T01:00:00.000Z"]);
    for (const path of ["/v1/logs?start=0", "/v1/logs?start=0&end=1", "/v1/logs?end=86400000"]) {
      const res = await get(path);
      assert.equal(res.status, 200, `${path}: ${res.text}`);
    }
    // The epoch itself is no end: nothing is before it.
    const atEpoch = await get("/v1/analytics?end=0");
    assert.equal(atEpoch.status, 400);
    assert.match(atEpoch.json().error.message, /'end' must be after 1970-01-01/);
    for (const v of ["-1", "1.5", "12345678901234567", "253402300800000"]) {
      const res = await get(`/v1/analytics?start=${encodeURIComponent(v)}`);
      assert.equal(res.status, 400, v);
      assert.equal(res.json().error.code, "invalid_parameter");
      assert.match(res.json().error.message, /'start' must be an ISO 8601 time .* or milliseconds since the epoch/);
    }
  });

  it("groups a request for a model the gateway does not serve under the id it named, with its error", async () => {
    const a = (await get("/v1/analytics?group_by=model")).json();
    const byModel = Object.fromEntries(a.groups.map((g: { key: string; requests: number; errors: number }) => [g.key, [g.requests, g.errors]]));
    assert.deepEqual(byModel, { "chat-4o": [1, 0], "no-such-model": [1, 1] });
  });
});
