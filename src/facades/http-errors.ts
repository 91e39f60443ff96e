import type { IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Middleware } from "koa";
import { apiError, invalidApiKey, retryGuidanceOf, toErrorBody, toErrorInfo, withRetryGuidance, type ErrorInfo } from "../core/errors.js";
import { log } from "../logger.js";
import { cutText } from "../core/text.js";

/**
 * The one place errors become HTTP: any thrown value turns into the spec's error object (section
 * 2.6) with its status. Internal errors are logged with the request id and reach the client only as
 * a generic 500. An error's retry guidance (`Retry-After` of a 503) is sent as headers. `onError`
 * lets a facade add its own headers.
 *
 * A request answered before its body was all read (refused: no key, an unknown path, a wrong
 * method; none of these apps reads a body) is answered so that the answer reaches a client still
 * writing the body (`answerBeforeBody`; the gateway's own answers do the same, `writeError` in
 * respond.ts).
 */
export function errorMiddleware(onError?: (info: ErrorInfo, headers: Record<string, string>) => void): Middleware {
  return async (ctx, next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined && ctx.respond !== false) {
        throw apiError(404, "not_found_error", "unknown_endpoint", `No endpoint ${ctx.method} ${ctx.path}.`);
      }
    } catch (err) {
      const info = toErrorInfo(err);
      if (info.status >= 500 && info.code === "internal_error") {
        log.error("request failed", { requestId: ctx.response.get("X-Svc-Request-Id") || undefined, path: ctx.path, err: String((err as Error)?.stack ?? err) });
      }
      if (ctx.headerSent || !ctx.writable) return;
      const headers: Record<string, string> = { ...retryGuidanceOf(err), ...challengeOf(info) };
      onError?.(info, headers);
      ctx.set(headers);
      ctx.status = info.status === 499 ? 400 : info.status;
      ctx.type = "application/json";
      ctx.body = JSON.stringify(toErrorBody(info));
    }
    if (ctx.respond !== false && !ctx.headerSent && !ctx.req.complete) {
      // Koa writes the answer once this returns, with the headers answerBeforeBody gives: at once
      // (a connection kept alive, a body declared too large), or once the body is read.
      let headers: Record<string, string> | undefined;
      const answered = answerBeforeBody(ctx.req, ctx.res, (h) => (headers = h));
      if (!headers) await answered;
      ctx.set(headers ?? {});
    }
  };
}

/** A 401's challenge (RFC 9110 11.6.1): both ports take a bearer token. */
export const challengeOf = (info: ErrorInfo): Record<string, string> | undefined => (info.status === 401 ? { "WWW-Authenticate": 'Bearer realm="svc"' } : undefined);

/**
 * 503 `shutting_down` (with `Retry-After: 1`, which the official SDKs wait on before a retry): the
 * gateway is stopping. A request that arrives on an open connection after shutdown began gets it
 * unread; one still running when the shutdown's grace period ends is cut with it (README,
 * "Shutdown").
 */
export const shuttingDown = () =>
  withRetryGuidance(apiError(503, "api_error", "shutting_down", "The gateway is shutting down; retry the request."), { "retry-after": "1" });

/** 405 for a known path with the wrong method. */
export const methodNotAllowed = (method: string, path: string, allow: string) =>
  apiError(405, "invalid_request_error", "method_not_allowed", `${method} is not allowed on ${path}; use ${allow}.`);

/** What `answerClientError` answered on a socket, kept on it for the request whose body broke off. */
const ANSWERED = Symbol("svc.clientErrorAnswer");
/** The request id of the request a response answers, for an answer written on its socket instead. */
const REQUEST_ID = Symbol("svc.requestId");
/**
 * What a refused request's body may take to come in (`answerBeforeBody`): at most this many bytes,
 * this long, and never slower than this rate over a second.
 */
export const LINGER_LIMITS = { bytes: 64 * 1024 * 1024, ms: 10_000, minBytesPerSecond: 16 * 1024 };

/** A socket whose refused request's body is being read and dropped (answerClientError leaves it be). */
const LINGERING = Symbol("svc.lingering");

/**
 * Reads and drops the rest of a request's body. Resolves true once it has ended, false when it went
 * past LINGER_LIMITS (too large, too long, or trickled in slower than the rate, as a slowloris
 * would) or its client left. Never rejects.
 */
