#!/usr/bin/env node
// The `svc` command. It runs the JavaScript that `npm run build` emits into dist/ (npm install and
// npm ci build it): production code should not pay for transpiling at start-up, nor for the
// per-closure cost of the loader's name-keeping transform on every request. When dist/ is missing,
// or older than any TypeScript under src/ (an edit since the last build), it runs the TypeScript
// through tsx's loader instead, so a stale build never shadows the code.
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

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
