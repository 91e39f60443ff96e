import type { ServerResponse } from "node:http";
import type { StreamChatResponse } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { retryGuidanceOf, toErrorBody, toErrorInfo, type ErrorInfo } from "../../core/errors.js";
import { isCanceled } from "../../core/proxy/proxy-service.js";
import { drainedOrClosed, endWatched, markEventStream, sendStallMs, WRITE_PART_BYTES, writeInParts } from "../../drained.js";
import { log } from "../../logger.js";
import { answerBeforeBody, answeredBody, challengeOf } from "../http-errors.js";
import type { ClientCodec, ParsedChatRequest } from "./codec.js";

/**
 * Writing gateway answers on the plain node:http response: one `writeHead` with every header
 * (each `setHeader` validates and stores on its own, which this hot path would pay per header).
 */

/**
 * The headers every gateway response carries (spec 4.1): request id, cache status and cost, and the
 * request id again under the name the surface's provider SDK reads it from (one of the two).
 */
export interface SvcHeaders {
  "X-Svc-Request-Id": string;
  "X-Svc-Cache": "HIT" | "MISS";
  "X-Svc-Cost": string;
  /** `ClientCodec.requestIdHeader` of chat completions (the openai SDK's `_request_id`). */
  "x-request-id"?: string;
  /** `ClientCodec.requestIdHeader` of messages (the anthropic SDK's `_request_id`). */
  "request-id"?: string;
}

/** A new request's svc headers: its id (under both names), a miss, no cost yet. */
export const svcHeaders = (requestId: string, codec: ClientCodec): SvcHeaders => ({
  "X-Svc-Request-Id": requestId,
  "X-Svc-Cache": "MISS",
  "X-Svc-Cost": "0",
  [codec.requestIdHeader]: requestId,
});

const hitCost = { "X-Svc-Cost": "0" } as const;
const costTrailer = { Trailer: "X-Svc-Cost" } as const;

/** Writes a whole answer as JSON, with its cost in `X-Svc-Cost`; returns the body written. */
export function writeCompletion(res: ServerResponse, svc: SvcHeaders, extra: Record<string, string> | undefined, codec: ClientCodec, ev: StreamChatResponse): string {
  if (ev.event.case !== "completion") throw new Error(`expected a completion, got ${ev.event.case}`);
  svc["X-Svc-Cost"] = ev.event.value.costUsd || "0";
  const body = JSON.stringify(codec.renderCompletion(ev.event.value));
  writeJson(res, 200, extra ? { ...svc, ...extra } : svc, body);
  return body;
}

/**
 * Writes a JSON body with the given status and headers. A large one (a long answer, a cached one)
 * goes out in parts as its client takes them, and a client that stops taking them is cut
 * (writeInParts), rather than the whole handed to the socket at once and held however long the
 * client does not read.
 */
