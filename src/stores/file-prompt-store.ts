import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { createJsonFileWriter, readJsonFile } from "./json-file.js";
import type { PromptRecord, PromptStore } from "./prompt-store.js";

interface FileShape {
  version: 1;
  prompts: PromptRecord[];
}

/**
 * The embedded prompt registry: in memory, persisted to `<dataDir>/prompts.json` after each put
 * the way the registry file is (temporary file, sync, rename), so a crash leaves the old or the new
 * file, never half of one. Writes are serialised.
 */
export async function createFilePromptStore(dataDir: string): Promise<PromptStore> {
  await mkdir(dataDir, { recursive: true });
  const path = join(dataDir, "prompts.json");
  // project id -> name -> versions, oldest first
  const byProject = new Map<string, Map<string, PromptRecord[]>>();
  const add = (p: PromptRecord) => {
    let names = byProject.get(p.projectId);
    if (!names) byProject.set(p.projectId, (names = new Map()));
    let versions = names.get(p.name);
    if (!versions) names.set(p.name, (versions = []));
    versions.push(p);
  };

  for (const p of (await readJsonFile<FileShape>(path))?.prompts ?? []) add(p);

  const file = createJsonFileWriter(path);
  const persist = (): Promise<void> =>
    file.write({ version: 1, prompts: [...byProject.values()].flatMap((names) => [...names.values()].flat()) } satisfies FileShape);

  return {
    async put(p) {
      const record = { ...p, version: (byProject.get(p.projectId)?.get(p.name)?.length ?? 0) + 1 };
      add(record);
      await persist();
      return record;
    },
    async get(projectId, name, version) {
      const versions = byProject.get(projectId)?.get(name);
      if (!versions) return undefined;
      return version === undefined ? versions.at(-1) : versions[version - 1];
    },
    async list(projectId) {
      const names = byProject.get(projectId);
      if (!names) return [];
      return [...names.keys()].sort().map((n) => names.get(n)!.at(-1)!);
    },
    async close() {
      await file.idle();
    },
  };
}
