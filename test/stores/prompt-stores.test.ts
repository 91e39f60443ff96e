import assert from "node:assert/strict";
import { appendFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { createFilePromptStore, IMPORTED_PROMPT_FILE, LEGACY_PROMPT_FILE, PROMPT_LOG } from "../../src/stores/file-prompt-store.js";
import { type PromptRecord, type PromptStore, PromptsUnavailableError } from "../../src/stores/prompt-store.js";
import { createRedisPromptStore, PROMPT_CALL_TIMEOUT_MS } from "../../src/stores/redis-prompt-store.js";
import { startRedis, type TestRedis } from "../support/redis.js";

const put = (s: PromptStore, projectId: string, name: string, content: string, description = "") => s.put({ projectId, name, content, description, createdAt: Date.now() });

for (const kind of ["file", "redis"] as const) {
  describe(`prompt store (${kind})`, () => {
    let dir: string;
    let redis: TestRedis | undefined;
    let open: () => Promise<PromptStore>;
    let store: PromptStore;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), "svc-prompts-"));
      if (kind === "redis") redis = await startRedis();
      open = async () => (kind === "file" ? createFilePromptStore(dir) : createRedisPromptStore(redis!.url));
      store = await open();
    });
    after(async () => {
      await store.close();
      await redis?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    it("numbers versions from 1 per project and name, and keeps the old ones", async () => {
      assert.equal((await put(store, "p1", "a", "one")).version, 1);
      assert.equal((await put(store, "p1", "a", "two")).version, 2);
      assert.equal((await put(store, "p2", "a", "other")).version, 1);
      assert.equal((await store.get("p1", "a"))?.content, "two");
      assert.equal((await store.get("p1", "a"))?.version, 2);
      assert.equal((await store.get("p1", "a", 1))?.content, "one");
      assert.equal(await store.get("p1", "a", 3), undefined);
      assert.equal(await store.get("p1", "b"), undefined);
    });

    it("lists a project's names at their latest version, by name", async () => {
      await put(store, "p3", "zeta", "z");
      await put(store, "p3", "alpha", "a1");
      await put(store, "p3", "alpha", "a2");
      const all = await store.list("p3", { after: "", limit: 100 });
      assert.deepEqual(all.prompts.map((p) => [p.name, p.version]), [["alpha", 2], ["zeta", 1]]);
      assert.equal(all.more, false);
      assert.ok(all.prompts.every((p) => !("content" in p)), "a listing carries no content");
      assert.deepEqual(await store.list("p_none", { after: "", limit: 100 }), { prompts: [], more: false });
    });

    it("lists a page at a time: the names after `after`, and whether more follow", async () => {
      const names = Array.from({ length: 25 }, (_, i) => `n${String(i).padStart(2, "0")}`);
      for (const n of [...names].reverse()) await put(store, "p5", n, n);
      const page = async (after: string, limit: number) => {
        const res = await store.list("p5", { after, limit });
        return [res.prompts.map((p) => p.name), res.more];
      };
      assert.deepEqual(await page("", 10), [names.slice(0, 10), true]);
      assert.deepEqual(await page("n09", 10), [names.slice(10, 20), true]);
      assert.deepEqual(await page("n19", 10), [names.slice(20), false]);
      assert.deepEqual(await page("n14", 10), [names.slice(15), false]);
      assert.deepEqual(await page("n04x", 3), [["n05", "n06", "n07"], true], "after a name that is not there");
      assert.deepEqual(await page("n24", 10), [[], false]);
      assert.deepEqual(await page("", 25), [names, false]);
    });

    it("gives concurrent puts distinct versions, and keeps them after a restart", async () => {
      // Redis: two replicas; the file: one process owns its data dir.
      const other = kind === "redis" ? await open() : store;
      const versions = await Promise.all(Array.from({ length: 10 }, (_, i) => put(i % 2 ? store : other, "p4", "race", `v${i}`).then((p) => p.version)));
      assert.deepEqual([...versions].sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      if (other !== store) await other.close();
      await store.close();
      store = await open();
      assert.equal((await store.get("p4", "race"))?.version, 10);
      assert.equal((await store.list("p4", { after: "", limit: 10 })).prompts.length, 1);
      for (let v = 1; v <= 10; v++) assert.match((await store.get("p4", "race", v))!.content, /^v\d$/);
    });

    it("reads the latest version with its own number while puts go on (no transaction needed)", async () => {
      // Version v holds "v" (made at v seconds): a read that paired one version's number with another's content shows.
      // Redis: another replica writes (one connection's commands never interleave with each other).
      const other = kind === "redis" ? await open() : store;
      const writer = (async () => {
        for (let v = 1; v <= 60; v++) assert.equal((await other.put({ projectId: "p7", name: "moving", content: String(v), description: "", createdAt: v * 1000 })).version, v);
      })();
      let done = false;
      void writer.finally(() => (done = true));
      let reads = 0;
      while (!done || reads === 0) {
        const [p, page] = await Promise.all([store.get("p7", "moving"), store.list("p7", { after: "", limit: 10 })]);
        if (p) assert.equal(p.content, String(p.version));
        if (page.prompts[0]) assert.equal(page.prompts[0].createdAt, page.prompts[0].version * 1000, "a listing pairs them too");
        reads++;
        await new Promise((r) => setImmediate(r)); // the file store answers from memory: let the writer on
      }
      await writer;
      if (other !== store) await other.close();
      assert.equal((await store.get("p7", "moving"))?.version, 60);
    });

    it("reads back any content, as stored, after a restart", async () => {
      const odd = ["line one\nline two\r\n", "tab\there \"quoted\" \\ back", "ünïcödé ✓ 𝄞 \u2028 \u0000 end", "x".repeat(300_000)];
      for (const c of odd) await put(store, "p6", "odd", c);
      await store.close();
      store = await open();
      for (let v = 1; v <= odd.length; v++) assert.equal((await store.get("p6", "odd", v))!.content, odd[v - 1]);
    });
  });
}

