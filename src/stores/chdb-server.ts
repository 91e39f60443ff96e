/**
 * The embedded telemetry engine's process: chDB (ClickHouse as a library) behind ClickHouse's HTTP
 * interface on loopback, so the gateway talks to it exactly as to a ClickHouse server (one client,
 * one SQL). Only the HTTP framing is ours, and only what @clickhouse/client uses of it: the SQL in
 * the body (or in `query` with the data in the body, for inserts), `param_*` query parameters
 * (sent as ClickHouse text, which the engine parses by the declared type), every other URL
 * parameter as a setting, `/ping`, and errors as status 500 with ClickHouse's error text.
 *
 * Why a process of its own: libchdb binds one data directory per process, and, loaded into the
 * gateway, its threads' memory management slowed every system call of the gateway's event loop
 * (bench/telemetry-load.ts: the gateway at 130% of a core at 200 requests/s, 37% with chDB here).
 *
 *   node src/stores/chdb-server.js PORT DATA_DIR [NICE]   (PORT 0: a free one; prints "ready PORT";
 *                                                         NICE: a lower CPU priority, 1-19)
 *
 * Started by chdb-process.ts, which it leaves when its parent's IPC channel closes.
 */
import { readdirSync } from "node:fs";
import { createServer, type IncomingMessage } from "node:http";
import { setPriority } from "node:os";
import { createChdbConnection } from "chdb/connection";

const [port, dir, nice = "0"] = process.argv.slice(2) as [string, string, string?];
lowerPriority(Number(nice));
const conn = createChdbConnection({ path: dir });
// Again for the threads chDB started as it opened: its memory worker raises itself to -20.
lowerPriority(Number(nice));
const NOT_SETTINGS = new Set(["query", "query_id", "database", "session_id", "role"]);

/**
 * `INSERT INTO t [(cols)] FORMAT F` (what the client sends) with the settings in a SETTINGS
 * clause before FORMAT. Undefined, leaving the statement to chDB's own handling, for any other
 * statement, for a setting name that is not a plain identifier, and for the HTTP-only settings and
 * `default_format`, which chDB's connection drops or maps rather than sets. Values go in as string
 * literals, which the engine converts to each setting's type.
 */
const INSERT = /^\s*(INSERT\s+INTO\s[\s\S]*?)\s+(FORMAT\s+\w+)\s*$/i;
const PLAIN_SETTING = /^(?!.*http)(?!wait_end_of_query$|send_progress_in_http_headers$|default_format$)[A-Za-z_][A-Za-z0-9_]*$/;
function insertWithSettings(sql: string, settings: Record<string, string>): string | undefined {
  const m = INSERT.exec(sql);
  if (!m) return undefined;
  const entries = Object.entries(settings);
  if (entries.length === 0) return sql;
  if (!entries.every(([k]) => PLAIN_SETTING.test(k))) return undefined;
  const literal = (v: string) => `'${v.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
  return `${m[1]} SETTINGS ${entries.map(([k, v]) => `${k} = ${literal(v)}`).join(", ")} ${m[2]}`;
}

/**
 * Lowers the process's CPU priority, so the engine's inserts and merges wait for the gateway's
 * requests rather than take the cores from them (its bursts set the gateway's p99 under load; see
 * docs/telemetry.md). On Linux a nice value belongs to each thread, and a new thread takes its
 * creator's: every thread there now is changed, before chDB opens and starts its own pools from
 * them (queries run on libuv's pool, whose threads would otherwise keep the default). Elsewhere
 * the call applies to the whole process. Lowering a priority needs no privilege; a failure only
 * leaves a thread as it was.
 */
function lowerPriority(n: number): void {
  if (!Number.isInteger(n) || n <= 0) return;
  let tids: number[] = [0];
  try {
    tids = readdirSync("/proc/self/task").map(Number);
  } catch {
    // no /proc: the whole process, through its pid
  }
  for (const tid of tids) {
    try {
      setPriority(tid, Math.min(n, 19));
    } catch {
      // leave this thread as it is
    }
  }
}

const readBody = async (req: IncomingMessage) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
};

const server = createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", "http://localhost");
  if (url.pathname === "/ping") return void res.end("Ok.\n");
  const body = await readBody(req);
  const query_params: Record<string, string> = {};
  const clickhouse_settings: Record<string, string> = {};
  for (const [k, v] of url.searchParams) {
    if (k.startsWith("param_")) query_params[k.slice(6)] = v;
    else if (!NOT_SETTINGS.has(k)) clickhouse_settings[k] = v;
  }
  const inUrl = url.searchParams.get("query");
  // The server reads a top-level String parameter in TSV-escaped form (the client sends `it\'s`);
  // chDB's binder takes it verbatim, so unescape those here. Composite types carry quoted literals,
  // which both parse alike.
  const types = new Map([...(inUrl ?? body).matchAll(/\{(\w+):([^}]+)\}/g)].map(([, name, type]) => [name!, type!.trim()]));
  for (const [name, type] of types) {
    if (query_params[name] !== undefined && /^(LowCardinality\()?(String|FixedString\(\d+\))\)?$/.test(type)) {
      query_params[name] = query_params[name]!.replace(/\\(.)/g, (_, c: string) => ({ t: "\t", n: "\n", r: "\r", "0": "\0" })[c] ?? c);
    }
  }
  try {
    // An insert carries its settings in its own SETTINGS clause. chDB's connection would put them
    // in front as `SET k = v; ...` statements, and a multi-statement query is split by lexing all
    // of it, the inserted rows included: about a third of an insert's CPU here.
    const insert = inUrl ? insertWithSettings(inUrl, clickhouse_settings) : undefined;
    const r = await conn.exec({
      query: insert ?? inUrl ?? body,
      ...(inUrl ? { values: body } : {}),
      query_params,
      clickhouse_settings: insert ? {} : clickhouse_settings,
    } as never);
    res.writeHead(200, { "Content-Type": "text/plain; charset=UTF-8", "X-ClickHouse-Summary": JSON.stringify(r.summary ?? {}) });
    r.stream.pipe(res);
  } catch (e) {
    const err = e as Error & { code?: string; cause?: Error };
    const text = err.cause?.message ?? err.message;
    res.writeHead(500, { "Content-Type": "text/plain; charset=UTF-8", "X-ClickHouse-Exception-Code": err.code ?? "1001" });
    res.end(text.startsWith("Code:") ? text : `Code: 1001. DB::Exception: ${text}. (STD_EXCEPTION)`);
  }
});
// Longer than the client's idle socket TTL (2.5 s): the gateway's writer reuses one connection for
// its inserts, and the client, not the server, retires it.
server.keepAliveTimeout = 10_000;
server.listen(Number(port), "127.0.0.1", () => {
  const bound = (server.address() as import("node:net").AddressInfo).port;
  process.stdout.write(`ready ${bound}\n`);
  process.send?.({ ready: bound });
});
let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  server.closeAllConnections();
  server.close(() => conn.close().then(() => process.exit(0), () => process.exit(0)));
  setTimeout(() => process.exit(0), 5_000).unref();
};
process.on("SIGTERM", stop);
// Ctrl-C reaches the whole process group: the gateway flushes its last logs here first, then stops this.
process.on("SIGINT", () => {});
// Never outlive the gateway: when it goes (even killed), the IPC channel closes.
process.on("disconnect", stop);
