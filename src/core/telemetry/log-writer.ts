import { randomUUID } from "node:crypto";
import { atMostEvery, log } from "../../logger.js";
import type { ModeName } from "../../stores/registry-store.js";
import { distinctRows, type LogRow, type TelemetryStore, TelemetryUnavailableError } from "../../stores/telemetry-store.js";
import type { LogBatch, LogSpool } from "./log-spool.js";

export interface LogWriterOptions {
  store: TelemetryStore;
  spool: LogSpool;
  /** Rows per insert; a full batch is written at once, a partial one on the next tick. */
  batchSize: number;
  /** How often queued rows are written, in milliseconds. */
  flushIntervalMs: number;
  /** The most rows held in memory; more are dropped (and counted) until the queue drains. */
  maxQueued?: number;
  /**
   * The most characters of request and response bodies held in memory (a row holds up to
   * LIMITS.bodyChars, 1 Mi, of each): a row past it is queued without its bodies (counted in
   * `bodiesDropped`), so a burst of large bodies faster than the store takes them costs logs their
   * bodies, never the process its memory. A batch carries at most a quarter of it past its first row.
   */
  maxQueuedBodyChars?: number;
  /** The first wait before the store is tried again after a failure, doubling up to retryMaxMs. */
  retryMinMs?: number;
  retryMaxMs?: number;
  /**
   * How often the store may refuse a batch (not an outage) before it is inserted in parts, and the
   * rows the store refuses alone are set aside.
   */
  maxRejections?: number;
  /** The most inserts splitting one refused batch may make; parts left untried then are set aside whole. */
  maxSplitInserts?: number;
  /**
   * How long an insert runs before the rows queued behind it are spooled at each tick instead of
   * held in memory for it (an engine that hangs: each insert waits out the store's timeout). At
   * once while the store is known to be out. Default: three flush intervals, STUCK_INSERT_MIN_MS at least.
   */
  stuckInsertMs?: number;
}

/** Counters since start, for metrics and tests. */
export interface LogWriterStats {
  /** Rows in memory now. */
  queued: number;
  /**
   * Rows in batches the store accepted. A batch whose first attempt landed but reported a failure
   * counts again when its retry is accepted (the engine drops that retry).
   */
  written: number;
  /** Rows written to the spool. */
  spooled: number;
  /** Spooled rows the store took later. */
  replayed: number;
  /** Batches on disk now. */
  spoolBatches: number;
  /** Failed store calls. */
  failures: number;
  /** Rows lost: the queue or the spool was full, or they came after close(). */
  dropped: number;
  /** Rows queued without their bodies: the bodies already queued filled `maxQueuedBodyChars`. */
  bodiesDropped: number;
  /** Rows set aside in `rejected/` because the store refused them (see `LogWriter`). */
  rejected: number;
  /** Whether the store is unreachable now. */
  outage: boolean;
}

/**
 * Writes request logs off the hot path. `record` only queues (it never throws, awaits or does I/O);
 * queued rows are inserted in batches, per mode, when a batch is full or every flushIntervalMs.
 *
 * When the store is unreachable, batches go to the disk spool instead, and everything after them
 * too, so that order is kept: while the spool holds anything, new batches join it behind the older
 * ones. The store is tried again with a doubling backoff; once it answers, the spool is replayed
 * oldest first, then the queue is written. A batch keeps its rows and its deduplication token, in
 * memory and on disk, so a replay never stores or counts a request twice, and completes a batch an
 * interrupted insert left half-landed (in the log table but not in every rollup).
 *
 * A batch the store keeps refusing (not an outage: it judged the data wrong, e.g. a row it cannot
 * parse) would otherwise take every request batched with it down with it, other projects' included.
 * After `maxRejections` refusals it is inserted in parts, halved again and again down to single rows
 * (`insertInParts`), so that the rows the store takes are stored and only those it refuses are set
 * aside in the spool's `rejected/`. Each part has a token derived from the batch's and the part's
 * place in it, the same on every attempt: a split cut short (an outage, a crash) is done again from
 * the whole batch, and the parts that landed the first time are dropped by the engine.
 *
 * `close()` writes what is queued (or spools it, when the store is down or the spool is not empty),
 * so a clean shutdown loses nothing; the spool is replayed by the next start.
 *
 * Failures are counted (`stats`), and an outage is logged once when it starts and once when it ends.
 */
