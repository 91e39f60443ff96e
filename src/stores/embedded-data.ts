import { stat } from "node:fs/promises";
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

/** Those of EMBEDDED_DATA_FILES in `dataDir` that hold something (present and not empty). */
export async function embeddedDataIn(dataDir: string): Promise<string[]> {
  const found = await Promise.all(EMBEDDED_DATA_FILES.map((f) => stat(join(dataDir, f)).then((s) => s.isFile() && s.size > 0, () => false)));
  return EMBEDDED_DATA_FILES.filter((_, i) => found[i]);
}

/**
 * The warning of a start in cluster mode on a data dir that holds embedded data: without it the
 * gateway started with no projects, keys or prompts, and said nothing of those it left unread.
 */
export function embeddedDataWarning(dataDir: string, files: readonly string[]): string {
  return `SVC_REDIS_URL is set (cluster mode), and SVC_DATA_DIR ${dataDir} holds embedded-mode data that cluster mode does not read: ${files.join(", ")}. Its projects, keys, prompts and spend are not in Redis, so this replica serves none of them; start without SVC_REDIS_URL to serve them, or move these files aside to silence this warning`;
}
