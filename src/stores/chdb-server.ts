/**
 * The embedded telemetry engine's process: chDB (ClickHouse as a library) behind ClickHouse's HTTP
 * interface on loopback, so the gateway talks to it exactly as to a ClickHouse server (one client,
 * one SQL). Only the HTTP framing is ours, and only what @clickhouse/client uses of it: `POST /`
 * with the SQL in the body (or in `query` with the data in the body, for inserts), `param_*` query
 * parameters (sent as ClickHouse text, decoded here by the declared type), the few settings the
 * gateway's own queries use, `/ping`, and errors as ClickHouse's error text.
 *
 * Every other local user can reach a loopback port, and the engine runs any SQL (file(), url(),
 * every project's logs), so a request must carry the password the gateway handed this process over
 * its IPC channel at start (`secret` below: never in argv, the environment or a file). It is what
 * @clickhouse/client sends as Basic auth (or X-ClickHouse-Key), compared in constant time. Anything
 * else is refused before a byte of SQL is read: no password or a wrong one (401), a request a
 * browser made (an Origin or Sec-Fetch-* header, or a content type a page may post cross-origin
 * without asking: 403), and a URL parameter outside the allowlist (400).
 *
 * Why a process of its own: libchdb binds one data directory per process, and, loaded into the
 * gateway, its threads' memory management slowed every system call of the gateway's event loop
 * (bench/telemetry-load.ts: the gateway at 130% of a core at 200 requests/s, 37% with chDB here).
 *
 *   started by chdb-process.ts only (it needs the IPC channel for its password):
 *   fork("chdb-server.js", [PORT, DATA_DIR, NICE])  (PORT 0: a free one; prints "ready PORT";
 *                                                    NICE: a lower CPU priority, 1-19)
 *   child -> parent { want: "secret" }; parent -> child { secret }; child -> parent { ready: PORT }
 *   exit 3: PORT is in use
 *
 * It leaves when its parent's IPC channel closes. Files it creates are the owner's alone (umask 077).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { readdirSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { setPriority } from "node:os";
import { Worker } from "node:worker_threads";
import { createChdbConnection } from "chdb/connection";

const [port, dir, nice = "0"] = process.argv.slice(2) as [string, string, string?];
/** The exit status when the port asked for is taken (chdb-process.ts then asks for a free one). */
const EXIT_PORT_IN_USE = 3;
// The request logs, bodies included, are the gateway user's alone: every file and directory the
// engine creates is 0600/0700, whatever umask the gateway was started with.
process.umask(0o077);
const secret = await receiveSecret();
lowerPriority(Number(nice));
const conn = openConnection();
// Again for the threads chDB started as it opened: its memory worker raises itself to -20.
lowerPriority(Number(nice));

/**
 * The password, from the parent over the IPC channel (a socket pair only this process and its
 * parent hold). Asked for rather than awaited: a message sent before this process listens for it
 * would be lost. Exits when there is no channel (started by hand) or no usable password comes.
 */
async function receiveSecret(): Promise<string> {
  if (!process.send) {
    process.stderr.write("chdb-server: start it through chdb-process.ts (it needs the parent's IPC channel for its password)\n");
    process.exit(2);
  }
  const got = await new Promise<unknown>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 30_000);
    process.once("message", (m: { secret?: unknown } | undefined) => {
      clearTimeout(timer);
      resolve(m?.secret);
    });
    // A parent gone before it answered (killed as this started) sends nothing: leave at once.
    process.once("disconnect", () => resolve(undefined));
    if (process.connected) process.send!({ want: "secret" });
    else resolve(undefined);
  });
  if (typeof got !== "string" || got.length < 32) {
    process.stderr.write("chdb-server: no password came from the parent\n");
    process.exit(2);
  }
  return got;
}

/**
 * chDB's connection on the directory, or exit with one line saying why: chDB has printed its own
 * error line (ClickHouse's "Code: NN. DB::Exception: ...") by then, and the JavaScript error's stack
 * would bury it.
 */
function openConnection(): ReturnType<typeof createChdbConnection> {
  try {
    return createChdbConnection({ path: dir });
  } catch (e) {
    process.stderr.write(`chdb-server: cannot open chDB on ${dir}: ${(e as Error).message}\n`);
    process.exit(1);
  }
}

const sha256 = (s: string) => createHash("sha256").update(s).digest();
const secretHash = sha256(secret);

/**
 * Whether the request carries the password: as @clickhouse/client sends it, `Authorization: Basic
 * base64(user:password)` (over HTTP), or `X-ClickHouse-Key` (its TLS form). The user name is not
 * checked (there is one user). Hashes of equal length, compared in constant time.
 */
