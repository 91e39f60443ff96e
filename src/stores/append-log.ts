import { type FileHandle, open, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { log } from "../logger.js";

/**
 * An append-only file of JSON lines (mode 0600): what the embedded prompt registry and the embedded
 * registry's journal are kept in. An append writes its lines and syncs the file (fdatasync) before
 * it resolves, so what it acknowledged survives a crash; a write or sync that fails is cut off again
 * (the file truncated back to its last whole line) and nothing of it is kept. One whose cut-off
 * fails too leaves the end of the file unknown: the log is then broken, and every later append
 * refused until a restart reads it back.
 *
 * At open the log is read back line by line. A crash in the middle of an append leaves a torn last
 * line without its newline, never acknowledged to anyone: it is dropped (and truncated away). Any
 * whole line that does not read back, the last one included, is damage the log does not guess
 * about: open fails, the file left as it is.
 */
export class AppendLog {
  private broken: Error | undefined;

  private constructor(
    readonly path: string,
    private readonly fh: FileHandle,
    /** The end of the last whole line: where the next append goes. */
    private end: number,
    private readonly what: string,
  ) {}

  /**
   * Opens (creating it when missing) the log at `path`, handing each whole line's parsed value,
   * byte offset and length (newline included) to `add`, which answers false for one it does not
   * take (damage: `damaged(lineNo, offset)` is thrown). `what` names the log in messages.
   */
  static async open(
    path: string,
    what: string,
    add: (value: unknown, offset: number, length: number) => boolean,
    damaged: (lineNo: number, offset: number) => Error,
  ): Promise<AppendLog> {
    const created = !(await exists(path));
    const fh = await open(path, "a+", 0o600);
    try {
      if (created) await syncDir(dirname(path));
      return new AppendLog(path, fh, await readBack(fh, path, what, add, damaged), what);
    } catch (e) {
      await fh.close();
      throw e;
    }
  }

  /** The log's size in bytes: its whole lines. */
  get size(): number {
    return this.end;
  }

  /**
   * Appends `lines` (each a line with its newline) and syncs; answers the offset the first went to.
   * A write that fails throws `refused(message, cause)`, nothing of it kept.
   */
  async append(lines: readonly Buffer[], refused: (message: string, cause: unknown) => Error): Promise<number> {
    if (this.broken) throw this.broken;
    const from = this.end;
    try {
      for (const bytes of lines) await writeAll(this.fh, bytes);
      await this.fh.datasync();
    } catch (e) {
      try {
        await this.fh.truncate(from);
        await this.fh.datasync();
      } catch (cut) {
        this.broken = refused(`the ${this.what} ${this.path} could not be restored after a failed write (${(cut as Error).message}); restart the server`, e);
        log.error(`the ${this.what} could not be cut back after a failed append; writes fail until restart`, { path: this.path, err: String(cut) });
      }
      throw refused(`cannot write the ${this.what} ${this.path}: ${(e as Error)?.message ?? e}`, e);
    }
    for (const bytes of lines) this.end += bytes.length;
    return from;
  }

  /** The `length` bytes at `offset` (a line appended before). */
  async read(offset: number, length: number): Promise<Buffer> {
    const buf = Buffer.allocUnsafe(length);
    let done = 0;
    while (done < length) {
      const { bytesRead } = await this.fh.read(buf, done, length - done, offset + done);
      if (bytesRead === 0) throw new Error(`the ${this.what} ${this.path} ends before the line at byte ${offset}`);
      done += bytesRead;
    }
    return buf;
  }

  /**
   * Replaces everything in the log (kept elsewhere now) with `lines`, synced. One that fails leaves
   * the log's contents unknown: it is broken then, `refused(...)` thrown now and by every append
   * after, until a restart reads it back.
   */
  async reset(lines: readonly Buffer[], refused: (message: string, cause: unknown) => Error): Promise<void> {
    if (this.broken) throw this.broken;
    try {
      await this.fh.truncate(0);
      this.end = 0;
      for (const bytes of lines) {
        await writeAll(this.fh, bytes);
        this.end += bytes.length;
      }
      await this.fh.datasync();
    } catch (e) {
      this.broken = refused(`the ${this.what} ${this.path} could not be started anew (${(e as Error)?.message ?? e}); restart the server`, e);
      throw this.broken;
    }
  }

  close(): Promise<void> {
    return this.fh.close();
  }
}

/**
 * Reads the log from the start (see AppendLog). Only bytes after the last newline are a torn
 * append (each line is written with its newline, and none is acknowledged before the sync): they
 * are truncated away. Answers the size of the log that was kept.
 */
async function readBack(
  fh: FileHandle,
  path: string,
  what: string,
  add: (value: unknown, offset: number, length: number) => boolean,
  damaged: (lineNo: number, offset: number) => Error,
): Promise<number> {
  const chunk = Buffer.allocUnsafe(1 << 20);
  const parts: Buffer[] = [];
  let partsLength = 0;
  let position = 0;
  let lineStart = 0;
  let lineNo = 0;
  for (;;) {
    const { bytesRead } = await fh.read(chunk, 0, chunk.length, position);
    if (bytesRead === 0) break;
    position += bytesRead;
    const data = chunk.subarray(0, bytesRead);
    let i = 0;
    for (;;) {
      const nl = data.indexOf(10, i);
      if (nl < 0) {
        parts.push(Buffer.from(data.subarray(i))); // a copy: `chunk` is read into again
        partsLength += data.length - i;
        break;
      }
      const tail = data.subarray(i, nl);
      const line = parts.length ? Buffer.concat([...parts, tail]) : tail;
      const length = partsLength + tail.length + 1;
      parts.length = 0;
      partsLength = 0;
      lineNo++;
      let value: unknown;
      try {
        value = JSON.parse(line.toString("utf8"));
      } catch {
        value = undefined;
      }
      if (value === undefined || !add(value, lineStart, length)) throw damaged(lineNo, lineStart);
      lineStart += length;
      i = nl + 1;
    }
  }
  if (lineStart < position) {
    log.warn(`dropped a torn last line of the ${what} (no newline: an append cut short by a crash, never acknowledged)`, { path, offset: lineStart, bytes: position - lineStart });
    await fh.truncate(lineStart);
    await fh.datasync();
  }
  return lineStart;
}

/** Writes all of `bytes` at the end of the file (it is open for appending). */
export async function writeAll(fh: FileHandle, bytes: Buffer): Promise<void> {
  let done = 0;
  while (done < bytes.length) done += (await fh.write(bytes, done, bytes.length - done)).bytesWritten;
}

export async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw e;
  }
}

/** Makes a new or renamed entry of `dir` durable; a no-op where directories cannot be synced. */
export async function syncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(dir, "r");
    await fh.sync();
  } catch {
    // Not every platform can open or sync a directory.
  } finally {
    await fh?.close().catch(() => {});
  }
}