describe("prompt store (file): an append-only log", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-prompts-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const logPath = () => join(dir, PROMPT_LOG);
  const lineOf = (r: PromptRecord) => `${JSON.stringify({ projectId: r.projectId, name: r.name, version: r.version, description: r.description, createdAt: r.createdAt, content: r.content })}\n`;

  it("removes the import a process killed before moving it into place left, and nothing else", async () => {
    const left = [`${PROMPT_LOG}.4194301.tmp`, `${PROMPT_LOG}.12.tmp`];
    const kept = [`${PROMPT_LOG}.x.tmp`, "registry.json.12.tmp"];
    for (const f of [...left, ...kept]) writeFileSync(join(dir, f), lineOf({ projectId: "proj_1", name: "p", version: 1, description: "", createdAt: 1, content: "c" }));
    const store = await createFilePromptStore(dir);
    try {
      for (const f of left) assert.ok(!existsSync(join(dir, f)), `${f} is removed`);
      for (const f of kept) assert.ok(existsSync(join(dir, f)), `${f} is kept`);
    } finally {
      await store.close();
    }
  });

  it("appends a put's one line and leaves every earlier byte where it was: a put's cost does not grow with the stored prompts", async () => {
    const store = await createFilePromptStore(dir);
    const big = "b".repeat(256 * 1024);
    const sizes: number[] = [];
    try {
      for (let i = 0; i < 24; i++) await put(store, `proj_${i % 3}`, `big${i % 5}`, big);
      const before = statSync(logPath());
      const bytesBefore = readFileSync(logPath());
      const filesBefore = readdirSync(dir).sort();
      // The same small put, with 6 MiB stored and again with 12 MiB: each writes its own line and nothing else.
      for (const round of [0, 1]) {
        const start = statSync(logPath()).size;
        const stored = await put(store, "proj_small", "tiny", `hello ${round}`);
        const after = statSync(logPath());
        assert.equal(after.ino, before.ino, "the same file, not a rewritten one");
        assert.equal(after.size - start, Buffer.byteLength(lineOf(stored)), "exactly one line more");
        sizes.push(after.size - start);
        assert.equal(readFileSync(logPath()).subarray(start).toString(), lineOf(stored));
        for (let i = 0; i < 24; i++) await put(store, `proj_${i % 3}`, `big${i % 5}`, big);
      }
      assert.equal(sizes[0], sizes[1], "the same put costs the same bytes with twice as much stored");
      assert.ok(readFileSync(logPath()).subarray(0, bytesBefore.length).equals(bytesBefore), "earlier bytes unchanged");
      assert.deepEqual(readdirSync(dir).sort(), filesBefore, "no other file written (no temporary copy, no snapshot)");
    } finally {
      await store.close();
    }
  });

  it("gives a burst of concurrent puts distinct versions in one append, each line whole", async () => {
    const store = await createFilePromptStore(dir);
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => put(store, "p", i % 2 ? "odd" : "even", `c${i}`)));
    await store.close();
    for (const name of ["odd", "even"]) {
      assert.deepEqual(results.filter((r) => r.name === name).map((r) => r.version).sort((a, b) => a - b), Array.from({ length: 15 }, (_, i) => i + 1));
    }
    const lines = readFileSync(logPath(), "utf8").trimEnd().split("\n");
    assert.equal(lines.length, 30);
    const reopened = await createFilePromptStore(dir);
    for (const r of results) assert.equal((await reopened.get("p", r.name, r.version))!.content, r.content);
    await reopened.close();
  });

  it("drops a torn last line (no newline) left by a crash, and appends after the last whole one", async () => {
    let store = await createFilePromptStore(dir);
    await put(store, "p", "a", "one");
    await put(store, "p", "a", "two");
    await store.close();
    const whole = statSync(logPath()).size;
    for (const torn of ['{"projectId":"p","name":"a","version":3,"descr', "\u0000\u0000\u0000\u0000"]) {
      appendFileSync(logPath(), torn);
      store = await createFilePromptStore(dir);
      assert.equal(statSync(logPath()).size, whole, JSON.stringify(torn));
      assert.equal((await store.get("p", "a"))!.version, 2);
      await store.close();
    }
    store = await createFilePromptStore(dir);
    assert.equal((await put(store, "p", "a", "three")).version, 3);
    await store.close();
    store = await createFilePromptStore(dir);
    assert.deepEqual([(await store.get("p", "a", 2))!.content, (await store.get("p", "a"))!.content], ["two", "three"]);
    await store.close();
  });

  it("refuses to start on a damaged line that records follow, rather than guess", async () => {
    const store = await createFilePromptStore(dir);
    await put(store, "p", "a", "one");
    await store.close();
    const good = readFileSync(logPath(), "utf8");
    writeFileSync(logPath(), `${good}garbage\n${good.replace('"version":1', '"version":2')}`);
    await assert.rejects(createFilePromptStore(dir), /cannot read the prompt log .*line 2 .*restore the file from a backup or move it aside/);
    // A version out of sequence is damage too.
    writeFileSync(logPath(), `${good}${good}${good.replace('"version":1', '"version":2')}`);
    await assert.rejects(createFilePromptStore(dir), /line 2/);
  });

  it("refuses to start on a damaged last line that has its newline (a whole line is no torn put), and keeps the file", async () => {
    const store = await createFilePromptStore(dir);
    await put(store, "p", "a", "one");
    await store.close();
    const good = readFileSync(logPath(), "utf8");
    for (const last of ['{"not":"a record"}\n', "garbage\n", good]) {
      writeFileSync(logPath(), `${good}${last}`);
      await assert.rejects(createFilePromptStore(dir), /cannot read the prompt log .*line 2 .*restore the file from a backup or move it aside/, JSON.stringify(last));
      assert.equal(readFileSync(logPath(), "utf8"), `${good}${last}`, "nothing cut");
    }
  });

  it("imports the prompts.json of earlier releases once, then keeps it as prompts.json.imported and never reads it again", async () => {
    const old: PromptRecord[] = [
      { projectId: "p1", name: "a", version: 1, content: "a1", description: "first", createdAt: 1 },
      { projectId: "p1", name: "a", version: 2, content: "a2\nmore", description: "", createdAt: 2 },
      { projectId: "p2", name: "b", version: 1, content: "b1", description: "", createdAt: 3 },
    ];
    writeFileSync(join(dir, LEGACY_PROMPT_FILE), JSON.stringify({ version: 1, prompts: old }));
    let store = await createFilePromptStore(dir);
    assert.deepEqual(await store.get("p1", "a", 1), old[0]);
    assert.deepEqual(await store.get("p1", "a"), old[1]);
    assert.deepEqual((await store.list("p2", { after: "", limit: 10 })).prompts.map((p) => [p.name, p.version]), [["b", 1]]);
    assert.equal((await put(store, "p1", "a", "a3")).version, 3);
    await store.close();
    assert.deepEqual(readdirSync(dir).sort(), [IMPORTED_PROMPT_FILE, PROMPT_LOG].sort());
    assert.deepEqual(JSON.parse(readFileSync(join(dir, IMPORTED_PROMPT_FILE), "utf8")).prompts, old, "the old file is kept as it was");
    // A prompts.json that shows up again is not imported a second time.
    writeFileSync(join(dir, LEGACY_PROMPT_FILE), JSON.stringify({ version: 1, prompts: [{ ...old[2], content: "stale", version: 1 }] }));
    store = await createFilePromptStore(dir);
    assert.equal((await store.get("p1", "a"))!.version, 3);
    assert.equal((await store.get("p2", "b"))!.content, "b1");
    assert.equal(await store.get("p2", "b", 2), undefined);
    await store.close();
  });

  it("refuses to start on a prompts.json it cannot import, and leaves it be", async () => {
    writeFileSync(join(dir, LEGACY_PROMPT_FILE), "{not json");
    await assert.rejects(createFilePromptStore(dir), /cannot import the prompts of .*prompts\.json/);
    assert.deepEqual(readdirSync(dir), [LEGACY_PROMPT_FILE]);
  });
});