function authorized(req: IncomingMessage): boolean {
  let password: string | undefined;
  const auth = req.headers.authorization;
  if (auth !== undefined) {
    const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(auth);
    if (!m) return false;
    const decoded = Buffer.from(m[1]!, "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    if (colon < 0) return false;
    password = decoded.slice(colon + 1);
  } else {
    const key = req.headers["x-clickhouse-key"];
    if (typeof key === "string") password = key;
  }
  return password !== undefined && timingSafeEqual(sha256(password), secretHash);
}

/**
 * Whether a browser sent it: a page on any origin can post to a loopback port without a CORS
 * preflight (a "simple" request), and browsers mark those with Origin and Sec-Fetch-Site and can
 * only give them one of three content types. @clickhouse/client sends none of these. (Not
 * Sec-Fetch-Mode: Node's own fetch sends that one too.)
 */
const BROWSER_TYPES = /^\s*(text\/plain|application\/x-www-form-urlencoded|multipart\/form-data)\b/i;
const fromBrowser = (req: IncomingMessage): boolean =>
  req.headers.origin !== undefined || req.headers["sec-fetch-site"] !== undefined || BROWSER_TYPES.test(req.headers["content-type"] ?? "");

/**
 * The URL parameters the gateway's queries use, and nothing else: `query`, `param_*`, the client's
 * `query_id` (ignored), `database` (the default one only) and these settings (the log inserts' and
 * the migrations' own, clickhouse-telemetry-store.ts and clickhouse-migrations.ts). Any other
 * setting could change what the engine may do (readonly, allow_*, max_*): refused.
 */
const SETTINGS = new Set([
  "insert_deduplicate",
  "insert_deduplication_token",
  "deduplicate_blocks_in_dependent_materialized_views",
  "parallel_view_processing",
  "async_insert",
  "default_format",
]);

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

/**
 * A query parameter as chDB binds it. The client sends ClickHouse's text form of the value: for a
 * String, escaped as in TSV (`it\'s`); for an Array(String), a literal of quoted strings
 * (`['o\'brien']`). chDB's binder escapes a JS string itself (TSV), so a String goes to it decoded,
 * and an Array(String) as a JS array (which it writes as a literal); a number's text is itself.
 */
const STRING = String.raw`(?:LowCardinality\()?(?:String|FixedString\(\d+\))\)?`;
const STRING_TYPE = new RegExp(`^${STRING}$`);
const STRING_ARRAY_TYPE = new RegExp(`^Array\\(${STRING}\\)$`);
function paramValue(text: string, type: string | undefined): unknown {
  if (type === undefined) return text;
  if (STRING_TYPE.test(type)) return unescapeText(text);
  if (STRING_ARRAY_TYPE.test(type)) return parseStringArray(text);
  return text;
}

/** ClickHouse's backslash escapes (readEscapedString): the named ones, else the character itself. */
const ESCAPES: Record<string, string> = { t: "\t", n: "\n", r: "\r", "0": "\0", b: "\b", f: "\f", a: "\x07", v: "\v", e: "\x1b" };
const unescapeText = (s: string): string => (s.includes("\\") ? s.replace(/\\([\s\S])/g, (_, c: string) => ESCAPES[c] ?? c) : s);

/** `['a', 'b\'c', '']` (quotes ' or ", backslash escapes or a doubled quote) as its strings. */
function parseStringArray(text: string): string[] {
  const fail = (): never => {
    throw Object.assign(new Error(`Code: 26. DB::Exception: Cannot parse an Array(String) query parameter. (CANNOT_PARSE_QUOTED_STRING)`), { code: "26" });
  };
  const out: string[] = [];
  let i = 0;
  const ws = () => {
    while (i < text.length && /\s/.test(text[i]!)) i++;
  };
  ws();
  if (text[i++] !== "[") fail();
  ws();
  if (text[i] === "]") {
    i++;
  } else {
    for (;;) {
      ws();
      const q = text[i++];
      if (q !== "'" && q !== '"') fail();
      let v = "";
      for (;;) {
        if (i >= text.length) fail();
        const c = text[i++]!;
        if (c === "\\") {
          if (i >= text.length) fail();
          const e = text[i++]!;
          v += ESCAPES[e] ?? e;
        } else if (c === q) {
          if (text[i] !== q) break;
          v += q;
          i++;
        } else {
          v += c;
        }
      }
      out.push(v);
      ws();
      const sep = text[i++];
      if (sep === "]") break;
      if (sep !== ",") fail();
    }
  }
  ws();
  if (i !== text.length) fail();
  return out;
}

/** A refusal in ClickHouse's form; the connection closes rather than read an unwanted body. */
function refuse(res: ServerResponse, status: number, code: number, text: string): void {
  res.writeHead(status, { "Content-Type": "text/plain; charset=UTF-8", "X-ClickHouse-Exception-Code": String(code), Connection: "close" });
  res.end(`Code: ${code}. DB::Exception: ${text}\n`);
}

const readBody = async (req: IncomingMessage) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
};

