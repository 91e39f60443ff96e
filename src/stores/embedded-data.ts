import { open, stat } from "node:fs/promises";
import { join } from "node:path";
import { LEGACY_PROMPT_FILE, PROMPT_LOG } from "./file-prompt-store.js";
import { REGISTRY_FILE, REGISTRY_JOURNAL } from "./file-registry-store.js";
import { LIMITS_SNAPSHOT_FILE } from "./memory-limits-store.js";

/**
 * The data dir's files of embedded mode's data: projects and keys, prompts (and an earlier
 * release's prompts file), the limits' spend and day counts. Cluster mode keeps all of it in Redis
 * and never reads them.
 */
export const EMBEDDED_DATA_FILES: readonly string[] = [REGISTRY_FILE, REGISTRY_JOURNAL, PROMPT_LOG, LEGACY_PROMPT_FILE, LIMITS_SNAPSHOT_FILE];

/**
 * Those of EMBEDDED_DATA_FILES in `dataDir` that hold something: present and not empty, and for the
 * registry's journal, more than its header (the generation it follows) line.
 */
export async function embeddedDataIn(dataDir: string): Promise<string[]> {
  const holds = async (f: string) => {
    const s = await stat(join(dataDir, f)).catch(() => undefined);
    if (!s?.isFile() || s.size === 0) return false;
    if (f === REGISTRY_JOURNAL) {
      const head = await readHead(join(dataDir, f), 256);
      const nl = head.indexOf(10);
      return nl < 0 || s.size > nl + 1;
    }
    // The registry's snapshot is written at an embedded gateway's first start, empty until a change.
    if (f === REGISTRY_FILE && s.size < 256) return !isEmptyRegistry((await readHead(join(dataDir, f), 256)).toString("utf8"));
    return true;
  };
  const found = await Promise.all(EMBEDDED_DATA_FILES.map(holds));
  return EMBEDDED_DATA_FILES.filter((_, i) => found[i]);
}

/** Whether a registry.json holds no project and no key. */
function isEmptyRegistry(text: string): boolean {
  try {
    const r = JSON.parse(text) as { projects?: unknown; keys?: unknown };
    return Array.isArray(r.projects) && r.projects.length === 0 && Array.isArray(r.keys) && r.keys.length === 0;
  } catch {
    return false;
  }
}

/** The first `n` bytes of a file (fewer when it is shorter). */
async function readHead(path: string, n: number): Promise<Buffer> {
  const fh = await open(path, "r");
  try {
    const buf = Buffer.alloc(n);
    const { bytesRead } = await fh.read(buf, 0, n, 0);
    return buf.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}

/**
 * The warning of a start in cluster mode on a data dir that holds embedded data: without it the
 * gateway started with no projects, keys or prompts, and said nothing of those it left unread.
 */
export function embeddedDataWarning(dataDir: string, files: readonly string[]): string {
  return `SVC_REDIS_URL is set (cluster mode), and SVC_DATA_DIR ${dataDir} holds embedded-mode data that cluster mode does not read: ${files.join(", ")}. Its projects, keys, prompts and spend are not in Redis, so this replica serves none of them; start without SVC_REDIS_URL to serve them, or move these files aside to silence this warning`;
}
