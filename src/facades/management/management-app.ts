import type { Client } from "@connectrpc/connect";
import Router from "@koa/router";
import Koa, { type Context } from "koa";
import type { ApiKey, AuthService, Project } from "../../gen/svc/auth/v1/auth_service_pb.js";
import { AnalyticsGranularity, AnalyticsGroupBy, type TelemetryService } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { apiError, invalidApiKey, invalidRequest, toErrorInfo } from "../../core/errors.js";
import { newRequestId } from "../../core/ids.js";
import { metadataKeyBeyond } from "../../core/telemetry/analytics-request.js";
import { errorMiddleware, refuseRepeatedAuthorization, V1_PATH } from "../http-errors.js";
import { Query } from "./query.js";
import { analyticsJson, logJson, promptJson } from "./render.js";

export interface ManagementDeps {
  auth: Client<typeof AuthService>;
  telemetry: Client<typeof TelemetryService>;
}

const granularities = { minute: AnalyticsGranularity.MINUTE, hour: AnalyticsGranularity.HOUR, day: AnalyticsGranularity.DAY } as const;
const groupBys = { model: AnalyticsGroupBy.MODEL, user: AnalyticsGroupBy.USER, key: AnalyticsGroupBy.KEY, status: AnalyticsGroupBy.STATUS } as const;
const endpoints = { "chat.completions": "/v1/chat/completions", messages: "/v1/messages" } as const;

interface Caller {
  key: ApiKey;
  project: Project;
}

const caller = (ctx: Context): Caller => ctx.state.caller as Caller;
const scope = (ctx: Context) => ({ projectId: caller(ctx).project.id, keyMode: caller(ctx).key.mode });

/** The core's request fields, as this API's query parameters (or path parameter `id`). */
const PARAMS: Record<string, string> = {
  start_time: "start",
  end_time: "end",
  page_token: "cursor",
  page_size: "limit",
  request_id: "id",
  metadata_key: "group_by",
  group_by: "group_by",
  status_class: "status",
  status: "status",
  cache: "cache",
  granularity: "granularity",
  version: "version",
  name: "name",
};

/**
 * A bad value the core found (its messages name its own request fields) in this API's terms: the
 * field names as the parameters a caller sent, and `invalid_parameter` as the code (a reused or
 * foreign cursor stays `invalid_page_token`). Anything else passes through as it is.
 */
function inApiTerms(err: unknown): unknown {
  const info = toErrorInfo(err);
  if (info.status !== 400 || info.type !== "invalid_request_error" || !["invalid_value", "missing_required_field", "invalid_page_token"].includes(info.code)) return err;
  const message = info.message.replace(/`(\w+)`/g, (whole, field: string) => (PARAMS[field] ? `'${PARAMS[field]}'` : whole));
  return invalidRequest(info.code === "invalid_page_token" ? "invalid_page_token" : "invalid_parameter", message);
}

/**
 * The management facade (spec 4.2): read access to the key's project's request logs, analytics
 * and prompts. Every /v1 request is authenticated with a service key as `Authorization: Bearer
 * <key>` (spec 5.3); the key's project and mode (live or test) scope everything it reads. The
 * formats are in docs/management-api.md.
 */
