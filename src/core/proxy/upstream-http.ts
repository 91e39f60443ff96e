import type { Socket } from "node:net";
import { StringDecoder } from "node:string_decoder";
import { Agent, buildConnector, errors as undiciErrors, type Dispatcher } from "undici";
import { ConnectError, Code } from "@connectrpc/connect";
import type { Timeouts } from "../../config.js";
import type { CancelSignal } from "../cancel.js";
import { apiError, withRetryGuidance } from "../errors.js";
import { atMostEvery, log } from "../../logger.js";
import type { UpstreamHttpRequest } from "./upstreams/adapter.js";

/** An upstream response: status and a body to read as text chunks. */
export interface UpstreamResponse {
  status: number;
  /** The response's content-type ("" when it sent none). */
  contentType: string;
  /** An error answer's headers (status 400 and up), for its retry guidance, or a redirect's (3xx); empty otherwise. */
  errorHeaders: Record<string, string | string[] | undefined>;
  body: AsyncIterable<string>;
  /** Reads the whole body as text, up to `limit` characters (more is cut off). */
  text(limit?: number): Promise<string>;
  /** Stops reading and releases the connection. */
  dispose(): void;
  /**
   * The answer is whole (its last event came): what is left of the body (the chunked end, which
   * usually follows at once) is read and dropped, so the connection goes back to the pool; a body
   * that does not end within `graceMs` is cut. No timeout applies, nothing is reported, and
   * dispose() changes nothing, from here on.
   */
  finishAnswer(graceMs?: number): void;
}

/** Sends adapter-built requests upstream over keep-alive pools, with the configured timeouts. */
export interface UpstreamHttp {
  send(req: UpstreamHttpRequest, cancel: CancelSignal): Promise<UpstreamResponse>;
  close(): Promise<void>;
}

const MAX_ERROR_BODY = 64 * 1024;
/** Decoded chunks a stream may hold unread before the upstream socket is paused (backpressure). */
const HIGH_WATER_CHUNKS = 64;

/**
 * How long the end of a body may take once the answer in it is whole (its last SSE event came):
 * the chunked terminator normally follows at once; an upstream that holds the connection open
 * after its answer has it closed, rather than holding the client's answer or failing it.
 */
const FINISH_GRACE_MS = 1000;

/**
 * One undici Agent (a keep-alive pool per origin) for all upstreams. The timeouts are plain Node
 * timers of our own: undici's connect, headers and body timeouts run on its coarse "fast timers"
 * (about 500 ms resolution above 1 s), which fired them up to half a second late. The connect
 * timeout is armed by the connector (once per new connection); the first-byte, idle and total
 * timeouts by each exchange (see Exchange).
 *
 * Requests go through undici's dispatch handler API rather than `request()`: no Readable body
 * stream, no async iterator over it and no AbortController of our own per request. On this hot
 * path those cost more than the rest of the exchange (bench/profile-gateway.ts).
 *
 * Connections per origin are not capped: each request in flight has one (kept alive after it), so
 * a request never waits behind long streams for a free connection, and the upstream sees as many
 * as the gateway has clients in flight. A request whose pooled connection the upstream had closed
 * (reset, or closed before a byte of the answer came: an idle keep-alive connection the upstream
 * dropped just as it was reused) is sent once more on a new connection (Exchange.#retry).
 */
export function createUpstreamHttp(timeouts: Timeouts): UpstreamHttp {
  const agent = new Agent({
    connect: timedConnector(timeouts.connectMs),
    // 0: off; Exchange keeps these two with its own timers.
    headersTimeout: 0,
    bodyTimeout: 0,
    keepAliveTimeout: 30_000,
    pipelining: 1,
  });

  return {
    send(req, cancel) {
      return new Promise<UpstreamResponse>((resolve, reject) => {
        const target = targetOf(req.url);
        const dispatch = (exchange: Exchange) => {
          try {
            agent.dispatch({ origin: target.origin, path: target.path, method: "POST", headers: req.headers, body: req.body }, exchange);
          } catch (e) {
            exchange.onResponseError(undefined, e as Error);
          }
        };
        const started = Date.now();
        // The one retry, within what is left of the total timeout.
        const again = () => {
          if (retriedLogged()) log.info("an upstream closed a pooled connection before answering: the request was sent again on a new connection", { origin: target.origin });
          dispatch(new Exchange(resolve, reject, cancel, { ...timeouts, totalMs: Math.max(1, timeouts.totalMs - (Date.now() - started)) }));
        };
        dispatch(new Exchange(resolve, reject, cancel, timeouts, again));
      });
    },
    close: () => agent.close(),
  };
}