export function writeJson(res: ServerResponse, status: number, headers: object, body: string): void {
  const bytes = body.length <= SMALL_BODY_CHARS ? body : Buffer.from(body);
  res.writeHead(status, { ...headers, "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(bytes) });
  if (typeof bytes === "string") endWatched(res, bytes);
  else void writeInParts(res, bytes, true);
}

/** Characters that fit in one part whatever they are (three bytes each at most, as UTF-16 code units). */
const SMALL_BODY_CHARS = Math.floor(WRITE_PART_BYTES / 3);

/**
 * Writes an error in the spec's shape (section 2.6). Internal errors are logged with the request id
 * and reach the client only as a generic 500. An upstream's refusal keeps its retry guidance
 * (`retry-after`, `retry-after-ms`, `x-should-retry`), which the client's SDK waits on.
 */
export function writeError(res: ServerResponse, svc: SvcHeaders, err: unknown, extraHeaders?: Record<string, string>, costUsd = "0"): { info: ErrorInfo; body: string; written: Promise<void> } {
  const info = toErrorInfo(err);
  if (info.status >= 500 && info.code === "internal_error") {
    log.error("request failed", { requestId: svc["X-Svc-Request-Id"], err: String((err as Error)?.stack ?? err) });
  }
  const body = JSON.stringify(toErrorBody(info));
  // Answered already: by node:http's handler of a broken or late body (answerClientError), whose
  // body is the log's; or, a stream begun, inside the stream.
  if (res.headersSent || res.destroyed) {
    // Begun and neither ended nor to be ended by its writer: cut, so that its client sees an
    // answer broken off rather than waits on it for ever.
    if (res.headersSent && !res.writableEnded && !res.destroyed) res.destroy();
    return { info, body: (!res.headersSent && answeredBody(res.socket)) || "", written: done };
  }
  // Nothing, unless the request reached an upstream that bills its prompt (it timed out, or its 2xx answer could not be read).
  svc["X-Svc-Cost"] = costUsd;
  // 499 (the client went away) has no reader; should one still be there, it gets a plain 400.
  const status = info.status === 499 ? 400 : info.status;
  const headers = { ...svc, ...extraHeaders, ...retryGuidanceOf(err), ...challengeOf(info) };
  const write = (more: Record<string, string>) => writeJson(res, status, { ...headers, ...more }, body);
  // Refused before its body was all read (too large, a bad key): answered so that the answer
  // reaches a client still writing the body, which is read and dropped within limits; a body
  // declared past them is not waited for, and the connection is closed after the answer rather
  // than kept with the rest of the body unread, which could frame a second answer.
  const req = res.req;
  if (!req || req.complete) {
    write({});
    return { info, body, written: done };
  }
  return { info, body, written: answerBeforeBody(req, res, write) };
}

const done = Promise.resolve();

/** When a stream is read on from its upstream without waiting for its client (writeStream). */
export interface ReadAhead {
  /** Whether to read on now, the client's socket full or not. */
  now(): boolean;
  /** While the stream waits on its client: calls `wake` when `now()` may have become true; gives its undo. */
  watch(wake: () => void): () => void;
}

/**
 * Begins a streamed answer: its 200 and headers, written once (writeStream calls it; a caller
 * that commits the stream before its first event, to keep a quiet connection alive, calls it
 * first). Whether the cost can go as a trailer: HTTP/1.0 has no chunked framing and so no trailers
 * (node:http refuses them there), and such a stream ends when the connection closes, its live cost
 * reaching only its log.
 */
export function beginStream(res: ServerResponse, svc: SvcHeaders, extra: Record<string, string> | undefined, codec: ClientCodec): boolean {
  const trailer = res.req?.httpVersion !== "1.0";
  if (res.headersSent) return trailer;
  res.writeHead(200, {
    ...extra,
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    ...(trailer ? costTrailer : undefined),
    "X-Svc-Request-Id": svc["X-Svc-Request-Id"],
    [codec.requestIdHeader]: svc["X-Svc-Request-Id"],
    "X-Svc-Cache": svc["X-Svc-Cache"],
    // A hit's cost (0) is known before the stream: it is a header too, for clients that cannot
    // read trailers (fetch, the SDKs' withResponse); the trailer still says it.
    ...(svc["X-Svc-Cache"] === "HIT" ? hitCost : undefined),
  });
  markEventStream(res);
  return trailer;
}

/**
 * Writes a streamed answer as SSE. The cost is only known at the end, so it is sent as the HTTP
 * trailer `X-Svc-Cost`, declared up front in `Trailer:` (DESIGN.md), and left in `svc` for the
 * caller. An error after the stream has begun is written as the style's SSE error event, and
 * returned. `onEvent` sees every event written; `partialCost` prices an answer that ended without
 * its final event (the upstream broke off, the client left), which the upstream still bills.
 * `cutShort` tells a cancellation with the client still there (the shutdown's cut) from one of a
 * client that left: the error event it gives is sent. `first` is undefined for a stream begun
 * before its first event came (beginStream), whose `rest` then gives all of it, or its error.
 */
export async function writeStream(
  res: ServerResponse,
  svc: SvcHeaders,
  extra: Record<string, string> | undefined,
  codec: ClientCodec,
  req: ParsedChatRequest,
  first: StreamChatResponse | undefined,
  rest: AsyncIterator<StreamChatResponse>,
  onEvent?: (ev: StreamChatResponse) => void,
  partialCost?: () => string,
  cutShort?: (err: unknown) => ErrorInfo | undefined,
  keepAliveMs = 0,
  readAhead?: ReadAhead,
): Promise<ErrorInfo | undefined> {
  const trailer = beginStream(res, svc, extra, codec);
  const renderer = codec.createStreamRenderer(req);
  let cost: string | undefined;
  let failure: ErrorInfo | undefined;
  // Events that arrive together (one upstream chunk) leave in one write: their texts are joined
  // until the current tick's promise jobs have run, then written once. One write per tick rather
  // than one per event: each write of a chunked response is framed and copied on its own.
  let pending = "";
  // A stream quiet for keepAliveMs gets an SSE comment (skipped by every SSE reader), so a proxy's
  // idle timeout in front does not cut it; a client not reading (backpressure) gets none. The timer
  // is armed by the first write of a stream still running then (one whose upstream sent it whole in
  // one piece has ended by that write, and needs none), and re-armed by each write after.
  let quiet: NodeJS.Timeout | undefined;
  let ended = false;
  const keepAlive = () => {
    if (ended || res.destroyed || res.writableEnded) return;
    if (!res.writableNeedDrain) res.write(": keep-alive\n\n");
    quiet!.refresh();
  };
  const take = (): string => {
    const text = pending;
    pending = "";
    if (keepAliveMs > 0 && !ended) {
      if (quiet) quiet.refresh();
      else quiet = setTimeout(keepAlive, keepAliveMs);
    }
    return text;
  };
  const flush = () => {
    if (!pending) return;
    const text = take();
    if (!res.destroyed) res.write(text);
  };
  // A large text (a cached answer served whole, an upstream chunk carrying much) goes out in parts
  // as the client takes them; a client that stops taking them is cut (writeInParts).
  const flushInParts = async () => {
    if (pending.length <= SMALL_BODY_CHARS) return flush();
    const text = take();
    if (!res.destroyed) await writeInParts(res, text, false);
  };
  const stallMs = sendStallMs(res);
  const emit = (ev: StreamChatResponse) => {
    onEvent?.(ev);
    if (ev.event.case === "messageEnd") cost = ev.event.value.costUsd || "0";
    else if (ev.event.case === "completion") cost = ev.event.value.costUsd || "0";
    const text = renderer.render(ev);
    if (!text) return;
    if (!pending) process.nextTick(flush);
    pending += text;
  };
  try {
    if (first) emit(first);
    // An event that arrives after the client left is still seen (priced); flush() writes nothing then.
    for (let r = await rest.next(); !r.done; r = await rest.next()) {
      emit(r.value);
      if (res.destroyed) break;
      // A client that reads slower than the upstream sends: the upstream is not read further (and
      // is paused in turn: core/proxy/upstream-http.ts) until the client's socket takes what is
      // written, so a slow or stalled reader holds a bounded buffer, not the whole answer. Unless
      // `readAhead` says others wait on this answer: it is read on, buffered for this client.
      if (pending.length >= res.writableHighWaterMark) {
        // One that others may come to wait on is written whole and waits on its client below,
        // where a waiter that comes wakes it (flushInParts's waits are not woken).
        if (readAhead) flush();
        else await flushInParts();
      }
      // Asked only when the client is behind: no call per event otherwise.
      if (res.writableNeedDrain && !readAhead?.now()) await drainedOrClosed(res, stallMs, readAhead?.watch);
    }
  } catch (err) {
    // A client that left has no reader for an error event; its answer is still priced below.
    const cut = isCanceled(err) ? cutShort?.(err) : undefined;
    if (!res.destroyed && (cut || !isCanceled(err))) {
      failure = cut ?? toErrorInfo(err);
      if (failure.code === "internal_error") log.error("stream failed", { requestId: svc["X-Svc-Request-Id"], err: String((err as Error)?.stack ?? err) });
      pending += renderer.error(failure);
    }
  } finally {
    ended = true;
    clearTimeout(quiet);
    // Ends the core's stream early when the client left, so it releases the upstream connection.
    await rest.return?.();
  }
  await flushInParts();
  svc["X-Svc-Cost"] = cost ?? partialCost?.() ?? "0";
  if (!res.destroyed) {
    if (trailer) res.addTrailers({ "X-Svc-Cost": svc["X-Svc-Cost"] });
    endWatched(res);
  }
  return failure;
}
