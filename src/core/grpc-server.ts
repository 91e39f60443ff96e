import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { Code, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { refuseCall, refuseUnauthenticated } from "./admin-auth.js";
import { bounded, MAX_ERROR_MESSAGE_CHARS } from "./errors.js";
import { isObject } from "./json.js";
import { cutMarked } from "./text.js";
import { applyClientTimeouts, clientTimeouts, type ClientTimeouts } from "../client-timeouts.js";
import { answerClientError } from "../facades/http-errors.js";

export interface CoreServer {
  server: net.Server;
  close(): Promise<void>;
}

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/**
 * Serves the core over gRPC, Connect and gRPC-Web on one port. HTTP/2 without TLS (h2c, what gRPC
 * clients speak) and HTTP/1.1 (Connect and gRPC-Web from curl or browsers) share it: the first bytes
 * of each connection tell the HTTP/2 preface from an HTTP/1 request line.
 *
 * Slow requests are timed out as on the HTTP ports (`timeouts`, README "The core port"), slow
 * answers never (a StreamChat may stream for minutes): a connection that sends nothing within
 * `headersMs` is closed; HTTP/1.1 gets node:http's timeouts and the 408 of the HTTP ports; an HTTP/2
 * connection without a stream open (its preface, settings or first headers not in yet, or idle
 * after its last stream) is closed after `headersMs` (before its first stream) or `idleMs`, and a
 * stream whose request has not come in whole within `requestMs` is reset.
 */
export interface CoreServerOptions {
  /**
   * Whether a call's `authorization` header is good. A call whose header is not is refused before
   * its body is read (admin-auth.ts `refuseUnauthenticated`); undefined lets every call through
   * (the interceptors may still check).
   */
  authorize?: (authorization: string | undefined) => boolean;
  /** The largest request message read, in bytes; larger ones are refused (RESOURCE_EXHAUSTED) as they come in. */
  readMaxBytes?: number;
}

export function createCoreServer(routes: (router: ConnectRouter) => void, interceptors: Interceptor[], timeouts?: Partial<ClientTimeouts>, opts: CoreServerOptions = {}): CoreServer {
  const t = clientTimeouts(timeouts);
  // JSON requests (Connect and gRPC-Web in JSON) with a field or enum name the services do not know
  // are refused, INVALID_ARGUMENT naming it, rather than Connect's default of dropping it: an admin
  // call whose change sits under a misspelt name (`requestsPerMinuet`, `PLAN_GOLD`) would otherwise
  // succeed having changed nothing. Binary protobuf keeps protobuf's own rule (unknown fields kept).
  // Bytes that are not UTF-8 in a JSON request are refused (INVALID_ARGUMENT) rather than read with
  // U+FFFD in their place, as the HTTP endpoints refuse such a body.
  const jsonOptions = { ignoreUnknownFields: false, textDecoder: new TextDecoder("utf-8", { fatal: true }) };
  const connect = connectNodeAdapter({ routes, interceptors, jsonOptions, ...(opts.readMaxBytes ? { readMaxBytes: opts.readMaxBytes } : {}) });
  const authorize = opts.authorize;
  // A call answered before its body was all read (a message over readMaxBytes is refused as soon as
  // its length prefix says so): the rest is read and dropped once the answer is out, as for a call
  // refused unauthenticated, so that a client still sending it is not held by flow control until
  // the request timeout. (On the answer's end() rather than its `finish`: an HTTP/2 response
  // finishes only when its stream closes, which waits for the body.)
  const served: typeof connect = (req, res) => {
    gentlerGrpcMessage(res);
    const end = res.end as (...args: unknown[]) => unknown;
    (res as { end: unknown }).end = function (this: unknown, ...args: unknown[]) {
      const done = end.apply(this, args);
      dropRest(req);
      return done;
    };
    try {
      return connect(req, res);
    } catch (e) {
      // Connect reads the call's URL from its authority before anything else, and throws where
      // there is none it can use (HTTP/1.0 without Host, an empty Host, `:authority: [`): thrown
      // from a request listener, that ended the process. The call is refused, unrun.
      if (res.headersSent) return void res.destroy();
      refuseCall(req, res as Parameters<typeof refuseCall>[1], Code.InvalidArgument, `the call cannot be read: ${cutMarked(String((e as Error)?.message ?? e), 200)}`);
    }
  };
  const handler: typeof connect = authorize
    ? (req, res) => {
        if (authorize(req.headers.authorization)) return served(req, res);
        refuseUnauthenticated(req, res as Parameters<typeof refuseUnauthenticated>[1]);
      }
    : served;
  const h2 = http2.createServer({}, handler);
  // A call that comes in on an HTTP/1.1 connection once the shutdown has begun (a keep-alive
  // client's next call, sent as its connection was being closed) is not run: its answer could not
  // be sent on a connection the port has ended, and one that ran unanswered (a key created) would
  // be lost to its client. It is refused, UNAVAILABLE (safe to retry elsewhere), where the
  // connection can still take it, with `Connection: close`; HTTP/2 clients get GOAWAY instead.
  const h1 = http.createServer((req, res) => {
    if (!closing) return handler(req, res);
    if (req.socket.writableEnded) return void req.socket.destroy();
    res.shouldKeepAlive = false;
    refuseCall(req, res, Code.Unavailable, "the server is shutting down; retry the call (it was not run)");
  });
  applyClientTimeouts(h1, t);
  h1.on("clientError", (err: Error, socket) => answerClientError(err, socket));
  const sessions = new Set<http2.ServerHttp2Session>();
  // HTTP/1 sockets handed over by the sniffer are not tracked by `h1` (it never listens), so
  // idle keep-alive connections are tracked here to close them at shutdown.
  const h1Sockets = new Set<net.Socket>();
  let closing = false;
  h1.on("connection", (socket: net.Socket) => {
    h1Sockets.add(socket);
    socket.once("close", () => h1Sockets.delete(socket));
  });
  // The answers being made on HTTP/1.1, whose connections are busy: at the shutdown those whose
  // headers have not gone out say `Connection: close`, so their clients send no next call on the
  // connection, and the connections without one are closed at once.
  const answering = new Set<http.ServerResponse>();
  h1.on("request", (req, res) => {
    answering.add(res);
    res.once("close", () => {
      answering.delete(res);
      if (closing) req.socket.end();
    });
  });
  h2.on("session", (s) => {
    sessions.add(s);
    // Armed while the session has no stream open: before its first (preface, settings and headers
    // must come in within `headersMs`), and after its last (idle for `idleMs`).
    let timer: NodeJS.Timeout | undefined;
    let open = 0;
    const arm = (ms: number) => {
      timer = setTimeout(() => {
        s.close();
        // A peer that reads nothing would keep a closing session (its GOAWAY unsent) open.
        setTimeout(() => s.destroy(), 1_000).unref();
      }, ms).unref();
    };
    arm(t.headersMs);
    s.on("stream", (stream: http2.ServerHttp2Stream) => {
      clearTimeout(timer);
      open++;
      stream.once("close", () => {
        if (--open === 0 && !s.closed && !s.destroyed) arm(t.idleMs);
      });
    });
    s.once("close", () => {
      clearTimeout(timer);
      sessions.delete(s);
    });
  });
  // A stream's request (its headers are in) must end within `requestMs`; its answer may take as
  // long as it takes. None of the services takes a stream of requests.
  h2.on("stream", (stream: http2.ServerHttp2Stream) => {
    if (stream.readableEnded) return;
    const timer = setTimeout(() => {
      if (!stream.readableEnded && !stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
    }, t.requestMs).unref();
    stream.once("end", () => clearTimeout(timer));
    stream.once("close", () => clearTimeout(timer));
  });
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    // A connection that sends nothing is closed like one whose headers never come in.
    const silent = setTimeout(() => socket.destroy(), t.headersMs).unref();
    socket.once("readable", function sniff() {
      const head: Buffer | null = socket.read(Math.min(PREFACE.length, socket.readableLength));
      if (head === null) {
        socket.once("readable", sniff);
        return;
      }
      clearTimeout(silent);
      socket.unshift(head);
      const isH2 = head.length > 0 && PREFACE.subarray(0, head.length).equals(head);
      (isH2 ? h2 : h1).emit("connection", socket);
    });
  });
  // node:http checks its timeouts only on a server that listens; `h1` is handed its connections by
  // the sniffer, so its checks start and stop with the port.
  server.on("listening", () => h1.emit("listening"));
  server.once("close", () => h1.close());
  return {
    server,
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        for (const res of answering) if (!res.headersSent) res.shouldKeepAlive = false;
        server.close(() => resolve());
        for (const s of sessions) s.close();
        const busy = new Set([...answering].map((res) => res.req.socket));
        for (const s of h1Sockets) if (!busy.has(s)) s.end();
        // Calls still running after a grace period are cut.
        setTimeout(() => {
          for (const s of sockets) s.destroy();
        }, 2_000).unref();
      }),
  };
}

