import { open, readFile, rename, rm } from "node:fs/promises";

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
 * failed (its caller was told) does not fail the writes after it.
 */
export function createJsonFileWriter(path: string, indent?: number): JsonFileWriter {
  let chain: Promise<void> = Promise.resolve();
  return {
    write(value) {
      const text = JSON.stringify(value, null, indent);
      chain = chain.catch(() => {}).then(async () => {
        await writeWhole(path, text, `${path}.${process.pid}.tmp`);
      });
      return chain;
    },
    idle: () => chain,
  };
}

/**
 * Writes a file (mode 0600) under a temporary name `tmp`, syncs it and renames it into place: a
 * crash leaves it whole or absent, and a write that fails (a full disk) leaves no temporary file.
 */
export async function writeWhole(path: string, text: string, tmp = `${path}.tmp`): Promise<void> {
  try {
    const fh = await open(tmp, "w", 0o600);
    try {
      await fh.writeFile(text);
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
