import { makeDir } from "./make-dir.js";
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { AppendLog, syncDir } from "./append-log.js";
import { readJsonFile, removeLeftTemps, tempOf, writeWhole } from "./json-file.js";
import { log } from "../logger.js";
import { type KeyRecord, type ProjectRecord, type RegistryStore, RegistryUnavailableError } from "./registry-store.js";

interface FileShape {
  version: 1;
  /** Which journal follows it (see createFileRegistryStore); absent (as before the journal) is 0. */
  generation?: number;
  projects: ProjectRecord[];
  keys: KeyRecord[];
}

/** The journal's first line: the generation of the snapshot its changes follow. */
interface JournalHeader {
  generation: number;
}
const isHeader = (v: unknown): v is JournalHeader =>
  typeof v === "object" && v !== null && Object.keys(v).length === 1 && Number.isSafeInteger((v as JournalHeader).generation) && (v as JournalHeader).generation >= 0;

/** The journal's lines: a project or key as it now is, or a key deleted. */
type JournalLine = { project: ProjectRecord } | { key: KeyRecord } | { deleteKey: string };

/** The embedded registry's snapshot in the data dir: every project and key, as of its last compaction. */
export const REGISTRY_FILE = "registry.json";
/** The changes since the snapshot, one line each, appended to (see createFileRegistryStore). */
export const REGISTRY_JOURNAL = "registry.jsonl";

/** Compacted at the latest once the journal is this large, and the snapshot no larger. */
const MIN_COMPACT_BYTES = 1 << 20;

/** The registry as it is on disk: what every read sees. */
class Records {
  readonly projects = new Map<string, ProjectRecord>();
  readonly keys = new Map<string, KeyRecord>();
  readonly byHash = new Map<string, KeyRecord>();
  /** Each project's keys, by id. */
  readonly keysOf = new Map<string, Map<string, KeyRecord>>();

  setKey(k: KeyRecord): void {
    this.deleteKey(k.id);
    this.keys.set(k.id, k);
    this.byHash.set(k.hash, k);
    let own = this.keysOf.get(k.projectId);
    if (!own) this.keysOf.set(k.projectId, (own = new Map()));
    own.set(k.id, k);
  }

  deleteKey(id: string): void {
    const k = this.keys.get(id);
    if (!k) return;
    this.keys.delete(id);
    if (this.byHash.get(k.hash) === k) this.byHash.delete(k.hash);
    const own = this.keysOf.get(k.projectId);
    own?.delete(id);
    if (own?.size === 0) this.keysOf.delete(k.projectId);
  }

  /** Applies a journal line (idempotent: a line applied twice leaves what applying it once did). */
  apply(line: JournalLine): void {
    if ("project" in line) this.projects.set(line.project.id, line.project);
    else if ("key" in line) this.setKey(line.key);
    else this.deleteKey(line.deleteKey);
  }

  /**
   * The registry as registry.json holds it (FileShape), in parts of a few hundred records each, so
   * that writing one of 20,000 keys holds the event loop a millisecond at a time, not 20 ms and more
   * at once. The records must not change until the last part is taken.
   */
  *snapshot(generation: number): Generator<string> {
    yield `{"version":1,"generation":${generation},"projects":[`;
    yield* listed(this.projects.values());
    yield '],"keys":[';
    yield* listed(this.keys.values());
    yield "]}";
  }
}

/** The JSON of `items` as the inside of a JSON array (no brackets), in parts of `per` items. */
function* listed(items: Iterable<unknown>, per = 250): Generator<string> {
  let part: unknown[] = [];
  let first = true;
  const text = () => {
    const inside = JSON.stringify(part).slice(1, -1);
    part = [];
    const t = first ? inside : `,${inside}`;
    first = false;
    return t;
  };
  for (const item of items) {
    part.push(item);
    if (part.length === per) yield text();
  }
  if (part.length) yield text();
}

/**
 * A batch's changes, staged over the records on disk: what a change reads here includes those
 * before it in the batch; `lines` are what the batch appends to the journal.
 */
class Staged {
  readonly lines: JournalLine[] = [];
  private readonly projects = new Map<string, ProjectRecord>();
  /** Keys changed: null for one deleted. */
  private readonly keys = new Map<string, KeyRecord | null>();
  /** Each project's key count, less its count on disk. */
  private readonly counted = new Map<string, number>();

  constructor(private readonly base: Records) {}

