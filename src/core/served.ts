import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import type { CacheService } from "../gen/svc/cache/v1/cache_service_pb.js";
import { KeyMode } from "../gen/svc/common/v1/key_mode_pb.js";
import type { LimitsService } from "../gen/svc/limits/v1/limits_service_pb.js";
import { type Completion, CompletionSchema } from "../gen/svc/proxy/v1/proxy_service_pb.js";
import type { ProxyService } from "../gen/svc/proxy/v1/proxy_service_pb.js";
import type { TelemetryService } from "../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { log } from "../logger.js";
import { apiError, bounded, carriesErrorInfo, invalidRequest, MAX_ERROR_MESSAGE_CHARS, notFound, toErrorInfo, withPlainRetryGuidance } from "./errors.js";
import { checkWireChatRequest } from "./proxy/wire-request.js";
import { cutText } from "./text.js";
import { parseObject } from "./json.js";
import { checkWireLog } from "./telemetry/log-row.js";

/**
 * What the core port adds to the service implementations the facades call in process. A facade
 * builds its requests from client input it has validated, and its calls are the hot path; a caller
 * on the core port builds the canonical request itself. So the checks of such requests wrap the
 * implementations for the router only (src/server.ts): nothing here runs on an in-process call.
 */

/** Resolves when the project exists; otherwise rejects with 404 project_not_found (or the registry's 503). */
export type ProjectCheck = (projectId: string) => Promise<unknown>;

/** The keys of a project (404 project_not_found when there is none: AuthService.ListKeys). */
export type ProjectKeys = (projectId: string) => Promise<ReadonlyArray<{ id: string; mode: KeyMode }>>;

/**
 * ProxyService for the core port: StreamChat's request is checked (wire-request.ts) and its project
 * looked up before the implementation runs, so a refused request never reaches the upstream. The
 * key it names must be a key of that project (a deleted key's id is refused, as
 * the key itself is at the gateway: 404 key_not_found), of the mode it says (a live key is not
 * called as a test one).
 */
export function servedProxyService(impl: ServiceImpl<typeof ProxyService>, keysOf: ProjectKeys): ServiceImpl<typeof ProxyService> {
  return {
    async *streamChat(req, ctx) {
      checkWireChatRequest(req); // project, key id and key mode are set
      const key = (await keysOf(req.projectId)).find((k) => k.id === req.keyId);
      if (!key) throw notFound("key_not_found", `No key with id '${cutText(req.keyId, 100)}' in project '${cutText(req.projectId, 100)}'.`);
      if (key.mode !== req.keyMode) throw invalidRequest("invalid_value", `\`key_mode\` must be the key's: '${cutText(req.keyId, 100)}' is a ${key.mode === KeyMode.LIVE ? "live" : "test"} key.`);
      yield* impl.streamChat(req, ctx);
    },
  };
}

/**
 * Resolves when the project a call names exists (NOT_FOUND otherwise); a call that names none is
 * left to the implementation, which refuses it as missing.
 */
async function existsIfNamed(project: ProjectCheck, projectId: string): Promise<void> {
  if (projectId) await project(projectId);
}

/**
 * TelemetryService for the core port: RecordRequest's log must be one the gateway would record
 * (log-row.ts `checkWireLog`) of a project that exists. The other calls are the implementation's.
 */
export function servedTelemetryService(impl: ServiceImpl<typeof TelemetryService>, project: ProjectCheck): ServiceImpl<typeof TelemetryService> {
  return {
    ...impl,
    async recordRequest(req, ctx) {
      if (req.log) {
        checkWireLog(req.log);
        await project(req.log.projectId);
      }
      return impl.recordRequest(req, ctx);
    },
    // A listing or analytics of a project that does not exist is NOT_FOUND, not an empty answer.
    async listLogs(req, ctx) {
      await existsIfNamed(project, req.projectId);
      return impl.listLogs(req, ctx);
    },
    async getAnalytics(req, ctx) {
      await existsIfNamed(project, req.projectId);
      return impl.getAnalytics(req, ctx);
    },
  };
}

