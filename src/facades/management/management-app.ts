import type { Client } from "@connectrpc/connect";
import Router from "@koa/router";
import Koa from "koa";
import type { AuthService } from "../../gen/svc/auth/v1/auth_service_pb.js";
import { invalidApiKey } from "../../core/errors.js";
import { errorMiddleware } from "../http-errors.js";

export interface ManagementDeps {
  auth: Client<typeof AuthService>;
}

/**
 * The management facade (spec 4.2). Every /v1 request is authenticated with a service key as
 * `Authorization: Bearer <key>` (spec 5.3); the key's project scopes what it reads. The read
 * endpoints (/v1/logs, /v1/analytics, /v1/prompts) arrive with the telemetry issue; until then an
 * authenticated request to them gets the spec's 404 error object.
 */
export function createManagementApp(deps: ManagementDeps): Koa {
  const app = new Koa();
  const router = new Router();
  app.use(errorMiddleware());
  router.get("/healthz", (ctx) => {
    ctx.body = { status: "ok" };
  });
  router.use("/v1", async (ctx, next) => {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get("authorization"));
    if (!m) throw invalidApiKey("Missing API key: send it as Authorization: Bearer <API_KEY>.");
    const { key, project } = await deps.auth.verifyKey({ secret: m[1]! });
    ctx.state.key = key;
    ctx.state.project = project;
    await next();
  });
  app.use(router.routes());
  return app;
}
