import { DEFAULT_SEND_STALL_MS } from "./drained.js";
import type { Server } from "node:http";

/**
 * How long a client may take to send a request, on each of the three ports (README, "Errors" and
 * "The core port"). They time out slow requests, never slow answers: a long stream out (SSE, a gRPC
 * server stream) is not cut by any of them.
 */
export interface ClientTimeouts {
  /**
   * The request line and headers (HTTP/1.1), or an HTTP/2 connection's preface, settings and first
   * request's headers, must have arrived within this long: 408 `request_timeout` (HTTP/1.1), the
   * connection closed (HTTP/2).
   */
  headersMs: number;
  /** The whole request, body included: 408 `request_timeout` (HTTP/1.1), the stream reset (HTTP/2). */
  requestMs: number;
  /** A connection with no request in progress (HTTP/1.1 keep-alive, HTTP/2 without streams) is closed after this long. */
  idleMs: number;
  /** How often node:http checks `headersMs` and `requestMs` (each fires up to this much late). */
  checkIntervalMs: number;
  /**
   * An answer's client that takes none of its bytes for this long (a stalled reader, not a slow
   * one) has its connection closed, as nginx's `send_timeout` (gateway port: src/drained.ts).
   */
  sendStallMs: number;
}

export const DEFAULT_CLIENT_TIMEOUTS: ClientTimeouts = {
  headersMs: 60_000,
  requestMs: 300_000,
  // Longer than common load balancers' idle timeout.
  idleMs: 65_000,
  checkIntervalMs: 5_000,
  sendStallMs: DEFAULT_SEND_STALL_MS,
};

/** `DEFAULT_CLIENT_TIMEOUTS` with some replaced (tests shorten them). */
export const clientTimeouts = (t?: Partial<ClientTimeouts>): ClientTimeouts => ({ ...DEFAULT_CLIENT_TIMEOUTS, ...t });

/**
 * Makes a node:http server enforce `t`; before it listens (the check interval is read then). Node's
 * own defaults are 60 s, 300 s and 5 s, checked every 30 s.
 */
export function applyClientTimeouts(server: Server, t: ClientTimeouts): void {
  server.headersTimeout = t.headersMs;
  server.requestTimeout = t.requestMs;
  server.keepAliveTimeout = t.idleMs;
  (server as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval = t.checkIntervalMs;
}
