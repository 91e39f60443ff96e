import { existsSync, readFileSync } from "node:fs";
import { isIP, isIPv6 } from "node:net";
import { join, resolve } from "node:path";
import { ApiStyle } from "./gen/svc/proxy/v1/proxy_service_pb.js";
import { defaultCachePrices, defaultModels, FALLBACK_IMAGE_TOKENS, FALLBACK_MAX_OUTPUT_TOKENS, type ModelRoute } from "./core/proxy/models.js";
import { parsePrice } from "./core/proxy/cost.js";
import { isObject, type JsonObject } from "./core/json.js";
import { shownUrl } from "./core/text.js";
import { MAX_CACHE_TTL_SECONDS } from "./core/cache/cache-service.js";
import { isLogLevel } from "./logger.js";

/** An upstream provider: its wire style, where it is and its key. */
export interface ProviderConfig {
  name: string;
  style: ApiStyle;
  baseUrl: string;
  apiKey: string;
  /** The setting the API key comes from (SVC_OPENAI_API_KEY, a config file's `apiKeyEnv`), named in errors. */
  apiKeyEnv?: string;
  /**
   * Whether a request needs the key wherever the provider is: a config file's provider that names an
   * `apiKeyEnv` says it takes one. The built-in two need it only at their public addresses (a
   * compatible server on another address, a local one, may take none).
   */
  keyRequired?: boolean;
  /** The setting the base URL comes from, named in warnings. */
  baseUrlSetting?: string;
}

/** The public hosts whose calls cannot work without a configured key. */
const PUBLIC_HOSTS = new Set(["api.openai.com", "api.anthropic.com"]);

/**
 * Whether the provider's requests are refused for want of a key (502 upstream_not_configured): it
 * has none, and needs one: a config file's provider naming `apiKeyEnv`, or a built-in one at its
 * public address.
 */
export const lacksKey = (p: ProviderConfig): boolean => !p.apiKey && (p.keyRequired === true || PUBLIC_HOSTS.has(new URL(p.baseUrl).hostname));

/**
 * A warning about a provider that is probably set up wrong, or undefined: it lacks the key it needs
 * (lacksKey), or its base URL (as config.ts keeps it, without a trailing slash) has the other
 * style's shape: an OpenAI-style one
 * is the SDK's base, ending in `/v1` (requests go to `{base}/chat/completions`), an Anthropic-style
 * one is not (requests go to `{base}/v1/messages`). Only warned at start, not refused: a compatible
 * provider may put its API at another path.
 */
export function providerWarning(p: ProviderConfig): string | undefined {
  if (lacksKey(p)) {
    if (p.keyRequired) return `the ${p.name} provider names its key's variable ${p.apiKeyEnv}, which is unset or empty: its models are answered 502 upstream_not_configured until it is set`;
    // A config file's provider at a public address that names no variable to read its key from.
    if (!p.apiKeyEnv) return `the ${p.name} provider (${p.baseUrl}) needs a key and names no variable to read it from: its models are answered 502 upstream_not_configured until the config file gives it one (providers.${p.name}.apiKeyEnv)`;
    return `${p.apiKeyEnv} is unset or empty: the ${p.name} provider's models are answered 502 upstream_not_configured until it is set (or start with --demo to answer every model from the built-in provider)`;
  }
  const path = new URL(p.baseUrl).pathname.replace(/\/+$/, "");
  const setting = p.baseUrlSetting ?? `the ${p.name} provider's base URL`;
  if (p.style === ApiStyle.CHAT_COMPLETIONS && !path.endsWith("/v1")) {
    return `${setting} (${p.baseUrl}) does not end in /v1: chat requests go to ${p.baseUrl}/chat/completions (an OpenAI-style base URL is the SDK's, such as https://api.openai.com/v1)`;
  }
  if (p.style === ApiStyle.MESSAGES && path.endsWith("/v1")) {
    return `${setting} (${p.baseUrl}) ends in /v1: messages requests go to ${p.baseUrl}/v1/messages (an Anthropic-style base URL has no /v1, such as https://api.anthropic.com)`;
  }
  return undefined;
}

/** Upstream timeouts, in milliseconds. */
export interface Timeouts {
  /** TCP/TLS connect. */
  connectMs: number;
  /** From sending the request to the response headers. */
  firstByteMs: number;
  /** Longest silence between two body chunks of a response (an idle stream). */
  idleMs: number;
  /** The whole upstream exchange. */
  totalMs: number;
}

/** The response cache. */
export interface CacheConfig {
  /** False with SVC_CACHE_DISABLED=1: no lookups, no stores, every answer a MISS. */
  enabled: boolean;
  /** How long an answer stays cached when its writer names no TTL, in seconds. */
  ttlSeconds: number;
  /** The byte budget of the embedded (in-memory) cache; in cluster mode Redis's maxmemory rules. */
  maxBytes: number;
  /** The largest answer cached, in bytes of its serialized form. */
  maxEntryBytes: number;
}

/** Rate limits and spend caps (LimitsService). */
export interface LimitsConfig {
  /** Refuse live requests while the limits store is unreachable; by default they are admitted unchecked. */
  failClosed: boolean;
  /** How long the reserved cost of a request that never settles (its process died) counts, in ms. */
  reservationTtlMs: number;
  /**
   * Admit a live request while its key is still being verified, on the limits its project had at
   * the key's last verification, and take the admission back when the verdict differs
   * (SVC_LIMITS_ADMIT_AHEAD; by default on with Redis, where it saves a round trip, off in memory).
   */
  admitAhead: boolean;
}

