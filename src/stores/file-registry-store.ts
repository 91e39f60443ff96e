import { mkdir, open, readFile, rename } from "node:fs/promises";
import { join } from "node:path";
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
  await mkdir(dataDir, { recursive: true });
  const path = join(dataDir, "registry.json");
  const projects = new Map<string, ProjectRecord>();
  const keys = new Map<string, KeyRecord>();
  const byHash = new Map<string, KeyRecord>();

  let text: string | undefined;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
  if (text !== undefined) {
    const data = JSON.parse(text) as FileShape;
    for (const p of data.projects) projects.set(p.id, p);
    for (const k of data.keys) {
      keys.set(k.id, k);
      byHash.set(k.hash, k);
    }
  }

  let chain: Promise<void> = Promise.resolve();
  const persist = (): Promise<void> => {
    const snapshot: FileShape = { version: 1, projects: [...projects.values()], keys: [...keys.values()] };
    chain = chain.then(async () => {
      const tmp = `${path}.${process.pid}.tmp`;
      const fh = await open(tmp, "w", 0o600);
      try {
        await fh.writeFile(JSON.stringify(snapshot, null, 2));
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, path);
    });
    return chain;
  };

  const byCreation = <T extends { createdAt: number }>(a: T, b: T) => a.createdAt - b.createdAt;

  return {
    async createProject(p) {
      projects.set(p.id, p);
      await persist();
    },
    async getProject(id) {
      return projects.get(id);
    },
    async listProjects() {
      return [...projects.values()].sort(byCreation);
    },
    async createKey(k, maxKeys) {
      let count = 0;
      for (const other of keys.values()) if (other.projectId === k.projectId) count++;
      if (count >= maxKeys) return false;
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
      return byHash.get(hash);
    },
    async close() {
      await chain;
    },
  };
}
