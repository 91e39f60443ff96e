import { open, rename } from "node:fs/promises";
import { join } from "node:path";
import { log } from "../logger.js";
import { readJsonFile, removeLeftTemps } from "./json-file.js";
import { type PromptRecord, type PromptStore, PromptsUnavailableError, type PromptSummary } from "./prompt-store.js";
import { makeDir } from "./make-dir.js";
import { AppendLog, exists, syncDir, writeAll } from "./append-log.js";

/** The log of every version, one JSON object a line, appended to and never rewritten. */
export const PROMPT_LOG = "prompts.jsonl";
/** The whole-file store of earlier releases, imported into the log once. */
export const LEGACY_PROMPT_FILE = "prompts.json";
/** What the legacy file is renamed to once imported: kept for the operator, never read again. */
export const IMPORTED_PROMPT_FILE = "prompts.json.imported";

/** Where a version's line lies in the log; its content is read from there when asked for. */
interface Entry {
  meta: PromptSummary;
  offset: number;
  length: number;
}

/** A project's names, kept sorted for listing, and each name's versions, oldest first. */
interface Project {
  names: string[];
  versions: Map<string, Entry[]>;
}

interface Pending {
  p: Omit<PromptRecord, "version">;
  resolve: (r: PromptRecord) => void;
  reject: (e: unknown) => void;
}

/**
 * The embedded prompt registry: an append-only log, `<dataDir>/prompts.jsonl`, one line per
 * version. A put appends its line and syncs the file (fdatasync) before it answers, so an
 * acknowledged version survives a crash; it never reads or rewrites what is already there, so its
 * cost follows the size of the prompt it stores, not the number or size of the stored ones.
 * Memory holds an index (names, versions, where each line lies), not the contents: a get reads its
 * one line back from the file.
 *
 * Puts are serialised by one writer that takes every put waiting at the time, numbers them (so
 * concurrent puts of a name get distinct, consecutive versions), appends them in one go and syncs
 * once (group commit). A write or sync that fails is cut off again (the file is truncated back to
 * its last whole line) and the puts in it fail with no version taken.
 *
 * At start the log is read back line by line. A crash in the middle of an append leaves a torn last
 * line without its newline, never acknowledged to anyone: it is dropped (and truncated away). Any
 * whole line that does not read back, the last one included, is damage the store does not guess
 * about: it refuses to start.
 *
 * A data dir of an earlier release has `prompts.json` (every prompt in one JSON file, rewritten on
 * each put) and no log: it is imported into a new log on first start, then renamed to
 * `prompts.json.imported` and never read again.
 */
export async function createFilePromptStore(dataDir: string): Promise<PromptStore> {
  await makeDir(dataDir);
  const path = join(dataDir, PROMPT_LOG);
  // An import of prompts.json that a process killed before moving it into place left there.
  await removeLeftTemps(path).catch(() => {});
  if (!(await exists(path))) await importLegacy(dataDir, path);
  else if (await exists(join(dataDir, LEGACY_PROMPT_FILE))) {
    log.warn(`prompt store: ${LEGACY_PROMPT_FILE} is ignored: prompts are kept in ${PROMPT_LOG} (it was imported before)`, { dataDir });
  }

  const projects = new Map<string, Project>();
  const versionsOf = (projectId: string, name: string): Entry[] | undefined => projects.get(projectId)?.versions.get(name);
  const index = (meta: PromptSummary, offset: number, length: number) => {
    let project = projects.get(meta.projectId);
    if (!project) projects.set(meta.projectId, (project = { names: [], versions: new Map() }));
    let versions = project.versions.get(meta.name);
    if (!versions) {
      project.versions.set(meta.name, (versions = []));
      project.names.splice(firstAfter(project.names, meta.name), 0, meta.name);
    }
    versions.push({ meta, offset, length });
  };

  const file = await AppendLog.open(
    path,
    "prompt log",
    (r, offset, length) => {
      if (!isRecord(r) || r.version !== (versionsOf(r.projectId, r.name)?.length ?? 0) + 1) return false;
      const { content: _, ...meta } = r;
      index(meta, offset, length);
      return true;
    },
    (lineNo, offset) => new Error(`cannot read the prompt log ${path}: line ${lineNo} (byte ${offset}) is not a prompt version that follows the lines before it; restore the file from a backup or move it aside`),
  );

  let queue: Pending[] = [];
  let writing = false;
  let idle: Promise<void> = Promise.resolve();
  let markIdle = () => {};
  let closed = false;

  /** Appends a batch of puts as one write and one sync; numbers them first. */
  const append = async (batch: Pending[]) => {
    const next = new Map<string, number>();
    const lines = batch.map(({ p }) => {
      const key = `${p.projectId}\u0000${p.name}`;
      const version = next.get(key) ?? (versionsOf(p.projectId, p.name)?.length ?? 0) + 1;
      next.set(key, version + 1);
      // Content last, so a line's metadata reads first in the file.
      const record: PromptRecord = { projectId: p.projectId, name: p.name, version, description: p.description, createdAt: p.createdAt, content: p.content };
      return { record, bytes: Buffer.from(`${JSON.stringify(record)}\n`) };
    });
    // A full disk, a read-only file: the put is refused, nothing of it kept (503 prompts_unavailable,
    // as a Redis that refuses writes), where it was an internal error.
    let offset: number;
    try {
      offset = await file.append(
        lines.map((l) => l.bytes),
        (message, cause) => new PromptsUnavailableError(message, { cause, writesRefused: true }),
      );
    } catch (e) {
      log.warn("prompt store: the prompt log could not be written: the put is refused and nothing of it stored", { path, err: String((e as Error)?.cause ?? e) });
      throw e;
    }
    for (const { record, bytes } of lines) {
      const { content: _, ...meta } = record;
      index(meta, offset, bytes.length);
      offset += bytes.length;
    }
    return lines.map((l) => l.record);
  };

  const drain = async () => {
    while (queue.length) {
      const batch = queue;
      queue = [];
      try {
        const stored = await append(batch);
        batch.forEach((b, i) => b.resolve(stored[i]!));
      } catch (e) {
        for (const b of batch) b.reject(e);
      }
    }
  };
  const kick = () => {
    if (writing) return;
    writing = true;
    idle = new Promise((resolve) => (markIdle = resolve));
    void drain().finally(() => {
      writing = false;
      markIdle();
      if (queue.length) kick();
    });
  };

  const read = async (e: Entry): Promise<PromptRecord> => ({ ...e.meta, content: (JSON.parse((await file.read(e.offset, e.length)).toString("utf8")) as PromptRecord).content });

  return {
    put(p) {
      if (closed) return Promise.reject(new Error("the prompt store is closed"));
      return new Promise<PromptRecord>((resolve, reject) => {
        queue.push({ p, resolve, reject });
        kick();
      });
    },
    async get(projectId, name, version) {
      const versions = versionsOf(projectId, name);
      const e = version === undefined ? versions?.at(-1) : versions?.[version - 1];
      return e && read(e);
    },
    async list(projectId, { after, limit }) {
      const project = projects.get(projectId);
      if (!project) return { prompts: [], more: false };
      const from = after ? firstAfter(project.names, after) : 0;
      const names = project.names.slice(from, from + limit);
      return { prompts: names.map((n) => project.versions.get(n)!.at(-1)!.meta), more: from + limit < project.names.length };
    },
    async close() {
      if (closed) return;
      closed = true;
      await idle;
      await file.close();
    },
  };
}

