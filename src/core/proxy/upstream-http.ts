import { Agent, errors as undiciErrors, type Dispatcher } from "undici";
import { ConnectError, Code } from "@connectrpc/connect";
import type { Timeouts } from "../../config.js";
import { apiError } from "../errors.js";
import type { UpstreamHttpRequest } from "./upstreams/adapter.js";

/** An upstream response: status and a body to read as text chunks. */
export interface UpstreamResponse {
  status: number;
  body: AsyncIterable<string>;
  /** Reads the whole body as text, up to `limit` characters (more is cut off). */
  text(limit?: number): Promise<string>;
  /** Stops reading and releases the connection. */
  dispose(): void;
}

/** Sends adapter-built requests upstream over keep-alive pools, with the configured timeouts. */
export interface UpstreamHttp {
  send(req: UpstreamHttpRequest, signal: AbortSignal): Promise<UpstreamResponse>;
  close(): Promise<void>;
}

const MAX_ERROR_BODY = 64 * 1024;

/**
 * One undici Agent (a keep-alive pool per origin) for all upstreams. `headersTimeout` is the
 * first-byte timeout, `bodyTimeout` the idle-stream timeout; the total timeout is a signal.
 */
export function createUpstreamHttp(timeouts: Timeouts): UpstreamHttp {
  const agent = new Agent({
    connect: { timeout: timeouts.connectMs },
    headersTimeout: timeouts.firstByteMs,
    bodyTimeout: timeouts.idleMs,
    keepAliveTimeout: 30_000,
    connections: 256,
    pipelining: 1,
  });

  return {
    async send(req, clientSignal) {
      // One controller and one timer per request: AbortSignal.timeout + AbortSignal.any cost several
      // times more on this hot path and keep their signals alive until a full GC.
      const controller = new AbortController();
      const total = { aborted: false };
      const timer = setTimeout(() => {
        total.aborted = true;
        controller.abort();
      }, timeouts.totalMs);
      const onClientAbort = () => controller.abort();
      if (clientSignal.aborted) controller.abort();
      else clientSignal.addEventListener("abort", onClientAbort, { once: true });
      const release = () => {
        clearTimeout(timer);
        clientSignal.removeEventListener("abort", onClientAbort);
      };
      let res: Dispatcher.ResponseData;
      try {
        const url = new URL(req.url);
        res = await agent.request({ origin: url.origin, path: url.pathname + url.search, method: "POST", headers: req.headers, body: req.body, signal: controller.signal });
      } catch (e) {
        release();
        throw upstreamFailure(e, total, clientSignal);
      }
      const body = res.body;
      body.once("close", release);
      // Decoded as a stream so a multi-byte character split across two chunks stays whole.
      const decoder = new TextDecoder();
      const decode = (chunk: Buffer | string): string => (typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true }));
      return {
        status: res.statusCode,
        body: (async function* () {
          try {
            for await (const chunk of body) yield decode(chunk);
          } catch (e) {
            throw upstreamFailure(e, total, clientSignal);
          }
        })(),
        async text(limit = MAX_ERROR_BODY) {
          let out = "";
          try {
            for await (const chunk of body) {
              out += decode(chunk);
              if (out.length > limit) {
                body.destroy();
                break;
              }
            }
          } catch (e) {
            throw upstreamFailure(e, total, clientSignal);
          }
          return out;
        },
        dispose() {
          if (!body.destroyed) body.destroy();
        },
      };
    },
    close: () => agent.close(),
  };
}

/** Maps a transport failure to the core's error: timeouts 504, unreachable 502, client gone Canceled. */
function upstreamFailure(e: unknown, total: { aborted: boolean }, client: AbortSignal): ConnectError {
  if (e instanceof ConnectError) return e;
  if (client.aborted) return new ConnectError("client closed the request", Code.Canceled);
  if (total.aborted) return apiError(504, "api_error", "upstream_timeout", "The upstream provider did not finish within the total timeout.");
  if (e instanceof undiciErrors.ConnectTimeoutError) return apiError(504, "api_error", "upstream_timeout", "Timed out connecting to the upstream provider.");
  if (e instanceof undiciErrors.HeadersTimeoutError) return apiError(504, "api_error", "upstream_timeout", "The upstream provider did not start answering in time.");
  if (e instanceof undiciErrors.BodyTimeoutError) return apiError(504, "api_error", "upstream_timeout", "The upstream provider stopped sending data (idle timeout).");
  return apiError(502, "api_error", "upstream_unreachable", "The upstream provider could not be reached or closed the connection.");
}
