import assert from "node:assert/strict";
import { fork } from "node:child_process";
import { request as httpRequest } from "node:http";
import { fileURLToPath } from "node:url";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ChdbProcess, startChdbProcess } from "../../src/stores/chdb-process.js";
import { TelemetryUnavailableError } from "../../src/stores/telemetry-store.js";

/** The nice value of each thread of a process (Linux: field 19 of /proc/<pid>/task/<tid>/stat). */
const threadNices = (pid: number): number[] =>
  readdirSync(`/proc/${pid}/task`).flatMap((tid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
      return [Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16])];
    } catch {
      return []; // the thread ended meanwhile
    }
  });

/** The pid of this process's engine child on `dir`, as soon as it runs chdb-server. */
async function engineChild(dir: string): Promise<number> {
  for (const end = Date.now() + 10_000; Date.now() < end; await new Promise((r) => setTimeout(r, 5))) {
    for (const name of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
      try {
        const stat = readFileSync(`/proc/${name}/stat`, "utf8");
        if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) !== process.pid) continue;
        const argv = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0");
        if (argv.some((a) => /chdb-server\.[jt]s$/.test(a)) && argv.includes(dir)) return Number(name);
      } catch {
        // gone meanwhile
      }
    }
  }
  throw new Error(`no engine process on ${dir}`);
}