const retriedLogged = atMostEvery(60_000);

/**
 * Whether a connection failed the way a kept-alive one the upstream had closed fails when it is
 * reused: reset (ECONNRESET, EPIPE), or closed by the other side after earlier answers on it
 * (undici's SocketError, whose socket had read bytes before this request). A fresh connection closed
 * without an answer is the upstream's failure, not a stale connection.
 */
function staleConnection(e: Error): boolean {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === "ECONNRESET" || code === "EPIPE") return true;
  // Not a response undici refused ("bad response": an unsolicited 100 Continue, a malformed head).
  if (!(e instanceof undiciErrors.SocketError) || e.message !== "other side closed") return false;
  const info = (e as { socket?: { bytesRead?: number } }).socket;
  return typeof info?.bytesRead === "number" && info.bytesRead > 0;
}

/**
 * undici's connector with its own connect timeout off (that one is a coarse fast timer) and a
 * plain timer instead: a connection not made within `ms` is destroyed and fails with undici's
 * ConnectTimeoutError, as undici's own would.
 */
function timedConnector(ms: number): buildConnector.connector {
  const connect = buildConnector({ timeout: 0 });
  return (opts, callback) => {
    let settled = false;
    let socket: Socket | undefined;
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      socket?.destroy(); // destroyed without an error: the connector's callback is not called again
      callback(new undiciErrors.ConnectTimeoutError(`Connect Timeout Error (attempted address: ${opts.hostname}:${opts.port}, timeout: ${ms}ms)`), null);
    }, ms);
    try {
      // undici's connector returns the socket it is connecting (its types say void).
      socket = (connect as unknown as (o: buildConnector.Options, cb: buildConnector.Callback) => Socket | undefined)(opts, (...args) => {
        clearTimeout(timer);
        if (settled) {
          args[1]?.destroy();
          return;
        }
        settled = true;
        callback(...args);
      });
    } catch (e) {
      clearTimeout(timer);
      throw e;
    }
  };
}

/** Origins and paths of the few upstream URLs there are, parsed once. */
const targets = new Map<string, { origin: string; path: string }>();
function targetOf(url: string): { origin: string; path: string } {
  let t = targets.get(url);
  if (!t) {
    const u = new URL(url);
    t = { origin: u.origin, path: u.pathname + u.search };
    if (targets.size < 1024) targets.set(url, t);
  }
  return t;
}

/**
 * The metadata key a Canceled call carries when its request had already gone to the upstream: the
 * upstream has the prompt then, and bills it.
 */
export const SENT_UPSTREAM = "svc-upstream-sent";

/** Whether a call that failed had sent its request to the upstream (see SENT_UPSTREAM). */
export const sentUpstream = (e: unknown): boolean => e instanceof ConnectError && e.metadata.get(SENT_UPSTREAM) === "1";

const NO_HEADERS: Record<string, never> = Object.freeze({});

class TotalTimeout extends Error {}
class ClientGone extends Error {}
class PhaseTimeout extends Error {}

/** Which of an exchange's timeouts ended it. */
const enum TimedOut {
  No,
  Total,
  FirstByte,
  Idle,
}

/**
 * One upstream exchange: undici's handler and the response it resolves to. Body chunks are decoded
 * as a UTF-8 stream (a character split across two chunks stays whole) and either queued for the
 * async iterator or, once `text()` is called, gathered into one string.
 */
