import type { Middleware } from "koa";
import { apiError, toErrorBody, toErrorInfo, type ErrorInfo } from "../core/errors.js";
import { log } from "../logger.js";

/**
 * The one place errors become HTTP: any thrown value turns into the spec's error object (section
 * 2.6) with its status. Internal errors are logged with the request id and reach the client only as
 * a generic 500. `onError` lets a facade add its own headers.
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
      const headers: Record<string, string> = {};
      onError?.(info, headers);
      ctx.set(headers);
      ctx.status = info.status === 499 ? 400 : info.status;
      ctx.type = "application/json";
      ctx.body = JSON.stringify(toErrorBody(info));
    }
  };
}

/** 405 for a known path with the wrong method. */
export const methodNotAllowed = (method: string, path: string, allow: string) =>
  apiError(405, "invalid_request_error", "method_not_allowed", `${method} is not allowed on ${path}; use ${allow}.`);