describe("prompt store (redis): a put touches its own keys only", () => {
  let redis: TestRedis;
  before(async () => {
    redis = await startRedis();
  });
  after(() => redis.stop());

  it("sends RPUSH, ZADD and HSET on the name's list, the names and the summaries, whatever else is stored", async () => {
    const store = createRedisPromptStore(redis.url);
    const watcher = new Redis(redis.url);
    try {
      for (let i = 0; i < 20; i++) await put(store, "proj_a", `n${i}`, "x".repeat(10_000));
      const monitor = await watcher.monitor();
      const seen: string[][] = [];
      monitor.on("monitor", (_time: string, args: string[]) => seen.push(args));
      await new Promise((r) => setTimeout(r, 50));
      await put(store, "proj_a", "n3", "new");
      await new Promise((r) => setTimeout(r, 100));
      monitor.disconnect();
      // The script's own commands (MONITOR shows them after its EVALSHA).
      const inner = seen.filter((a) => !["multi", "exec", "evalsha", "eval"].includes(a[0]!.toLowerCase()));
      assert.deepEqual(inner.map((a) => a[0]!.toLowerCase()).sort(), ["hset", "rpush", "zadd"], JSON.stringify(seen));
      assert.deepEqual(inner.map((a) => a[1]).sort(), ["svc:prompts:{proj_a}:latest", "svc:prompts:{proj_a}:names", "svc:prompts:{proj_a}:versions:n3"]);
    } finally {
      watcher.disconnect();
      await store.close();
    }
  });

  it("lists a page without reading any prompt's content (each up to 1 MiB), and a name put before the summaries from its list once, its summary written then", async () => {
    const store = createRedisPromptStore(redis.url);
    const watcher = new Redis(redis.url);
    try {
      for (let i = 0; i < 5; i++) await put(store, "proj_l", `p${i}`, "y".repeat(100_000), `d${i}`);
      await put(store, "proj_l", "p2", "newer", "d2 again");
      // A name an earlier release put: its versions and its name, no summary.
      await watcher.rpush("svc:prompts:{proj_l}:versions:old", JSON.stringify({ content: "z".repeat(50_000), description: "legacy", createdAt: 7 }));
      await watcher.zadd("svc:prompts:{proj_l}:names", 0, "old");
      const listed = async () => {
        const monitor = await watcher.monitor();
        const seen: string[][] = [];
        monitor.on("monitor", (_time: string, args: string[]) => seen.push(args));
        await new Promise((r) => setTimeout(r, 50));
        const page = await store.list("proj_l", { after: "", limit: 10 });
        await new Promise((r) => setTimeout(r, 100));
        monitor.disconnect();
        return { page, reads: seen.filter((a) => a[0]!.toLowerCase() === "lindex").map((a) => a[1]) };
      };
      const first = await listed();
      assert.deepEqual(first.page.prompts.map((p) => [p.name, p.version, p.description]), [["old", 1, "legacy"], ["p0", 1, "d0"], ["p1", 1, "d1"], ["p2", 2, "d2 again"], ["p3", 1, "d3"], ["p4", 1, "d4"]]);
      assert.ok(first.page.prompts.every((p) => !("content" in p)));
      assert.deepEqual(first.reads, ["svc:prompts:{proj_l}:versions:old"], "only the name without a summary is read from its list");
      const second = await listed();
      assert.deepEqual(second.page.prompts, first.page.prompts);
      assert.deepEqual(second.reads, [], "no content read once its summary is written");
    } finally {
      watcher.disconnect();
      await store.close();
    }
  });
});

