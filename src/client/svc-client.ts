import { type Client, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { AuthService } from "../gen/svc/auth/v1/auth_service_pb.js";
import { CacheService } from "../gen/svc/cache/v1/cache_service_pb.js";
import { LimitsService } from "../gen/svc/limits/v1/limits_service_pb.js";
import { ProxyService } from "../gen/svc/proxy/v1/proxy_service_pb.js";
import { TelemetryService } from "../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { shownUrl } from "../core/text.js";
import type { AnalyticsQuery, AnalyticsResult, LogPage, LogQuery, LogRecord, Page, PromptRecord } from "./types.js";

export interface SvcClientOptions {
  /** The service key; defaults to the SVC_API_KEY environment variable (spec 5.8). */
  apiKey?: string;
  /**
   * The management API's origin; defaults to SVC_MANAGEMENT_URL, else http://127.0.0.1 on
   * SVC_MANAGEMENT_PORT (8081), the port `svc serve` takes from the same setting. A trailing `/v1`
   * (as `svc serve` prints its addresses) is taken off.
   */
  managementUrl?: string;
  /** The gateway's origin; defaults to SVC_GATEWAY_URL, else http://127.0.0.1 on SVC_GATEWAY_PORT (8080). A trailing `/v1` is taken off. */
  gatewayUrl?: string;
}

/**
 * An error answer of the management API, in the spec's shape (section 2.6), with what its headers
 * said: `requestId` (X-Svc-Request-Id, the id to quote when reporting it) and `retryAfterSeconds`
 * (Retry-After, on the 503s of an outage: how long to wait before trying again), each undefined
 * when the answer did not carry it, as for an error the client raises without a request.
 */
export class SvcApiError extends Error {
  /** The answer's X-Svc-Request-Id, or undefined. */
  readonly requestId: string | undefined;
  /** The answer's Retry-After in seconds (an HTTP date as the seconds until then), or undefined. */
  readonly retryAfterSeconds: number | undefined;
  constructor(
    readonly status: number,
    readonly type: string,
    readonly code: string,
    message: string,
    headers: { requestId?: string; retryAfterSeconds?: number } = {},
  ) {
    super(message);
    this.name = "SvcApiError";
    this.requestId = headers.requestId;
    this.retryAfterSeconds = headers.retryAfterSeconds;
  }
}

/**
 * Retry-After as seconds: delta-seconds as given, an HTTP date as the whole seconds until then (0
 * once past); undefined when absent or neither.
 */
function retryAfterSeconds(value: string | null, now = Date.now()): number | undefined {
  const v = value?.trim();
  if (!v) return undefined;
  if (/^\d+$/.test(v)) return Number(v);
  const at = Date.parse(v);
  return Number.isNaN(at) || /^[\d.+-]+$/.test(v) ? undefined : Math.max(0, Math.ceil((at - now) / 1000));
}

/**
 * A base URL as given (`/v1` or not, in any case, as the server reads its paths), checked (see
 * checkBaseUrl), without trailing slashes or the API's `/v1`: what `svc serve` prints.
 */
function origin(u: string, from: string): string {
  checkBaseUrl(u, from);
  return u.replace(/\/+$/, "").replace(/\/v1$/i, "");
}

/**
 * The checks of a base URL paths are appended to, refused at once, naming where it came from,
 * rather than built into URLs that fail at every call: http or https; no query or fragment, looked
 * for in the string as written (an empty one, `http://h:8081/?`, has URL.search and URL.hash "",
 * yet ends up before every path); no white space (a padded value from a .env file: URL() trims it,
 * fetch does not); no user or password (fetch refuses a URL with them). A message shows the URL
 * with any user and password masked (shownUrl), whichever check refused it.
 */
function checkBaseUrl(u: string, from: string): void {
  let url: URL;
  try {
    url = new URL(u);
  } catch {
    throw new Error(`${from} is not a URL: ${JSON.stringify(shownUrl(u))} (write it as http://host:port).`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error(`${from} must be an http:// or https:// URL, got ${JSON.stringify(shownUrl(u))}.`);
  if (/[?#]/.test(u)) throw new Error(`${from} must not have a query or fragment, got ${JSON.stringify(shownUrl(u))}.`);
  if (/\s/.test(u)) throw new Error(`${from} must not hold white space, got ${JSON.stringify(shownUrl(u))}.`);
  if (url.username !== "" || url.password !== "") throw new Error(`${from} must not hold a user or password (the key is the credential), got ${JSON.stringify(shownUrl(u))}.`);
}

/** The default address on this machine: the port `svc serve` listens on, from the same setting (checked as it checks it). */
function local(port: string | undefined, fallback: number, name: string): string {
  if (port === undefined || port === "") return `http://127.0.0.1:${fallback}`;
  if (!/^\d+$/.test(port) || Number(port) < 1 || Number(port) > 65535) throw new Error(`${name} must be a port from 1 to 65535, got ${JSON.stringify(port)}.`);
  return `http://127.0.0.1:${Number(port)}`;
}

/**
 * A typed client for the management API (request logs, analytics, prompts) of the key's project,
 * and the settings that point the official `openai` and `@anthropic-ai/sdk` clients at the gateway:
 *
 *   const svc = new SvcClient();                       // key from SVC_API_KEY
 *   const openai = new OpenAI(svc.openaiOptions());
 *   const anthropic = new Anthropic(svc.anthropicOptions());
 *   const page = await svc.logs.list({ limit: 20, model: "chat-4o" });
 */
/** The URL to use and where it came from: the option, else the variable, else the local default. */
const pick = (given: string | undefined, option: string, set: string | undefined, variable: string, fallback: () => string): [string, string] =>
  given !== undefined ? [given, `{ ${option} }`] : set ? [set, variable] : [fallback(), "the default address"];

export class SvcClient {
  readonly apiKey: string;
  readonly managementUrl: string;
  readonly gatewayUrl: string;

  constructor(opts: SvcClientOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    const key = opts.apiKey ?? env.SVC_API_KEY;
    if (!key) throw new Error("No service API key: pass { apiKey } or set SVC_API_KEY.");
    this.apiKey = key;
    this.managementUrl = origin(...pick(opts.managementUrl, "managementUrl", env.SVC_MANAGEMENT_URL, "SVC_MANAGEMENT_URL", () => local(env.SVC_MANAGEMENT_PORT, 8081, "SVC_MANAGEMENT_PORT")));
    this.gatewayUrl = origin(...pick(opts.gatewayUrl, "gatewayUrl", env.SVC_GATEWAY_URL, "SVC_GATEWAY_URL", () => local(env.SVC_GATEWAY_PORT, 8080, "SVC_GATEWAY_PORT")));
  }

  /** Options for `new OpenAI(...)`: the gateway's /v1 and the service key (sent as Bearer, which the gateway accepts). */
  openaiOptions(): { apiKey: string; baseURL: string } {
    return { apiKey: this.apiKey, baseURL: `${this.gatewayUrl}/v1` };
  }

  /** Options for `new Anthropic(...)`: the gateway's origin and the service key (sent as x-api-key, which the gateway accepts). */
  anthropicOptions(): { apiKey: string; baseURL: string } {
    return { apiKey: this.apiKey, baseURL: this.gatewayUrl };
  }

  // Every value the caller gives is sent, an empty string or a 0 included: only `undefined` means
  // "not given". The API refuses an empty or out-of-range value (400 invalid_parameter) rather
  // than reading it as no filter, which would list every row; a client that dropped it would turn
  // that refusal back into the very answer it prevents (docs/management-api.md).
  readonly logs = {
    /** One page of logs, newest first; pass `next_cursor` back as `cursor` for the next. */
    list: (q: LogQuery = {}): Promise<LogPage> => this.#get("/v1/logs", logParams(q)),
    /** The full record of one request (its X-Svc-Request-Id), bodies included. */
    get: async (id: string): Promise<LogRecord> => this.#get(`/v1/logs/${pathSegment(id, "id")}`),
    /** Every log matching the query, page after page. */
    all: (q: LogQuery = {}): AsyncIterable<LogRecord> => this.#all(q),
  };

  /** Totals and a time series over a range, optionally grouped. */
  analytics(q: AnalyticsQuery = {}): Promise<AnalyticsResult> {
    const p = new URLSearchParams();
    if (q.start !== undefined) p.set("start", toIso(q.start));
    if (q.end !== undefined) p.set("end", toIso(q.end));
    if (q.granularity !== undefined) p.set("granularity", q.granularity);
    if (q.groupBy !== undefined) p.set("group_by", q.groupBy);
    return this.#get("/v1/analytics", p);
  }

  readonly prompts = {
    list: (q: { limit?: number; cursor?: string } = {}): Promise<Page<PromptRecord>> => {
      const p = new URLSearchParams();
      if (q.limit !== undefined) p.set("limit", String(q.limit));
      if (q.cursor !== undefined) p.set("cursor", q.cursor);
      return this.#get("/v1/prompts", p);
    },
    /** The latest version, or `version`. */
    get: async (name: string, version?: number): Promise<PromptRecord> =>
      this.#get(`/v1/prompts/${pathSegment(name, "name")}`, version === undefined ? undefined : new URLSearchParams({ version: String(version) })),
  };

  async *#all(q: LogQuery): AsyncIterable<LogRecord> {
    let cursor = q.cursor;
    for (;;) {
      const page = await this.logs.list({ ...q, cursor });
      yield* page.data;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  async #get<T>(path: string, params?: URLSearchParams): Promise<T> {
    const qs = params && [...params.keys()].length ? `?${params}` : "";
    let res: Response;
    try {
      res = await fetch(`${this.managementUrl}${path}${qs}`, { headers: { authorization: `Bearer ${this.apiKey}` } });
    } catch (e) {
      const why = (e as { cause?: { code?: string; message?: string } }).cause;
      throw new Error(
        `Cannot reach the management API at ${this.managementUrl} (${why?.code ?? why?.message ?? String(e)}): is \`svc serve\` running there? Set SVC_MANAGEMENT_URL (or SVC_MANAGEMENT_PORT) or pass { managementUrl }.`,
        { cause: e },
      );
    }
    const text = await res.text();
    const headers = { requestId: res.headers.get("x-svc-request-id") ?? undefined, retryAfterSeconds: retryAfterSeconds(res.headers.get("retry-after")) };
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new SvcApiError(res.status, "api_error", "invalid_response", `The management API answered ${res.status} with a body that is not JSON.`, headers);
    }
    if (!res.ok) {
      const e = (body as { error?: { type?: string; code?: string; message?: string } }).error ?? {};
      throw new SvcApiError(res.status, e.type ?? "api_error", e.code ?? "unknown", e.message ?? `HTTP ${res.status}`, headers);
    }
    return body as T;
  }
}

/**
 * A time as the API reads it: a Date or whole epoch milliseconds (0 or more) as ISO 8601, anything
 * else as written: a string as given, and a value that is no such time (an invalid Date, NaN, a
 * fraction, a negative number, a null from untyped code) for the API to refuse naming the parameter,
 * rather than thrown here as a RangeError, dropped, or made into some other time.
 */
function toIso(t: Date | string | number): string {
  const d = t instanceof Date ? t : typeof t === "number" && Number.isSafeInteger(t) && t >= 0 ? new Date(t) : undefined;
  return d && !Number.isNaN(d.getTime()) ? d.toISOString() : String(t);
}

/**
 * An id or name as one path segment. An empty one, `.` or `..` is refused here, as the API refuses a
 * bad id (400 invalid_parameter): URL parsing drops such a segment (encoded or not), so
 * `/v1/logs/.` would reach the API as the listing, answered as if it were the record.
 */
function pathSegment(value: string, name: string): string {
  if (value === "") throw new SvcApiError(400, "invalid_request_error", "invalid_parameter", `'${name}' must not be empty.`);
  if (value === "." || value === "..") throw new SvcApiError(400, "invalid_request_error", "invalid_parameter", `'${name}' must not be '${value}'.`);
  return encodeURIComponent(value);
}

function logParams(q: LogQuery): URLSearchParams {
  const p = new URLSearchParams();
  const set = (name: string, v: string | number | undefined) => {
    if (v !== undefined) p.set(name, String(v));
  };
  set("limit", q.limit);
  set("cursor", q.cursor);
  set("start", q.start === undefined ? undefined : toIso(q.start));
  set("end", q.end === undefined ? undefined : toIso(q.end));
  set("model", q.model);
  set("status", q.status);
  set("endpoint", q.endpoint);
  set("cache", q.cache);
  set("user_id", q.userId);
  for (const [k, v] of Object.entries(q.metadata ?? {})) p.set(`metadata.${k}`, v);
  return p;
}

/** Sends `authorization: Bearer <token>` with every call: the core port's admin credential. */
export const bearerAuth =
  (token: string): Interceptor =>
  (next) =>
  (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };

/** The core's services over gRPC (or Connect with `protocol: "connect"`), for internal consumers; every call needs the admin token. */
export function createCoreClients(opts: { url: string; adminToken: string; protocol?: "grpc" | "connect" }): {
  auth: Client<typeof AuthService>;
  cache: Client<typeof CacheService>;
  limits: Client<typeof LimitsService>;
  proxy: Client<typeof ProxyService>;
  telemetry: Client<typeof TelemetryService>;
} {
  checkBaseUrl(opts.url, "{ url }");
  const auth = bearerAuth(opts.adminToken);
  const transport =
    opts.protocol === "connect"
      ? createConnectTransport({ baseUrl: opts.url, httpVersion: "1.1", interceptors: [auth] })
      : createGrpcTransport({ baseUrl: opts.url, interceptors: [auth] });
  return {
    auth: createClient(AuthService, transport),
    cache: createClient(CacheService, transport),
    limits: createClient(LimitsService, transport),
    proxy: createClient(ProxyService, transport),
    telemetry: createClient(TelemetryService, transport),
  };
}