/** Queries chDB is running now, and what waits for none to be (stop). */
let running = 0;
let idle: (() => void) | undefined;

const server = createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", "http://localhost");
  if (url.pathname === "/ping" && (req.method === "GET" || req.method === "HEAD")) return void res.end("Ok.\n");
  if (url.pathname !== "/" || req.method !== "POST") return refuse(res, 404, 1001, "Only POST / is served here. (STD_EXCEPTION)");
  if (fromBrowser(req)) return refuse(res, 403, 1001, "Requests from a browser are refused. (STD_EXCEPTION)");
  if (!authorized(req)) return refuse(res, 401, 516, "default: Authentication failed: password is incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)");
  const raw: Record<string, string> = {};
  const clickhouse_settings: Record<string, string> = {};
  for (const [k, v] of url.searchParams) {
    if (k.startsWith("param_") && k.length > 6) raw[k.slice(6)] = v;
    else if (SETTINGS.has(k)) clickhouse_settings[k] = v;
    else if (k === "database" ? v !== "default" : k !== "query" && k !== "query_id") {
      return refuse(res, 400, 115, `URL parameter ${JSON.stringify(k.slice(0, 100))} is not accepted by the embedded engine. (UNKNOWN_SETTING)`);
    }
  }
  const inUrl = url.searchParams.get("query");
  const body = await readBody(req);
  const sql = inUrl ?? body;
  const types = new Map([...sql.matchAll(/\{(\w+):([^}]+)\}/g)].map(([, name, type]) => [name!, type!.trim()]));
  try {
    const query_params: Record<string, unknown> = {};
    for (const [name, text] of Object.entries(raw)) query_params[name] = paramValue(text, types.get(name));
    // An insert carries its settings in its own SETTINGS clause. chDB's connection would put them
    // in front as `SET k = v; ...` statements, and a multi-statement query is split by lexing all
    // of it, the inserted rows included: about a third of an insert's CPU here.
    const insert = inUrl ? insertWithSettings(inUrl, clickhouse_settings) : undefined;
    running++;
    let r;
    try {
      r = await conn.exec({
        query: insert ?? inUrl ?? body,
        ...(inUrl ? { values: body } : {}),
        query_params,
        clickhouse_settings: insert ? {} : clickhouse_settings,
      } as never);
    } finally {
      running--;
      if (running === 0) idle?.();
    }
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
// A restart asks for the port the engine had; another process may have taken it since.
const listenFailed = (e: NodeJS.ErrnoException) => {
  process.stderr.write(`chdb-server: cannot listen on 127.0.0.1:${port}: ${e.code === "EADDRINUSE" ? "the port is in use" : e.message}\n`);
  process.exit(e.code === "EADDRINUSE" ? EXIT_PORT_IN_USE : 1);
};
server.once("error", listenFailed);
server.listen(Number(port), "127.0.0.1", () => {
  server.off("error", listenFailed);
  const bound = (server.address() as import("node:net").AddressInfo).port;
  process.stdout.write(`ready ${bound}\n`);
  process.send?.({ ready: bound });
});
/**
 * Ends this process without running chDB's exit handlers: after a session whose work was cut off
 * (its gateway killed mid-insert) one of them can wait for ever on a lock a thread of chDB holds,
 * which left the process hung inside exit(), holding the data directory, its gateway long gone.
 * What chDB took is on disk as each insert lands; nothing is owed to its destructors.
 */
const leave = () => process.kill(process.pid, "SIGKILL");
let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  // Leaves within 5 s whatever holds the main thread (a call into chDB that does not return): the
  // timer runs on a thread of its own.
  new Worker(`setTimeout(() => process.kill(${process.pid}, "SIGKILL"), 5000)`, { eval: true }).unref();
  // A query under way (an insert whose body came whole: its gateway killed just after sending it)
  // is let finish first: cut, an insert lands in the log table and not in the rollups, and nothing
  // replays a batch its gateway held only in memory. One whose body was still coming never runs.
  server.close(() => conn.close().then(leave, leave));
  server.closeIdleConnections();
  if (running === 0) server.closeAllConnections();
  else idle = () => server.closeAllConnections();
};
process.on("SIGTERM", stop);
// Ctrl-C, and a closing terminal's SIGHUP, reach the whole process group: the gateway flushes its
// last logs here first, then stops this.
process.on("SIGINT", () => {});
process.on("SIGHUP", () => {});
// Never outlive the gateway: when it goes (even killed), the IPC channel closes.
process.on("disconnect", stop);