describe("the embedded engine's process", function () {
  this.timeout(60_000);
  let dir: string;
  let engine: ChdbProcess | undefined;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-chdb-proc-"));
  });
  afterEach(async () => {
    await engine?.stop();
    engine = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  /** Runs an insert and a query, so the engine has started the threads that do its work. */
  const work = async ({ url, password }: ChdbProcess) => {
    const q = (sql: string, body?: string) =>
      fetch(`${url}/?${body ? `query=${encodeURIComponent(sql)}` : ""}`, {
        method: "POST",
        body: Buffer.from(body ?? sql), // bytes: no text/plain content type, which the engine refuses
        headers: { authorization: `Basic ${Buffer.from(`default:${password}`).toString("base64")}` },
      }).then(async (r) => {
        assert.equal(r.status, 200, await r.clone().text());
        return r.text();
      });
    await q("CREATE TABLE t (n UInt32) ENGINE = MergeTree ORDER BY n");
    await q("INSERT INTO t FORMAT JSONEachRow", '{"n":1}\n{"n":2}');
    assert.equal((await q("SELECT sum(n) FROM t FORMAT TSV")).trim(), "3");
  };

  it("gets none of the gateway's secrets in its environment, and still works", async function () {
    if (!readdirSync("/proc").includes("self")) this.skip();
    const secrets = { SVC_OPENAI_API_KEY: "sk-ENVLEAK-1", SVC_ADMIN_TOKEN: "ENVLEAK-2", AZURE_KEY: "ENVLEAK-3", SVC_REDIS_URL: "redis://:ENVLEAK-4@127.0.0.1:1" };
    const before = { ...process.env };
    Object.assign(process.env, secrets);
    try {
      engine = await startChdbProcess(dir);
    } finally {
      for (const k of Object.keys(secrets)) if (before[k] === undefined) delete process.env[k];
      Object.assign(process.env, before);
    }
    const environ = readFileSync(`/proc/${engine.pid}/environ`, "utf8");
    assert.ok(!environ.includes("ENVLEAK"), "no secret reaches the engine's process");
    assert.match(environ, /(^|\0)PATH=/, "what it needs still does");
    await work(engine);
  });

  it("runs in UTC whatever the gateway's TZ, so a TZ only Node can read does not keep it from starting", async function () {
    if (!readdirSync("/proc").includes("self")) this.skip();
    const before = process.env.TZ;
    process.env.TZ = "JST-9"; // POSIX form: Node and date(1) take it, the engine's tables do not
    try {
      engine = await startChdbProcess(dir);
    } finally {
      if (before === undefined) delete process.env.TZ;
      else process.env.TZ = before;
    }
    assert.match(readFileSync(`/proc/${engine.pid}/environ`, "utf8"), /(^|\0)TZ=UTC(\0|$)/);
    await work(engine);
  });

  it("runs every thread at the nice value asked for, the threads its queries start included", async function () {
    if (!existsSync("/proc/self/task")) this.skip(); // per-thread priorities are read from Linux's /proc
    // Above this process's own (as a CI runner may already be niced): raising it needs no privilege.
    const nice = Math.min(19, threadNices(process.pid)[0]! + 7);
    engine = await startChdbProcess(dir, 0, { nice });
    await work(engine);
    const nices = threadNices(engine.pid);
    assert.ok(nices.length > 4, `the engine runs its pools (${nices.length} threads)`);
    // chDB's memory worker raises itself to -20 as it starts: lowered again after the engine opens.
    assert.deepEqual([...new Set(nices)], [nice]);
  });

  it("stops an engine that was stopped (SIGSTOP) at once, not after the kill's grace", async () => {
    engine = await startChdbProcess(dir, 0);
    await work(engine);
    process.kill(engine.pid, "SIGSTOP");
    const started = Date.now();
    await engine.stop();
    assert.ok(Date.now() - started < 3_000, `stopped in ${Date.now() - started} ms`);
    assert.equal(engine.alive, false);
  });

  it("names the process that holds the directory (an engine left stopped), not the tail of a Node stack", async () => {
    engine = await startChdbProcess(dir, 0);
    await work(engine);
    process.kill(engine.pid, "SIGSTOP"); // as a gateway killed with kill -9 can leave it
    await assert.rejects(startChdbProcess(dir, 0), (e: Error) => {
      assert.ok(e instanceof TelemetryUnavailableError, String(e));
      const held = `the telemetry directory ${dir} is held by another process: pid ${engine!.pid}, an embedded telemetry engine (chdb-server), stopped (SIGSTOP).`;
      assert.ok(e.message.startsWith(held), e.message);
      assert.match(e.message, new RegExp(`kill -CONT ${engine!.pid}`));
      assert.doesNotMatch(e.message, /Node\.js v|[{}]/);
      return true;
    });
  });

  it("says which signal killed an engine as it started", async function () {
    if (!existsSync("/proc/self/task")) this.skip(); // the child is found through Linux's /proc
    const starting = startChdbProcess(dir, 0);
    const pid = await engineChild(dir);
    process.kill(pid, "SIGKILL");
    await assert.rejects(starting, (e: Error) => {
      assert.equal(e.message, `chDB was killed (SIGKILL) on ${dir} before it was ready`);
      return true;
    });
  });

  it("leaves at once when its gateway goes before handing it the password (killed as the engine started)", async () => {
    const script = fileURLToPath(new URL("../../src/stores/chdb-server.ts", import.meta.url));
    const child = fork(script, ["0", dir, "0"], { execArgv: ["--import", "tsx"], stdio: ["ignore", "ignore", "pipe", "ipc"] });
    let stderr = "";
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    await new Promise<void>((r) => child.once("message", () => r())); // it asks for the password
    const t0 = Date.now();
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    child.disconnect(); // as a gateway killed then: its end of the channel closes
    assert.equal(await exited, 2);
    assert.ok(Date.now() - t0 < 5_000, `left after ${Date.now() - t0} ms (it waited 30 s for the password)`);
    assert.match(stderr, /no password came from the parent/);
  });

  it("lets an insert under way finish when its gateway goes (killed just after sending it): the rows in the table and in its view alike", async function () {
    this.timeout(120_000);
    const script = fileURLToPath(new URL("../../src/stores/chdb-server.ts", import.meta.url));
    const password = "p".repeat(40);
    const start = async () => {
      const child = fork(script, ["0", dir, "0"], { execArgv: ["--import", "tsx"], stdio: ["ignore", "ignore", "pipe", "ipc"] });
      const port = await new Promise<number>((resolve, reject) => {
        child.on("message", (m: { want?: string; ready?: number }) => {
          if (m.want) child.send({ secret: password });
          if (m.ready) resolve(m.ready);
        });
        child.once("exit", (code) => reject(new Error(`the engine exited (${code})`)));
      });
      const q = async (sql: string, body?: string) => {
        const r = await fetch(`http://127.0.0.1:${port}/?${body ? `query=${encodeURIComponent(sql)}` : ""}`, {
          method: "POST",
          body: Buffer.from(body ?? sql),
          headers: { authorization: `Basic ${Buffer.from(`default:${password}`).toString("base64")}` },
        });
        const text = await r.text();
        assert.equal(r.status, 200, text.slice(0, 300));
        return text;
      };
      return { child, q, port };
    };
    const first = await start();
    await first.q("CREATE TABLE t (n UInt64, s String) ENGINE = MergeTree ORDER BY n");
    await first.q("CREATE TABLE counts (c UInt64) ENGINE = SummingMergeTree ORDER BY tuple()");
    await first.q("CREATE MATERIALIZED VIEW v TO counts AS SELECT count() AS c FROM t");
    // Rows enough that the insert takes a while in the engine once its body has come.
    const rows = 400_000;
    let body = "";
    for (let i = 0; i < rows; i++) body += `{"n":${i},"s":"row ${i} ${"x".repeat(40)}"}\n`;
    const exited = new Promise<void>((r) => first.child.once("exit", () => r()));
    // The body handed to the socket whole, then a moment for the engine to read it (loopback), well
    // before it has parsed and written the rows: the gateway goes then.
    const sent = new Promise<void>((resolve) => {
      const req = httpRequest({ host: "127.0.0.1", port: first.port, path: `/?query=${encodeURIComponent("INSERT INTO t FORMAT JSONEachRow")}`, method: "POST", headers: { authorization: `Basic ${Buffer.from(`default:${password}`).toString("base64")}` } });
      req.on("error", () => {});
      req.on("response", (r) => r.resume());
      req.on("finish", () => resolve());
      req.end(Buffer.from(body));
    });
    await sent;
    await new Promise((r) => setTimeout(r, 200));
    first.child.disconnect();
    await exited;
    const again = await start();
    try {
      const inTable = Number((await again.q("SELECT count() FROM t FORMAT TSV")).trim());
      const inView = Number((await again.q("SELECT sum(c) FROM counts FORMAT TSV")).trim());
      assert.equal(inView, inTable, `${inTable} rows in the table, ${inView} counted by its view`);
      assert.equal(inTable, rows, "the insert under way finished");
    } finally {
      const gone = new Promise<void>((r) => again.child.once("exit", () => r()));
      again.child.disconnect();
      await gone;
    }
  });

  it("leaves the priority alone at nice 0", async function () {
    if (!existsSync("/proc/self/task")) this.skip();
    engine = await startChdbProcess(dir, 0, { nice: 0 });
    await work(engine);
    // As chDB sets them: the parent's priority, and its memory worker's own (-20, when permitted).
    const ours = threadNices(process.pid)[0]!;
    assert.ok(threadNices(engine.pid).every((n) => n <= ours), String(threadNices(engine.pid)));
    assert.ok(threadNices(engine.pid).filter((n) => n === ours).length > 4);
  });
});
