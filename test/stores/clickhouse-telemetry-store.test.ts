import assert from "node:assert/strict";
import { randomBase62 } from "../../src/core/ids.js";
import { utcMicrosText } from "../../src/core/telemetry/micros.js";
import type { LogRow } from "../../src/stores/telemetry-store.js";
import { refusedByEngine } from "../../src/stores/clickhouse-telemetry-store.js";
import { allLogs, forEachEngine, logRow, T0 } from "../support/telemetry.js";

const project = () => `proj_${randomBase62(10)}`;
const ids = (rows: Array<{ request_id: string }>) => rows.map((r) => r.request_id);
const token = () => `t-${randomBase62(16)}`;

describe("ClickHouse telemetry store", function () {
  this.timeout(30_000);

  forEachEngine((engine) => {
    it("applies its migrations once: a second start finds them applied", async () => {
      const again = await engine().reopen();
      assert.deepEqual(await again.ready(), []);
      assert.equal((await allLogs(again, project())).length, 0);
    });

    it("reads a log back with every field, bodies only from getLog", async () => {
      const p = project();
      const row = logRow(1, {
        project_id: p, key_id: "key_x", endpoint: "/v1/messages", model: "assistant-3-5-haiku-20241022", provider: "anthropic",
        stream: true, status: 429, error_type: "rate_limit_error", error_code: "rate_limit_exceeded", cache: "HIT", user_id: "user's 1",
        metadata: { team: "a'b\\c", env: "prod" }, prompt_tokens: 123, completion_tokens: 45, cost_usd: "0.000000000001",
        cost_saved_usd: "12.5", latency_ms: 12.5, ttfb_ms: 3.25, upstream_latency_ms: 9, request_body: "{\"é\":\"ü\\n\"}", response_body: "x".repeat(10_000),
      });
      assert.equal(await engine().store.insert("live", [row], token()), 1);
      const got = await engine().store.getLog(p, "live", row.request_id);
      const { time, bodies_expire_at, ...rest } = row;
      assert.deepEqual(got, { ...rest, time_us: (T0 + 1000) * 1000 });
      const [listed] = await allLogs(engine().store, p);
      assert.deepEqual(listed, { ...rest, time_us: (T0 + 1000) * 1000, request_body: "", response_body: "" });
    });

    it("keeps microseconds: logs one microsecond apart list in time order, not request-id order", async () => {
      const p = project();
      const us = (T0 + 5) * 1000;
      // Request ids in the opposite order to their times, so an order by id alone would fail.
      const rows = [3, 2, 1].map((n, i) => logRow(n, { project_id: p, time: utcMicrosText(us + i) }));
      await engine().store.insert("live", rows, token());
      const listed = await allLogs(engine().store, p);
      assert.deepEqual(listed.map((l) => [l.request_id, l.time_us]), rows.map((r, i) => [r.request_id, us + i]).reverse());
    });

    it("lists newest first and applies each filter", async () => {
      const p = project();
      const rows: LogRow[] = [
        logRow(1, { project_id: p, model: "chat-4o", status: 200, cache: "MISS", user_id: "u1", metadata: { env: "prod" } }),
        logRow(2, { project_id: p, model: "chat-4", status: 500, cache: "MISS", user_id: "u2", metadata: { env: "dev" } }),
        logRow(3, { project_id: p, model: "chat-4o", status: 429, cache: "HIT", user_id: "u1", endpoint: "/v1/messages", metadata: { env: "prod", team: "x" } }),
        logRow(4, { project_id: p, model: "chat-4o", status: 201, cache: "MISS", user_id: "", metadata: {} }),
      ];
      await engine().store.insert("live", rows, token());
      const list = (filter: object) => engine().store.listLogs({ projectId: p, mode: "live", filter, limit: 10 }).then((r) => ids(r.logs));
      const id = (n: number) => rows[n - 1]!.request_id;
      assert.deepEqual(await list({}), [id(4), id(3), id(2), id(1)]);
      assert.deepEqual(await list({ model: "chat-4" }), [id(2)]);
      assert.deepEqual(await list({ status: 429 }), [id(3)]);
      assert.deepEqual(await list({ statusClass: 2 }), [id(4), id(1)]);
      assert.deepEqual(await list({ endpoint: "/v1/messages" }), [id(3)]);
      assert.deepEqual(await list({ cache: "HIT" }), [id(3)]);
      assert.deepEqual(await list({ userId: "u1" }), [id(3), id(1)]);
      assert.deepEqual(await list({ metadata: [["env", "prod"]] }), [id(3), id(1)]);
      assert.deepEqual(await list({ metadata: [["env", "prod"], ["team", "x"]] }), [id(3)]);
      assert.deepEqual(await list({ metadata: [["env", ""]] }), []);
      assert.deepEqual(await list({ fromUs: (T0 + 2000) * 1000, toUs: (T0 + 4000) * 1000 }), [id(3), id(2)]);
      // Bounds to the microsecond: row 2 is at T0 + 2 s exactly.
      assert.deepEqual(await list({ fromUs: (T0 + 2000) * 1000 + 1, toUs: (T0 + 4000) * 1000 }), [id(3)]);
      assert.deepEqual(await list({ fromUs: (T0 + 1000) * 1000, toUs: (T0 + 2000) * 1000 + 1 }), [id(2), id(1)]);
      assert.deepEqual(await list({ model: "chat-4o", cache: "MISS" }), [id(4), id(1)]);
    });

    it("keeps pages stable while newer logs arrive", async () => {
      const p = project();
      // Two logs share a time: the cursor orders them by request id.
      const rows = Array.from({ length: 10 }, (_, i) => logRow(i, { project_id: p, timeMs: T0 + Math.floor(i / 2) * 1000 }));
      await engine().store.insert("live", rows, token());
      const first = await engine().store.listLogs({ projectId: p, mode: "live", filter: {}, limit: 3 });
      assert.deepEqual([first.logs.length, first.more], [3, true]);
      const last = first.logs[2]!;
      await engine().store.insert("live", [logRow(100, { project_id: p, timeMs: T0 + 60_000 }), logRow(101, { project_id: p, timeMs: T0 + 120_000 })], token());
      const seen = ids(first.logs);
      let after = { timeUs: last.time_us, requestId: last.request_id };
      for (;;) {
        const page = await engine().store.listLogs({ projectId: p, mode: "live", filter: {}, limit: 3, after });
        seen.push(...ids(page.logs));
        if (!page.more) break;
        after = { timeUs: page.logs[2]!.time_us, requestId: page.logs[2]!.request_id };
      }
      assert.deepEqual(seen, ids(rows).reverse());
    });

    it("keeps projects and modes apart", async () => {
      const [a, b] = [project(), project()];
      await engine().store.insert("live", [logRow(1, { project_id: a }), logRow(2, { project_id: b })], token());
      await engine().store.insert("test", [logRow(3, { project_id: a })], token());
      assert.deepEqual(ids(await allLogs(engine().store, a)), [logRow(1).request_id]);
      assert.deepEqual(ids(await allLogs(engine().store, a, "test")), [logRow(3).request_id]);
      assert.equal(await engine().store.getLog(b, "live", logRow(1).request_id), undefined);
      assert.equal(await engine().store.getLog(a, "test", logRow(1).request_id), undefined);
      const range = { fromSec: T0 / 1000 - 3600, toSec: T0 / 1000 + 3600, granularity: "hour" as const, groupLimit: 10 };
      assert.equal((await engine().store.analytics({ projectId: a, ...range })).totals.requests, 1, "test logs are not in analytics");
    });

    const dayRange = (p: string) => ({ projectId: p, fromSec: T0 / 1000 - 86_400, toSec: T0 / 1000 + 86_400, groupLimit: 10 });

    it("rolls up metadata keys up to 64 and values up to 256 characters counted as JavaScript counts them, not as bytes", async () => {
      const p = project();
      const cjk = (n: number) => "中".repeat(n); // 3 bytes, one UTF-16 unit each
      const emoji = (n: number) => "😀".repeat(n); // 4 bytes, two UTF-16 units each
      const within = [cjk(256), emoji(128), `${emoji(127)}ab`];
      const beyond = [cjk(257), emoji(129)];
      const rows = [...within, ...beyond].map((v, i) => logRow(i, { project_id: p, metadata: { team: v, [cjk(64)]: "k" } }));
      rows.push(logRow(9, { project_id: p, metadata: { [cjk(65)]: "k" } }));
      await engine().store.insert("live", rows, token());
      const groups = async (granularity: "minute" | "hour" | "day", groupBy: string) =>
        new Set((await engine().store.analytics({ ...dayRange(p), granularity, groupBy: groupBy as never })).groups.map((g) => g.key));
      assert.deepEqual(await groups("minute", "metadata.team"), new Set([...within, ...beyond]), "the minute series reads the logs");
      for (const granularity of ["hour", "day"] as const) {
        assert.deepEqual(await groups(granularity, "metadata.team"), new Set(within), granularity);
        assert.deepEqual(await groups(granularity, `metadata.${cjk(64)}`), new Set(["k"]), granularity);
        assert.deepEqual(await groups(granularity, `metadata.${cjk(65)}`), new Set(), granularity);
      }
    });

    it("stores and counts a batch once, however often it is retried under its token", async () => {
      const p = project();
      const one = logRow(1, { project_id: p });
      const batch = [one, one, logRow(2, { project_id: p })];
      const t = token();
      assert.equal(await engine().store.insert("live", batch, t), 2, "a repeat inside the batch is dropped");
      await engine().store.insert("live", batch, t);
      await engine().store.insert("live", batch, t);
      assert.deepEqual(ids(await allLogs(engine().store, p)), [logRow(2).request_id, one.request_id]);
      for (const granularity of ["minute", "hour", "day"] as const) {
        assert.equal((await engine().store.analytics({ ...dayRange(p), granularity })).totals.requests, 2, granularity);
      }
    });

    it("promises a next page only when it has a log: a duplicate not merged yet is not one", async () => {
      const p = project();
      const [one, two] = [logRow(1, { project_id: p }), logRow(2, { project_id: p })];
      await engine().store.insert("live", [one, two], token());
      // The same log again, under a new token (a RecordRequest retried by its caller): a second row
      // until the table merges, listed next to its twin.
      await engine().store.insert("live", [one], token());
      const list = (limit: number, after?: { timeUs: number; requestId: string }) =>
        engine().store.listLogs({ projectId: p, mode: "live", filter: {}, limit, after });
      const whole = await list(2);
      assert.deepEqual([ids(whole.logs), whole.more], [[two.request_id, one.request_id], false]);
      const first = await list(1);
      assert.deepEqual([ids(first.logs), first.more], [[two.request_id], true]);
      const second = await list(1, { timeUs: first.logs[0]!.time_us, requestId: two.request_id });
      assert.deepEqual([ids(second.logs), second.more], [[one.request_id], false]);
    });

    it("knows a batch by its token, not its rows: the insert's settings reach the engine", async () => {
      // Rows alike would be dropped by the engine's hash of the block alone; different rows under a
      // used token are dropped only if insert_deduplication_token was applied.
      const p = project();
      const t = token();
      await engine().store.insert("live", [logRow(1, { project_id: p })], t);
      await engine().store.insert("live", [logRow(2, { project_id: p })], t);
      assert.deepEqual(ids(await allLogs(engine().store, p)), [logRow(1).request_id]);
    });

    it("completes, on retry, a batch that reached the log table but not the rollups", async () => {
      // An engine killed mid-insert can commit the log table's part and not the views' parts.
      // Detaching the views makes exactly that state; the retry must then fill the rollups.
      const p = project();
      const batch = [logRow(1, { project_id: p }), logRow(2, { project_id: p })];
      const t = token();
      const views = ["1m", "1h", "1d"].map((g) => `analytics_live_${g}_mv`);
      for (const v of views) await engine().sql(`DETACH TABLE ${v}`);
      try {
        await engine().store.insert("live", batch, t);
      } finally {
        for (const v of views) await engine().sql(`ATTACH TABLE ${v}`);
      }
      assert.equal((await allLogs(engine().store, p)).length, 2);
      assert.equal((await engine().store.analytics({ ...dayRange(p), granularity: "day" })).totals.requests, 0, "the half-landed state");
      await engine().store.insert("live", batch, t);
      await engine().store.insert("live", batch, t);
      assert.equal((await allLogs(engine().store, p)).length, 2);
      for (const granularity of ["minute", "hour", "day"] as const) {
        assert.equal((await engine().store.analytics({ ...dayRange(p), granularity })).totals.requests, 2, granularity);
      }
    });

    describe("analytics", () => {
      const p = project();
      // 30 requests over three hours: models, users, keys, statuses, metadata and costs vary.
      const rows = Array.from({ length: 30 }, (_, i) =>
        logRow(i, {
          project_id: p,
          timeMs: T0 + i * 6 * 60_000,
          model: i % 3 === 0 ? "chat-4" : "chat-4o",
          user_id: `user_${i % 4}`,
          key_id: i % 2 ? "key_odd" : "key_even",
          status: i % 5 === 0 ? 500 : 200,
          // A stream the upstream broke off after its 200: an error all the same.
          ...(i % 7 === 3 ? { stream: true, error_type: "api_error", error_code: "upstream_stream_incomplete" } : {}),
          cache: i % 6 === 0 ? "HIT" : "MISS",
          metadata: i % 2 ? { team: `t${i % 3}` } : {},
          prompt_tokens: i,
          completion_tokens: 2 * i,
          cost_usd: `0.${String(i + 1).padStart(6, "0")}`,
          latency_ms: 10 * (i + 1),
        }),
      );
      const sum = (rs: LogRow[]) => ({
        requests: rs.length,
        errors: rs.filter((r) => r.status >= 400 || r.error_type !== "").length,
        cacheHits: rs.filter((r) => r.cache === "HIT").length,
        promptTokens: rs.reduce((a, r) => a + r.prompt_tokens, 0),
        completionTokens: rs.reduce((a, r) => a + r.completion_tokens, 0),
        costMicros: rs.reduce((a, r) => a + Math.round(Number(r.cost_usd) * 1e6), 0),
      });
      const figures = (m: { requests: number; errors: number; cacheHits: number; promptTokens: number; completionTokens: number; costUsd: string }) => ({
        requests: m.requests, errors: m.errors, cacheHits: m.cacheHits, promptTokens: m.promptTokens, completionTokens: m.completionTokens,
        costMicros: Math.round(Number(m.costUsd) * 1e6),
      });
      const range = { projectId: p, fromSec: T0 / 1000, toSec: T0 / 1000 + 4 * 3600, groupLimit: 100 };
      // The service aligns ranges to the granularity before asking the store.
      const aligned = (granularity: "minute" | "hour" | "day") => {
        const step = { minute: 60, hour: 3600, day: 86_400 }[granularity];
        return { ...range, granularity, fromSec: Math.floor(range.fromSec / step) * step, toSec: Math.ceil(range.toSec / step) * step };
      };

      before(async () => {
        // In three batches, as the writer would send them.
        for (let i = 0; i < 30; i += 10) await engine().store.insert("live", rows.slice(i, i + 10), token());
      });

      it("gives totals equal to the sum of the logs, at every granularity", async () => {
        for (const granularity of ["minute", "hour", "day"] as const) {
          const r = await engine().store.analytics(aligned(granularity));
          assert.deepEqual(figures(r.totals), sum(rows), granularity);
          assert.deepEqual(r.groups, []);
        }
      });

      it("gives an hourly series whose buckets add up, with latency percentiles", async () => {
        const r = await engine().store.analytics({ ...range, granularity: "hour" });
        assert.deepEqual(r.buckets.map((b) => b.timeSec), [0, 1, 2].map((h) => T0 / 1000 + h * 3600));
        for (const [h, b] of r.buckets.entries()) assert.deepEqual(figures(b.metrics), sum(rows.slice(h * 10, h * 10 + 10)));
        assert.equal(r.totals.latencyP50Ms, 155);
        assert.ok(r.totals.latencyP95Ms > 280 && r.totals.latencyP95Ms <= 300, String(r.totals.latencyP95Ms));
        assert.ok(r.totals.latencyP99Ms >= r.totals.latencyP95Ms && r.totals.latencyP99Ms <= 300);
      });

      it("leaves out empty buckets and answers zeros for an empty range", async () => {
        const r = await engine().store.analytics({ ...range, fromSec: T0 / 1000 - 7200, toSec: T0 / 1000 - 3600, granularity: "minute" });
        assert.deepEqual(r.buckets, []);
        assert.deepEqual(figures(r.totals), sum([]));
        assert.equal(r.totals.latencyP99Ms, 0);
      });

      const groupings: Array<[string, (r: LogRow) => string | undefined]> = [
        ["model", (r) => r.model],
        ["user", (r) => r.user_id],
        ["key", (r) => r.key_id],
        ["status", (r) => String(r.status)],
        ["metadata.team", (r) => r.metadata.team],
      ];
      for (const [dim, keyOf] of groupings) {
        for (const granularity of ["minute", "hour", "day"] as const) {
          it(`groups by ${dim} (${granularity}): each group sums its logs, most requests first`, async () => {
            const r = await engine().store.analytics({ ...aligned(granularity), groupBy: dim as never });
            const expected = new Map<string, LogRow[]>();
            for (const row of rows) {
              const k = keyOf(row);
              if (k !== undefined) expected.set(k, [...(expected.get(k) ?? []), row]);
            }
            assert.deepEqual(new Set(r.groups.map((g) => g.key)), new Set(expected.keys()));
            for (const g of r.groups) assert.deepEqual(figures(g.metrics), sum(expected.get(g.key)!), g.key);
            const counts = r.groups.map((g) => g.metrics.requests);
            assert.deepEqual(counts, [...counts].sort((a, b) => b - a));
            const perGroup = new Map<string, number>();
            for (const b of r.buckets) perGroup.set(b.group, (perGroup.get(b.group) ?? 0) + b.metrics.requests);
            for (const g of r.groups) assert.equal(perGroup.get(g.key), g.metrics.requests);
            assert.deepEqual(figures(r.totals), sum(rows));
          });
        }
      }

      it("returns the top groups only, and says so", async () => {
        const r = await engine().store.analytics({ ...range, granularity: "hour", groupBy: "user", groupLimit: 2 });
        assert.equal(r.groups.length, 2);
        assert.equal(r.groupsTruncated, true);
        assert.deepEqual(new Set(r.buckets.map((b) => b.group)), new Set(r.groups.map((g) => g.key)));
      });
    });
  });
});

describe("telemetry store: what counts as a batch refused", () => {
  const engineError = (code: string, type: string, message: string) => Object.assign(new Error(`Code: ${code}. DB::Exception: ${message}. (${type})`), { code, type });

  it("takes a full or failing disk for an outage (spooled and written later), not for bad data (set aside)", () => {
    for (const e of [
      engineError("243", "NOT_ENOUGH_SPACE", "Cannot reserve 1.00 MiB, not enough space"),
      engineError("1001", "STD_EXCEPTION", "write: No space left on device"),
      engineError("75", "CANNOT_WRITE_TO_FILE_DESCRIPTOR", "Cannot write to file /data/x.bin"),
      engineError("242", "TABLE_IS_READ_ONLY", "Table is in readonly mode"),
      new Error("socket hang up"),
    ]) assert.equal(refusedByEngine(e), false, e.message);
    assert.equal(refusedByEngine(engineError("27", "CANNOT_PARSE_INPUT_ASSERTION_FAILED", "Cannot parse input: expected '\"' before: 'x'")), true);
  });
});
