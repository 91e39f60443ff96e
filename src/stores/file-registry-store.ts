import { makeDir } from "./make-dir.js";
import { join } from "node:path";
import { createJsonFileWriter, readJsonFile } from "./json-file.js";
import { log } from "../logger.js";
import { type KeyRecord, type ProjectRecord, type RegistryStore, RegistryUnavailableError } from "./registry-store.js";

interface FileShape {
  version: 1;
  projects: ProjectRecord[];
  keys: KeyRecord[];
}

/** The embedded registry's file in the data dir. */
export const REGISTRY_FILE = "registry.json";

/**
 * The embedded registry: everything in memory, persisted to `<dataDir>/registry.json` on each
 * change by writing a temporary file, syncing it and renaming it over the old one, so a crash
 * leaves either the old or the new file, never half of one. A change takes effect in memory only
 * once it is on disk (`commit`), so one refused (a full disk) is applied nowhere.
 */
export async function createFileRegistryStore(dataDir: string): Promise<RegistryStore> {
  await makeDir(dataDir);
  const path = join(dataDir, REGISTRY_FILE);
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
  /**
   * Changes the registry: `change` works out the new records, which are written to the file, and
   * only once they are on disk do they take effect; a write that fails (a full disk, a read-only
   * file) changes nothing, and is RegistryUnavailableError (refused writes), whose caller is told
   * nothing was changed. Changes run one at a time, each on what the one before left.
   */
  let changes: Promise<unknown> = Promise.resolve();
  const commit = <T>(change: () => { result: T; projects?: ProjectRecord[]; keys?: KeyRecord[]; apply?: () => void }): Promise<T> => {
    const run = changes.catch(() => {}).then(async () => {
      const c = change();
      if (!c.apply) return c.result;
      try {
        await file.write({ version: 1, projects: c.projects ?? [...projects.values()], keys: c.keys ?? [...keys.values()] } satisfies FileShape);
      } catch (e) {
        log.warn("the registry could not be saved: the change is refused and not applied", { path, err: String((e as Error)?.message ?? e) });
        throw new RegistryUnavailableError(`cannot write the registry ${path}`, { writesRefused: true, cause: e });
      }
      c.apply();
      return c.result;
    });
    changes = run;
    return run;
  };

  const byCreation = <T extends { createdAt: number }>(a: T, b: T) => a.createdAt - b.createdAt;
  const withProject = (p: ProjectRecord) => [...projects.values()].filter((o) => o.id !== p.id).concat(p);
  const keyCount = (projectId: string) => {
    let count = 0;
    for (const k of keys.values()) if (k.projectId === projectId) count++;
    return count;
  };

  return {
    createProject: (p) => commit(() => ({ result: undefined, projects: withProject(p), apply: () => void projects.set(p.id, p) })),
    async getProject(id) {
      return projects.get(id);
    },
    updateProject: (id, change) =>
      commit(() => {
        const p = projects.get(id);
        if (!p) return { result: undefined };
        const next = change(p, keyCount(id));
        return { result: next, projects: withProject(next), apply: () => void projects.set(id, next) };
      }),
    async listProjects() {
      return [...projects.values()].sort(byCreation);
    },
    createKey: (k, maxKeys) =>
      commit(() => {
        let max: number;
        if (typeof maxKeys === "number") max = maxKeys;
        else {
          const p = projects.get(k.projectId);
          max = p ? maxKeys(p) : 0;
        }
        if (keyCount(k.projectId) >= max) return { result: false };
        return {
          result: true,
          keys: [...keys.values(), k],
          apply: () => {
            keys.set(k.id, k);
            byHash.set(k.hash, k);
          },
        };
      }),
    async listKeys(projectId) {
      return [...keys.values()].filter((k) => k.projectId === projectId).sort(byCreation);
    },
    deleteKey: (id) =>
      commit(() => {
        const k = keys.get(id);
        if (!k) return { result: undefined };
        return {
          result: k,
          keys: [...keys.values()].filter((o) => o.id !== id),
          apply: () => {
            keys.delete(id);
            byHash.delete(k.hash);
          },
        };
      }),
    async findKeyByHash(hash) {
      const key = byHash.get(hash);
      return key && { key, project: projects.get(key.projectId) };
    },
    async close() {
      await changes.catch(() => {});
      await file.idle().catch(() => {});
    },
  };
}