describe("prompt store (redis): a stalled Redis (the connection open, nothing answered)", () => {
  let redis: TestRedis;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    process.kill(redis.pid, "SIGCONT");
    await redis.stop();
  });

  it("fails a call within PROMPT_CALL_TIMEOUT_MS, and later ones at once, as PromptsUnavailableError; works again once Redis answers", async () => {
    const store = createRedisPromptStore(redis.url);
    try {
      await put(store, "stall", "a", "a1");
      process.kill(redis.pid, "SIGSTOP");
      const calls = [() => store.get("stall", "a"), () => store.list("stall", { after: "", limit: 10 }), () => put(store, "stall", "b", "b1")];
      let t0 = performance.now();
      await assert.rejects(calls[0]!(), (e: unknown) => e instanceof PromptsUnavailableError && /did not answer within 1000 ms/.test(e.message));
      const first = performance.now() - t0;
      assert.ok(first >= PROMPT_CALL_TIMEOUT_MS - 50 && first < PROMPT_CALL_TIMEOUT_MS + 1500, `the first call failed after ${first} ms`);
      for (const call of calls) {
        t0 = performance.now();
        await assert.rejects(call(), (e: unknown) => e instanceof PromptsUnavailableError && /not answering/.test(e.message));
        assert.ok(performance.now() - t0 < 500, "refused at once while stalled");
      }
      process.kill(redis.pid, "SIGCONT");
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          assert.equal((await store.get("stall", "a"))?.content, "a1");
          break;
        } catch (e) {
          if (!(e instanceof PromptsUnavailableError) || Date.now() > deadline) throw e;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      assert.equal((await put(store, "stall", "b", "b1")).version, 1);
    } finally {
      process.kill(redis.pid, "SIGCONT");
      await store.close();
    }
  });
});

