import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Client } from "@connectrpc/connect";
import { createDirectClient } from "../../src/core/direct-client.js";
import { createLimitsService } from "../../src/core/limits/limits-service.js";
import { Decision, LimitWindow, LimitsService } from "../../src/gen/svc/limits/v1/limits_service_pb.js";
import type { LimitsStore } from "../../src/stores/limits-store.js";
import { createMemoryLimitsStore, LIMITS_SNAPSHOT_FILE, type LimitsSnapshot, openMemoryLimitsStore } from "../../src/stores/memory-limits-store.js";
import { DEFAULT_START } from "../support/limits-backends.js";
import { captureLog } from "../support/log-capture.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The embedded limits store with a data dir: the month's spend and the day window outlive a
 * restart (close, then open on the same dir); minute windows and reservations do not.
 */
describe("the embedded limits store's snapshot (limits.json)", () => {
  let dir: string;
  let file: string;
  const clock = { ms: DEFAULT_START };
  const project = "proj_persist";
  let open: Array<LimitsStore> = [];

  /** Opens the store on `dir` with its service on the test's clock. */
  const start = async (delayMs = 50): Promise<{ store: LimitsStore; limits: Client<typeof LimitsService> }> => {
    const store = await openMemoryLimitsStore(dir, { delayMs, now: () => clock.ms });
    open.push(store);
    return { store, limits: createDirectClient(LimitsService, createLimitsService({ store, now: () => clock.ms })) };
  };
  const snapshot = () => JSON.parse(readFileSync(file, "utf8")) as LimitsSnapshot;
  const spend = (limits: Client<typeof LimitsService>, cap: string, worst: string, cost: string, more: object = {}) =>
    limits.admit({ projectId: project, maxCostUsd: worst, limits: { monthlySpendCapUsd: cap, ...more } }).then(async (r) => {
      if (r.decision === Decision.ALLOWED) await limits.settle({ projectId: project, reservationId: r.reservationId, costUsd: cost });
      return r;
    });

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-limits-persist-"));
    file = join(dir, LIMITS_SNAPSHOT_FILE);
    clock.ms = DEFAULT_START;
    open = [];
  });
  afterEach(async () => {
    for (const s of open) await s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("keeps the month's spend across a clean restart, so a used-up cap still refuses", async () => {
    const a = await start();
    assert.equal((await spend(a.limits, "0.01", "0.004", "0.004")).decision, Decision.ALLOWED);
    assert.equal((await spend(a.limits, "0.01", "0.004", "0.0036")).decision, Decision.ALLOWED);
    assert.equal((await spend(a.limits, "0.01", "0.004", "0")).decision, Decision.SPEND_CAPPED);
    await a.store.close();

    const b = await start();
    assert.equal((await b.limits.getUsage({ projectId: project })).spentUsd, "0.0076");
    const r = await spend(b.limits, "0.01", "0.004", "0");
    assert.equal(r.decision, Decision.SPEND_CAPPED);
    assert.equal(r.spendRemainingUsd, "0.0024");
    assert.equal((await spend(b.limits, "0.01", "0.002", "0.002")).decision, Decision.ALLOWED, "what is left of the cap is still there");
  });

  it("keeps the day window's count across a restart; the minute window and reservations in flight start empty", async () => {
    const a = await start();
    const limits = { requestsPerMinute: 2, requestsPerDay: 3, monthlySpendCapUsd: "1" };
    for (let i = 0; i < 2; i++) assert.equal((await a.limits.admit({ projectId: project, maxCostUsd: "0", limits })).decision, Decision.ALLOWED);
    // A request in flight at the restart: its reservation must not hold the cap after it.
    const inFlight = await a.limits.admit({ projectId: project, maxCostUsd: "0.9", limits: { ...limits, requestsPerMinute: 3 } });
    assert.equal(inFlight.decision, Decision.ALLOWED);
    assert.equal((await a.limits.admit({ projectId: project, maxCostUsd: "0", limits: { ...limits, requestsPerDay: 4 } })).decision, Decision.PLAN_LIMITED);
    await a.store.close();

    clock.ms += 5_000;
    const b = await start();
    const usage = await b.limits.getUsage({ projectId: project });
    assert.equal(usage.requestsLastDay, 3);
    assert.equal(usage.requestsLastMinute, 0, "minute windows start empty after a restart");
    assert.equal(usage.reservedUsd, "0", "no reservation survives a restart");
    const refused = await b.limits.admit({ projectId: project, maxCostUsd: "0", limits });
    assert.equal(refused.decision, Decision.PLAN_LIMITED);
    assert.equal(refused.window, LimitWindow.DAY);
    assert.equal((await b.limits.admit({ projectId: project, maxCostUsd: "0.9", limits: { ...limits, requestsPerDay: 10 } })).decision, Decision.ALLOWED, "the cap is whole again");
    // A day (and a bucket) later the window has moved past them, restored or not.
    clock.ms += 24 * 3_600_000 + 120_000;
    assert.equal((await b.limits.admit({ projectId: project, maxCostUsd: "0", limits })).decision, Decision.ALLOWED);
  });

  it("writes the snapshot shortly after a change, off the request's path, so a crash loses at most that delay", async () => {
    const a = await start(200);
    await spend(a.limits, "1", "0.5", "0.25");
    assert.ok(!existsSync(file), "not written on the request's path");
    for (let i = 0; i < 20; i++) await spend(a.limits, "1", "0.01", "0.01");
    const deadline = Date.now() + 3_000;
    while (!existsSync(file) && Date.now() < deadline) await sleep(20);
    assert.ok(existsSync(file), "written within the delay");
    await sleep(300);
    assert.deepEqual(snapshot().projects[project]!.spent, { "2026-11": 450_000_000 });
    // A crash (no close): a store opened on the same dir finds what was written.
    const b = await start();
    assert.equal((await b.limits.getUsage({ projectId: project })).spentUsd, "0.45");
  });

  it("keeps only the current month's spend: a new month starts at 0 after a restart too", async () => {
    clock.ms = Date.UTC(2026, 10, 30, 23, 59, 0);
    const a = await start();
    assert.equal((await spend(a.limits, "1", "0.9", "0.9")).decision, Decision.ALLOWED);
    await a.store.close();
    assert.deepEqual(Object.keys(snapshot().projects[project]!.spent!), ["2026-11"]);

    // Restarted in the next month: November's spend no longer counts.
    clock.ms = Date.UTC(2026, 11, 1, 0, 1, 0);
    const b = await start();
    assert.equal((await b.limits.getUsage({ projectId: project })).spentUsd, "0");
    assert.equal((await spend(b.limits, "1", "0.9", "0.3")).decision, Decision.ALLOWED);
    await b.store.close();
    assert.deepEqual(snapshot().projects[project]!.spent, { "2026-12": 300_000_000 }, "months before the current one are dropped from the file");

    const c = await start();
    assert.equal((await c.limits.getUsage({ projectId: project })).spentUsd, "0.3");
  });

  it("keeps the spend of the month the clock is in after it stepped back across a month's end", async () => {
    clock.ms = Date.UTC(2027, 0, 10); // ahead: January
    const a = await start();
    assert.equal((await spend(a.limits, "5", "0.1", "0.1")).decision, Decision.ALLOWED);
    clock.ms = Date.UTC(2026, 10, 20); // back in November
    assert.equal((await spend(a.limits, "5", "0.45", "0.45")).decision, Decision.ALLOWED);
    await a.store.close();
    assert.equal(snapshot().projects[project]!.spent!["2026-11"], 450_000_000, JSON.stringify(snapshot()));
    const b = await start();
    assert.equal((await b.limits.getUsage({ projectId: project })).spentUsd, "0.45", "November's spend outlives the restart");
  });

  for (const [what, text] of [
    ["not JSON", "{\"version\":1,\"projects\":{"],
    ["JSON but not a snapshot", JSON.stringify({ version: 1, savedAtMs: 1, projects: { p: { spent: { "2026-11": -5 } } } })],
  ] as const) {
    it(`starts empty, with a warning naming the file, when the snapshot is ${what}; the file is moved aside and a good one written`, async () => {
      writeFileSync(file, text);
      let b!: { store: LimitsStore; limits: Client<typeof LimitsService> };
      const lines = await captureLog(async () => {
        b = await start();
      });
      const warning = lines.map((l) => JSON.parse(l) as { level: string; msg: string; path: string; movedTo?: string }).find((l) => l.level === "warn");
      assert.ok(warning, lines.join(""));
      assert.match(warning.msg, /limits snapshot cannot be read/);
      assert.equal(warning.path, file);
      assert.equal(warning.movedTo, `${file}.unreadable`);
      assert.equal(readFileSync(`${file}.unreadable`, "utf8"), text, "kept for inspection");
      assert.equal((await b.limits.getUsage({ projectId: project })).spentUsd, "0");
      await spend(b.limits, "1", "0.1", "0.1");
      await b.store.close();
      assert.equal(snapshot().projects[project]!.spent!["2026-11"], 100_000_000);
    });
  }

  it("removes the temporary files that processes killed in the middle of a save left, and nothing else", async () => {
    const left = [`${LIMITS_SNAPSHOT_FILE}.4194301.tmp`, `${LIMITS_SNAPSHOT_FILE}.12.tmp`];
    const kept = [`${LIMITS_SNAPSHOT_FILE}.unreadable`, "registry.json.12.tmp", `${LIMITS_SNAPSHOT_FILE}.x.tmp`];
    for (const f of [...left, ...kept]) writeFileSync(join(dir, f), "{\"projects\":");
    const a = await start();
    await spend(a.limits, "1", "0.1", "0.1");
    await a.store.close();
    for (const f of left) assert.ok(!existsSync(join(dir, f)), `${f} is removed`);
    for (const f of kept) assert.ok(existsSync(join(dir, f)), `${f} is kept`);
    assert.equal(snapshot().projects[project]!.spent!["2026-11"], 100_000_000);
  });

  it("writes nothing without a data dir (tests, benches)", async () => {
    const store = createMemoryLimitsStore();
    const limits = createDirectClient(LimitsService, createLimitsService({ store, now: () => clock.ms }));
    await spend(limits, "1", "0.1", "0.1");
    await store.close();
    assert.ok(!existsSync(file));
  });

  it("logs a snapshot it cannot write once, keeps serving, and writes it when it can again", async () => {
    const a = await start(30);
    // A directory where the file would go: every rename over it fails.
    mkdirSync(file);
    const lines = await captureLog(async () => {
      for (let i = 0; i < 5; i++) {
        assert.equal((await spend(a.limits, "1", "0.01", "0.01")).decision, Decision.ALLOWED);
        await sleep(50);
      }
      rmdirSync(file);
      await sleep(200);
    });
    assert.equal(lines.filter((l) => l.includes("cannot be written")).length, 1, lines.join(""));
    assert.equal(snapshot().projects[project]!.spent!["2026-11"], 50_000_000);
  });
});