function readRestOfBody(req: IncomingMessage, limits: typeof LINGER_LIMITS): Promise<boolean> {
  if (req.complete) return Promise.resolve(true);
  if (req.destroyed) return Promise.resolve(false);
  const socket = req.socket as IncomingMessage["socket"] & { [LINGERING]?: boolean };
  socket[LINGERING] = true;
  return new Promise((resolve) => {
    const t0 = Date.now();
    let total = 0;
    let recent = 0;
    const finish = (ended: boolean) => {
      clearInterval(timer);
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onGone);
      socket.off("close", onGone);
      socket[LINGERING] = false;
      resolve(ended);
    };
    const onEnd = () => finish(true);
    const onGone = () => finish(false);
    const onData = (chunk: Buffer) => {
      total += chunk.length;
      recent += chunk.length;
      if (total > limits.bytes) finish(false);
    };
    const timer = setInterval(() => {
      if (Date.now() - t0 >= limits.ms || recent < limits.minBytesPerSecond) finish(false);
      recent = 0;
    }, 1000);
    timer.unref();
    req.on("data", onData);
    req.once("end", onEnd);
    req.once("error", onGone);
    socket.once("close", onGone);
    req.resume();
  });
}

/**
 * Answers a request whose body has not all been read (refused: too large, a bad key, an unknown
 * path) so that the answer reaches a client still writing that body: closing a connection under
 * such a client makes the kernel answer the unread bytes with a reset, which takes the answer with
 * it (the SDKs saw a connection error instead of the 400 or 401, and sent the whole body again).
 * `answer` is called with the headers to add (`Connection: close` or none).
 * - On a connection kept alive, the answer goes at once, and the rest of the body is read and
 *   dropped; past LINGER_LIMITS the connection is destroyed rather than waited on until the
 *   request timeout. Once the body has ended, node:http reads the connection's next request.
 * - On a connection that closes after its answer (`Connection: close`, HTTP/1.0), the body is
 *   read first (within the same limits), then the answer is written, and node:http closes it.
 * - A body declared larger than LINGER_LIMITS is not waited for: answered at once with
 *   `Connection: close`.
 * Resolves once the answer is written (or could not be), not waiting for a body read after it.
 * Never rejects.
 */
export async function answerBeforeBody(req: IncomingMessage, res: ServerResponse, answer: (headers: Record<string, string>) => void, limits = LINGER_LIMITS): Promise<void> {
  if (req.complete) return answer({});
  if (!(Number(req.headers["content-length"] ?? 0) <= limits.bytes)) return answer({ Connection: "close" });
  if (res.shouldKeepAlive) {
    answer({});
    // The rest of the body is read off the request's path: it is answered (and logged) now.
    void readRestOfBody(req, limits).then((ended) => {
      if (!ended) req.socket.destroy();
    });
    return;
  }
  await readRestOfBody(req, limits);
  if (!res.headersSent && !res.destroyed) answer(req.complete ? {} : { Connection: "close" });
}

/** Set on a socket whose bad request waits for the answer of the whole request before it. */
const BEHIND = Symbol("svc.badRequestBehind");

/**
 * Files a response's request id, so that an answer `answerClientError` writes on its socket for
 * it (its body broke off or timed out) carries the same id as the request's log.
 */
export function fileRequestId(res: object, requestId: string): void {
  (res as { [REQUEST_ID]?: string })[REQUEST_ID] = requestId;
}

/** The request in progress on a socket: its response, and the request (whether it came in whole). */
type InFlight = { [REQUEST_ID]?: string; headersSent?: boolean; writableFinished?: boolean; req?: { complete?: boolean }; once(event: "finish" | "close", fn: () => void): unknown };
const inFlight = (socket: Duplex): InFlight | null | undefined => (socket as Duplex & { _httpMessage?: InFlight | null })._httpMessage;

/**
 * The request id filed for the request being read on a socket, if any: a request whose body is
 * still coming in. A request that came in whole is not the one a parse error is about.
 */
export function requestIdOnSocket(socket: Duplex): string | undefined {
  const res = inFlight(socket);
  return res?.req?.complete ? undefined : res?.[REQUEST_ID];
}

/**
 * The error a request's broken-off body stands for: what `answerClientError` told the client on its
 * socket (400 malformed_request, 408 request_timeout), or, when nothing could be told (the client
 * reset the connection), the client gone (Canceled: logged 499).
 */
export function bodyBrokenOff(socket: Duplex | null): ConnectError {
  const info = (socket as (Duplex & { [ANSWERED]?: ErrorInfo }) | null)?.[ANSWERED];
  return info ? apiError(info.status, info.type, info.code, info.message) : new ConnectError("the client closed the request before its body was read", Code.Canceled);
}

