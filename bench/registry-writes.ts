/**
 * The embedded registry's cost per change with a large registry (2,000 projects, 20,000 keys):
 * key creations one at a time and 50 at once, and how long the event loop (every request's
 * thread) is held meanwhile. Prints figures; a change appends to the journal, and the registry is rewritten whole at each compaction (file-registry-store.ts).
 *   node --import tsx bench/registry-writes.ts
 */
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { createFileRegistryStore, REGISTRY_JOURNAL } from "../src/stores/file-registry-store.js";
import type { KeyRecord, ProjectRecord } from "../src/stores/registry-store.js";

const PROJECTS = 2000;
const KEYS = 20_000;
const dir = mkdtempSync(join(tmpdir(), "svc-bench-registry-"));
try {
  let store = await createFileRegistryStore(dir);
  const key = (i: number, projectId: string): KeyRecord => ({ id: `key_${i.toString(36).padStart(22, "0")}`, projectId, mode: i % 2 ? "live" : "test", hash: `${i}`.padStart(64, "f"), displayPrefix: "svc_sk_live_abcd", description: `key ${i}`, createdAt: 1_750_000_000_000 + i });
  const projectIds = Array.from({ length: PROJECTS }, (_, i) => `proj_${i.toString(36).padStart(22, "0")}`);
  await Promise.all(projectIds.map((id, i) => store.createProject({ id, name: `project ${i}`, plan: "enterprise", createdAt: 1_750_000_000_000 + i } satisfies ProjectRecord)));
  for (let i = 0; i < KEYS; i += 500) await Promise.all(Array.from({ length: 500 }, (_, j) => store.createKey(key(i + j, projectIds[(i + j) % PROJECTS]!), 1e9)));
  await store.close();
  store = await createFileRegistryStore(dir);
  console.log(`registry: ${PROJECTS} projects, ${KEYS} keys, registry.json ${(statSync(join(dir, "registry.json")).size / 1e6).toFixed(1)} MB`);
  let next = KEYS;
  const delay = monitorEventLoopDelay({ resolution: 1 });
  for (const [label, parallel, rounds] of [["one at a time", 1, 20], ["50 at once", 50, 4]] as const) {
    delay.reset();
    delay.enable();
    const t0 = performance.now();
    for (let r = 0; r < rounds; r++) await Promise.all(Array.from({ length: parallel }, () => store.createKey(key(next++, projectIds[next % PROJECTS]!), 1e9)));
    const ms = (performance.now() - t0) / (rounds * parallel);
    delay.disable();
    console.log(`createKey ${label}: ${ms.toFixed(2)} ms a change; event loop held up to ${(delay.max / 1e6).toFixed(1)} ms (p50 ${(delay.percentile(50) / 1e6).toFixed(1)} ms)`);
  }
  // Changes until the journal outgrows the snapshot and the registry is compacted (written whole).
  const journalSize = () => statSync(join(dir, REGISTRY_JOURNAL)).size;
  let changes = 0;
  let others = 0;
  for (let last = journalSize(); ; ) {
    delay.reset();
    delay.enable();
    await Promise.all(Array.from({ length: 50 }, () => store.createKey(key(next++, projectIds[next % PROJECTS]!), 1e9)));
    delay.disable();
    changes += 50;
    const size = journalSize();
    if (size < last) break;
    others = Math.max(others, delay.max);
    last = size;
  }
  console.log(`compaction: after ${changes} changes (50 at once); event loop held up to ${(delay.max / 1e6).toFixed(1)} ms in its round, up to ${(others / 1e6).toFixed(1)} ms in the ${changes / 50 - 1} rounds before`);
  await store.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