/** The index of the first name in sorted `names` that sorts after `name`. */
function firstAfter(names: string[], name: string): number {
  let lo = 0;
  let hi = names.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (names[mid]! <= name) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

const isRecord = (v: unknown): v is PromptRecord => {
  const r = v as PromptRecord;
  return (
    typeof v === "object" && v !== null &&
    typeof r.projectId === "string" && typeof r.name === "string" && Number.isSafeInteger(r.version) &&
    typeof r.content === "string" && typeof r.description === "string" && typeof r.createdAt === "number"
  );
};

/**
 * Imports the whole-file store of earlier releases, if there is one, into a new log: written aside,
 * synced and renamed into place, so a crash leaves no log (the import runs again) or the whole one.
 * The old file is then renamed and never read again.
 */
async function importLegacy(dataDir: string, path: string): Promise<void> {
  const legacy = join(dataDir, LEGACY_PROMPT_FILE);
  let data: { prompts?: unknown } | undefined;
  try {
    data = await readJsonFile<{ prompts?: unknown }>(legacy);
    if (data !== undefined && !Array.isArray(data.prompts)) throw new Error("it has no `prompts` list");
  } catch (e) {
    throw new Error(`cannot import the prompts of ${legacy}: ${(e as Error).message}; restore it from a backup or move it aside`);
  }
  if (data === undefined) return;
  const counts = new Map<string, number>();
  const lines: string[] = [];
  for (const r of data.prompts as unknown[]) {
    if (!isRecord(r)) throw new Error(`cannot import the prompts of ${legacy}: an entry is not a prompt version; restore it from a backup or move it aside`);
    const key = `${r.projectId}\u0000${r.name}`;
    const version = (counts.get(key) ?? 0) + 1;
    if (r.version !== version) throw new Error(`cannot import the prompts of ${legacy}: ${r.name} of ${r.projectId} has version ${r.version} where ${version} was expected; restore it from a backup or move it aside`);
    counts.set(key, version);
    const record: PromptRecord = { projectId: r.projectId, name: r.name, version, description: r.description, createdAt: r.createdAt, content: r.content };
    lines.push(`${JSON.stringify(record)}\n`);
  }
  const tmp = `${path}.${process.pid}.tmp`;
  const fh = await open(tmp, "w", 0o600);
  try {
    for (const line of lines) await writeAll(fh, Buffer.from(line));
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
  await rename(legacy, join(dataDir, IMPORTED_PROMPT_FILE));
  await syncDir(dataDir);
  log.info(`prompt store: imported ${LEGACY_PROMPT_FILE} into ${PROMPT_LOG}; the old file is kept as ${IMPORTED_PROMPT_FILE} and no longer read`, { dataDir, versions: lines.length });
}