/**
 * LimitsService for the core port: every call names a project that exists (Admit finds its limits
 * in the registry already); a Settle, Rescind or GetUsage of one that does not is NOT_FOUND
 * (404 project_not_found) instead of charging, or reading, a project nobody has.
 */
export function servedLimitsService(impl: ServiceImpl<typeof LimitsService>, project: ProjectCheck): ServiceImpl<typeof LimitsService> {
  return {
    ...impl,
    async settle(req, ctx) {
      await existsIfNamed(project, req.projectId);
      return impl.settle(req, ctx);
    },
    async rescind(req, ctx) {
      await existsIfNamed(project, req.projectId);
      return impl.rescind(req, ctx);
    },
    async getUsage(req, ctx) {
      await existsIfNamed(project, req.projectId);
      return impl.getUsage(req, ctx);
    },
  };
}

/**
 * What of a Completion would keep it from being served as a hit, or undefined: its JSON texts must
 * be what the gateway writes there (each extra_json a JSON object, a block's raw_json JSON, or
 * empty), else every hit on it failed as an internal error; its token counts must not be negative,
 * else every hit's log was refused, and so dropped.
 */
function unservable(c: Completion): string | undefined {
  const objects: Array<[string, string]> = [["extra_json", c.extraJson], ["message_extra_json", c.messageExtraJson], ["choice_extra_json", c.choiceExtraJson], ["usage.extra_json", c.usage?.extraJson ?? ""]];
  for (const [i, b] of c.blocks.entries()) {
    objects.push([`blocks[${i}].extra_json`, b.extraJson]);
    if (b.rawJson !== "" && !isJson(b.rawJson)) return `\`blocks[${i}].raw_json\` is not JSON`;
  }
  for (const [path, text] of objects) if (text !== "" && parseObject(text) === undefined) return `\`${path}\` is not a JSON object`;
  const u = c.usage;
  if (u) {
    for (const [name, n] of [["input_tokens", u.inputTokens], ["output_tokens", u.outputTokens], ["cache_read_tokens", u.cacheReadTokens], ["cache_write_tokens", u.cacheWriteTokens], ["cache_write_1h_tokens", u.cacheWrite1hTokens]] as const) {
      if (n < 0) return `\`usage.${name}\` is negative`;
    }
  }
  return undefined;
}

const isJson = (text: string): boolean => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

/**
 * CacheService for the core port: PutEntry's payload must be what the gateway stores and serves as
 * a hit (a Completion in protobuf binary form), for a project that exists; an entry nobody could
 * serve is refused instead of stored. GetEntry of a project that does not exist is NOT_FOUND, as the
 * other services' calls are, not a miss. The facades' in-process puts are answers the gateway itself
 * encoded (completion-binary.ts), and skip the decode.
 */
export function servedCacheService(impl: ServiceImpl<typeof CacheService>, project: ProjectCheck): ServiceImpl<typeof CacheService> {
  return {
    ...impl,
    async getEntry(req, ctx) {
      await existsIfNamed(project, req.projectId);
      return impl.getEntry(req, ctx);
    },
    async putEntry(req, ctx) {
      if (req.payload.byteLength > 0) {
        let c: Completion;
        try {
          c = fromBinary(CompletionSchema, req.payload);
        } catch {
          throw invalidRequest("invalid_value", "`payload` must be a svc.proxy.v1.Completion in protobuf binary form.");
        }
        const bad = unservable(c);
        if (bad !== undefined) throw invalidRequest("invalid_value", `\`payload\` holds a Completion no gateway could serve: ${bad}.`);
      }
      await existsIfNamed(project, req.projectId);
      return impl.putEntry(req, ctx);
    },
  };
}

