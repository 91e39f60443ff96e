import { fork, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/**
 * A tiny request/reply protocol over the Node IPC channel between the bench orchestrator and its
 * child processes (fake upstream, target, load generator). Each child answers `cpu` with its own
 * `process.cpuUsage()` so the orchestrator can charge CPU time to one process only.
 */

export interface CpuSample {
  /** process.cpuUsage(): user and system microseconds since the process started. */
  user: number;
  system: number;
  /** The child's monotonic clock, in milliseconds. */
  at: number;
  /** process.hrtime in microseconds (the clock of --cpu-prof sample timestamps). */
  mono: number;
  /**
   * User + system microseconds of the child's own live child processes (the gateway's telemetry
   * engine), from /proc; 0 where there is no /proc.
   */
  children: number;
}

/** CPU microseconds of this process's live descendants, from /proc (Linux; 0 elsewhere). */
function descendantsCpuUs(): number {
  let total = 0;
  const visit = (pid: string) => {
    let kids: string[] = [];
    try {
      for (const tid of readdirSync(`/proc/${pid}/task`)) kids.push(...readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").split(" ").filter(Boolean));
    } catch {
      return;
    }
    for (const kid of kids) {
      try {
        const f = readFileSync(`/proc/${kid}/stat`, "utf8").split(") ")[1]!.split(" ");
        total += ((Number(f[11]) + Number(f[12])) * 1e6) / 100; // utime + stime, USER_HZ ticks
      } catch {
        continue;
      }
      visit(kid);
    }
  };
  visit(String(process.pid));
  return total;
}

type Handler = (args: any) => unknown;

interface Request {
  id: number;
  cmd: string;
  args?: unknown;
}

interface Reply {
  id: number;
  ok: boolean;
  result?: unknown;
  error?: string;
}

/** In a child: answers the parent's commands (`cpu` and `stop` are built in) and reports `ready`. */
export function serveParent(handlers: Record<string, Handler>, onStop: () => Promise<void> | void = () => {}): {
  ready(info: Record<string, unknown>): void;
} {
  if (!process.send) throw new Error("this script is a bench child; run `npm run bench`");
  const all: Record<string, Handler> = {
    cpu: (): CpuSample => ({ ...process.cpuUsage(), at: performance.now(), mono: Number(process.hrtime.bigint() / 1000n), children: descendantsCpuUs() }),
    /** Heap figures; with `{ gc: true }` under --expose-gc, after a full collection. */
    memory: (args?: { gc?: boolean }) => {
      const gc = (globalThis as { gc?: () => void }).gc;
      if (args?.gc && gc) gc();
      return process.memoryUsage();
    },
    stop: async () => {
      await onStop();
      // Exit after the reply is flushed; a normal exit also lets --cpu-prof write its profile.
      setImmediate(() => process.exit(0));
      return true;
    },
    ...handlers,
  };
  process.on("message", async (m: Request) => {
    let reply: Reply;
    try {
      const h = all[m.cmd];
      if (!h) throw new Error(`unknown command ${m.cmd}`);
      reply = { id: m.id, ok: true, result: await h(m.args) };
    } catch (e) {
      reply = { id: m.id, ok: false, error: String((e as Error)?.stack ?? e) };
    }
    process.send!(reply);
  });
  // The orchestrator went away: do not linger.
  process.on("disconnect", () => process.exit(0));
  return { ready: (info) => process.send!({ ready: true, info }) };
}

export interface Child {
  name: string;
  info: Record<string, any>;
  call<T = unknown>(cmd: string, args?: unknown): Promise<T>;
  cpu(): Promise<CpuSample>;
  stop(): Promise<void>;
  proc: ChildProcess;
}

/** True when the bench runs as built JavaScript (`npm run bench` builds first), false under tsx. */
const compiled = import.meta.url.endsWith(".js");

/**
 * Forks `bench/<script>` and waits for its `ready` message: the built JavaScript next to this file
 * when the bench runs built (what `svc serve` runs), else the TypeScript under tsx.
 */
export async function startChild(name: string, script: string, opts: { env?: Record<string, string>; execArgv?: string[] } = {}): Promise<Child> {
  const path = fileURLToPath(new URL(compiled ? script.replace(/\.ts$/, ".js") : script, import.meta.url));
  const proc = fork(path, [], {
    execArgv: [...(compiled ? [] : ["--import", "tsx"]), ...(opts.execArgv ?? [])],
    env: { ...process.env, ...opts.env },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  let next = 1;
  const waiting = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
  let exited = false;
  const info = await new Promise<Record<string, any>>((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`${name} exited (${code}) before it was ready`));
    proc.once("exit", onExit);
    proc.on("message", (m: any) => {
      if (m?.ready) {
        proc.off("exit", onExit);
        resolve(m.info);
        return;
      }
      const w = waiting.get(m?.id);
      if (!w) return;
      waiting.delete(m.id);
      if (m.ok) w.resolve(m.result);
      else w.reject(new Error(`${name}: ${m.error}`));
    });
  });
  proc.once("exit", (code) => {
    exited = true;
    for (const w of waiting.values()) w.reject(new Error(`${name} exited (${code})`));
    waiting.clear();
  });
  const call = <T>(cmd: string, args?: unknown) =>
    new Promise<T>((resolve, reject) => {
      if (exited) return reject(new Error(`${name} is not running`));
      const id = next++;
      waiting.set(id, { resolve, reject });
      proc.send({ id, cmd, args } satisfies Request);
    });
  return {
    name,
    info,
    proc,
    call,
    cpu: () => call<CpuSample>("cpu"),
    async stop() {
      if (exited) return;
      const gone = new Promise<void>((r) => proc.once("exit", () => r()));
      await call("stop").catch(() => {});
      const t = setTimeout(() => proc.kill("SIGKILL"), 10_000);
      await gone;
      clearTimeout(t);
    },
  };
}

/** CPU microseconds (user + system) and wall milliseconds between two samples. */
export const cpuDelta = (a: CpuSample, b: CpuSample) => ({ us: b.user - a.user + (b.system - a.system), wallMs: b.at - a.at, childrenUs: b.children - a.children });