/** Reads and drops what is left of a call's request body, once its answer is out. */
function dropRest(req: http.IncomingMessage | http2.Http2ServerRequest): void {
  const stream = (req as http2.Http2ServerRequest).stream as http2.ServerHttp2Stream | undefined;
  if (!stream) {
    if (!req.readableEnded && !req.destroyed) req.resume();
    return;
  }
  if (stream.readableEnded || stream.destroyed) return;
  // Connect stops reading by destroying the request, whose HTTP/2 compatibility wrapper then pauses
  // its stream at each chunk it can no longer take: the stream's own data is read instead.
  stream.removeAllListeners("data");
  stream.on("data", () => {});
  stream.resume();
}

/**
 * gRPC's `grpc-message` percent-encoded as the gRPC spec asks (only `%`, and bytes outside printable
 * ASCII: https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md), not as Connect writes it
 * (encodeURIComponent, every reserved character too). The spec lets a client decode either, but
 * grpc-js decodes with decodeURI, which leaves `%2C`, `%3A`, `%2F` in the messages its users see
 * ("one of free%2C pro%2C enterprise"). Rewritten in the headers of a trailers-only answer and in
 * the trailers; gRPC-Web carries its trailers in the body, which its clients decode whole.
 */
function gentlerGrpcMessage(res: { writeHead: unknown; addTrailers: unknown }): void {
  const writeHead = res.writeHead as (this: unknown, ...args: unknown[]) => unknown;
  res.writeHead = function (this: unknown, ...args: unknown[]) {
    reencodeGrpcMessage(args[1]);
    return writeHead.apply(this, args);
  };
  const addTrailers = res.addTrailers as (this: unknown, headers: unknown) => void;
  res.addTrailers = function (this: unknown, headers: unknown) {
    reencodeGrpcMessage(headers);
    return addTrailers.call(this, headers);
  };
}

/**
 * Rewrites a headers object's `grpc-message`, if any, percent-encoding only what the gRPC spec
 * requires, and cut to MAX_ERROR_MESSAGE_CHARS as the core's own messages are: one Connect itself
 * wrote (its JSON decoder quotes an unknown field's name whole) could otherwise pass HTTP/2's
 * header size, which resets the stream and the caller's connection with it.
 */
function reencodeGrpcMessage(headers: unknown): void {
  if (!isObject(headers)) return;
  const v = headers["grpc-message"];
  if (typeof v !== "string" || (!v.includes("%") && v.length <= MAX_ERROR_MESSAGE_CHARS)) return;
  let text: string;
  try {
    text = bounded(decodeURIComponent(v));
  } catch {
    headers["grpc-message"] = bounded(v); // not Connect's encoding: only cut
    return;
  }
  // A run of such characters is whole code points (it came from decodeURIComponent): encodable.
  headers["grpc-message"] = text.replace(/[^\x20-\x24\x26-\x7e]+/g, encodeURIComponent);
}

