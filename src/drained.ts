import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";

/**
 * Resolves once `res` can take more (`drain`), or its client is gone (`close`); both listeners are
 * removed either way, so a long answer written under back-pressure does not pile them up. With
 * `stallMs`, a client that takes none of what waits for it that long is cut: its connection is
 * closed (as nginx's `send_timeout`), which resolves the wait too.
 */
export function drainedOrClosed(res: ServerResponse, stallMs = 0, wake?: (done: () => void) => () => void): Promise<void> {
  return new Promise((resolve) => {
    const stop = stallMs > 0 ? cutWhenStalled(res, stallMs) : undefined;
    let unwake: (() => void) | undefined;
    const done = () => {
      stop?.();
      unwake?.();
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
    // Another reason to stop waiting, given by the caller (`wake` calls `done`; what it gives undoes it).
    unwake = wake?.(done);
  });
}

/** How long a client may take none of an answer's bytes before its connection is closed (README, "Slow clients"). */
export const DEFAULT_SEND_STALL_MS = 60_000;

/** Each connection's stall limit, set by the server that took it (tests shorten it). */
const stallLimits = new WeakMap<Socket, number>();

export const setSendStallMs = (socket: Socket, ms: number): void => {
  stallLimits.set(socket, ms);
};

/** The stall limit of `res`'s connection: 0 (none) for one no gateway server took. */
export const sendStallMs = (res: ServerResponse): number => (res.socket ? stallLimits.get(res.socket as Socket) ?? 0 : 0);

/** The most written at once: a slow reader's progress shows between parts, and a stalled one holds at most this much more. */
export const WRITE_PART_BYTES = 64 * 1024;

/**
 * Writes `data` in parts of WRITE_PART_BYTES, each once the client has taken enough of the one
 * before (back-pressure), then ends the response when `end` says so; a client that stalls is cut
 * (drainedOrClosed). Resolves once all is handed over, or the client is gone.
 */
export async function writeInParts(res: ServerResponse, data: string | Buffer, end: boolean): Promise<void> {
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  const stallMs = sendStallMs(res);
  for (let at = 0; at < bytes.length; at += WRITE_PART_BYTES) {
    if (res.destroyed) return;
    const part = bytes.subarray(at, at + WRITE_PART_BYTES);
    if (end && at + WRITE_PART_BYTES >= bytes.length) return endWatched(res, part);
    if (!res.write(part)) await drainedOrClosed(res, stallMs);
  }
  if (end && !res.destroyed) endWatched(res);
}

/**
 * Ends `res`, and cuts a client that does not take its last bytes within the stall limit: an
 * answer left unfinished holds its connection (and, pipelined, the requests behind it) forever.
 */
export function endWatched(res: ServerResponse, last?: Buffer | string): void {
  if (last === undefined) res.end();
  else res.end(last);
  // Nothing left waiting on the client (the usual answer, taken whole by the socket): no timer.
  const socket = res.socket;
  if (!socket || socket.writableLength === 0 || res.destroyed) return;
  const stallMs = sendStallMs(res);
  if (stallMs <= 0) return;
  const stop = cutWhenStalled(res, stallMs);
  const done = () => {
    stop();
    res.off("finish", done);
    res.off("close", done);
  };
  res.on("finish", done);
  res.on("close", done);
}

/** A socket's own queue: what libuv holds that the kernel has not taken yet (it shrinks as the client reads). */
type WithQueue = { _handle?: { writeQueueSize?: number } | null };

/** The bytes waiting on `res`'s client: fewer as it takes any of them. */
function waiting(res: ServerResponse): number {
  const socket = res.socket;
  if (!socket) return 0;
  return socket.writableLength + ((socket as unknown as WithQueue)._handle?.writeQueueSize ?? 0);
}

/**
 * Cuts `res`'s connection once its client has taken none of the bytes waiting for it for
 * `stallMs`, as nginx's `send_timeout` counts between two writes that make progress: a slow reader,
 * taking any, is never cut. Looked at a few times per `stallMs`; returns the stop.
 */
function cutWhenStalled(res: ServerResponse, stallMs: number): () => void {
  let left = waiting(res);
  let progressAt = performance.now();
  const check = setInterval(() => {
    const now = waiting(res);
    if (now < left) progressAt = performance.now();
    left = now;
    if (performance.now() - progressAt >= stallMs) {
      clearInterval(check);
      res.destroy();
    }
  }, Math.max(20, Math.min(stallMs / 4, 5000)));
  return () => clearInterval(check);
}

/** Answers being written as SSE streams, into which a comment may go between events (server.ts, probeGone). */
const eventStreams = new WeakSet<ServerResponse>();

/** Marks `res` as an SSE stream under way: an SSE comment written between its events is skipped by every reader. */
export const markEventStream = (res: ServerResponse): void => void eventStreams.add(res);

/** Whether `res` is an SSE stream under way (markEventStream). */
export const isEventStream = (res: ServerResponse): boolean => eventStreams.has(res);
