import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./redis.js";

const script = fileURLToPath(new URL("../../src/stores/chdb-server.ts", import.meta.url));

export interface TestClickHouse {
  url: string;
  port: number;
  /** Kills the server (SIGKILL: an outage, not a shutdown); its data stays for start(). */
  kill(): Promise<void>;
  /** Starts it (again) on the same port and data. */
  start(): Promise<void>;
  /** Kills it and deletes its data. */
  stop(): Promise<void>;
}

/**
 * A ClickHouse server for tests: SVC_TEST_CLICKHOUSE_URL when set (a real server; the tests that
 * kill and restart it are skipped then), else chDB behind a ClickHouse HTTP interface in a child
 * process (src/stores/chdb-server.ts), on a free port with a private data dir under the OS temp dir.
 * `started: false` reserves the port and data dir without starting it: the store is unreachable
 * until start().
 */
export async function startTestClickHouse(opts: { started?: boolean } = {}): Promise<TestClickHouse> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "svc-clickhouse-"));
  let child: ChildProcess | undefined;
  const kill = async () => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise((r) => c.once("exit", r));
    c.kill("SIGKILL");
    await exited;
  };
  const start = async () => {
    if (child) return;
    const c = spawn(process.execPath, ["--import", "tsx", script, String(port), dir], { stdio: ["ignore", "pipe", "pipe"] });
    child = c;
    let err = "";
    c.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the chDB HTTP server did not start in 30 s: ${err}`)), 30_000);
      c.stdout!.on("data", (d: Buffer) => {
        if (d.toString().includes("ready")) {
          clearTimeout(timer);
          resolve();
        }
      });
      c.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the chDB HTTP server exited ${code}: ${err}`));
      });
    });
  };
  if (opts.started !== false) await start();
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    kill,
    start,
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
