import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ChdbProcess, newChdbPassword, startChdbProcess } from "../../src/stores/chdb-process.js";
import { freePort } from "./redis.js";

export interface TestClickHouse {
  /** With the engine's password as the default user's: `http://default:PASSWORD@127.0.0.1:PORT`. */
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
 * process (src/stores/chdb-server.ts, started as the gateway starts it: chdb-process.ts), on a free
 * port with a private data dir under the OS temp dir and a password of its own (in `url`).
 * `started: false` reserves the port and data dir without starting it: the store is unreachable
 * until start().
 */
export async function startTestClickHouse(opts: { started?: boolean } = {}): Promise<TestClickHouse> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "svc-clickhouse-"));
  const password = newChdbPassword();
  let child: ChdbProcess | undefined;
  const kill = async () => {
    const c = child;
    child = undefined;
    if (!c || !c.alive) return;
    process.kill(c.pid, "SIGKILL");
    await c.exited;
  };
  const start = async () => {
    if (child) return;
    child = await startChdbProcess(dir, port, { password });
  };
  if (opts.started !== false) await start();
  return {
    url: `http://default:${password}@127.0.0.1:${port}`,
    port,
    kill,
    start,
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
