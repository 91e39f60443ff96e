import { readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ModeName } from "../../stores/registry-store.js";
import type { LogRow } from "../../stores/telemetry-store.js";
import { makeDir } from "../../stores/make-dir.js";
import { writeWhole } from "../../stores/json-file.js";

/** A batch of logs of one mode, as written to the store or kept on disk until it can be. */
export interface LogBatch {
  mode: ModeName;
  /** The batch's deduplication token: the same on every attempt, across restarts. */
  token: string;
  rows: LogRow[];
}

/** A batch on disk. */
export interface SpooledBatch extends LogBatch {
  seq: number;
}

/**
 * Batches the store could not take, on disk, in the order they were spooled. Each batch is one
 * file, `<seq>.jsonl` (a header line, then one row per line), written to a temporary name, synced
 * and renamed, so a crash leaves whole batches only; files are never changed after that, only
 * removed once the store has the batch. A batch the store keeps refusing (not an outage: it judged
 * the batch itself wrong) is moved aside to `rejected/`, so one bad batch cannot stop the rest; when
 * the writer found which of its rows the store refuses (log-writer.ts), only those are kept there.
 */
export interface LogSpool {
  readonly dir: string;
  /** Batches on disk. */
  readonly batches: number;
  /** Bytes on disk. */
  readonly bytes: number;
  /** Appends a batch; false (and nothing written) when the spool would pass its byte budget. */
  append(batch: LogBatch): Promise<boolean>;
  /** The oldest batch, or undefined when the spool is empty. */
  oldest(): Promise<SpooledBatch | undefined>;
  /** Removes a batch the store has taken. */
  remove(batch: SpooledBatch): Promise<void>;
  /**
   * Moves a batch the store refuses to `rejected/`; with `rows`, keeps only those there (the store
   * took the others), as `rejected/<seq>.jsonl` with the batch's header, and removes the batch.
   */
  reject(batch: SpooledBatch, rows?: LogRow[]): Promise<void>;
}

const FILE = /^(\d{16})\.jsonl$/;
const name = (seq: number) => `${String(seq).padStart(16, "0")}.jsonl`;

export async function openLogSpool(dir: string, opts: { maxBytes: number }): Promise<LogSpool> {
  // Created for the gateway user alone (its batches are 0600 too); an existing one is left as it is.
  await makeDir(dir, 0o700);
  // One that exists but takes no files (read-only, another user's, /proc) is found now, not at the
  // first outage, when the logs it should hold would be lost.
  const probe = join(dir, `.probe-${process.pid}`);
  await writeFile(probe, "", { mode: 0o600 });
  await rm(probe, { force: true });
  const sizes = new Map<number, number>();
  for (const f of await readdir(dir)) {
    const m = FILE.exec(f);
    if (m) sizes.set(Number(m[1]), (await stat(join(dir, f))).size);
    else if (f.endsWith(".tmp")) await rm(join(dir, f), { force: true }); // a write a crash cut short
  }
  const seqs = [...sizes.keys()].sort((a, b) => a - b);
  let next = (seqs.at(-1) ?? 0) + 1;
  let bytes = [...sizes.values()].reduce((a, b) => a + b, 0);

  const drop = (seq: number) => {
    bytes -= sizes.get(seq) ?? 0;
    sizes.delete(seq);
    const i = seqs.indexOf(seq);
    if (i >= 0) seqs.splice(i, 1);
  };

  return {
    dir,
    get batches() {
      return seqs.length;
    },
    get bytes() {
      return bytes;
    },

    async append(batch) {
      const text = batchText(batch);
      const size = Buffer.byteLength(text);
      if (bytes + size > opts.maxBytes) return false;
      const seq = next++;
      await writeWhole(join(dir, name(seq)), text);
      seqs.push(seq);
      sizes.set(seq, size);
      bytes += size;
      return true;
    },

    async oldest() {
      while (seqs.length > 0) {
        const seq = seqs[0]!;
        let text: string;
        try {
          text = await readFile(join(dir, name(seq)), "utf8");
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
          drop(seq); // removed by hand: nothing to replay
          continue;
        }
        try {
          const [head, ...rest] = text.split("\n").filter(Boolean);
          const header = JSON.parse(head!) as { mode: ModeName; token: string };
          return { seq, mode: header.mode, token: header.token, rows: rest.map((l) => JSON.parse(l) as LogRow) };
        } catch {
          // Not a batch this version wrote: keep it for a person, out of the replay's way.
          await makeDir(join(dir, "rejected"), 0o700);
          await rename(join(dir, name(seq)), join(dir, "rejected", name(seq)));
          drop(seq);
        }
      }
      return undefined;
    },

    async remove(batch) {
      await rm(join(dir, name(batch.seq)), { force: true });
      drop(batch.seq);
    },

    async reject(batch, rows) {
      await makeDir(join(dir, "rejected"), 0o700);
      if (rows && rows.length < batch.rows.length) {
        // Written whole before the batch goes: a crash between the two replays the batch, which
        // writes this file again.
        await writeWhole(join(dir, "rejected", name(batch.seq)), batchText({ ...batch, rows }));
        await rm(join(dir, name(batch.seq)), { force: true });
      } else {
        await rename(join(dir, name(batch.seq)), join(dir, "rejected", name(batch.seq)));
      }
      drop(batch.seq);
    },
  };
}

/** A batch's file: a header line, then one row per line. */
function batchText(batch: LogBatch): string {
  const lines = [JSON.stringify({ v: 1, mode: batch.mode, token: batch.token, count: batch.rows.length })];
  for (const r of batch.rows) lines.push(JSON.stringify(r));
  return `${lines.join("\n")}\n`;
}

