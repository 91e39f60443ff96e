import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/**
 * The core's gRPC port serves internal services and the admin CLI; every call must carry the admin
 * credential as `authorization: Bearer <token>`. Tokens are compared through their hashes so the
 * comparison takes the same time whatever the guess.
 */
export function adminTokenCheck(token: string): (authorization: string | undefined) => boolean {
  const expected = createHash("sha256").update(token).digest();
  return (authorization) => {
    const m = /^Bearer\s+(\S+)$/i.exec(authorization ?? "");
    const given = createHash("sha256").update(m?.[1] ?? "").digest();
    return m !== null && timingSafeEqual(given, expected);
  };
}

const REFUSED = "missing or invalid admin token";

/** The check as a Connect interceptor: what a call that reached the services meets. */
export function adminAuthInterceptor(token: string): Interceptor {
  const ok = adminTokenCheck(token);
  return (next) => async (req) => {
    if (!ok(req.header.get("authorization") ?? undefined)) throw new ConnectError(REFUSED, Code.Unauthenticated);
    return next(req);
  };
}

/**
 * Answers a call without the admin token before its body is read (Connect reads a unary call's whole
 * body before any interceptor runs, so a caller without the token could make the port buffer a
 * large one): UNAUTHENTICATED in the shape of the call's protocol, as Connect itself would answer
 * it (refuseCall).
 */
export function refuseUnauthenticated(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse): void {
  refuseCall(req, res, Code.Unauthenticated, REFUSED);
}

/** The HTTP status of a Connect unary error, by code (the Connect protocol's table), for those refuseCall gives. */
const CONNECT_HTTP_STATUS: Partial<Record<Code, number>> = { [Code.Unauthenticated]: 401, [Code.Unavailable]: 503, [Code.InvalidArgument]: 400 };
const CODE_NAME: Partial<Record<Code, string>> = { [Code.Unauthenticated]: "unauthenticated", [Code.Unavailable]: "unavailable", [Code.InvalidArgument]: "invalid_argument" };

/**
 * Answers a call, unrun, with an error in the shape of its protocol, as Connect itself would answer
 * it. gRPC: a trailers-only answer; gRPC-Web: the status in the headers; Connect streaming: an
 * end-stream message; Connect unary and anything else: the code's HTTP status with Connect's JSON
 * error. The rest of the body is read and dropped, never kept: closing the connection (HTTP/1.1) or
 * resetting the stream (HTTP/2) instead fails a client still writing its body (EPIPE, "premature
 * close") before it reads the answer. A body that trickles in is cut by the request timeout.
 */
export function refuseCall(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse, code: Code.Unauthenticated | Code.Unavailable | Code.InvalidArgument, message: string): void {
  const ct = String(req.headers["content-type"] ?? "");
  const h2 = "stream" in res;
  const grpcStatus = { "grpc-status": String(code), "grpc-message": encodeURIComponent(message) };
  const name = CODE_NAME[code]!;
  if (/^application\/grpc-web/i.test(ct)) {
    send(res, 200, { "content-type": ct, ...grpcStatus }, undefined);
  } else if (/^application\/grpc/i.test(ct)) {
    if (h2) {
      const stream = (res as Http2ServerResponse).stream;
      stream.respond({ ":status": 200, "content-type": ct, ...grpcStatus }, { endStream: true });
      drain(req);
      return;
    }
    send(res, 200, { "content-type": ct, ...grpcStatus }, undefined);
  } else if (/^application\/connect\+/i.test(ct)) {
    const json = Buffer.from(JSON.stringify({ error: { code: name, message } }));
    const end = Buffer.alloc(5 + json.length);
    end[0] = 0b10; // end-stream flag
    end.writeUInt32BE(json.length, 1);
    json.copy(end, 5);
    send(res, 200, { "content-type": ct }, end);
  } else {
    send(res, CONNECT_HTTP_STATUS[code]!, { "content-type": "application/json" }, Buffer.from(JSON.stringify({ code: name, message })));
  }
  drain(req);
}

function send(res: ServerResponse | Http2ServerResponse, status: number, headers: Record<string, string>, body: Buffer | undefined): void {
  const all: Record<string, string | number> = { ...headers, "content-length": body?.length ?? 0 };
  (res as ServerResponse).writeHead(status, all);
  (res as ServerResponse).end(body);
}

/** Reads and drops the rest of a refused call's body: resetting the stream instead fails a client still sending it ("premature close") before it reads the answer. */
function drain(req: IncomingMessage | Http2ServerRequest): void {
  if (!req.readableEnded) req.resume();
}
