import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startRedis, type TestRedis } from "./redis.js";
import { TEST_ENGINE } from "./test-engine.js";

const bin = fileURLToPath(new URL("../../bin/svc.js", import.meta.url));

/** rm -rf that waits out a process still writing into the directory (up to ~10 s). */
async function removeDir(dir: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      return rmSync(dir, { recursive: true, force: true });
    } catch (e) {
      if (attempt >= 100 || (e as NodeJS.ErrnoException).code !== "ENOTEMPTY") throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

export interface SvcServe {
  grpcUrl: string;
  gatewayUrl: string;
  managementUrl: string;
  /** The server's process id. */
  pid: number;
  /** What it has logged (stderr) so far. */
  logged(): string;
  /** Runs the `svc` command against this server (SVC_SERVER_URL names it; a --server given overrides it). */
  svc(...args: string[]): Promise<Run>;
  /** Runs the `svc` command with the server's own settings only (no SVC_SERVER_URL): the CLI finds the server from them. */
  svcWithServeEnv(...args: string[]): Promise<Run>;
  /** Stops it with SIGTERM (a clean shutdown), then starts it again on the same data dir and settings. */
  restart(): Promise<SvcServe>;
  stop(): Promise<void>;
}

/** Runs the `svc` command with exactly `env`, in `cwd`. */
function run(args: string[], env: NodeJS.ProcessEnv, cwd?: string): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [bin, ...args], { env, cwd }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

/**
 * Waits for `svc serve`'s banner and reads its addresses from it; `output()` is all it has printed
 * so far (read on after the banner too).
 */
export function banner(server: ChildProcess): Promise<{ grpcUrl: string; gatewayUrl: string; managementUrl: string; output: () => string }> {
  let out = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`svc serve did not start: ${out}`)), 30_000);
    server.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const core = /core gRPC\s+(\S+)/.exec(out);
      const gw = /gateway\s+(\S+)\/v1/.exec(out);
      const management = /management\s+(\S+)\/v1/.exec(out);
      if (core && gw && management) {
        clearTimeout(timer);
        resolve({ grpcUrl: core[1]!, gatewayUrl: gw[1]!, managementUrl: management[1]!, output: () => out });
      }
    });
    server.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`svc serve exited ${code}: ${out}`));
    });
  });
}

/** Starts `svc serve --demo` in a child process with a private data dir and free ports; `extraEnv` adds settings. */
export async function startSvcServe(extraEnv: Record<string, string> = {}, dataDir = mkdtempSync(join(tmpdir(), "svc-cli-"))): Promise<SvcServe> {
  const env = { PATH: process.env.PATH, SVC_DATA_DIR: join(dataDir, "data"), SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", ...TEST_ENGINE, ...extraEnv };
  const server: ChildProcess = spawn(process.execPath, [bin, "serve", "--demo"], { env, cwd: dataDir, stdio: ["ignore", "pipe", "pipe"] });
  // Read as it comes, so a server that logs much never blocks on a full pipe.
  let logged = "";
  server.stderr!.on("data", (d: Buffer) => (logged += d.toString()));
  const { grpcUrl, gatewayUrl, managementUrl, output } = await banner(server);
  const kill = async (signal: NodeJS.Signals) => {
    if (server.exitCode !== null || server.signalCode !== null) return;
    const exited = new Promise((r) => server.once("exit", r));
    server.kill(signal);
    await exited;
  };
  return {
    grpcUrl,
    gatewayUrl,
    managementUrl,
    pid: server.pid!,
    logged: () => logged,
    svc: (...args) => run(args, { ...env, SVC_SERVER_URL: grpcUrl }, dataDir),
    svcWithServeEnv: (...args) => run(args, env, dataDir),
    async restart() {
      await kill("SIGTERM");
      if (server.exitCode !== 0) throw new Error(`svc serve exited ${server.exitCode ?? server.signalCode} on SIGTERM: ${output()}`);
      return startSvcServe(extraEnv, dataDir);
    },
    async stop() {
      // A clean stop: the server stops its telemetry engine (a child process writing into the
      // data dir) before it exits. SIGKILL only if it hangs; the engine then leaves on its own
      // when the IPC channel closes, and may still be writing: the removal is retried meanwhile.
      const hung = setTimeout(() => server.kill("SIGKILL"), 15_000);
      await kill("SIGTERM");
      clearTimeout(hung);
      await removeDir(dataDir);
    },
  };
}

/**
 * Two `svc serve --demo` processes sharing a private Redis and `adminToken`, started before the
 * calling describe's tests and stopped after them. `redis` may be replaced by a test that restarts
 * it (on the same port): the one there at the end is stopped.
 */
export function processesOnOneRedis(adminToken: string): { readonly a: SvcServe; readonly b: SvcServe; redis: TestRedis } {
  const pair = {} as { a: SvcServe; b: SvcServe; redis: TestRedis };
  before(async () => {
    pair.redis = await startRedis();
    const env = { SVC_REDIS_URL: pair.redis.url, SVC_ADMIN_TOKEN: adminToken, SVC_LOG_LEVEL: "error" };
    [pair.a, pair.b] = await Promise.all([startSvcServe(env), startSvcServe(env)]);
  });
  after(async () => {
    await Promise.all([pair.a?.stop(), pair.b?.stop()]);
    await pair.redis?.stop();
  });
  return pair;
}