class Exchange implements Dispatcher.DispatchHandler, UpstreamResponse {
  status = 0;
  contentType = "";
  errorHeaders: Record<string, string | string[] | undefined> = NO_HEADERS;
  #resolve: ((r: UpstreamResponse) => void) | undefined;
  #reject: ((e: unknown) => void) | undefined;
  #cancel: CancelSignal;
  #controller: Dispatcher.DispatchController | undefined;
  #timeouts: Timeouts;
  /** The total timeout. */
  #timer: NodeJS.Timeout;
  /**
   * The first-byte timeout from the request going out until the response's head, then the idle
   * timeout, refreshed by each body chunk (refresh() re-arms the one timer: no timer per chunk).
   */
  #phase: NodeJS.Timeout | undefined;
  #timedOut = TimedOut.No;
  /** Whether the request went out on a connection (a client that leaves after that is still billed). */
  #sent = false;
  #decoder: StringDecoder | undefined;
  #queue: string[] = [];
  #ended = false;
  #error: ConnectError | undefined;
  /** The reader waiting for the next chunk, if any. */
  #wake: (() => void) | undefined;
  /** While `text()` gathers the body: what it has so far and its limit. */
  #text: { out: string; limit: number; done: (s: string) => void; fail: (e: unknown) => void } | undefined;
  /** After finishAnswer(): the cut of a body that does not end in time; what comes is dropped meanwhile. */
  #draining: NodeJS.Timeout | undefined;
  /** Sends the request again on a new connection, when its connection proves stale (staleConnection). */
  #retry: (() => void) | undefined;

  constructor(resolve: (r: UpstreamResponse) => void, reject: (e: unknown) => void, cancel: CancelSignal, timeouts: Timeouts, retry?: () => void) {
    this.#resolve = resolve;
    this.#reject = reject;
    this.#cancel = cancel;
    this.#timeouts = timeouts;
    this.#retry = retry;
    this.#timer = setTimeout(Exchange.#totalTimedOut, timeouts.totalMs, this);
    // The listener is never removed: the cancellation belongs to this one call and is dropped with it.
    if (!cancel.aborted) cancel.onAbort(() => this.#controller?.abort(new ClientGone("client closed the request")));
  }

  static #totalTimedOut(ex: Exchange): void {
    ex.#timedOut = TimedOut.Total;
    ex.#controller?.abort(new TotalTimeout("total timeout"));
  }

  /** The first-byte timeout while no response has started, then the idle timeout. */
  static #phaseTimedOut(ex: Exchange): void {
    const c = ex.#controller;
    if (!c || ex.#ended) return;
    if (ex.status === 0) ex.#timedOut = TimedOut.FirstByte;
    else if (c.paused) return; // our reader is behind, not the upstream: re-armed when reading resumes
    else ex.#timedOut = TimedOut.Idle;
    c.abort(new PhaseTimeout("upstream timeout"));
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#cancel.aborted) controller.abort(new ClientGone("client closed the request"));
    else {
      this.#sent = true;
      this.#phase = setTimeout(Exchange.#phaseTimedOut, this.#timeouts.firstByteMs, this);
    }
  }