/** Request logs and analytics (TelemetryService). */
export interface TelemetryConfig {
  /** A ClickHouse server (cluster mode); unset: chDB embedded under `<dataDir>/telemetry`. */
  clickhouseUrl: string | undefined;
  /** How long request and response bodies are kept, in days; the rest of a log stays. */
  bodyTtlDays: number;
  /** Logs per insert. */
  batchSize: number;
  /** How often queued logs are written, in milliseconds. */
  flushIntervalMs: number;
  /** Where logs wait on disk while the store is unreachable. */
  spoolDir: string;
  /** The spool's byte budget; logs beyond it are dropped and counted. */
  spoolMaxBytes: number;
  /**
   * The embedded engine's CPU priority, as a nice value (0-19; 0 is the gateway's own): its
   * inserts and merges then yield the cores to requests. Unused with a ClickHouse server.
   */
  engineNice: number;
}

/** Everything `svc serve` runs on. */
export interface Config {
  host: string;
  gatewayPort: number;
  managementPort: number;
  grpcPort: number;
  /** The demo provider's port (`--demo`), on 127.0.0.1; 0: a free one. */
  demoPort: number;
  dataDir: string;
  redisUrl: string | undefined;
  /**
   * SVC_REDIS_CLUSTER: whether SVC_REDIS_URL names a node of a Redis Cluster (true) or a single
   * server (false); undefined: asked of the server at start (`cluster_enabled`).
   */
  redisCluster: boolean | undefined;
  adminToken: string | undefined;
  /** Largest accepted request body, in bytes. */
  maxRequestBytes: number;
  /** The bytes of request bodies coming in, all requests together (facades/gateway/body-budget.ts). */
  maxBodyBytesInFlight: number;
  /**
   * A live stream that has sent nothing for this long gets an SSE comment (`: keep-alive`), which
   * the SDKs skip, so a proxy's idle timeout in front does not cut it while the upstream is quiet
   * (Anthropic's own `ping` events are not passed on). 0: none.
   */
  streamKeepAliveMs: number;
  timeouts: Timeouts;
  cache: CacheConfig;
  limits: LimitsConfig;
  telemetry: TelemetryConfig;
  providers: Map<string, ProviderConfig>;
  models: Map<string, ModelRoute>;
}

/** A setting with a bad value: the message names the setting and what is expected. */
export class ConfigError extends Error {}

/** The shortest admin token taken: the one token guards every admin call on the core port. */
export const MIN_ADMIN_TOKEN_LENGTH = 16;

/**
 * Refuses an admin token that is too short to guard the core port (projects, keys, every log), or
 * that a `Bearer` header cannot carry (spaces, control or non-ASCII characters). `source` names
 * where it came from; the message never quotes the token.
 */
export function checkAdminToken(token: string, source: string): string {
  if (!/^[\x21-\x7e]*$/.test(token)) {
    throw new ConfigError(`${source} must be printable ASCII without spaces (it is sent as \`authorization: Bearer <token>\`)`);
  }
  if (token.length < MIN_ADMIN_TOKEN_LENGTH) {
    throw new ConfigError(
      `${source} is ${token.length} character${token.length === 1 ? "" : "s"} long; an admin token must be at least ${MIN_ADMIN_TOKEN_LENGTH} (it guards every admin call on the core port). ` +
        "Use a random one (e.g. `openssl rand -base64 32`), or leave SVC_ADMIN_TOKEN unset and `svc serve` generates one into $SVC_DATA_DIR/admin-token",
    );
  }
  return token;
}

const defaultTimeouts: Timeouts = { connectMs: 10_000, firstByteMs: 120_000, idleMs: 60_000, totalMs: 600_000 };

/**
 * The wire styles a provider's `style` and a model's `surface` name. A Map, not an object: a
 * lookup in an object finds its prototype's members too ("constructor", "toString").
 */
const styles = new Map<unknown, ApiStyle>([
  ["chat-completions", ApiStyle.CHAT_COMPLETIONS],
  ["messages", ApiStyle.MESSAGES],
]);

/** A whole number written in plain decimal digits, or NaN: `Number()` alone would also take "0x50" or "1e3". */
const decimal = (s: string): number => (/^\d+$/.test(s.trim()) ? Number(s) : NaN);

/** An integer setting from min to max, or `fallback` when unset; `what` says what is expected. */
function intInRange(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number, what: string): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = decimal(raw);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new ConfigError(`${name} must be ${what}, got ${JSON.stringify(raw)}`);
  return n;
}

/** A port setting (0 picks a free one), or `fallback` when unset. */
export const portSetting = (env: NodeJS.ProcessEnv, name: string, fallback: number): number => intInRange(env, name, fallback, 0, 65535, "a port number (0-65535)");

/**
 * A positive whole number (a decimal string from the environment, a number from the config file),
 * at most `max`; `maxText` says the maximum in words in the refusal ("30 days").
 */
function positiveInt(v: unknown, name: string, max = Number.MAX_SAFE_INTEGER, maxText?: string): number {
  const n = typeof v === "string" ? decimal(v) : v;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n <= 0 || n > max) {
    throw new ConfigError(`${name} must be a positive integer up to ${max}${maxText ? ` (${maxText})` : ""}, got ${JSON.stringify(v)}`);
  }
  return n;
}

