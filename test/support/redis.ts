import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A free TCP port on loopback. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const { port } = srv.address() as { port: number };
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

export interface TestRedis {
  url: string;
  port: number;
  /** The server's process id (SIGSTOP / SIGCONT stall it). */
  pid: number;
  /** Its working directory. */
  dir: string;
  /** Kills it (SIGKILL); its directory goes with it unless it was started with `keepDir`. */
  stop(): Promise<void>;
  /** Removes its directory (for one started with `keepDir`). */
  removeDir(): Promise<void>;
}

/**
 * Starts a private `redis-server` on a free port, keeping nothing on disk, so tests never touch
 * the machine's own Redis or each other's data. `args` are more of its settings (`--requirepass x`).
 */
export async function startRedis(port?: number, args: string[] = [], opts: { keepDir?: boolean; dir?: string } = {}): Promise<TestRedis> {
  const p = port ?? (await freePort());
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "svc-redis-"));
  const child: ChildProcess = spawn("redis-server", ["--port", String(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("redis-server did not start in 10 s")), 10_000);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    let said = "";
    const onExit = (code: number | null, signal: string | null) => {
      clearTimeout(timer);
      reject(new Error(`redis-server on port ${p} exited at start (${signal ?? code}): ${said.trim().split("\n").slice(-3).join(" | ")}`));
    };
    child.once("exit", onExit);
    child.stdout!.on("data", (d: Buffer) => {
      said = (said + d.toString()).slice(-4000);
      if (said.includes("Ready to accept connections")) {
        clearTimeout(timer);
        child.off("exit", onExit);
        resolve();
      }
    });
  });
  return {
    url: `redis://127.0.0.1:${p}`,
    port: p,
    pid: child.pid!,
    dir,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => {
          if (!opts.keepDir) rmSync(dir, { recursive: true, force: true });
          resolve();
        });
        child.kill("SIGKILL");
      }),
    removeDir: async () => rmSync(dir, { recursive: true, force: true }),
  };
}
