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

/** The registry's records, by id. */
interface Records {
  projects: Map<string, ProjectRecord>;
  keys: Map<string, KeyRecord>;
}

/**
 * One change, worked out on the staged records it changes: its result, and, when it changed
 * anything, what else takes effect with it once it is on disk (the key index).
 */
type Step<T> = (s: Records) => { result: T; apply?: () => void };

interface Pending<T> {
  step: Step<T>;
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
}

/** The embedded registry's file in the data dir. */
export const REGISTRY_FILE = "registry.json";

/**
 * The embedded registry: everything in memory, persisted to `<dataDir>/registry.json` on each
 * change by writing a temporary file, syncing it and renaming it over the old one, so a crash
 * leaves either the old or the new file, never half of one. A change takes effect in memory only
 * once it is on disk (`commit`), so one refused (a full disk) is applied nowhere. The changes that
 * come while the file is being written are written together, in one write, next.
 */
export async function createFileRegistryStore(dataDir: string): Promise<RegistryStore> {
  await makeDir(dataDir);
  const path = join(dataDir, REGISTRY_FILE);
  // The records on disk; a batch of changes replaces them with its staged copies once it is written.
  let projects = new Map<string, ProjectRecord>();
  let keys = new Map<string, KeyRecord>();
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

  // Compact: the file is rewritten whole on each change, and indenting doubled the time it takes.
  const file = createJsonFileWriter(path);

  /**
   * Changes the registry. Every change waiting when the file is free is worked out in turn, each
   * on what the ones before it left (`step`, on a staged copy of the records), and the batch is
   * written to the file once (group commit: a registry saved whole costs its size per write, not
   * per change); only once they are on disk do they take effect. A write that fails (a full disk, a
   * read-only file) changes nothing and fails every change of its batch with
   * RegistryUnavailableError (refused writes), whose caller is told nothing was changed.
   */
  let queue: Array<Pending<unknown>> = [];
  let writing: Promise<void> | undefined;
  const kick = () => {
    if (writing) return;
    // A change queued after drain's last look, before this ends, is drained by the next round.
    writing = drain().finally(() => {
      writing = undefined;
      if (queue.length) kick();
    });
  };
  const commit = <T>(step: Step<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      queue.push({ step, resolve, reject } as Pending<unknown>);
      kick();
    });
  const drain = async () => {
    while (queue.length) {
      const batch = queue;
      queue = [];
      const staged: Records = { projects: new Map(projects), keys: new Map(keys) };
      const done: Array<{ p: Pending<unknown>; result: unknown; apply?: () => void }> = [];
      let changed = false;
      for (const p of batch) {
        try {
          const { result, apply } = p.step(staged);
          changed ||= apply !== undefined;
          done.push({ p, result, apply });
        } catch (e) {
          p.reject(e);
        }
      }
      if (changed) {
        try {
          await file.write({ version: 1, projects: [...staged.projects.values()], keys: [...staged.keys.values()] } satisfies FileShape);
        } catch (e) {
          log.warn("the registry could not be saved: the change is refused and not applied", { path, err: String((e as Error)?.message ?? e) });
          const refused = new RegistryUnavailableError(`cannot write the registry ${path}`, { writesRefused: true, cause: e });
          for (const d of done) d.p.reject(refused);
          continue;
        }
        projects = staged.projects;
        keys = staged.keys;
      }
      for (const d of done) {
        d.apply?.();
        d.p.resolve(d.result);
      }
    }
  };

  const byCreation = <T extends { createdAt: number }>(a: T, b: T) => a.createdAt - b.createdAt;
  const keyCount = (s: Records, projectId: string) => {
    let count = 0;
    for (const k of s.keys.values()) if (k.projectId === projectId) count++;
    return count;
  };

  return {
    createProject: (p) =>
      commit((s) => {
        s.projects.set(p.id, p);
        return { result: undefined, apply: () => {} };
      }),
    async getProject(id) {
      return projects.get(id);
    },
    updateProject: (id, change) =>
      commit((s) => {
        const p = s.projects.get(id);
        if (!p) return { result: undefined };
        const next = change(p, keyCount(s, id));
        s.projects.set(id, next);
        return { result: next, apply: () => {} };
      }),
    async listProjects() {
      return [...projects.values()].sort(byCreation);
    },
    createKey: (k, maxKeys) =>
      commit((s) => {
        let max: number;
        if (typeof maxKeys === "number") max = maxKeys;
        else {
          const p = s.projects.get(k.projectId);
          max = p ? maxKeys(p) : 0;
        }
        if (keyCount(s, k.projectId) >= max) return { result: false };
        s.keys.set(k.id, k);
        return { result: true, apply: () => void byHash.set(k.hash, k) };
      }),
    async listKeys(projectId) {
      return [...keys.values()].filter((k) => k.projectId === projectId).sort(byCreation);
    },
    deleteKey: (id) =>
      commit((s) => {
        const k = s.keys.get(id);
        if (!k) return { result: undefined };
        s.keys.delete(id);
        return { result: k, apply: () => void byHash.delete(k.hash) };
      }),
    async findKeyByHash(hash) {
      const key = byHash.get(hash);
      return key && { key, project: projects.get(key.projectId) };
    },
    async close() {
      while (writing) await writing;
      await file.idle().catch(() => {});
    },
  };
}
