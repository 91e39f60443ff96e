import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A small disk of its own (a tmpfs) that a test can fill up, for what a full disk does. */
export interface SmallDisk {
  /** Where it is mounted. */
  readonly path: string;
  /** Fills it: every write that needs a new page fails with ENOSPC from here on. */
  fill(): void;
  /** Frees what fill() took. */
  unfill(): void;
}

/**
 * Mounts a tmpfs of `size` (`256k`) for the enclosing describe, before its tests and unmounted
 * after them; the tests are skipped where this machine does not let a test mount one (no privilege).
 */
export function smallDisk(size: string, prefix: string): SmallDisk {
  let path = "";
  let mounted = false;
  const filler = () => join(path, ".fill");
  before(function () {
    path = mkdtempSync(join(tmpdir(), prefix));
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", path], { stdio: "ignore" });
      mounted = true;
    } catch {
      this.skip();
    }
  });
  after(() => {
    if (mounted) execFileSync("umount", [path]);
    rmSync(path, { recursive: true, force: true });
  });
  return {
    get path() {
      return path;
    },
    fill() {
      try {
        writeFileSync(filler(), Buffer.alloc(64 * 1024 * 1024));
      } catch {
        // full
      }
    },
    unfill: () => rmSync(filler(), { force: true }),
  };
}