describe("prompt store (redis): a full Redis (maxmemory, noeviction)", () => {
  let redis: TestRedis;
  before(async () => {
    redis = await startRedis(undefined, ["--maxmemory-policy", "noeviction"]);
  });
  after(() => redis.stop());

  it("still reads every prompt (a full Redis refuses reads queued in a MULTI, not reads), and refuses a put as PromptsUnavailableError with nothing stored", async () => {
    const store = createRedisPromptStore(redis.url);
    const raw = new Redis(redis.url);
    try {
      await put(store, "full", "a", "a1");
      await put(store, "full", "a", "a2");
      await put(store, "full", "b", "b1");
      await raw.config("SET", "maxmemory", "1"); // full: every write refused, reads answered
      await assert.rejects(raw.set("fill", "x"), /^ReplyError: OOM/, "Redis is full");
      assert.deepEqual([(await store.get("full", "a"))?.content, (await store.get("full", "a"))?.version], ["a2", 2]);
      assert.equal((await store.get("full", "a", 1))?.content, "a1");
      assert.equal(await store.get("full", "nope"), undefined);
      const page = await store.list("full", { after: "", limit: 1 });
      assert.deepEqual([page.prompts.map((p) => [p.name, p.version]), page.more], [[["a", 2]], true]);
      assert.deepEqual((await store.list("full", { after: "a", limit: 10 })).prompts.map((p) => [p.name, p.version]), [["b", 1]]);
      for (const name of ["a", "c"]) {
        await assert.rejects(put(store, "full", name, "refused"), (e: unknown) => {
          assert.ok(e instanceof PromptsUnavailableError, String(e));
          assert.equal(e.writesRefused, true);
          assert.match(e.message, /redis refused the write: OOM/);
          return true;
        });
      }
      await raw.config("SET", "maxmemory", "0");
      assert.equal(await raw.llen("svc:prompts:{full}:versions:a"), 2, "nothing half-written");
      assert.equal(await raw.exists("svc:prompts:{full}:versions:c"), 0);
      assert.deepEqual(await raw.zrange("svc:prompts:{full}:names", "0", "-1"), ["a", "b"]);
      assert.equal((await put(store, "full", "a", "a3")).version, 3, "puts work again once Redis has room");
    } finally {
      await raw.config("SET", "maxmemory", "0");
      raw.disconnect();
      await store.close();
    }
  });
});