/**
 * The largest request body and cached answer a setting may allow: a body is read into one string,
 * and the core port reads messages of twice that (coreReadMaxBytes), which its HTTP/2 stack caps
 * below 4 GiB; a V8 string stops short of 512 Mi characters.
 */
export const MAX_BODY_BYTES = 256 * 1024 * 1024;

/** The longest delay a Node timer keeps (2^31 - 1 ms, about 24.8 days); a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;


function url(v: unknown, name: string): string {
  if (typeof v !== "string") throw new ConfigError(`${name} must be a URL string`);
  try {
    const u = new URL(v);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error();
  } catch {
    throw new ConfigError(`${name} must be an http(s) URL, got ${JSON.stringify(shownUrl(v))}`);
  }
  return v.replace(/\/+$/, "");
}

/**
 * A provider's base URL: a URL the endpoint's path is appended to, so no query or fragment (they
 * would end up before it), and no user name or password (never sent: the provider's key has its
 * own setting).
 */
function baseUrl(v: unknown, name: string): string {
  const u = url(v, name);
  if (/[?#]/.test(u)) throw new ConfigError(`${name} must not hold a query string or fragment (requests go to the base URL with the endpoint's path appended), got ${JSON.stringify(shownUrl(u))}`);
  const parsed = new URL(u);
  if (parsed.username !== "" || parsed.password !== "") {
    throw new ConfigError(`${name} must not hold a user name or password (they are not sent; the provider's API key has its own setting), got ${JSON.stringify(shownUrl(u))}`);
  }
  return u;
}

/**
 * What a cluster replica (SVC_REDIS_URL set) shares only when its settings say so, warned about at
 * start: request logs go to a ClickHouse server only with SVC_CLICKHOUSE_URL (without it each
 * replica keeps its own in chDB, and a log is found only on the replica that served it), and the
 * admin token is one for all only with SVC_ADMIN_TOKEN (without it each replica generates its own).
 */
export function clusterWarnings(config: Pick<Config, "redisUrl" | "adminToken"> & { telemetry: Pick<TelemetryConfig, "clickhouseUrl"> }): string[] {
  if (!config.redisUrl) return [];
  const out: string[] = [];
  if (!config.telemetry.clickhouseUrl) {
    out.push("SVC_REDIS_URL is set without SVC_CLICKHOUSE_URL: this replica keeps its request logs and analytics in its own embedded chDB, so /v1/logs and /v1/analytics answer only for the requests it served; set SVC_CLICKHOUSE_URL for logs shared by every replica");
  }
  if (!config.adminToken) {
    out.push("SVC_REDIS_URL is set without SVC_ADMIN_TOKEN: this replica uses an admin token of its own (in its data dir), which other replicas refuse; give every replica the same SVC_ADMIN_TOKEN");
  }
  return out;
}

/** The listen address when SVC_HOST is unset. */
export const DEFAULT_HOST = "127.0.0.1";

/** One label of a DNS name: letters, digits, `-` (not at either end) and `_`, at most 63. */
const LABEL = /^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$/;

/**
 * SVC_HOST: an IP address or a DNS name, as `listen()` takes it. A name whose last label is all
 * digits is a mistyped IPv4 address (`999.1.1.1`, `10.0.0`): refused here, before anything starts,
 * rather than looked up as a name when the first port listens. Whether the address is one of this
 * machine's is checked when the server starts (server.ts).
 */
function hostSetting(v: string | undefined): string {
  if (v === undefined || v === "") return DEFAULT_HOST;
  if (isIP(v)) return v;
  const labels = v.replace(/\.$/, "").split(".");
  if (v.length > 253 || !labels.every((l) => LABEL.test(l)) || /^\d+$/.test(labels.at(-1)!)) {
    throw new ConfigError(`SVC_HOST must be an IP address (such as 127.0.0.1, 0.0.0.0 or ::) or a host name, without a scheme, port or brackets, got ${JSON.stringify(v)}`);
  }
  return v;
}

/**
 * The host a client on this machine connects to for a server listening on `host`: a wildcard
 * address (0.0.0.0, ::) listens on every interface, loopback included, and is reached there; an
 * IPv6 address is bracketed, as a URL writes it. The banner of `svc serve` and the CLI's default
 * server address both come from it, so the CLI finds the server from the settings it was started with.
 */
export function connectHost(host: string): string {
  if (host === "0.0.0.0" || (isIPv6(host) && /^[0:]+$/.test(host))) return "127.0.0.1";
  return isIPv6(host) ? `[${host}]` : host;
}

/**
 * The core's gRPC URL for a client on this machine, from the settings `svc serve` listens on
 * (SVC_HOST, SVC_GRPC_PORT, with their defaults): where the CLI finds the server. Throws
 * ConfigError naming a bad setting, or SVC_GRPC_PORT=0 (a free port picked at start, which only
 * the server's banner tells).
 */
export function localCoreUrl(env: NodeJS.ProcessEnv): string {
  const host = connectHost(hostSetting(env.SVC_HOST));
  const grpcPort = portSetting(env, "SVC_GRPC_PORT", 8090);
  if (grpcPort === 0) {
    throw new ConfigError("SVC_GRPC_PORT is 0, so `svc serve` listens on a free port it picks at start: set --server or SVC_SERVER_URL to the core gRPC address its banner printed");
  }
  return `http://${host}:${grpcPort}`;
}

/**
 * SVC_REDIS_URL: a `redis://` or `rediss://` URL, or unset. Its path, when it has one, is the
 * database's number (`/2`), as the `db` query parameter may be: anything else is refused here, as
 * the Redis client would send it as it is (`SELECT abc`, `SELECT -1`), and a refused SELECT leaves
 * a connection on database 0 (see stayOnConfiguredDb, stores/redis-connection.ts).
 */
function redisUrl(v: string | undefined): string | undefined {
  if (!v) return undefined;
  let parsed: URL | undefined;
  try {
    parsed = new URL(v);
  } catch {
    // not a URL at all
  }
  // The value is not echoed: it may hold a password. A URL of the right scheme that does not parse
  // is nearly always a password with characters a URL reserves.
  if (!parsed && /^rediss?:\/\//i.test(v)) {
    throw new ConfigError("SVC_REDIS_URL is not a valid URL: percent-encode the characters of the user name and password that a URL reserves (@ : / ? # % and space: %40 %3A %2F %3F %23 %25 %20), e.g. redis://:p%40ss@127.0.0.1:6379");
  }
  if (!parsed || !["redis:", "rediss:"].includes(parsed.protocol)) {
    throw new ConfigError(`SVC_REDIS_URL must be a redis:// or rediss:// URL such as redis://127.0.0.1:6379, got one starting ${JSON.stringify(v.slice(0, 8))}`);
  }
  const path = parsed.pathname.replace(/^\//, "");
  const queries = parsed.searchParams.getAll("db");
  // The Redis client takes the last of several: the one checked must be the one used.
  if (queries.length > 1) throw new ConfigError(`SVC_REDIS_URL names the database ${queries.length} times (db parameters); name it once`);
  const query = queries[0] ?? null;
  for (const [db, where] of [[path, "its path"], [query, "its db parameter"]] as const) {
    if (db !== null && db !== "" && !/^\d+$/.test(db)) {
      throw new ConfigError(`SVC_REDIS_URL names the database by number (redis://host:6379/2; none: 0), but ${where} is ${JSON.stringify(db)}`);
    }
  }
  // Both: the client takes the path's, and drops the other without a word.
  if (path !== "" && query !== null) throw new ConfigError("SVC_REDIS_URL names the database twice, in its path and in a db parameter; name it once");
  // The user name and password are percent-decoded for Redis: a `%` not starting an escape cannot be.
  for (const [part, what] of [[parsed.username, "user name"], [parsed.password, "password"]] as const) {
    try {
      decodeURIComponent(part);
    } catch {
      throw new ConfigError(`SVC_REDIS_URL's ${what} holds a % that starts no escape: percent-encode it as %25 (and the other characters a URL reserves: @ : / ? # and space as %40 %3A %2F %3F %23 %20)`);
    }
  }
  return v;
}

/** The config file's sections; a key not listed is a typo, refused rather than silently ignored. */
const FILE_KEYS: Record<string, readonly string[] | undefined> = {
  providers: undefined,
  models: undefined,
  timeouts: ["connectMs", "firstByteMs", "idleMs", "totalMs"],
  maxRequestBytes: undefined,
};
const PROVIDER_KEYS = ["style", "baseUrl", "apiKeyEnv"];
const MODEL_KEYS = ["surface", "provider", "upstreamModel", "inputPer1M", "outputPer1M", "cacheReadPer1M", "cacheWritePer1M", "cacheWrite1hPer1M", "maxOutputTokens", "imageTokens"];
/** The prices of a model, USD per 1M tokens; the cache's default to the provider's multiples of the input price. */
const PRICE_KEYS = ["inputPer1M", "outputPer1M", "cacheReadPer1M", "cacheWritePer1M", "cacheWrite1hPer1M"] as const;

function checkKeys(obj: JsonObject, known: readonly string[], where: string): void {
  for (const k of Object.keys(obj)) {
    if (!known.includes(k)) throw new ConfigError(`${where} has an unknown key ${JSON.stringify(k)} (known: ${known.join(", ")})`);
  }
}

function readFileConfig(path: string | undefined): JsonObject {
  if (!path) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new ConfigError(`cannot read config file ${path}: ${(e as Error).message}`);
  }
  if (!isObject(parsed)) throw new ConfigError(`config file ${path} must hold a JSON object`);
  checkKeys(parsed, Object.keys(FILE_KEYS), `config file ${path}`);
  for (const [section, keys] of Object.entries(FILE_KEYS)) {
    const v = parsed[section];
    if (keys && isObject(v)) checkKeys(v, keys, `config ${section}`);
  }
  for (const [section, keys] of [["providers", PROVIDER_KEYS], ["models", MODEL_KEYS]] as const) {
    const v = parsed[section];
    if (isObject(v)) for (const [name, entry] of Object.entries(v)) if (isObject(entry)) checkKeys(entry, keys, `config ${section}.${name}`);
  }
  return parsed;
}

/**
 * A provider's API key from the environment variable `name` ("" when unset). It is sent in a header
 * (`Authorization: Bearer`, `x-api-key`), so it must be printable ASCII without spaces: a newline
 * (a secret file's last line) made every request fail (502 upstream_unreachable: the HTTP client
 * refuses the header), and spaces reached the upstream as part of the key. Refused at start; the
 * message never quotes the key. `owner` says whose key it is, for a variable the config file names.
 */
function apiKeySetting(env: NodeJS.ProcessEnv, name: string, owner = ""): string {
  const key = env[name] ?? "";
  if (/^[\x21-\x7e]*$/.test(key)) return key;
  const what = /^\s|\s$/.test(key)
    ? "leading or trailing whitespace (such as the trailing newline of a secret file)"
    : "whitespace, control or non-ASCII characters";
  throw new ConfigError(`${name}${owner} holds ${what}: an API key is sent in a request header and must be printable ASCII without spaces; strip it (the key is not shown here)`);
}

function providers(env: NodeJS.ProcessEnv, file: JsonObject): Map<string, ProviderConfig> {
  const out = new Map<string, ProviderConfig>([
    ["openai", { name: "openai", style: ApiStyle.CHAT_COMPLETIONS, baseUrl: baseUrl(env.SVC_OPENAI_BASE_URL || "https://api.openai.com/v1", "SVC_OPENAI_BASE_URL"), apiKey: apiKeySetting(env, "SVC_OPENAI_API_KEY"), apiKeyEnv: "SVC_OPENAI_API_KEY", baseUrlSetting: "SVC_OPENAI_BASE_URL" }],
    ["anthropic", { name: "anthropic", style: ApiStyle.MESSAGES, baseUrl: baseUrl(env.SVC_ANTHROPIC_BASE_URL || "https://api.anthropic.com", "SVC_ANTHROPIC_BASE_URL"), apiKey: apiKeySetting(env, "SVC_ANTHROPIC_API_KEY"), apiKeyEnv: "SVC_ANTHROPIC_API_KEY", baseUrlSetting: "SVC_ANTHROPIC_BASE_URL" }],
  ]);
  const extra = file.providers;
  if (extra === undefined) return out;
  if (!isObject(extra)) throw new ConfigError("config `providers` must be an object of name -> {style, baseUrl, apiKeyEnv}");
  for (const [name, p] of Object.entries(extra)) {
    const where = `config providers.${name}`;
    if (!isObject(p)) throw new ConfigError(`${where} must be an object`);
    const style = styles.get(p.style);
    if (!style) throw new ConfigError(`${where}.style must be "chat-completions" or "messages"`);
    if (p.apiKeyEnv !== undefined && (typeof p.apiKeyEnv !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(p.apiKeyEnv))) {
      // Not quoted: a key written where its variable's name goes is the usual mistake.
      throw new ConfigError(`${where}.apiKeyEnv must name an environment variable (letters, digits and _), got ${typeof p.apiKeyEnv === "string" ? "a string that is not one (not shown: it may be the key itself)" : `a ${Array.isArray(p.apiKeyEnv) ? "list" : p.apiKeyEnv === null ? "null" : typeof p.apiKeyEnv}`}`);
    }
    const fileUrl = baseUrl(p.baseUrl, `${where}.baseUrl`);
    const fileKey = typeof p.apiKeyEnv === "string" ? { apiKey: apiKeySetting(env, p.apiKeyEnv, ` (the key of ${where})`), apiKeyEnv: p.apiKeyEnv, keyRequired: true } : undefined;
    const builtIn = out.get(name);
    if (builtIn) {
      // Redefining a built-in provider: its environment settings still apply over the file (the
      // base URL's variable, when set, wins as every variable does), and its key's variable stays
      // unless the file names another.
      const urlVar = builtIn.baseUrlSetting!;
      const key = fileKey ?? { apiKey: builtIn.apiKey, apiKeyEnv: builtIn.apiKeyEnv };
      out.set(name, { name, style, baseUrl: env[urlVar] ? builtIn.baseUrl : fileUrl, ...key, baseUrlSetting: env[urlVar] ? urlVar : `${where}.baseUrl` });
      continue;
    }
    out.set(name, { name, style, baseUrl: fileUrl, ...(fileKey ?? { apiKey: "" }), baseUrlSetting: `${where}.baseUrl` });
  }
  return out;
}

/**
 * A name the config file gives (a model's provider or upstream model): a non-empty string without
 * spaces at either end. Not coerced with String(), which took `{}` as "[object Object]" (sent
 * upstream as the model) and `["openai"]` as "openai".
 */
function nameSetting(v: unknown, where: string): string {
  if (typeof v !== "string" || v.trim() === "" || v.trim() !== v) {
    throw new ConfigError(`${where} must be a non-empty string without spaces at either end, got ${JSON.stringify(v)}`);
  }
  return v;
}

/** A price the config file gives, as the text parsePrice reads: a decimal string ("2.50") or a JSON number, nothing else coerced. */
function priceSetting(v: unknown, where: string): string {
  if (typeof v === "string" || (typeof v === "number" && Number.isFinite(v))) return String(v);
  throw new ConfigError(`${where} must be a price in USD per 1M tokens, a decimal string such as "2.50", got ${JSON.stringify(v)}`);
}

/**
 * The highest price a model may have, USD per 1M tokens: far above any real model's, and low enough
 * that a request's cost stays within what its log holds (under a million USD, see
 * MAX_LOGGED_COST_USD) for any real usage, so its X-Svc-Cost and its log agree. A price beyond it
 * is a typo, or a price per token or per 1K written where one per 1M belongs.
 */
export const MAX_PRICE_PER_1M = "10000";

function checkPrice(id: string, key: string, text: string): void {
  let price: bigint;
  try {
    price = parsePrice(text);
  } catch (e) {
    throw new ConfigError(`model ${id} ${key}: ${(e as Error).message}`);
  }
  if (price > parsePrice(MAX_PRICE_PER_1M)) {
    throw new ConfigError(`model ${id} ${key}: price ${JSON.stringify(text)} is above ${MAX_PRICE_PER_1M} USD per 1M tokens, the most a price may be (prices are per 1M tokens, not per token or per 1K)`);
  }
}

function models(file: JsonObject, known: Map<string, ProviderConfig>): Map<string, ModelRoute> {
  // A cache price left unset ("") is derived below from the input price, once the provider is known.
  const out = new Map(defaultModels.map((m) => [m.id, { ...m }]));
  const extra = file.models;
  if (extra !== undefined) {
    if (!isObject(extra)) throw new ConfigError(`config \`models\` must be an object of id -> {${MODEL_KEYS.join(", ")}}`);
    for (const [id, m] of Object.entries(extra)) {
      const where = `config models.${id}`;
      if (id.trim() === "") throw new ConfigError(`config models has the model id ${JSON.stringify(id)}: a model id must be a non-empty string`);
      if (!isObject(m)) throw new ConfigError(`${where} must be an object`);
      const base = out.get(id);
      const surface = m.surface === undefined ? base?.surface : styles.get(m.surface);
      if (!surface) throw new ConfigError(`${where}.surface must be "chat-completions" or "messages"${m.surface === undefined ? ": the endpoint that serves a model id of one's own" : ""}`);
      const route: ModelRoute = {
        id,
        surface,
        provider: m.provider === undefined ? base?.provider ?? "" : nameSetting(m.provider, `${where}.provider`),
        upstreamModel: m.upstreamModel === undefined ? base?.upstreamModel ?? "" : nameSetting(m.upstreamModel, `${where}.upstreamModel`),
        inputPer1M: m.inputPer1M === undefined ? base?.inputPer1M ?? "" : priceSetting(m.inputPer1M, `${where}.inputPer1M`),
        outputPer1M: m.outputPer1M === undefined ? base?.outputPer1M ?? "" : priceSetting(m.outputPer1M, `${where}.outputPer1M`),
        cacheReadPer1M: m.cacheReadPer1M === undefined ? "" : priceSetting(m.cacheReadPer1M, `${where}.cacheReadPer1M`),
        cacheWritePer1M: m.cacheWritePer1M === undefined ? "" : priceSetting(m.cacheWritePer1M, `${where}.cacheWritePer1M`),
        cacheWrite1hPer1M: m.cacheWrite1hPer1M === undefined ? "" : priceSetting(m.cacheWrite1hPer1M, `${where}.cacheWrite1hPer1M`),
        maxOutputTokens: FALLBACK_MAX_OUTPUT_TOKENS,
        imageTokens: FALLBACK_IMAGE_TOKENS,
      };
      // A default model's ceiling holds only while it still names the same upstream model.
      const sameModel = base !== undefined && base.provider === route.provider && base.upstreamModel === route.upstreamModel;
      if (m.maxOutputTokens !== undefined) route.maxOutputTokens = positiveInt(m.maxOutputTokens, `${where}.maxOutputTokens`);
      else if (sameModel) route.maxOutputTokens = base.maxOutputTokens;
      route.maxOutputTokensKnown = m.maxOutputTokens !== undefined || (sameModel && base.maxOutputTokensKnown !== false);
      if (m.imageTokens !== undefined) route.imageTokens = positiveInt(m.imageTokens, `${where}.imageTokens`);
      else if (sameModel) route.imageTokens = base.imageTokens;
      // Its cache prices hold while it also keeps its input price; otherwise they follow the input price.
      if (sameModel && base.inputPer1M === route.inputPer1M) {
        if (m.cacheReadPer1M === undefined) route.cacheReadPer1M = base.cacheReadPer1M;
        if (m.cacheWritePer1M === undefined) route.cacheWritePer1M = base.cacheWritePer1M;
        if (m.cacheWrite1hPer1M === undefined) route.cacheWrite1hPer1M = base.cacheWrite1hPer1M;
      }
      for (const k of ["cacheReadPer1M", "cacheWritePer1M", "cacheWrite1hPer1M"] as const) if (m[k] !== undefined) checkPrice(id, k, route[k]);
      if (!route.upstreamModel) throw new ConfigError(`${where}.upstreamModel is required`);
      if (!route.provider) throw new ConfigError(`${where}.provider is required`);
      for (const k of ["inputPer1M", "outputPer1M"] as const) if (!route[k]) throw new ConfigError(`${where}.${k} is required (USD per 1M tokens, such as "2.50")`);
      out.set(id, route);
    }
  }
  for (const m of out.values()) {
    const provider = known.get(m.provider);
    if (!provider) throw new ConfigError(`model ${m.id} names unknown provider ${JSON.stringify(m.provider)}`);
    for (const k of PRICE_KEYS) {
      if (m[k] === "" && k.startsWith("cache")) continue; // unset (a set one was checked above): derived from the input price below
      checkPrice(m.id, k, m[k]);
    }
    const derived = defaultCachePrices(m.inputPer1M, provider.style);
    if (m.cacheReadPer1M === "") m.cacheReadPer1M = derived.cacheReadPer1M;
    if (m.cacheWritePer1M === "") m.cacheWritePer1M = derived.cacheWritePer1M;
    if (m.cacheWrite1hPer1M === "") m.cacheWrite1hPer1M = derived.cacheWrite1hPer1M;
  }
  return out;
}

function timeouts(env: NodeJS.ProcessEnv, file: JsonObject): Timeouts {
  const t = file.timeouts === undefined ? {} : file.timeouts;
  if (!isObject(t)) throw new ConfigError("config `timeouts` must be an object");
  const pick = (key: keyof Timeouts, envName: string) =>
    env[envName] ? positiveInt(env[envName], envName, MAX_TIMER_MS) : t[key] === undefined ? defaultTimeouts[key] : positiveInt(t[key], `config timeouts.${key}`, MAX_TIMER_MS);
  return {
    connectMs: pick("connectMs", "SVC_UPSTREAM_CONNECT_TIMEOUT_MS"),
    firstByteMs: pick("firstByteMs", "SVC_UPSTREAM_FIRST_BYTE_TIMEOUT_MS"),
    idleMs: pick("idleMs", "SVC_UPSTREAM_IDLE_TIMEOUT_MS"),
    totalMs: pick("totalMs", "SVC_UPSTREAM_TOTAL_TIMEOUT_MS"),
  };
}

function cache(env: NodeJS.ProcessEnv): CacheConfig {
  const pick = (name: string, fallback: number, max?: number, maxText?: string) => (env[name] ? positiveInt(env[name], name, max, maxText) : fallback);
  return {
    enabled: !flag(env, "SVC_CACHE_DISABLED"),
    ttlSeconds: pick("SVC_CACHE_TTL_SECONDS", 3600, MAX_CACHE_TTL_SECONDS, "30 days"),
    maxBytes: pick("SVC_CACHE_MAX_BYTES", 256 * 1024 * 1024),
    maxEntryBytes: pick("SVC_CACHE_MAX_ENTRY_BYTES", 4 * 1024 * 1024, MAX_BODY_BYTES, "256 MiB"),
  };
}

/** The words a switch takes, in any case (spaces around them ignored); unset or empty is off. */
const ON = ["1", "true", "yes"];
const OFF = ["0", "false", "no"];

/** A switch: on or off, and the error lists exactly the words it takes. */
function flag(env: NodeJS.ProcessEnv, name: string): boolean {
  const raw = (env[name] ?? "").trim().toLowerCase();
  if (raw === "" || OFF.includes(raw)) return false;
  if (ON.includes(raw)) return true;
  throw new ConfigError(`${name} must be ${ON.join(", ")} (on) or ${OFF.join(", ")} (off), got ${JSON.stringify(env[name])}`);
}

function limits(env: NodeJS.ProcessEnv): LimitsConfig {
  return {
    failClosed: flag(env, "SVC_LIMITS_FAIL_CLOSED"),
    admitAhead: (env.SVC_LIMITS_ADMIT_AHEAD ?? "").trim() === "" ? Boolean(env.SVC_REDIS_URL) : flag(env, "SVC_LIMITS_ADMIT_AHEAD"),
    reservationTtlMs: env.SVC_LIMITS_RESERVATION_TTL_MS ? positiveInt(env.SVC_LIMITS_RESERVATION_TTL_MS, "SVC_LIMITS_RESERVATION_TTL_MS") : 15 * 60_000,
  };
}

function telemetry(env: NodeJS.ProcessEnv, dataDir: string): TelemetryConfig {
  const pick = (name: string, fallback: number, max: number) => (env[name] ? positiveInt(env[name], name, max) : fallback);
  return {
    clickhouseUrl: env.SVC_CLICKHOUSE_URL ? url(env.SVC_CLICKHOUSE_URL, "SVC_CLICKHOUSE_URL") : undefined,
    bodyTtlDays: pick("SVC_TELEMETRY_BODY_TTL_DAYS", 30, 3650),
    batchSize: pick("SVC_TELEMETRY_BATCH_SIZE", 10_000, 100_000),
    flushIntervalMs: pick("SVC_TELEMETRY_FLUSH_INTERVAL_MS", 1000, 60_000),
    spoolDir: dirSetting(env, "SVC_TELEMETRY_SPOOL_DIR", join(dataDir, "telemetry-spool"), "<SVC_DATA_DIR>/telemetry-spool"),
    spoolMaxBytes: pick("SVC_TELEMETRY_SPOOL_MAX_BYTES", 1024 ** 3, Number.MAX_SAFE_INTEGER),
    engineNice: intInRange(env, "SVC_TELEMETRY_ENGINE_NICE", 10, 0, 19, "a nice value from 0 (no change) to 19 (lowest priority)"),
  };
}

/**
 * A directory setting, resolved from the working directory; `fallback` when unset or empty
 * (`fallbackText` names it in the refusal). Only whitespace is refused, as other settings refuse it:
 * taken as a path, it made a directory named " " in the working directory.
 */
function dirSetting(env: NodeJS.ProcessEnv, name: string, fallback: string, fallbackText: string): string {
  const raw = env[name];
  if (raw === undefined || raw === "") return resolve(fallback);
  if (raw.trim() === "") throw new ConfigError(`${name} is only whitespace (${JSON.stringify(raw)}): set it to a directory, or leave it unset for ${fallbackText}`);
  return resolve(raw);
}

/** SVC_STREAM_KEEPALIVE_MS: 15 s unset, 0 for none, else a positive number of milliseconds. */
function streamKeepAlive(v: string | undefined): number {
  if (v === undefined || v.trim() === "") return 15_000;
  const n = decimal(v);
  if (!Number.isSafeInteger(n) || n < 0 || n > MAX_TIMER_MS) {
    throw new ConfigError(`SVC_STREAM_KEEPALIVE_MS must be a whole number of milliseconds from 0 (no keep-alive) to ${MAX_TIMER_MS}, got ${JSON.stringify(v)}`);
  }
  return n;
}

/** The three listening ports, each its own (0, a free port picked at start, may repeat). */
function ports(env: NodeJS.ProcessEnv): { gatewayPort: number; managementPort: number; grpcPort: number } {
  const named: Array<[string, number]> = [
    ["SVC_GATEWAY_PORT", portSetting(env, "SVC_GATEWAY_PORT", 8080)],
    ["SVC_MANAGEMENT_PORT", portSetting(env, "SVC_MANAGEMENT_PORT", 8081)],
    ["SVC_GRPC_PORT", portSetting(env, "SVC_GRPC_PORT", 8090)],
  ];
  for (let i = 0; i < named.length; i++) {
    for (let j = i + 1; j < named.length; j++) {
      if (named[i]![1] !== 0 && named[i]![1] === named[j]![1]) {
        throw new ConfigError(`${named[i]![0]} and ${named[j]![0]} are both ${named[i]![1]}: each server needs a port of its own`);
      }
    }
  }
  return { gatewayPort: named[0]![1], managementPort: named[1]![1], grpcPort: named[2]![1] };
}

/**
 * The largest request body (SVC_MAX_REQUEST_BYTES, or the config file's maxRequestBytes; 4 MiB),
 * and the bytes of bodies coming in at once (SVC_MAX_BODY_BYTES_IN_FLIGHT; by default 256 MiB or
 * four of the largest body, whichever is more), which must hold at least one whole body.
 */
function bodySizes(env: NodeJS.ProcessEnv, file: JsonObject): { maxRequestBytes: number; maxBodyBytesInFlight: number } {
  const maxRequestBytes = env.SVC_MAX_REQUEST_BYTES
    ? positiveInt(env.SVC_MAX_REQUEST_BYTES, "SVC_MAX_REQUEST_BYTES", MAX_BODY_BYTES, "256 MiB")
    : file.maxRequestBytes === undefined ? 4 * 1024 * 1024 : positiveInt(file.maxRequestBytes, "config maxRequestBytes", MAX_BODY_BYTES, "256 MiB");
  if (!env.SVC_MAX_BODY_BYTES_IN_FLIGHT) return { maxRequestBytes, maxBodyBytesInFlight: Math.max(256 * 1024 * 1024, 4 * maxRequestBytes) };
  const maxBodyBytesInFlight = positiveInt(env.SVC_MAX_BODY_BYTES_IN_FLIGHT, "SVC_MAX_BODY_BYTES_IN_FLIGHT");
  if (maxBodyBytesInFlight < maxRequestBytes) {
    const source = env.SVC_MAX_REQUEST_BYTES ? "SVC_MAX_REQUEST_BYTES" : file.maxRequestBytes === undefined ? "SVC_MAX_REQUEST_BYTES's default" : "the config file's maxRequestBytes";
    throw new ConfigError(`SVC_MAX_BODY_BYTES_IN_FLIGHT must be at least the largest request body (${source}, ${maxRequestBytes}), got ${maxBodyBytesInFlight}`);
  }
  return { maxRequestBytes, maxBodyBytesInFlight };
}

/**
 * Reads the configuration: environment variables for addresses, credentials and ports, and a JSON
 * file (`SVC_CONFIG`, else `./svc.config.json` when present) for models, prices, extra providers
 * and timeouts. Throws ConfigError naming the first bad setting.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const filePath = env.SVC_CONFIG || (existsSync("svc.config.json") ? "svc.config.json" : undefined);
  const file = readFileConfig(filePath);
  const known = providers(env, file);
  const dataDir = dirSetting(env, "SVC_DATA_DIR", "data", "./data");
  if (env.SVC_LOG_LEVEL && !isLogLevel(env.SVC_LOG_LEVEL)) throw new ConfigError(`SVC_LOG_LEVEL must be debug, info, warn or error, got ${JSON.stringify(env.SVC_LOG_LEVEL)}`);
  return {
    host: hostSetting(env.SVC_HOST),
    ...ports(env),
    demoPort: portSetting(env, "SVC_DEMO_PORT", 0),
    dataDir,
    redisUrl: redisUrl(env.SVC_REDIS_URL),
    redisCluster: (env.SVC_REDIS_CLUSTER ?? "").trim() === "" ? undefined : flag(env, "SVC_REDIS_CLUSTER"),
    adminToken: env.SVC_ADMIN_TOKEN ? checkAdminToken(env.SVC_ADMIN_TOKEN, "SVC_ADMIN_TOKEN") : undefined,
    ...bodySizes(env, file),
    streamKeepAliveMs: streamKeepAlive(env.SVC_STREAM_KEEPALIVE_MS),
    timeouts: timeouts(env, file),
    cache: cache(env),
    limits: limits(env),
    telemetry: telemetry(env, dataDir),
    providers: known,
    models: models(file, known),
  };
}