/** The one message a caller on the core port gets for an internal error, as the HTTP facades' 500. */
const INTERNAL_MESSAGE = "The server had an error while processing the request.";

/**
 * An internal error: anything but a ConnectError, a ConnectError with code INTERNAL or UNKNOWN
 * (Connect's code for a wrapped foreign error), or one carrying the spec's 500 internal_error. The
 * errors the core means to send (400s, 404s, 503s...) carry their own status and pass untouched.
 */
function isInternal(e: unknown): boolean {
  if (!(e instanceof ConnectError)) return true;
  if (carriesErrorInfo(e)) return toErrorInfo(e).code === "internal_error";
  return e.code === Code.Internal || e.code === Code.Unknown;
}

/** The request id a call's message names, if any (StreamChat's request, RecordRequest's log). */
function requestIdOf(message: unknown): string | undefined {
  const m = message as { requestId?: unknown; log?: { requestId?: unknown } } | undefined;
  const id = m?.requestId ?? m?.log?.requestId;
  return typeof id === "string" && id !== "" ? id : undefined;
}

/**
 * A refusal whose message is cut to MAX_ERROR_MESSAGE_CHARS, as the HTTP endpoints cut theirs: a
 * message that quotes what the caller sent (an unknown id of 100 KB) would travel in gRPC's
 * `grpc-message` header, which past the HTTP/2 frame size resets the stream and takes the caller's
 * connection down with it.
 */
function clipped(e: unknown): unknown {
  if (!(e instanceof ConnectError) || e.rawMessage.length <= MAX_ERROR_MESSAGE_CHARS) return e;
  const cut = new ConnectError(bounded(e.rawMessage), e.code, e.metadata, undefined, e.cause);
  cut.details.push(...e.details);
  return cut;
}

/**
 * Logs every internal error of a call served on the core port once, with its stack, the procedure
 * and the request id when the call names one, and answers the caller INTERNAL with a generic message
 * and the spec's 500 internal_error (never the error's own message): what the HTTP facades do
 * (src/facades/http-errors.ts, respond.ts). Errors of a server stream are met while its messages
 * are read, and are handled there. Registered on the served router only (src/server.ts), so
 * in-process calls, whose errors the facades log, are not wrapped.
 */
export function internalErrorInterceptor(): Interceptor {
  return (next) => async (req) => {
    // The message is read when a failure is logged, not before: StreamChat makes a request id
    // for a request that has none, into the message.
    let message: unknown;
    // What failed reading the request (a binary message that does not parse) is the caller's, not
    // a fault of the server: answered as Connect answers it on a unary call, and not logged.
    let unreadable: unknown;
    if (req.stream) {
      const source = req.message;
      req = {
        ...req,
        message: (async function* () {
          try {
            for await (const m of source) {
              message = m;
              yield m;
            }
          } catch (e) {
            unreadable = e;
            throw e;
          }
        })(),
      };
    } else {
      message = req.message;
    }
    const hide = (e: unknown): unknown => {
      // Retry guidance as the HTTP answers give it: the internal names it rides under are not the caller's.
      if (e === unreadable || !isInternal(e)) return withPlainRetryGuidance(clipped(e));
      const cause = e instanceof ConnectError ? e.cause : undefined;
      log.error("core call failed", {
        procedure: `/${req.service.typeName}/${req.method.name}`,
        requestId: requestIdOf(message),
        err: String((e as Error)?.stack ?? e),
        ...(cause !== undefined ? { cause: String((cause as Error)?.stack ?? cause) } : {}),
      });
      return apiError(500, "api_error", "internal_error", INTERNAL_MESSAGE);
    };
    let res;
    try {
      res = await next(req);
    } catch (e) {
      throw hide(e);
    }
    if (!res.stream) return res;
    const out = res.message;
    return {
      ...res,
      message: (async function* () {
        try {
          yield* out;
        } catch (e) {
          throw hide(e);
        }
      })(),
    };
  };
}