  project(id: string): ProjectRecord | undefined {
    return this.projects.get(id) ?? this.base.projects.get(id);
  }
  key(id: string): KeyRecord | undefined {
    const k = this.keys.get(id);
    return k === null ? undefined : (k ?? this.base.keys.get(id));
  }
  keyCount(projectId: string): number {
    return (this.base.keysOf.get(projectId)?.size ?? 0) + (this.counted.get(projectId) ?? 0);
  }
  setProject(p: ProjectRecord): void {
    this.projects.set(p.id, p);
    this.lines.push({ project: p });
  }
  addKey(k: KeyRecord): void {
    if (!this.key(k.id)) this.count(k.projectId, 1);
    this.keys.set(k.id, k);
    this.lines.push({ key: k });
  }
  deleteKey(k: KeyRecord): void {
    this.count(k.projectId, -1);
    this.keys.set(k.id, null);
    this.lines.push({ deleteKey: k.id });
  }
  private count(projectId: string, by: number): void {
    this.counted.set(projectId, (this.counted.get(projectId) ?? 0) + by);
  }
}

/** One change, worked out on the staged records (it stages what it changes): its result. */
type Step<T> = (s: Staged) => T;

interface Pending<T> {
  step: Step<T>;
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
}

const isString = (v: unknown): v is string => typeof v === "string";
const isProject = (v: unknown): v is ProjectRecord => {
  const p = v as ProjectRecord;
  return typeof v === "object" && v !== null && isString(p.id) && isString(p.name) && isString(p.plan) && typeof p.createdAt === "number";
};
const isKey = (v: unknown): v is KeyRecord => {
  const k = v as KeyRecord;
  return typeof v === "object" && v !== null && [k.id, k.projectId, k.mode, k.hash, k.displayPrefix, k.description].every(isString) && typeof k.createdAt === "number";
};
const isJournalLine = (v: unknown): v is JournalLine => {
  if (typeof v !== "object" || v === null || Object.keys(v).length !== 1) return false;
  const l = v as Record<string, unknown>;
  return "project" in l ? isProject(l.project) : "key" in l ? isKey(l.key) : isString(l.deleteKey);
};

/**
 * The embedded registry: everything in memory, kept in the data dir as a snapshot,
 * `registry.json`, and a journal of the changes since, `registry.jsonl` (one line each: a project or
 * key as it now is, or a key deleted). A change appends its lines to the journal and syncs it before
 * it takes effect in memory (a change refused, as on a full disk, is applied nowhere), so it costs
 * the size of what it changes, not of the registry. The changes that come while the journal is
 * being written are appended together next (group commit).
 *
 * Once the journal outgrows the snapshot (and 1 MiB), the registry is compacted: a new snapshot is
 * written (a temporary file synced and renamed over the old one), then the journal started anew,
 * about one whole write per snapshot's worth of changes. The registry is also compacted when the
 * store closes, so a clean stop leaves everything in `registry.json` (what releases before the
 * journal read).
 *
 * Each snapshot has a generation, one more at each compaction, and the journal's first line names
 * the generation its changes follow. At start the snapshot is read, then the journal over it when
 * they match. A journal of an older generation is one the snapshot already holds (a crash between
 * the compaction's two steps, or a backup that copied the journal before the snapshot, as it
 * should, across a compaction): it is left unread and started anew. A journal of a newer one
 * follows a snapshot that is not there (a backup that copied them the other way round, a snapshot
 * restored alone): the start stops, rather than serve a registry missing what lay between, a deleted
 * key brought back say. A torn last line (a crash in the middle of an append, never acknowledged) is
 * dropped, and any other line that does not read back stops the start (see AppendLog).
 */
