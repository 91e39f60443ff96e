import type { IncomingMessage, ServerResponse } from "node:http";
import Router from "@koa/router";
import Koa from "koa";
import { ApiStyle } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { newRequestId } from "../../core/ids.js";
import { errorMiddleware, fileRequestId, methodNotAllowed, V1_PATH } from "../http-errors.js";
import { chatCompletionsCodec } from "./chat-completions-codec.js";
import { messagesCodec } from "./messages-codec.js";
import { apiKeyOf } from "./request-input.js";
import { type GatewayDeps, type GatewayState, newGatewayState, serveChat, type Surface } from "./serve-chat.js";

export type { GatewayDeps } from "./serve-chat.js";

const surfaces: Surface[] = [
  { path: "/v1/chat/completions", style: ApiStyle.CHAT_COMPLETIONS, codec: chatCompletionsCodec },
  { path: "/v1/messages", style: ApiStyle.MESSAGES, codec: messagesCodec },
];
const byPath = new Map(surfaces.map((s) => [s.path, s]));

/**
 * The gateway facade: provider-style HTTP in, core calls, provider-style JSON or SSE out. It owns
 * wire compatibility only; every decision is the core's.
 *
 * `POST /v1/chat/completions` and `POST /v1/messages` at their exact paths are served straight from
 * node:http: they are the hot path, and a Koa context, router and middleware chain cost more per
 * request than the rest of the facade (README, "Why two HTTP layers"). Everything else (health,
 * unknown paths, wrong methods, path spellings the router also accepts) goes to the Koa app.
 * The promise it returns settles once the request is done, its log record handed over (the server
 * waits for those at shutdown); it never rejects.
 */
export function createGatewayHandler(deps: GatewayDeps): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const state = newGatewayState();
  const koa = createGatewayApp(deps, state).callback();
  return (req, res) => {
    const s = req.method === "POST" ? byPath.get(req.url!) : undefined;
    if (s) {
      const requestId = newRequestId();
      fileRequestId(res, requestId);
      return serveChat(req, res, s, deps, state, requestId);
    }
    return koa(req, res);
  };
}

/** The Koa app for every gateway request that is not on the hot path. */
export function createGatewayApp(deps: GatewayDeps, state: GatewayState = newGatewayState()): Koa {
  const app = new Koa();
  const router = new Router();

  app.use(async (ctx, next) => {
    // Every response, errors and health included, carries the request id, cache status and cost.
    ctx.state.requestId = newRequestId();
    ctx.set("X-Svc-Request-Id", ctx.state.requestId);
    // Also under the names each provider SDK reads it from (`requestID` of an error): an SDK call
    // to a path the gateway does not serve (count_tokens, models) still names its log line.
    for (const s of surfaces) ctx.set(s.codec.requestIdHeader, ctx.state.requestId);
    ctx.set("X-Svc-Cache", "MISS");
    ctx.set("X-Svc-Cost", "0");
    await next();
  });
  app.use(errorMiddleware((_info, headers) => {
    headers["X-Svc-Cost"] = "0";
  }));
  // Every request under /v1 needs a key (spec 5.1): without one, a 404 or 405 would tell anyone
  // which paths exist. A POST to a served path verifies its own (serveChat).
  app.use(async (ctx, next) => {
    if (V1_PATH.test(ctx.path) && !(ctx.method === "POST" && router.match(ctx.path, "POST").route)) {
      await deps.auth.verifyKey({ secret: apiKeyOf(ctx.req) });
    }
    await next();
  });

  router.get("/healthz", (ctx) => {
    ctx.body = { status: "ok" };
  });
  router.all("/healthz", (ctx) => {
    ctx.set("Allow", "GET, HEAD");
    throw methodNotAllowed(ctx.method, "/healthz", "GET");
  });
  for (const s of surfaces) {
    router.post(s.path, async (ctx) => {
      ctx.respond = false;
      fileRequestId(ctx.res, ctx.state.requestId as string);
      await serveChat(ctx.req, ctx.res, s, deps, state, ctx.state.requestId as string);
    });
    router.all(s.path, (ctx) => {
      ctx.set("Allow", "POST");
      throw methodNotAllowed(ctx.method, s.path, "POST");
    });
  }
  app.use(router.routes());
  return app;
}

