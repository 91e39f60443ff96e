import { fork, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { chmod } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { TelemetryUnavailableError } from "./telemetry-store.js";
import { makeDir } from "./make-dir.js";

/** The embedded engine's process (chdb-server.ts), its ClickHouse HTTP address and password. */
export interface ChdbProcess {
  url: string;
  port: number;
  /** What every request must carry as its ClickHouse password (any user name). */
  password: string;
  /** The process id (for CPU accounting). */
  pid: number;
  /** True until the process exits. */
  readonly alive: boolean;
  /** Settles when the process exits, for whatever reason. */
  exited: Promise<void>;
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 60_000;
/** chdb-server.ts's exit status when the port it was asked for is taken. */
const EXIT_PORT_IN_USE = 3;

/** The engine could not listen on the port it was asked for: another process has it. */
export class ChdbPortInUseError extends TelemetryUnavailableError {}

/** How the engine's process runs. */
export interface ChdbOptions {
  /** Its CPU priority as a nice value (0-19), set on every thread before chDB opens; 0 leaves it. */
  nice?: number;
  /** The password its requests must carry; default: a new one (newChdbPassword). */
  password?: string;
}

/**
 * What of the gateway's environment the engine's process gets: what Node and the engine read
 * (paths, locale, time zone, temp dirs, Node's and ClickHouse's own settings, the log level),
 * never the gateway's secrets (provider keys, their `apiKeyEnv` variables, the admin token,
 * SVC_REDIS_URL's password), which a process that runs any SQL it is sent has no use for. Its
 * time zone is UTC, whatever the gateway's: every time it stores or reads is UTC (the columns say
 * so), and a TZ the engine cannot load, which Node and `date` take (the POSIX form `JST-9`, a name
 * not in its tables), kept it from starting at all (logs and analytics 503 for as long as it ran).
 */
const ENGINE_ENV = /^(PATH|LD_LIBRARY_PATH|HOME|USER|LOGNAME|LANG|LANGUAGE|LC_[A-Z_]+|TMPDIR|TMP|TEMP|NODE_[A-Z0-9_]+|UV_[A-Z0-9_]+|CHDB_[A-Z0-9_]+|CLICKHOUSE_[A-Z0-9_]+|SVC_LOG_LEVEL)$/;
export const engineEnv = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({ ...Object.fromEntries(Object.entries(env).filter(([k]) => ENGINE_ENV.test(k))), TZ: "UTC" });

/** A password for the engine's HTTP port: 32 random bytes, base64url. */
export const newChdbPassword = (): string => randomBytes(32).toString("base64url");

/** Why the engine's process ended before it was ready, from its exit and what it wrote to stderr. */
function startFailure(dir: string, port: number, code: number | null, signal: NodeJS.Signals | null, stderr: string): TelemetryUnavailableError {
  if (code === EXIT_PORT_IN_USE) return new ChdbPortInUseError(`chDB cannot listen on 127.0.0.1:${port}: the port is in use`);
  if (/Cannot find (package|module) 'chdb/.test(stderr)) return new TelemetryUnavailableError("chDB is not installed (the optional dependency `chdb`); install it or set SVC_CLICKHOUSE_URL");
  // ClickHouse locks `<dir>/status` for as long as it has the directory open, and prints this when
  // another process has it (chDB 3.4: "Code: 76. DB::Exception: Cannot lock file <dir>/status.
  // Another server instance in same directory is already running. (CANNOT_OPEN_FILE)").
  if (/Cannot lock file .*status|Another server instance in same directory/.test(stderr)) {
    const holder = describeHolder(dir);
    return new TelemetryUnavailableError(`the telemetry directory ${dir} is held by another process: ${holder.what}. chDB opens a directory in one process at a time: ${holder.remedy}, and the engine starts`);
  }
  // chDB's own error line, else chdb-server's, else the error a crash names, else the last lines.
  const lines = stderr.split("\n").map((l) => l.trim()).filter(Boolean);
  const detail = lines.find((l) => /DB::Exception/.test(l)) ?? lines.find((l) => /^chdb-server: /.test(l)) ?? lines.find((l) => /^\w*(Error|Exception)\b/.test(l)) ?? lines.slice(-3).join(" ");
  const how = signal ? `was killed (${signal})` : `exited (${code})`;
  return new TelemetryUnavailableError(`chDB ${how} on ${dir} before it was ready${detail ? `: ${detail.replace(/^chdb-server: /, "")}` : ""}`);
}

/**
 * The process holding the engine's directory, as far as it can be told: the pid ClickHouse wrote
 * into `<dir>/status` as it locked it ("PID: 1234"), with what /proc says of it on Linux (its
 * program, and whether it is stopped: an engine left SIGSTOPped by a gateway that was killed acts on
 * nothing, not even its parent's death, until continued; continued, it leaves).
 */
function describeHolder(dir: string): { what: string; remedy: string } {
  let pid: number | undefined;
  try {
    pid = Number(/^PID:\s*(\d+)/m.exec(readFileSync(join(dir, "status"), "utf8"))?.[1]) || undefined;
  } catch {
    // no status file to read
  }
  if (pid === undefined) return { what: "its pid is not known", remedy: "end the process that has it open (`fuser -v` on the directory names it)" };
  const what = [`pid ${pid}`];
  let remedy = `end process ${pid}`;
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    what.push(cmdline.some((a) => /chdb-server\.[jt]s$/.test(a)) ? "an embedded telemetry engine (chdb-server)" : basename(cmdline[0] || "?"));
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    if (/^[Tt]$/.test(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] ?? "")) {
      what.push("stopped (SIGSTOP)");
      remedy = `end process ${pid}, or continue it (\`kill -CONT ${pid}\`: an engine whose gateway is gone then leaves by itself)`;
    }
  } catch {
    // no /proc, or the process is gone meanwhile
  }
  return { what: what.join(", "), remedy };
}

/**
 * Starts chDB on `dir` in a child process serving ClickHouse's HTTP interface on a free loopback
 * port, which answers only requests that carry `password` (handed to the child over its IPC
 * channel, never in its argv, environment or a file). Under tsx (tests, development) it runs the
 * TypeScript, else the built JavaScript. Fails with TelemetryUnavailableError when chDB is not
 * installed or cannot open the directory.
 *
 * The directory is the engine's: created, or made if it exists, 0700, so the request logs in it are
 * the gateway user's alone (the child creates its files under umask 077).
 */
export async function startChdbProcess(dataDir: string, port = 0, opts: ChdbOptions = {}): Promise<ChdbProcess> {
  const dir = resolve(dataDir); // the child runs in another working directory
  const password = opts.password ?? newChdbPassword();
  await makeDir(dir, 0o700);
  await chmod(dir, 0o700);
  const ts = import.meta.url.endsWith(".ts");
  const script = fileURLToPath(new URL(ts ? "./chdb-server.ts" : "./chdb-server.js", import.meta.url));
  const child: ChildProcess = fork(script, [String(port), dir, String(opts.nice ?? 0)], {
    execArgv: ts ? ["--import", "tsx"] : [],
    env: engineEnv(process.env),
    // `--import tsx` resolves from the working directory: the package's own, not wherever svc runs.
    cwd: fileURLToPath(new URL("../..", import.meta.url)),
    stdio: ["ignore", "ignore", "pipe", "ipc"],
  });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => {
    if (stderr.length < 4096) stderr += d.toString();
  });
  let alive = true;
  const exited = new Promise<void>((r) => child.once("exit", () => {
    alive = false;
    r();
  }));
  const bound = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new TelemetryUnavailableError(`chDB did not start within ${START_TIMEOUT_MS / 1000} s`));
    }, START_TIMEOUT_MS);
    child.on("message", (m: { ready?: number; want?: string }) => {
      if (m?.want === "secret") child.send({ secret: password });
      if (typeof m?.ready === "number") {
        clearTimeout(timer);
        resolve(m.ready);
      }
    });
    // "close", not "exit": what it wrote to stderr has all been read by then.
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      reject(startFailure(dir, port, code, signal, stderr));
    });
  });
  // The child keeps no event loop of ours alive, and leaves on its own if this process dies.
  child.unref();
  (child.channel as unknown as { unref?: () => void } | undefined)?.unref?.();
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    password,
    pid: child.pid!,
    exited,
    get alive() {
      return alive;
    },
    async stop() {
      if (!alive) return;
      child.kill("SIGTERM");
      // A stopped engine (SIGSTOP, a debugger) acts on the TERM only once continued; a hung one is
      // killed after 5 s (its inserts are durable as they land, and what it had not taken is spooled).
      child.kill("SIGCONT");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** The first wait before restarting a dead engine, doubled after each failed restart up to the last. */
const RESTART_DELAY_MS = 1_000;
const RESTART_DELAY_MAX_MS = 30_000;
/** While restarts keep failing, one warning a minute. */
const RESTART_FAILURE_LOG_MS = 60_000;

/** What the supervisor reports: an engine that died, restarts that fail, one that is back. */
export type ChdbReport = (level: "warn" | "info", message: string) => void;

/** The supervised engine, as its clients see it. */
export interface SupervisedChdb {
  /** The engine's address, starting it if it is not running. */
  url(): Promise<string>;
  /**
   * Its address now, without starting anything; undefined while it is not running. Each start
   * takes a new port, so a client of an earlier address must reconnect (`url()`).
   */
  readonly currentUrl: string | undefined;
  readonly password: string;
  stop(): Promise<void>;
}

/**
 * Keeps the embedded engine's process running: started on first use, restarted a second after it
 * dies (or at once, when a client asks for its address meanwhile: `url()`), with the same password;
 * stopped with the gateway. A restart that fails (the new process dies as it starts, the directory
 * is held) is tried again, waiting 1 s, 2 s, ... up to 30 s between tries, until one succeeds or
 * the gateway stops. Every start takes a free port: a dead engine's port may be any local
 * process's by the time its clients call again, and what they send carries the password, so
 * clients stop using an address once its engine is gone (`currentUrl` is undefined, then another).
 * The password is new with each supervisor, i.e. each start of the gateway, and is kept in memory only.
 */
export function superviseChdb(dir: string, report: ChdbReport, opts: ChdbOptions = {}): SupervisedChdb {
  let proc: ChdbProcess | undefined;
  let starting: Promise<ChdbProcess> | undefined;
  let stopped = false;
  /** Set from the engine's death until a restart succeeds. */
  let restarting = false;
  let retry: NodeJS.Timeout | undefined;
  let delay = RESTART_DELAY_MS;
  let failureLoggedAt: number | undefined;
  const password = opts.password ?? newChdbPassword();

  const scheduleRestart = (ms: number) => {
    clearTimeout(retry);
    retry = setTimeout(() => {
      retry = undefined;
      // A client's url() may have started it meanwhile.
      if (!proc?.alive) void start().catch(() => {});
    }, ms);
    retry.unref();
  };

  const started = (p: ChdbProcess): ChdbProcess => {
    proc = p;
    if (restarting && failureLoggedAt !== undefined) report("info", `the embedded telemetry engine is running again (port ${p.port})`);
    restarting = false;
    delay = RESTART_DELAY_MS;
    failureLoggedAt = undefined;
    void p.exited.then(() => {
      if (stopped) return;
      restarting = true;
      report("warn", "the embedded telemetry engine's process exited; restarting it");
      scheduleRestart(RESTART_DELAY_MS);
    });
    return p;
  };

  const failed = (e: unknown): never => {
    if (restarting && !stopped) {
      if (failureLoggedAt === undefined || Date.now() - failureLoggedAt >= RESTART_FAILURE_LOG_MS) {
        failureLoggedAt = Date.now();
        report("warn", `the embedded telemetry engine could not be restarted (${(e as Error).message}); trying again, up to every ${RESTART_DELAY_MAX_MS / 1000} s`);
      }
      scheduleRestart(delay);
      delay = Math.min(delay * 2, RESTART_DELAY_MAX_MS);
    }
    throw e;
  };

  const start = (): Promise<ChdbProcess> =>
    (starting ??= startChdbProcess(dir, 0, { ...opts, password })
      .then(started, failed)
      .finally(() => {
        starting = undefined;
      }));
  return {
    async url() {
      if (stopped) throw new TelemetryUnavailableError("the embedded telemetry engine is stopped");
      return (proc?.alive ? proc : await start()).url;
    },
    get currentUrl() {
      return proc?.alive ? proc.url : undefined;
    },
    password,
    async stop() {
      stopped = true;
      clearTimeout(retry);
      await starting?.catch(() => {});
      await proc?.stop();
    },
  };
}
