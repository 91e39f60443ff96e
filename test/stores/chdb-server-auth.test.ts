import assert from "node:assert/strict";
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectClickHouseServer } from "../../src/stores/clickhouse-client.js";
import { type ChdbProcess, startChdbProcess } from "../../src/stores/chdb-process.js";

/**
 * The embedded engine's HTTP port (src/stores/chdb-server.ts) is on loopback, where every local
 * user, and every web page through a browser, can reach it: it runs SQL only for the gateway,
 * which alone knows the password it handed the child at start.
 */
describe("the embedded engine's HTTP port: the gateway's password, its own parameters, no browsers", function () {
  this.timeout(60_000);
  let dir: string;
  let engine: ChdbProcess;
  /** A file only SQL could read, and one only SQL could write. */
  let marker = "";
  let written = "";

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "svc-chdb-auth-"));
    marker = join(dir, "admin-token");
    writeFileSync(marker, "svc_admin_marker_value\n", { mode: 0o600 });
    written = join(dir, "written-by-sql.txt");
    engine = await startChdbProcess(join(dir, "telemetry"), 0);
  });
  after(async () => {
    await engine?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;
  const post = (sql: string, headers: Record<string, string> = {}, search = "") =>
    fetch(`${engine.url}/${search}`, { method: "POST", body: Buffer.from(sql), headers }).then(async (r) => ({ status: r.status, text: await r.text() }));
  const steal = `SELECT * FROM file('${marker}', 'LineAsString') FORMAT TSV`;
  const plant = `INSERT INTO FUNCTION file('${written}', 'LineAsString') SELECT 'planted'`;

  it("refuses a request without the password, or with a wrong one, and runs none of its SQL", async () => {
    for (const headers of [
      {} as Record<string, string>,
      { authorization: basic("default", "") },
      { authorization: basic("default", `${engine.password.slice(0, -1)}x`) },
      { authorization: basic("default", `${engine.password}x`) },
      { authorization: basic("default", engine.password.slice(0, 20)) },
      { authorization: `Bearer ${engine.password}` },
      { authorization: engine.password },
      { "x-clickhouse-user": "default", "x-clickhouse-key": "wrong" },
      // A wrong Authorization is not rescued by a right X-ClickHouse-Key.
      { authorization: basic("default", "wrong"), "x-clickhouse-key": engine.password },
    ]) {
      const read = await post(steal, headers);
      assert.equal(read.status, 401, JSON.stringify(headers));
      assert.doesNotMatch(read.text, /marker_value/);
      assert.match(read.text, /AUTHENTICATION_FAILED/);
      assert.equal((await post(plant, headers)).status, 401);
      assert.equal((await post("SELECT 1", headers, `?query=${encodeURIComponent(plant)}`)).status, 401);
    }
    assert.equal(existsSync(written), false, "no file written");
  });

  it("runs a request carrying it as @clickhouse/client sends it: Basic auth (any user name) or X-ClickHouse-Key", async () => {
    assert.equal(engine.password.length, 43, "32 random bytes, base64url");
    for (const headers of [{ authorization: basic("default", engine.password) } as Record<string, string>, { authorization: basic("other", engine.password) }, { "x-clickhouse-user": "default", "x-clickhouse-key": engine.password }]) {
      const r = await post("SELECT 41 + 1 FORMAT TSV", headers);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.text.trim(), "42");
    }
    const good = connectClickHouseServer(engine.url, { password: engine.password });
    const none = connectClickHouseServer(engine.url);
    try {
      assert.deepEqual(await (await good.client.query({ query: "SELECT 1 AS n", format: "JSONEachRow" })).json(), [{ n: 1 }]);
      await assert.rejects(none.client.query({ query: "SELECT 1", format: "JSONEachRow" }), /Authentication failed/);
    } finally {
      await good.close();
      await none.close();
    }
  });

  it("keeps the password out of the child's command line and environment", function () {
    if (!existsSync(`/proc/${engine.pid}/cmdline`)) this.skip();
    assert.doesNotMatch(readFileSync(`/proc/${engine.pid}/cmdline`, "latin1"), new RegExp(engine.password));
    assert.doesNotMatch(readFileSync(`/proc/${engine.pid}/environ`, "latin1"), new RegExp(engine.password));
  });

  it("gives each start a password of its own", async () => {
    const other = await startChdbProcess(join(dir, "telemetry-2"), 0);
    try {
      assert.notEqual(other.password, engine.password);
      assert.equal((await post("SELECT 1", { authorization: basic("default", other.password) })).status, 401);
    } finally {
      await other.stop();
    }
  });

  it("refuses what a browser sends, password or not: an Origin or Sec-Fetch-Site header, a form or text/plain body", async () => {
    const auth = { authorization: basic("default", engine.password) };
    for (const extra of [
      { origin: "http://evil.example" } as Record<string, string>,
      { origin: "null" },
      { "sec-fetch-site": "cross-site" },
      { "content-type": "text/plain;charset=UTF-8" },
      { "content-type": "application/x-www-form-urlencoded" },
      { "content-type": "multipart/form-data; boundary=x" },
    ]) {
      const r = await post(plant, { ...auth, ...extra });
      assert.equal(r.status, 403, JSON.stringify(extra));
    }
    // A string body through fetch is text/plain: what a page's fetch() or form would send.
    const page = await fetch(`${engine.url}/`, { method: "POST", body: steal });
    assert.equal(page.status, 403);
    assert.equal(existsSync(written), false);
  });

  it("serves POST / only (and /ping)", async () => {
    const auth = { authorization: basic("default", engine.password) };
    assert.equal((await fetch(`${engine.url}/?query=${encodeURIComponent("SELECT 1")}`, { headers: auth })).status, 404);
    assert.equal((await fetch(`${engine.url}/play`, { method: "POST", body: Buffer.from("SELECT 1"), headers: auth })).status, 404);
    assert.equal(await (await fetch(`${engine.url}/ping`)).text(), "Ok.\n");
  });

  it("takes only the URL parameters the gateway's queries use; any other setting is refused before the query runs", async () => {
    const auth = { authorization: basic("default", engine.password) };
    const ok = await post("SELECT {n:UInt32} + 1 FORMAT TSV", auth, `?query_id=q1&database=default&param_n=41&default_format=TSV`);
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.text.trim(), "42");
    for (const search of ["?readonly=0", "?max_execution_time=1", "?allow_ddl=1", "?session_id=s", "?role=admin", "?database=system", "?user=default", "?password=x", "?param_=1", "?enable_http_compression=1"]) {
      const r = await post(plant, auth, search);
      assert.equal(r.status, 400, `${search}: ${r.text}`);
      assert.match(r.text, /not accepted/);
    }
    assert.equal(existsSync(written), false);
    // The log inserts' settings, as the store sends them (in the insert's own SETTINGS clause).
    assert.equal((await post("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s SETTINGS non_replicated_deduplication_window = 100", auth)).status, 200);
    const settings = "&insert_deduplicate=1&insert_deduplication_token=tok&deduplicate_blocks_in_dependent_materialized_views=1&parallel_view_processing=0&async_insert=0";
    for (let i = 0; i < 2; i++) {
      const r = await post('{"s":"a"}\n', auth, `?query=${encodeURIComponent("INSERT INTO t FORMAT JSONEachRow")}${settings}`);
      assert.equal(r.status, 200, r.text);
    }
    assert.equal((await post("SELECT count() FROM t FORMAT TSV", auth)).text.trim(), "1", "the second insert deduplicated by its token");
  });

  it("decodes String and Array(String) parameters as ClickHouse does: any string comes back as it was sent", async () => {
    const values = ["plain", "o'brien", "a\\'b", "back\\slash", "p\\", "\\", "\\\\", "''", "x' OR '1'='1", "tab\there", "nl\nx", "cr\rx", "nul\0x", "\\0", "\\n", "\\t",
      "é😀 中文", "[]", "['a']", "a,b", "]", "{x:String}", "%27%00", "\"dq\"", "`bt`", "\b\f\v\x07\x1b", "", " lead and trail "];
    const h = connectClickHouseServer(engine.url, { password: engine.password });
    try {
      for (const v of values) {
        const rows = await (await h.client.query({ query: "SELECT {s:String} AS s, {a:Array(String)} AS a, has({a:Array(String)}, {s:String}) AS found", query_params: { s: v, a: [v, "z", v] }, format: "JSONEachRow" })).json<{ s: string; a: string[]; found: number }>();
        assert.deepEqual(rows, [{ s: v, a: [v, "z", v], found: 1 }], JSON.stringify(v));
      }
      const all = await (await h.client.query({ query: "SELECT {a:Array(String)} AS a, {e:Array(String)} AS e", query_params: { a: values, e: [] }, format: "JSONEachRow" })).json<{ a: string[]; e: string[] }>();
      assert.deepEqual(all, [{ a: values, e: [] }]);
    } finally {
      await h.close();
    }
  });

  it("keeps its files to the gateway user: the directory 0700 (made so when it existed), what the engine writes 0600/0700", async function () {
    if (process.platform === "win32") this.skip();
    const t = join(dir, "perm-telemetry");
    mkdirSync(t, { mode: 0o755 });
    chmodSync(t, 0o755);
    const oldMask = process.umask(0o022); // as a gateway started by a typical shell
    let e: ChdbProcess | undefined;
    try {
      e = await startChdbProcess(t, 0);
      const h = connectClickHouseServer(e.url, { password: e.password });
      try {
        await h.client.command({ query: "CREATE TABLE p (s String) ENGINE = MergeTree ORDER BY s" });
        await h.client.insert({ table: "p", values: [{ s: "secret body" }], format: "JSONEachRow" });
      } finally {
        await h.close();
      }
    } finally {
      process.umask(oldMask);
      await e?.stop();
    }
    assert.equal(statSync(t).mode & 0o777, 0o700);
    const open: string[] = [];
    let files = 0;
    const walk = (d: string) => {
      for (const name of readdirSync(d)) {
        const p = join(d, name);
        const st = lstatSync(p);
        if (st.isSymbolicLink()) continue;
        files++;
        if (st.mode & 0o077) open.push(`${p} ${(st.mode & 0o777).toString(8)}`);
        if (st.isDirectory()) walk(p);
      }
    };
    walk(t);
    assert.ok(files > 5, `the engine wrote its files (${files})`);
    assert.deepEqual(open, [], "nothing readable by group or others");
  });
});
