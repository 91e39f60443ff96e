import { mkdir, stat } from "node:fs/promises";
import { dirname } from "node:path";

/**
 * `mkdir -p`: creates `dir` and the directories above it that are missing, each with `mode`; one
 * that exists is left as it is. Node's own `mkdir(dir, { recursive: true })` never returns where a
 * directory's parent exists but refuses it with ENOENT (`/proc/nope`, a path on a pseudo file
 * system): it spins at a full core instead. Here that ENOENT is thrown, with the other errors
 * (EEXIST: a file is in its place; ENOTDIR: a part of the path is a file; EACCES, EROFS).
 */
export async function makeDir(dir: string, mode?: number): Promise<void> {
  const opts = mode === undefined ? {} : { mode };
  try {
    await mkdir(dir, opts);
    return;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EEXIST" && (await isDirectory(dir))) return;
    const parent = dirname(dir);
    if (code !== "ENOENT" || parent === dir) throw e;
    // The parent is missing, or refuses children: made once, then this directory tried once more.
    await makeDir(parent, mode);
  }
  try {
    await mkdir(dir, opts);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST" && (await isDirectory(dir))) return;
    throw e;
  }
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

/** Why a directory could not be made or used, from makeDir's error, for a message naming its setting. */
export function dirProblem(e: unknown): string {
  const err = e as NodeJS.ErrnoException;
  return err.code === "EEXIST" ? "it exists and is not a directory"
    : err.code === "ENOTDIR" ? "a part of its path is a file, not a directory"
    : err.code === "ENOENT" ? "it cannot be created there (the file system above it takes no new directories)"
    : err.code === "EACCES" || err.code === "EPERM" ? "permission denied"
    : err.code === "EROFS" ? "the file system is read-only"
    : err.message;
}
