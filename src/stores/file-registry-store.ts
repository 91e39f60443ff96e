import { makeDir } from "./make-dir.js";
import { join } from "node:path";
import { createJsonFileWriter, readJsonFile } from "./json-file.js";
import type { KeyRecord, ProjectRecord, RegistryStore } from "./registry-store.js";

interface FileShape {
  version: 1;
  projects: ProjectRecord[];
  keys: KeyRecord[];
}

/**
 * The embedded registry: everything in memory, persisted to `<dataDir>/registry.json` after each
 * change by writing a temporary file, syncing it and renaming it over the old one, so a crash
 * leaves either the old or the new file, never half of one. Writes are serialised.
 */
export async function createFileRegistryStore(dataDir: string): Promise<RegistryStore> {
  await makeDir(dataDir);
  const path = join(dataDir, "registry.json");
  const projects = new Map<string, ProjectRecord>();
  const keys = new Map<string, KeyRecord>();
  const byHash = new Map<string, KeyRecord>();

  let data: FileShape | undefined;
  try {
    data = await readJsonFile<FileShape>(path);
    if (data !== undefined && (!Array.isArray(data.projects) || !Array.isArray(data.keys))) throw new Error("it has no `projects` and `keys` lists");
  } catch (e) {
    // Never started over: an empty registry written over it would lose every project and key.
    throw new Error(`cannot read the registry ${path}: ${(e as Error).message}; restore it from a backup or move it aside`);
  }
  if (data !== undefined) {
    for (const p of data.projects) projects.set(p.id, p);
    for (const k of data.keys) {
      keys.set(k.id, k);
      byHash.set(k.hash, k);
    }
  }

  const file = createJsonFileWriter(path, 2);
  const persist = (): Promise<void> => file.write({ version: 1, projects: [...projects.values()], keys: [...keys.values()] } satisfies FileShape);

  const byCreation = <T extends { createdAt: number }>(a: T, b: T) => a.createdAt - b.createdAt;

  return {
    async createProject(p) {
      projects.set(p.id, p);
      await persist();
    },
    async getProject(id) {
      return projects.get(id);
    },
    async updateProject(id, change) {
      const p = projects.get(id);
      if (!p) return undefined;
      let count = 0;
      for (const k of keys.values()) if (k.projectId === id) count++;
      const next = change(p, count);
      projects.set(id, next);
      await persist();
      return next;
    },
    async listProjects() {
      return [...projects.values()].sort(byCreation);
    },
    async createKey(k, maxKeys) {
      let max: number;
      if (typeof maxKeys === "number") max = maxKeys;
      else {
        const p = projects.get(k.projectId);
        max = p ? maxKeys(p) : 0;
      }
      let count = 0;
      for (const other of keys.values()) if (other.projectId === k.projectId) count++;
      if (count >= max) return false;
      keys.set(k.id, k);
      byHash.set(k.hash, k);
      await persist();
      return true;
    },
    async listKeys(projectId) {
      return [...keys.values()].filter((k) => k.projectId === projectId).sort(byCreation);
    },
    async deleteKey(id) {
      const k = keys.get(id);
      if (!k) return undefined;
      keys.delete(id);
      byHash.delete(k.hash);
      await persist();
      return k;
    },
    async findKeyByHash(hash) {
      const key = byHash.get(hash);
      return key && { key, project: projects.get(key.projectId) };
    },
    async close() {
      await file.idle();
    },
  };
}