  onResponseStart(_c: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    if (statusCode < 200) {
      this.#phase?.refresh(); // 1xx informational: the real answer follows
      return;
    }
    this.status = statusCode;
    const ct = headers["content-type"];
    if (ct !== undefined) this.contentType = typeof ct === "string" ? ct : ct.join(", ");
    if (statusCode >= 300) this.errorHeaders = headers;
    // From here on the idle timeout: the same timer re-armed when the two are equal.
    const { firstByteMs, idleMs } = this.#timeouts;
    if (this.#phase && firstByteMs === idleMs) this.#phase.refresh();
    else {
      clearTimeout(this.#phase);
      this.#phase = setTimeout(Exchange.#phaseTimedOut, idleMs, this);
    }
    const resolve = this.#resolve!;
    this.#resolve = this.#reject = undefined;
    resolve(this);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#draining) return;
    this.#phase?.refresh();
    const s = (this.#decoder ??= new StringDecoder("utf8")).write(chunk);
    if (s === "") return;
    const t = this.#text;
    if (t) {
      t.out += s;
      if (t.out.length > t.limit) {
        this.#text = undefined;
        this.dispose();
        t.done(t.out);
      }
      return;
    }
    this.#queue.push(s);
    if (this.#queue.length >= HIGH_WATER_CHUNKS && !controller.paused) controller.pause();
    this.#wakeReader();
  }

  onResponseEnd(): void {
    const rest = this.#decoder?.end() ?? "";
    this.#ended = true;
    clearTimeout(this.#timer);
    clearTimeout(this.#phase);
    if (this.#draining) {
      clearTimeout(this.#draining);
      return;
    }
    const t = this.#text;
    if (t) {
      this.#text = undefined;
      t.done(t.out + rest);
      return;
    }
    if (rest) this.#queue.push(rest);
    this.#wakeReader();
  }

  onResponseError(_c: Dispatcher.DispatchController | undefined, err: Error): void {
    clearTimeout(this.#timer);
    clearTimeout(this.#phase);
    if (this.#draining) {
      // The answer was whole: its connection's end (or the grace's cut) is nobody's error.
      clearTimeout(this.#draining);
      this.#ended = true;
      return;
    }
    // Nothing of the answer came, nor any timeout or the client's leaving: a stale connection's
    // request is sent once more, on a new one.
    if (this.#retry && this.#reject && this.status === 0 && this.#timedOut === TimedOut.No && !this.#cancel.aborted && staleConnection(err)) {
      const retry = this.#retry;
      this.#retry = this.#resolve = this.#reject = undefined;
      this.#ended = true;
      retry();
      return;
    }
    const e = this.#failure(err);
    if (this.#reject) {
      const reject = this.#reject;
      this.#resolve = this.#reject = undefined;
      reject(e);
      return;
    }
    this.#ended = true;
    this.#error = e;
    const t = this.#text;
    if (t) {
      this.#text = undefined;
      t.fail(e);
    }
    this.#wakeReader();
  }

  get body(): AsyncIterable<string> {
    return this;
  }

  [Symbol.asyncIterator](): AsyncIterator<string> {
    return {
      next: () => this.#next(),
      return: async () => {
        this.dispose();
        return { done: true, value: undefined };
      },
    };
  }

  async #next(): Promise<IteratorResult<string>> {
    for (;;) {
      if (this.#queue.length) {
        const value = this.#queue.shift()!;
        if (this.#controller?.paused && this.#queue.length < HIGH_WATER_CHUNKS / 2) this.#resume();
        return { done: false, value };
      }
      if (this.#error) throw this.#error;
      if (this.#ended) return { done: true, value: undefined };
      await new Promise<void>((r) => (this.#wake = r));
    }
  }

  #wakeReader(): void {
    const w = this.#wake;
    if (w) {
      this.#wake = undefined;
      w();
    }
  }

  text(limit = MAX_ERROR_BODY): Promise<string> {
    const queued = this.#queue.join("");
    this.#queue = [];
    if (this.#error) return Promise.reject(this.#error);
    if (queued.length > limit) {
      this.dispose();
      return Promise.resolve(queued);
    }
    if (this.#ended) return Promise.resolve(queued);
    return new Promise((done, fail) => {
      this.#text = { out: queued, limit, done, fail };
      // Only now: a resumed connection may hand over the rest of the body, and its end, at once.
      if (this.#controller?.paused) this.#resume();
    });
  }

  /** Resumes a paused upstream; the idle time starts again (it did not count while we were behind). */
  #resume(): void {
    this.#controller!.resume();
    this.#phase?.refresh();
  }

  finishAnswer(graceMs = FINISH_GRACE_MS): void {
    if (this.#ended || this.#draining) return;
    clearTimeout(this.#timer);
    clearTimeout(this.#phase);
    this.#queue = [];
    this.#draining = setTimeout(Exchange.#cut, graceMs, this);
    this.#draining.unref();
    if (this.#controller?.paused) this.#controller.resume();
  }

  static #cut(ex: Exchange): void {
    ex.#ended = true;
    if (ex.#controller && !ex.#controller.aborted) ex.#controller.abort(new ClientGone("answer complete; the rest of the body did not come"));
  }

  dispose(): void {
    if (this.#draining) return;
    clearTimeout(this.#timer);
    clearTimeout(this.#phase);
    if (this.#ended) return;
    this.#ended = true;
    if (this.#controller && !this.#controller.aborted) this.#controller.abort(new ClientGone("response disposed"));
  }

  /**
   * Maps a transport failure to the core's error: timeouts 504, client gone Canceled, and otherwise
   * 502: `upstream_unreachable` when no response had started, `upstream_stream_incomplete` when the
   * upstream had answered (its status and perhaps part of the body) and then broke the connection.
   */
  #failure(e: unknown): ConnectError {
    if (e instanceof ConnectError) return e;
    if (e instanceof ClientGone || this.#cancel.aborted) {
      const sent = this.#sent ? { [SENT_UPSTREAM]: "1" } : undefined;
      if (this.#cancel.deadlinePassed) return new ConnectError("the call's deadline passed before the upstream's answer was complete", Code.DeadlineExceeded, sent);
      return new ConnectError("client closed the request", Code.Canceled, sent);
    }
    const timedOut = this.#timedOut;
    if (e instanceof undiciErrors.ConnectTimeoutError) return apiError(504, "api_error", "upstream_timeout", "Timed out connecting to the upstream provider.");
    // A timeout after the request went out: the upstream has the prompt and bills it, as when a
    // client leaves (SENT_UPSTREAM tells the gateway to charge it).
    const late = (message: string) => {
      const err = apiError(504, "api_error", "upstream_timeout", message);
      if (this.#sent) err.metadata.set(SENT_UPSTREAM, "1");
      return err;
    };
    if (e instanceof TotalTimeout || timedOut === TimedOut.Total) return late("The upstream provider did not finish within the total timeout.");
    if (timedOut === TimedOut.FirstByte || e instanceof undiciErrors.HeadersTimeoutError) return late("The upstream provider did not start answering in time.");
    if (timedOut === TimedOut.Idle || e instanceof undiciErrors.BodyTimeoutError) return late("The upstream provider stopped sending data (idle timeout).");
    if (this.status !== 0) return apiError(502, "api_error", "upstream_stream_incomplete", "The upstream provider closed the connection before the answer was complete.");
    if (outOfDescriptors(e)) return gatewayOutOfDescriptors(e);
    // The reason (refused, DNS, TLS) is for the server's log (proxy-service's operator warning), not the client.
    return Object.assign(apiError(502, "api_error", "upstream_unreachable", "The upstream provider could not be reached or closed the connection before answering."), { cause: e });
  }
}

/** Whether a failed connection failed for want of file descriptors in this process (EMFILE) or the system (ENFILE). */
const outOfDescriptors = (e: unknown): boolean => {
  for (let c: unknown = e, depth = 0; c instanceof Error && depth < 4; c = c.cause, depth++) {
    const code = (c as NodeJS.ErrnoException).code;
    if (code === "EMFILE" || code === "ENFILE") return true;
  }
  return false;
};

const descriptorsLogged = atMostEvery(60_000);

/**
 * The gateway's own limit, not the upstream's: 503 with a retry a second later, and the operator
 * told (at most once a minute) which limit to raise, rather than a 502 that blames the provider.
 */
function gatewayOutOfDescriptors(e: unknown): ConnectError {
  if (descriptorsLogged()) log.error("out of file descriptors: an upstream connection could not be opened; raise the open-files limit (ulimit -n, LimitNOFILE)", { err: String((e as Error)?.message ?? e) });
  return withRetryGuidance(apiError(503, "api_error", "gateway_overloaded", "The gateway has no connection to spare right now; retry shortly."), { "retry-after": "1" });
}