export async function createFileRegistryStore(dataDir: string): Promise<RegistryStore> {
  await makeDir(dataDir);
  const path = join(dataDir, REGISTRY_FILE);
  const journalPath = join(dataDir, REGISTRY_JOURNAL);
  const records = new Records();

  let data: FileShape | undefined;
  try {
    data = await readJsonFile<FileShape>(path);
    if (data !== undefined && (!Array.isArray(data.projects) || !Array.isArray(data.keys))) throw new Error("it has no `projects` and `keys` lists");
    if (data?.generation !== undefined && !(Number.isSafeInteger(data.generation) && data.generation >= 0)) throw new Error("its `generation` is not a whole number");
  } catch (e) {
    // Never started over: an empty registry written over it would lose every project and key.
    throw new Error(`cannot read the registry ${path}: ${(e as Error).message}; restore it from a backup or move it aside`);
  }
  for (const p of data?.projects ?? []) records.projects.set(p.id, p);
  for (const k of data?.keys ?? []) records.setKey(k);
  /** The snapshot's generation: the journal's changes follow it. */
  let generation = data?.generation ?? 0;
  const sizeOf = async (file: string) => (await stat(file).catch(() => undefined))?.size ?? 0;

  /**
   * A snapshot without a generation under a journal that names one was written by a release before
   * the journal after this one ran: a rollback (those releases rewrite registry.json whole and never
   * read the journal). After a clean stop, as the README asks, the journal holds nothing but its
   * header and the snapshot everything: it is taken as the journal's generation. One whose journal holds
   * changes (no clean stop before going back) stops the start: those changes and the earlier
   * release's may disagree, and which to keep is the operator's call.
   */
  const legacySnapshot = data !== undefined && data.generation === undefined;
  let rolledBack = false;
  /** The journal's generation as read: undefined while none (an empty journal), or once started anew. */
  let follows: number | undefined;
  /** Changes in the journal since its header. */
  let changes = 0;
  const journal = await AppendLog.open(
    journalPath,
    "registry journal",
    (line) => {
      if (follows === undefined) {
        if (!isHeader(line)) return false;
        follows = line.generation;
        if (follows > generation) {
          if (!legacySnapshot) {
            throw new Error(`cannot read the registry: its journal ${journalPath} follows generation ${follows} of ${REGISTRY_FILE}, which is generation ${generation}: the snapshot is older than its journal (a backup copied ${REGISTRY_FILE} before ${REGISTRY_JOURNAL}, or restored one without the other); restore both from one backup, copying ${REGISTRY_JOURNAL} first`);
          }
          rolledBack = true;
        }
        return true;
      }
      if (!isJournalLine(line)) return false;
      if (rolledBack) {
        throw new Error(`cannot read the registry: ${REGISTRY_FILE} was written by a release before the journal (a rollback), and its journal ${journalPath} holds changes that release never saw (the gateway was not stopped cleanly before going back): move ${REGISTRY_JOURNAL} aside to keep ${REGISTRY_FILE} as that release left it, without them, or restore both files from a backup`);
      }
      // A journal the snapshot already holds is read through (each line checked) but not applied.
      if (follows === generation) {
        records.apply(line);
        changes++;
      }
      return true;
    },
    (lineNo, offset) => new Error(`cannot read the registry journal ${journalPath}: line ${lineNo} (byte ${offset}) is not ${lineNo === 1 ? "its header" : "a registry change"}; restore it and ${REGISTRY_FILE} from a backup`),
  );
  if (rolledBack) {
    log.info(`registry: ${REGISTRY_FILE} was written by a release before the journal (a rollback); taken as generation ${follows}`, { path });
    generation = follows!;
  }
  /**
   * Writes the records as registry.json of `gen`, and makes its rename durable before the journal is
   * started anew for it: a power cut must not leave the old snapshot under a journal of the new one.
   */
  const writeSnapshot = async (gen: number) => {
    await writeWhole(path, records.snapshot(gen), tempOf(path, process.pid));
    await syncDir(dataDir);
  };
  const refused = (message: string, cause: unknown) => new RegistryUnavailableError(message, { writesRefused: true, cause });
  const header = () => Buffer.from(`${JSON.stringify({ generation } satisfies JournalHeader)}\n`);
  if (follows !== generation || generation === 0) {
    if (follows !== undefined && follows !== generation) log.info("registry: its journal is of a generation registry.json already holds (a compaction cut short): started anew", { path: journalPath, journal: follows, snapshot: generation });
    try {
      // A registry without a generation yet (a new data dir, or one of a release before the
      // journal) is written as generation 1 first: from then on a registry.json without one is
      // always an earlier release's rewrite (a rollback), never this one's.
      if (generation === 0) {
        await writeSnapshot(1);
        generation = 1;
        changes = 0;
      }
      await journal.reset([header()], (_message, cause) => new Error(`cannot start the registry journal ${journalPath}: ${(cause as Error)?.message ?? cause}`, { cause }));
    } catch (e) {
      await journal.close();
      throw e;
    }
  }
  // The temporary files of snapshots that crashed processes left.
  await removeLeftTemps(path).catch(() => {});
  /** The journal's size past which it is compacted next. */
  let compactAt = Math.max(await sizeOf(path), MIN_COMPACT_BYTES);

  /**
   * Writes the registry whole as the next generation's snapshot, then starts the journal anew for
   * it. A snapshot that cannot be written (a full disk) leaves both files as they were, which still
   * hold every change, and is tried again once the journal has grown as much again. A journal that
   * cannot be started anew after it (its contents then unknown) refuses every change until a
   * restart, which finds the snapshot holding all of them.
   */
  const compact = async () => {
    try {
      // Changes wait meanwhile (this runs in drain), so the records hold still while written.
      await writeSnapshot(generation + 1);
    } catch (e) {
      log.warn("the registry could not be compacted: its journal is kept, which holds every change", { path, err: String((e as Error)?.message ?? e) });
      compactAt = journal.size * 2;
      return;
    }
    generation++;
    changes = 0;
    await journal.reset([header()], refused).catch((e) => {
      log.error("the registry journal could not be started anew after a compaction: changes are refused until a restart (registry.json holds every one so far)", { path: journalPath, err: String((e as Error)?.cause ?? e) });
    });
    compactAt = Math.max(await sizeOf(path), MIN_COMPACT_BYTES);
  };

  /**
   * Changes the registry. Every change waiting when the journal is free is worked out in turn, each
   * on what the ones before it left (`step`, on a staged copy of the records), and the batch is
   * appended to the journal once; only once it is on disk does it take effect. A write that fails
   * (a full disk, a read-only file) changes nothing and fails every change of its batch with
   * RegistryUnavailableError (refused writes), whose caller is told nothing was changed.
   */
  let queue: Array<Pending<unknown>> = [];
  let writing: Promise<void> | undefined;
  let closed = false;
  const kick = () => {
    if (writing) return;
    // A change queued after drain's last look, before this ends, is drained by the next round.
    writing = drain().finally(() => {
      writing = undefined;
      if (queue.length) kick();
    });
  };
  const commit = <T>(step: Step<T>): Promise<T> => {
    if (closed) return Promise.reject(new RegistryUnavailableError("the registry is closed"));
    return new Promise<T>((resolve, reject) => {
      queue.push({ step, resolve, reject } as Pending<unknown>);
      kick();
    });
  };
  const drain = async () => {
    while (queue.length) {
      const batch = queue;
      queue = [];
      const staged = new Staged(records);
      const done: Array<{ p: Pending<unknown>; result: unknown }> = [];
      for (const p of batch) {
        try {
          done.push({ p, result: p.step(staged) });
        } catch (e) {
          p.reject(e);
        }
      }
      if (staged.lines.length) {
        try {
          await journal.append(
            staged.lines.map((l) => Buffer.from(`${JSON.stringify(l)}\n`)),
            refused,
          );
        } catch (e) {
          log.warn("the registry could not be saved: the change is refused and not applied", { path: journalPath, err: String((e as Error)?.cause ?? e) });
          for (const d of done) d.p.reject(e);
          continue;
        }
        for (const line of staged.lines) records.apply(line);
        changes += staged.lines.length;
      }
      for (const d of done) d.p.resolve(d.result);
      if (journal.size > compactAt) await compact();
    }
  };

  const byCreation = <T extends { createdAt: number }>(a: T, b: T) => a.createdAt - b.createdAt;

  return {
    createProject: (p) => commit((s) => void s.setProject(p)),
    async getProject(id) {
      return records.projects.get(id);
    },
    updateProject: (id, change) =>
      commit((s) => {
        const p = s.project(id);
        if (!p) return undefined;
        const next = change(p, s.keyCount(id));
        s.setProject(next);
        return next;
      }),
    async listProjects() {
      return [...records.projects.values()].sort(byCreation);
    },
    createKey: (k, maxKeys) =>
      commit((s) => {
        let max: number;
        if (typeof maxKeys === "number") max = maxKeys;
        else {
          const p = s.project(k.projectId);
          max = p ? maxKeys(p) : 0;
        }
        if (s.keyCount(k.projectId) >= max) return false;
        s.addKey(k);
        return true;
      }),
    async listKeys(projectId) {
      return [...(records.keysOf.get(projectId)?.values() ?? [])].sort(byCreation);
    },
    deleteKey: (id) =>
      commit((s) => {
        const k = s.key(id);
        if (k) s.deleteKey(k);
        return k;
      }),
    async findKeyByHash(hash) {
      const key = records.byHash.get(hash);
      return key && { key, project: records.projects.get(key.projectId) };
    },
    async close() {
      if (closed) return;
      closed = true;
      while (writing) await writing;
      // Everything into the snapshot, so a clean stop leaves the journal empty.
      if (changes > 0) await compact();
      await journal.close();
    },
  };
}