/** The error body `answerClientError` wrote on a socket, for the log of the request it answered. */
export function answeredBody(socket: Duplex | null): string | undefined {
  const info = (socket as (Duplex & { [ANSWERED]?: ErrorInfo }) | null)?.[ANSWERED];
  return info && JSON.stringify(toErrorBody(info));
}

/**
 * Answers a request that node:http could not parse or wait for (the `clientError` event) in the
 * spec's error shape instead of Node's bare status line: 431 when the header block passes Node's
 * limit (`--max-http-header-size`, 16 KiB by default), 408 when the request took longer than the
 * server's request timeout, 400 for anything else malformed; `headers` added. The connection is
 * then destroyed, as Node does (what follows on it cannot be trusted, and a half-open socket would
 * otherwise stay). A socket already reset, or one whose failing request's response has begun, is
 * only destroyed: an answer written there would be read as part of that response. A bad request
 * pipelined behind a whole one that is still being answered waits for that answer, then gets its
 * own, then the connection closes.
 */
export function answerClientError(err: Error & { code?: string }, socket: Duplex, headers: Record<string, string> = {}): void {
  const stash = socket as Duplex & { [ANSWERED]?: ErrorInfo; [BEHIND]?: boolean };
  // Already waiting to answer a bad request pipelined behind a whole one (Node raises an error per
  // chunk that follows).
  if (stash[BEHIND]) return;
  // The response on the socket, if any: the failing request's own (a body that timed out or broke
  // off), or, when that request came in whole, the one before a pipelined bad request.
  const res = inFlight(socket);
  // The body of a request already answered breaks while it is read and dropped (answerBeforeBody):
  // that request has its answer, and another here would be read as the next request's.
  if ((socket as Duplex & { [LINGERING]?: boolean })[LINGERING] && !res) {
    socket.destroy();
    return;
  }
  if (err.code === "ECONNRESET" || !socket.writable) {
    socket.destroy();
    return;
  }
  // A connection that sent nothing at all (a client's pool opened it and never used it) is closed
  // without an answer: a 408 would be read as the answer to the request it might send next.
  if (err.code === "ERR_HTTP_REQUEST_TIMEOUT" && !res && (socket as Duplex & { bytesRead?: number }).bytesRead === 0) {
    socket.destroy();
    return;
  }
  if (res?.req?.complete) {
    // A whole request is still being answered, and a bad one came in behind it: the whole one gets
    // its answer, then the bad one its error, then the connection closes. (Cutting the connection
    // here would lose an answer its client is owed, and that the log says was given.)
    stash[BEHIND] = true;
    answerAfter(res, socket, () => answerClientErrorNow(err, socket, headers));
    return;
  }
  if (res?.headersSent) {
    socket.destroy();
    return;
  }
  answerClientErrorNow(err, socket, headers);
}

/**
 * Answers a bad request (`answer`) once the answers before it are out: `res`'s, then those of the
 * requests pipelined between (each is given the socket, and served, when the one before it is out:
 * server.ts), so the error is read as the bad request's own. A connection lost meanwhile is closed.
 */
function answerAfter(res: InFlight, socket: Duplex, answer: () => void): void {
  res.once("finish", () => {
    const next = inFlight(socket);
    if (next && next !== res && !next.writableFinished) answerAfter(next, socket, answer);
    else answer();
  });
  res.once("close", () => {
    if (!res.writableFinished) socket.destroy();
  });
}

function answerClientErrorNow(err: Error & { code?: string }, socket: Duplex, headers: Record<string, string>): void {
  const stash = socket as Duplex & { [ANSWERED]?: ErrorInfo };
  // The answer before it may have closed the connection (`Connection: close`).
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const [info, reason]: [ErrorInfo, string] =
    err.code === "HPE_HEADER_OVERFLOW"
      ? [{ status: 431, type: "invalid_request_error", code: "headers_too_large", message: "The request's headers (with its request line and URL) are too large." }, "Request Header Fields Too Large"]
      : err.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? [{ status: 408, type: "invalid_request_error", code: "request_timeout", message: "The request was not received in time." }, "Request Timeout"]
        : [{ status: 400, type: "invalid_request_error", code: "malformed_request", message: "The request is not valid HTTP/1.1." }, "Bad Request"];
  stash[ANSWERED] = info;
  writeRawError(socket, info, reason, headers);
}

