import { open, readdir, readFile, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/** A JSON file's parsed contents, or undefined when the file does not exist. */
export async function readJsonFile<T>(path: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as T;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
}

/** Writes whole snapshots of one JSON file, one after the other. */
export interface JsonFileWriter {
  /** Writes `value` after the writes before it; resolves once it is on disk. */
  write(value: unknown): Promise<void>;
  /** Resolves when every write so far is done. */
  idle(): Promise<void>;
}

/**
 * Each write goes to a temporary file (mode 0600) that is synced and renamed over the old one, so a
 * crash leaves either the old or the new file, never half of one. Writes are serialised; one that
 * failed (its caller was told) does not fail the writes after it. The temporary files earlier
 * processes left (see removeLeftTemps) are removed before the first write.
 */
export function createJsonFileWriter(path: string, indent?: number): JsonFileWriter {
  let chain: Promise<void> = removeLeftTemps(path).catch(() => {});
  return {
    write(value) {
      const text = JSON.stringify(value, null, indent);
      chain = chain.catch(() => {}).then(async () => {
        await writeWhole(path, text, tempOf(path, process.pid));
      });
      return chain;
    },
    idle: () => chain,
  };
}

/**
 * Writes a file (mode 0600) under a temporary name `tmp`, syncs it and renames it into place: a
 * crash leaves it whole or absent, and a write that fails (a full disk) leaves no temporary file.
 * Given as parts, each is made and written in turn, the event loop free between them.
 */
export async function writeWhole(path: string, text: string | Iterable<string>, tmp = `${path}.tmp`): Promise<void> {
  try {
    const fh = await open(tmp, "w", 0o600);
    try {
      if (typeof text === "string") await fh.writeFile(text);
      else for (const part of text) await fh.writeFile(part);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true }).catch(() => {});
    throw e;
  }
}

/** The temporary file a process writes `path` under (see removeLeftTemps). */
export const tempOf = (path: string, pid: number) => `${path}.${pid}.tmp`;

/**
 * Removes the temporary files of `path` (`<path>.<pid>.tmp`) that other processes left: one killed
 * (kill -9, out of memory, a power cut) between creating its file and renaming it into place left
 * it for good, one more each crash. The data dir is one process's alone (its lock, svc.pid, is
 * taken before any store opens), so another pid's file is no write under way; this process's own
 * name (its pid reused, as pid 1 in a container) is overwritten by its next write.
 */
export async function removeLeftTemps(path: string): Promise<void> {
  const dir = dirname(path);
  const prefix = `${basename(path)}.`;
  for (const name of await readdir(dir)) {
    if (!name.startsWith(prefix) || !name.endsWith(".tmp")) continue;
    const pid = name.slice(prefix.length, -".tmp".length);
    if (/^\d+$/.test(pid) && Number(pid) !== process.pid) await rm(join(dir, name), { force: true });
  }
}