export function createManagementApp(deps: ManagementDeps): Koa {
  const app = new Koa();
  const router = new Router();
  // Every answer carries an id to quote, as the gateway's do (and names it in an error's log line).
  app.use((ctx, next) => {
    ctx.set("X-Svc-Request-Id", newRequestId());
    return next();
  });
  // Every path of this API is read-only, so a 405 names the same methods everywhere.
  app.use(errorMiddleware((info, headers) => {
    if (info.status === 405) headers.Allow = "GET, HEAD";
  }));
  // Every request under /v1 needs a key (spec 5.1), whatever its path and method: without one, a
  // 404 or 405 would tell anyone which paths exist.
  app.use(async (ctx, next) => {
    if (!V1_PATH.test(ctx.path)) return next();
    refuseRepeatedAuthorization(ctx.req);
    const m = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get("authorization"));
    if (!m) throw invalidApiKey("Missing API key: send it as Authorization: Bearer <API_KEY>.");
    const { key, project } = await deps.auth.verifyKey({ secret: m[1]! });
    ctx.state.caller = { key: key!, project: project! } satisfies Caller;
    try {
      await next();
    } catch (e) {
      throw inApiTerms(e);
    }
  });
  router.get("/healthz", (ctx) => {
    ctx.body = { status: "ok" };
  });

  router.get("/v1/logs", async (ctx) => {
    const q = new Query(ctx.querystring);
    const limit = q.int("limit", 1, 1000) ?? 50;
    const cursor = q.string("cursor") ?? "";
    const start = q.time("start");
    const end = q.time("end");
    const status = q.string("status");
    let statusCode = 0;
    let statusClass = "";
    if (status !== undefined) {
      if (/^[1-5]xx$/i.test(status)) statusClass = status.toLowerCase();
      else if (/^[1-5]\d\d$/.test(status)) statusCode = Number(status);
      else throw invalidRequest("invalid_parameter", `Query parameter 'status' must be an HTTP status (429) or class (4xx), got '${status}'.`);
    }
    const endpoint = q.oneOf("endpoint", Object.keys(endpoints) as Array<keyof typeof endpoints>);
    const cache = q.oneOf("cache", ["hit", "miss"] as const);
    const filters = {
      model: q.string("model") ?? "",
      userId: q.string("user_id") ?? "",
      metadata: q.prefixed("metadata"),
    };
    q.done();
    const res = await deps.telemetry.listLogs({
      ...scope(ctx),
      pageSize: limit,
      pageToken: cursor,
      startTime: start,
      endTime: end,
      status: statusCode,
      statusClass,
      endpoint: endpoint ? endpoints[endpoint] : "",
      cache: cache ? cache.toUpperCase() : "",
      ...filters,
    });
    ctx.body = { object: "list", data: res.logs.map((l) => logJson(l, false)), has_more: res.nextPageToken !== "", next_cursor: res.nextPageToken || null };
  });

  router.get("/v1/logs/:id", async (ctx) => {
    new Query(ctx.querystring).done();
    // An unknown id (or another project's) is the service's 404 log_not_found.
    const res = await deps.telemetry.getLog({ ...scope(ctx), requestId: ctx.params.id! });
    ctx.body = logJson(res.log!, true);
  });

  router.get("/v1/analytics", async (ctx) => {
    const q = new Query(ctx.querystring);
    // The range's defaults and rounding are the core's (GetAnalytics), so both paths answer alike:
    // only the times the caller gave are passed on.
    const start = q.time("start");
    const end = q.time("end");
    const granularity = q.oneOf("granularity", Object.keys(granularities) as Array<keyof typeof granularities>) ?? "hour";
    // Enumerated values are read without regard to case, as `granularity` is; a metadata key is
    // data, and kept as given.
    const group = q.string("group_by");
    let groupBy = AnalyticsGroupBy.UNSPECIFIED;
    let metadataKey = "";
    let groupName: string | null = null;
    if (group !== undefined) {
      const lower = group.toLowerCase();
      if (lower.startsWith("metadata.") && group.length > 9) {
        groupBy = AnalyticsGroupBy.METADATA;
        metadataKey = group.slice(9);
        const beyond = metadataKeyBeyond(metadataKey, granularity);
        if (beyond) throw invalidRequest("invalid_parameter", `Query parameter 'group_by': the metadata key after 'metadata.' ${beyond}`);
        groupName = `metadata.${metadataKey}`;
      } else if (Object.hasOwn(groupBys, lower)) {
        groupBy = groupBys[lower as keyof typeof groupBys];
        groupName = lower;
      } else throw invalidRequest("invalid_parameter", `Query parameter 'group_by' must be model, user, key, status or metadata.<key>, got '${group}'.`);
    }
    q.done();
    const res = await deps.telemetry.getAnalytics({
      ...scope(ctx),
      startTime: start,
      endTime: end,
      granularity: granularities[granularity],
      groupBy,
      metadataKey,
    });
    ctx.body = analyticsJson(res, groupName);
  });

  router.get("/v1/prompts", async (ctx) => {
    const q = new Query(ctx.querystring);
    const limit = q.int("limit", 1, 1000) ?? 100;
    const cursor = q.string("cursor") ?? "";
    q.done();
    const res = await deps.telemetry.listPrompts({ projectId: caller(ctx).project.id, pageSize: limit, pageToken: cursor });
    ctx.body = { object: "list", data: res.prompts.map((p) => promptJson(p, false)), has_more: res.nextPageToken !== "", next_cursor: res.nextPageToken || null };
  });

  router.get("/v1/prompts/:name", async (ctx) => {
    const q = new Query(ctx.querystring);
    const version = q.int("version", 1, 2_147_483_647) ?? 0;
    q.done();
    // An unknown name or version is the service's 404 prompt_not_found.
    const res = await deps.telemetry.getPrompt({ projectId: caller(ctx).project.id, name: ctx.params.name!, version });
    ctx.body = promptJson(res.prompt!, true);
  });

  // A method the router has no notion of (TRACE, PROPFIND, ...) would be its 501 thrown as a bare
  // error (a 500 here): it is a 405 on a path of this API, and a 404 elsewhere.
  const routerMethods = new Set(router.methods);
  app.use(async (ctx, next) => {
    if (routerMethods.has(ctx.method)) return next();
    if (router.match(ctx.path, "GET").route) throw methodNotAllowed();
    throw apiError(404, "not_found_error", "unknown_endpoint", `No endpoint ${ctx.method} ${ctx.path}.`);
  });
  app.use(router.routes());
  app.use(router.allowedMethods({ throw: true, methodNotAllowed: () => methodNotAllowed() }));
  return app;
}

const methodNotAllowed = () => apiError(405, "invalid_request_error", "method_not_allowed", "The management API is read-only: use GET.");