export interface LogWriter {
  record(mode: ModeName, row: LogRow): void;
  /** Writes (or spools) what is queued now; resolves when done. */
  flush(): Promise<void>;
  readonly stats: LogWriterStats;
  close(): Promise<void>;
}

const MODES: ModeName[] = ["live", "test"];
const REFUSAL_LOG_INTERVAL_MS = 60_000;

/** The characters of a row's bodies: nearly all of a large row's size. */
const bodyChars = (r: LogRow): number => r.request_body.length + r.response_body.length;

/** The shortest an insert runs before the rows queued behind it are spooled instead of held in memory (see stuckMs). */
export const STUCK_INSERT_MIN_MS = 3_000;

export function createLogWriter(opts: LogWriterOptions): LogWriter {
  const { store, spool, batchSize } = opts;
  const maxQueued = opts.maxQueued ?? 100_000;
  const maxBodyChars = opts.maxQueuedBodyChars ?? 64 * 1024 * 1024;
  const batchBodyChars = Math.max(1, Math.floor(maxBodyChars / 4));
  let queuedBodyChars = 0;
  const retryMinMs = opts.retryMinMs ?? 500;
  const retryMaxMs = opts.retryMaxMs ?? 30_000;
  const maxRejections = opts.maxRejections ?? 3;
  const maxSplitInserts = opts.maxSplitInserts ?? 256;
  const queues: Record<ModeName, LogRow[]> = { live: [], test: [] };
  const stats: LogWriterStats = { queued: 0, written: 0, spooled: 0, replayed: 0, spoolBatches: spool.batches, failures: 0, dropped: 0, bodiesDropped: 0, rejected: 0, outage: false };
  const refusals = new Map<number, number>();
  let retryAt = 0;
  let backoff = retryMinMs;
  let running: Promise<void> | undefined;
  let again = false;
  let closing = false;
  let closed = false;
  const refusalLogged = atMostEvery(REFUSAL_LOG_INTERVAL_MS);
  const dropLogged = atMostEvery(REFUSAL_LOG_INTERVAL_MS);
  const bodiesDropLogged = atMostEvery(REFUSAL_LOG_INTERVAL_MS);

  const up = () => {
    if (stats.outage) {
      stats.outage = false;
      log.info("telemetry store is back: writing logs again", { spooledBatches: spool.batches });
    }
    backoff = retryMinMs;
    retryAt = 0;
  };

  const down = (err: unknown) => {
    stats.failures++;
    retryAt = Date.now() + backoff;
    backoff = Math.min(backoff * 2, retryMaxMs);
    if (err instanceof TelemetryUnavailableError) {
      if (!stats.outage) {
        stats.outage = true;
        log.warn("telemetry store unreachable: spooling logs to disk until it is back", { err: err.message, spool: spool.dir });
      }
    } else if (refusalLogged()) {
      log.error("telemetry store refused a batch of logs", { err: String((err as Error)?.message ?? err) });
    }
  };

  const dropped = (n: number, why: string) => {
    stats.dropped += n;
    // At most once a minute, with the count of every row dropped since start: a loss that goes on
    // (or comes back) is seen, never one line per row.
    if (dropLogged()) log.error(`request logs dropped: ${why}`, { rows: n, droppedSinceStart: stats.dropped });
  };

  /** The next batch of a mode's queue: at most `max` (batchSize) rows, and at most batchBodyChars of bodies past its first row. */
  const take = (mode: ModeName, max = batchSize): LogRow[] => {
    const q = queues[mode];
    const limit = Math.min(max, batchSize, q.length);
    let n = 0;
    let chars = 0;
    while (n < limit) {
      const c = bodyChars(q[n]!);
      if (n > 0 && chars + c > batchBodyChars) break;
      chars += c;
      n++;
    }
    const rows = q.splice(0, n);
    stats.queued -= rows.length;
    queuedBodyChars -= chars;
    return rows;
  };

  // When the insert running now began (0: none runs). An insert that takes longer than stuckMs (an
  // engine that hangs: each waits out the store's timeout) has the rows queued meanwhile spooled at
  // each tick, rather than held in memory for it, where a SIGKILL would lose them all.
  let insertingSince = 0;
  const stuckMs = opts.stuckInsertMs ?? Math.max(3 * opts.flushIntervalMs, STUCK_INSERT_MIN_MS);
  const insert = async (mode: ModeName, rows: LogRow[], token: string): Promise<number> => {
    insertingSince = Date.now();
    try {
      return await store.insert(mode, rows, token);
    } finally {
      insertingSince = 0;
    }
  };

  const toSpool = async (batch: LogBatch) => {
    let ok = false;
    try {
      ok = await spool.append(batch);
    } catch (err) {
      log.error("cannot write the telemetry spool", { err: String(err), spool: spool.dir });
    }
    if (ok) stats.spooled += batch.rows.length;
    else dropped(batch.rows.length, "the telemetry spool is full or cannot be written");
    stats.spoolBatches = spool.batches;
  };

  /**
   * Spools the rows queued now, in batches of at most batchSize; rows that arrive while those are
   * written wait for the next interval (or the close). Looping until the queue is empty wrote a
   * file of the few rows that came in during each file's write and sync, under steady traffic one
   * every few milliseconds, each replayed later as an insert of its own.
   */
  const spoolQueuesNow = async () => {
    const due: Record<ModeName, number> = { live: queues.live.length, test: queues.test.length };
    for (const mode of MODES) {
      while (due[mode] > 0 && queues[mode].length > 0) {
        const rows = take(mode, due[mode]);
        due[mode] -= rows.length;
        await toSpool({ mode, token: randomUUID(), rows });
      }
    }
  };

  // One spooling at a time (a cycle's, a tick's while an insert is stuck): their files in the order their rows were taken.
  let spooling: Promise<void> = Promise.resolve();
  const spoolQueues = (): Promise<void> => (spooling = spooling.then(spoolQueuesNow, spoolQueuesNow));

  const waiting = () => retryAt > 0 && Date.now() < retryAt;

  /**
   * Inserts a batch the store refuses in parts: each refused part is halved and its halves tried in
   * turn, until a refused part is a single row, which is what the store refuses. Parts are ranges of
   * the batch's distinct rows (a request repeated in the batch must not land in two parts), each
   * under the token `<batch token>:<from>-<to>`: the same batch always splits the same way into the
   * same tokens. A batch with k rows the store refuses among n takes about 2k·log2(n/k) inserts; at
   * `maxSplitInserts` the parts not tried yet are set aside whole. An outage on the way throws
   * (TelemetryUnavailableError): the batch stays in the spool and is tried again whole.
   */
  const insertInParts = async (batch: LogBatch): Promise<{ written: number; stored: number; refused: LogRow[] }> => {
    const rows = distinctRows(batch.rows);
    const refused: LogRow[] = [];
    let written = 0;
    let stored = 0;
    let calls = 0;
    // Parts to insert, [from, to) of `rows`, the next one last: depth first, in the batch's order.
    const todo: Array<[number, number]> = [];
    const halve = (from: number, to: number) => {
      const mid = from + ((to - from) >> 1);
      todo.push([mid, to], [from, mid]);
    };
    if (rows.length > 1) halve(0, rows.length);
    else refused.push(...rows); // the whole batch is that row, and it was refused
    while (todo.length > 0) {
      const [from, to] = todo.pop()!;
      if (calls >= maxSplitInserts) {
        refused.push(...rows.slice(from, to));
        continue;
      }
      calls++;
      try {
        written += await insert(batch.mode, rows.slice(from, to), `${batch.token}:${from}-${to}`);
        stored += to - from;
      } catch (err) {
        if (err instanceof TelemetryUnavailableError) throw err;
        stats.failures++;
        if (to - from === 1) refused.push(rows[from]!);
        else halve(from, to);
      }
    }
    return { written, stored, refused };
  };

  const cycle = async (final: boolean): Promise<void> => {
    // Spooled batches first, oldest first; newer rows wait behind them (on disk, if need be).
    while (spool.batches > 0) {
      if (final || waiting()) return spoolQueues();
      const batch = await spool.oldest();
      if (!batch) break;
      try {
        stats.written += await insert(batch.mode, batch.rows, batch.token);
        stats.replayed += batch.rows.length;
        refusals.delete(batch.seq);
        await spool.remove(batch);
        up();
      } catch (err) {
        down(err);
        if (!(err instanceof TelemetryUnavailableError)) {
          const n = (refusals.get(batch.seq) ?? 0) + 1;
          refusals.set(batch.seq, n);
          if (n >= maxRejections) {
            let split: Awaited<ReturnType<typeof insertInParts>>;
            try {
              split = await insertInParts(batch);
            } catch (e) {
              // An outage on the way: the batch is tried again whole (and split again) later;
              // its refusals so far are kept, so the next refusal splits it at once.
              down(e);
              return spoolQueues();
            }
            refusals.delete(batch.seq);
            stats.written += split.written;
            stats.replayed += split.stored;
            if (split.refused.length > 0) {
              await spool.reject(batch, split.refused);
              stats.rejected += split.refused.length;
              log.error("telemetry store refused rows of a spooled batch: those set aside, the rest stored", {
                rows: batch.rows.length,
                rejected: split.refused.length,
                dir: `${spool.dir}/rejected`,
              });
            } else {
              await spool.remove(batch);
            }
            if (split.stored > 0) up(); // it answered: the spool goes on without waiting
            continue;
          }
        }
        return spoolQueues();
      } finally {
        stats.spoolBatches = spool.batches;
      }
    }
    // The rows queued now, not those that arrive while they are written: under steady traffic a
    // loop "until the queue is empty" never ends, and writes a small batch after every insert
    // (many inserts a second, each a part per table for the engine to write and merge). Rows that
    // arrive meanwhile wait for the next interval, or for a full batch.
    const due: Record<ModeName, number> = { live: queues.live.length, test: queues.test.length };
    for (const mode of MODES) {
      while (queues[mode].length > 0 && (final || due[mode] > 0)) {
        if (waiting() && !final) return spoolQueues();
        const batch: LogBatch = { mode, token: randomUUID(), rows: take(mode, final ? batchSize : due[mode]) };
        due[mode] -= batch.rows.length;
        try {
          stats.written += await insert(mode, batch.rows, batch.token);
          up();
        } catch (err) {
          down(err);
          await toSpool(batch);
          return spoolQueues();
        }
      }
    }
  };

  const kick = (final = false): Promise<void> => {
    if (running) {
      // A tick or a full batch while a cycle runs: one more cycle when it ends, for what is queued then.
      again = true;
      return running;
    }
    running = cycle(final)
      .catch((err) => log.error("telemetry writer failed", { err: String((err as Error)?.stack ?? err) }))
      .finally(() => {
        running = undefined;
        if (again && !closing) {
          again = false;
          void kick();
        }
      });
    return running;
  };

  const timer = setInterval(() => {
    // A cycle stuck in an insert (the store in an outage, or hanging): what is queued goes to disk now.
    if (running && stats.queued > 0 && insertingSince > 0 && (stats.outage || Date.now() - insertingSince >= stuckMs)) {
      void spoolQueues().catch((err) => log.error("telemetry writer failed", { err: String((err as Error)?.stack ?? err) }));
    }
    if (stats.queued > 0 || spool.batches > 0) void kick();
  }, opts.flushIntervalMs);
  timer.unref();

  return {
    record(mode, row) {
      try {
        if (closed) return dropped(1, "recorded after the writer closed");
        if (stats.queued >= maxQueued) return dropped(1, "the in-memory queue is full");
        let chars = bodyChars(row);
        if (chars > 0 && queuedBodyChars + chars > maxBodyChars) {
          row.request_body = row.response_body = "";
          chars = 0;
          stats.bodiesDropped++;
          if (bodiesDropLogged()) log.warn("request logs queued without their bodies: the bodies waiting to be written fill the writer's memory budget", { bodiesDroppedSinceStart: stats.bodiesDropped });
        }
        const q = queues[mode];
        q.push(row);
        stats.queued++;
        queuedBodyChars += chars;
        if (q.length >= batchSize) void kick();
      } catch {
        stats.dropped++;
      }
    },

    async flush() {
      while (running) await running;
      await kick();
    },

    get stats() {
      return stats;
    },

    async close() {
      if (closed) return;
      closing = true;
      clearInterval(timer);
      while (running) await running;
      // A tick's spooling behind a stuck insert, its file still being written: on disk before the close ends.
      await spooling.catch(() => {});
      await kick(true);
      closed = true;
    },
  };
}
