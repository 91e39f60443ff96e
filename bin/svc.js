#!/usr/bin/env node
// The `svc` command. It runs the JavaScript that `npm run build` emits into dist/ (npm install and
// npm ci build it): production code should not pay for transpiling at start-up, nor for the
// per-closure cost of the loader's name-keeping transform on every request. When dist/ is missing,
// or older than any TypeScript under src/ (an edit since the last build), it runs the TypeScript
// through tsx's loader instead, so a stale build never shadows the code.
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

// `svc serve` takes SIGINT, SIGTERM and SIGHUP as a clean stop from its first moment: one that comes
// while its modules load (most of a start) or while it starts is kept, and acted on once it has
// started (src/cli/main.ts, serve()); a second one before then stops it at once (a start that
// hangs, on a hung disk, say, is not stuck). Without this, Node's default killed it (exit code 143).
if (process.argv[2] === "serve" || process.argv[2] === "demo") {
  const signals = { first: undefined, handler: undefined };
  globalThis[Symbol.for("svc.serve-signals")] = signals;
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.on(signal, () => {
      if (signals.handler) return signals.handler(signal);
      if (signals.first === undefined) return void (signals.first = signal);
      process.stderr.write(`received ${signal} again while starting: stopping at once\n`);
      // Its default action, as if never caught: process.exit would wait on a thread the hung start holds.
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    });
  }
}

// A working directory deleted under the shell (`rm -rf` of the directory it stands in) leaves
// process.cwd() throwing, which a dependency calls as it loads: say so plainly instead of a stack.
// `svc serve` stops as on a bad setting (its relative paths, ./data by default, mean nothing there).
try {
  process.cwd();
} catch (e) {
  if (e?.code !== "ENOENT") throw e;
  process.stderr.write("error: the current directory no longer exists (it was deleted or moved away); run svc from a directory that exists\n");
  process.exit(process.argv[2] === "serve" || process.argv[2] === "demo" ? 2 : 1);
}

const root = fileURLToPath(new URL("..", import.meta.url));
const built = join(root, "dist", "src", "cli", "main.js");

function newestTs(dir) {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestTs(p));
    else if (e.name.endsWith(".ts")) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

function fresh() {
  try {
    return statSync(built).mtimeMs >= newestTs(join(root, "src"));
  } catch {
    return false;
  }
}

if (process.env.SVC_RUN_TS !== "1" && fresh()) {
  await import(built);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../src/cli/main.ts");
}
