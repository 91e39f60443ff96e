import { create } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import Router from "@koa/router";
import Koa, { type Context } from "koa";
import type { AuthService } from "../../gen/svc/auth/v1/auth_service_pb.js";
import { ApiStyle, type ProxyService, StreamChatRequestSchema } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { newRequestId } from "../../core/ids.js";
import { errorMiddleware, methodNotAllowed } from "../http-errors.js";
import { chatCompletionsCodec } from "./chat-completions-codec.js";
import type { ClientCodec } from "./codec.js";
import { messagesCodec } from "./messages-codec.js";
import { apiKeyOf, checkProviderVersion, metadataOf, readJsonBody, userIdOf } from "./request-input.js";
import { writeCompletion, writeStream } from "./respond.js";

export interface GatewayDeps {
  auth: Client<typeof AuthService>;
  proxy: Client<typeof ProxyService>;
  maxRequestBytes: number;
}

interface Surface {
  path: string;
  style: ApiStyle;
  codec: ClientCodec;
}

const surfaces: Surface[] = [
  { path: "/v1/chat/completions", style: ApiStyle.CHAT_COMPLETIONS, codec: chatCompletionsCodec },
  { path: "/v1/messages", style: ApiStyle.MESSAGES, codec: messagesCodec },
];

/**
 * The gateway facade: provider-style HTTP in, core calls, provider-style JSON or SSE out. It owns
 * wire compatibility only; every decision is the core's.
 */
export function createGatewayApp(deps: GatewayDeps): Koa {
  const app = new Koa();
  const router = new Router();

  app.use(async (ctx, next) => {
    // Every response, errors included, carries the request id and the cache status.
    ctx.state.requestId = newRequestId();
    ctx.set("X-Svc-Request-Id", ctx.state.requestId);
    ctx.set("X-Svc-Cache", "MISS");
    await next();
  });
  app.use(errorMiddleware((_info, headers) => {
    headers["X-Svc-Cost"] = "0";
  }));

  router.get("/healthz", (ctx) => {
    ctx.body = { status: "ok" };
  });
  for (const s of surfaces) {
    router.post(s.path, (ctx) => handle(ctx, s, deps));
    router.all(s.path, (ctx) => {
      ctx.set("Allow", "POST");
      throw methodNotAllowed(ctx.method, s.path, "POST");
    });
  }
  app.use(router.routes());
  return app;
}

async function handle(ctx: Context, s: Surface, deps: GatewayDeps): Promise<void> {
  const { key, project } = await deps.auth.verifyKey({ secret: apiKeyOf(ctx.req) });
  const body = await readJsonBody(ctx.req, deps.maxRequestBytes);
  const metadata = metadataOf(ctx.req);
  const userId = userIdOf(ctx.req);
  if (s.style === ApiStyle.MESSAGES) checkProviderVersion(ctx.req);
  const parsed = s.codec.parseRequest(body);
  const req = create(StreamChatRequestSchema, {
    ...parsed,
    requestId: ctx.state.requestId as string,
    projectId: project!.id,
    keyId: key!.id,
    keyMode: key!.mode,
    userId,
    metadata,
  });

  // A client that goes away aborts the upstream call.
  const abort = new AbortController();
  ctx.res.once("close", () => {
    if (!ctx.res.writableFinished) abort.abort();
  });
  const events = deps.proxy.streamChat(req, { signal: abort.signal })[Symbol.asyncIterator]();
  // Errors before the first event are still plain HTTP errors (the error middleware writes them).
  const first = await events.next();
  if (first.done) throw new Error("the proxy ended without an answer");
  if (req.stream) return writeStream(ctx, s.codec, parsed, first.value, events);
  writeCompletion(ctx, s.codec, first.value);
  await events.return?.(); // let the core's stream run its cleanup now, not at garbage collection
}