describe("the embedded limits store's snapshot saved by a clock ahead of this one", () => {
  let dir: string;
  beforeEach(() => void (dir = mkdtempSync(join(tmpdir(), "svc-limits-future-"))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("drops its day counts and later months' spend, with a warning, so no project is refused until the clocks agree", async () => {
    const now = Date.now();
    const ahead = now + 31 * 86_400_000;
    const minute = Math.floor(ahead / 60_000);
    const month = new Date(now).toISOString().slice(0, 7);
    const later = new Date(ahead).toISOString().slice(0, 7);
    const snap: LimitsSnapshot = { version: 1, savedAtMs: ahead, projects: { proj_f: { spent: { [month]: 2_000_000_000, [later]: 7_000_000_000 }, day: { oldest: minute - 10, counts: [[minute, 1000]] } } } };
    writeFileSync(join(dir, LIMITS_SNAPSHOT_FILE), JSON.stringify(snap));
    let store: LimitsStore | undefined;
    const lines = await captureLog(async () => {
      store = await openMemoryLimitsStore(dir, { delayMs: 10 });
    });
    try {
      assert.ok(lines.some((l) => /saved later than now/.test(l)), lines.join("\n"));
      const limits = createDirectClient(LimitsService, createLimitsService({ store: store!, now: () => now }));
      const r = await limits.admit({ projectId: "proj_f", maxCostUsd: "0", limits: { requestsPerDay: 1000 } });
      assert.equal(r.decision, Decision.ALLOWED, "the future day's 1000 requests do not hold the window");
      const usage = await limits.getUsage({ projectId: "proj_f" });
      assert.equal(usage.spentUsd, "2", "this month's spend is kept");
    } finally {
      await store?.close();
    }
  });
});