/**
 * Answers a CONNECT (node:http's `connect` event hands its socket over) with `info`, as
 * answerClientError answers a bad request: after the answers of the requests before it on the
 * connection, when it came pipelined behind one still being answered (written at once, it would
 * be read as that one's answer, which would be lost).
 */
export function answerHandedOver(socket: Duplex, info: ErrorInfo, reason: string, headers: Record<string, string>): void {
  const write = () => {
    // The answer before it may have closed the connection (`Connection: close`).
    if (!socket.writable) socket.destroy();
    else writeRawError(socket, info, reason, headers);
  };
  const res = inFlight(socket);
  if (res && !res.writableFinished) answerAfter(res, socket, write);
  else write();
}

/**
 * Writes an error in the spec's shape straight on a socket that no ServerResponse speaks for (a
 * request node:http could not parse, a CONNECT), then closes the connection.
 */
export function writeRawError(socket: Duplex, info: ErrorInfo, reason: string, headers: Record<string, string>): void {
  const body = JSON.stringify(toErrorBody(info));
  const lines = [
    `HTTP/1.1 ${info.status} ${reason}`,
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    "Content-Type: application/json; charset=utf-8",
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Connection: close",
  ];
  // Ended first, so a further error on the socket (Node raises one per chunk that follows) finds it
  // no longer writable and answers nothing twice; destroyed once written.
  socket.end(`${lines.join("\r\n")}\r\n\r\n${body}`, () => socket.destroy());
}

/**
 * A request whose framing node:http lets through but this server does not take, or undefined:
 * HTTP/1.1 without `Host` (node:http's own refusal had no body) or with two (RFC 9112 3.2: a
 * proxy in front may have read the other one), and a transfer coding other than
 * `chunked` (`gzip, chunked`: node:http reads the chunks and hands on the compressed bytes as the
 * body). Answered with the connection closed, as a request whose framing is in doubt must be.
 */
export function framingRefusal(req: IncomingMessage): ErrorInfo | undefined {
  if (req.httpVersion === "1.1" && req.headers.host === undefined) {
    return { status: 400, type: "invalid_request_error", code: "malformed_request", message: "An HTTP/1.1 request must carry a Host header." };
  }
  if (headerLines(req.rawHeaders, "host") > 1) {
    return { status: 400, type: "invalid_request_error", code: "malformed_request", message: "A request must carry one Host header, not several." };
  }
  const te = req.headers["transfer-encoding"];
  if (te !== undefined && te.trim().toLowerCase() !== "chunked") {
    return { status: 400, type: "invalid_request_error", code: "unsupported_transfer_encoding", message: `Transfer-Encoding '${cutText(te, 100)}' is not supported: send the body uncompressed, as is or chunked.` };
  }
  return undefined;
}

/**
 * How many lines of the header `name` (lower case) a request's raw headers hold: Node's `headers`
 * joins repeats of most (two X-Svc-User-Id read "a, b") and keeps the first of some (Host,
 * Authorization), so neither shows there how many came.
 */
export function headerLines(raw: string[], name: string): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]!;
    if (k.length === name.length && k.toLowerCase() === name) n++;
  }
  return n;
}

/**
 * The paths of both APIs, which need a key whatever their method (spec 5.1), a path neither serves
 * included: the routers match them without regard to case.
 */
export const V1_PATH = /^\/v1(\/|$)/i;

/**
 * Two Authorization headers, whatever each holds, are refused 401 on both APIs, as two keys in
 * X-Svc-Api-Key or x-api-key (which Node joins) are: Node would keep the first and drop the other.
 */
export function refuseRepeatedAuthorization(req: IncomingMessage): void {
  if (headerLines(req.rawHeaders, "authorization") > 1) throw invalidApiKey("Invalid API key: the Authorization header was sent more than once; send the key once.");
}

/** `framingRefusal`'s answer, and the 417 of an `Expect` other than 100-continue: the error, then the connection closed. */
export function writeRefusal(res: ServerResponse, info: ErrorInfo, headers: Record<string, string> = {}): void {
  const body = JSON.stringify(toErrorBody(info));
  res.shouldKeepAlive = false;
  res.writeHead(info.status, { ...headers, "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Files the answer someone other than the request's handler gave the request still being read on
 * `socket` (the shutdown's cut, while its body was arriving), as answerClientError files its own:
 * the handler's read of the body then fails with that answer (bodyBrokenOff), which its log records.
 */
export function fileAnswer(socket: Duplex, info: ErrorInfo): void {
  (socket as Duplex & { [ANSWERED]?: ErrorInfo })[ANSWERED] = info;
}

