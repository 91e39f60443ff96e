import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { ApiStyle } from "./gen/svc/proxy/v1/proxy_service_pb.js";
import { defaultModels, type ModelRoute } from "./core/proxy/models.js";
import { parsePrice } from "./core/proxy/cost.js";
import { isObject, type JsonObject } from "./core/json.js";

/** An upstream provider: its wire style, where it is and its key. */
export interface ProviderConfig {
  name: string;
  style: ApiStyle;
  baseUrl: string;
  apiKey: string;
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

/** Everything `svc serve` runs on. */
export interface Config {
  host: string;
  gatewayPort: number;
  managementPort: number;
  grpcPort: number;
  dataDir: string;
  redisUrl: string | undefined;
  adminToken: string | undefined;
  /** Largest accepted request body, in bytes. */
  maxRequestBytes: number;
  timeouts: Timeouts;
  providers: Map<string, ProviderConfig>;
  models: Map<string, ModelRoute>;
}

/** A setting with a bad value: the message names the setting and what is expected. */
export class ConfigError extends Error {}

const defaultTimeouts: Timeouts = { connectMs: 10_000, firstByteMs: 120_000, idleMs: 60_000, totalMs: 600_000 };

const styles: Record<string, ApiStyle> = {
  "chat-completions": ApiStyle.CHAT_COMPLETIONS,
  messages: ApiStyle.MESSAGES,
};

function port(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new ConfigError(`${name} must be a port number (0-65535), got ${JSON.stringify(raw)}`);
  return n;
}

function positiveInt(v: unknown, name: string): number {
  if (typeof v === "string" && v !== "") v = Number(v);
  if (typeof v !== "number" || !Number.isInteger(v) || v <= 0) throw new ConfigError(`${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

function url(v: unknown, name: string): string {
  if (typeof v !== "string") throw new ConfigError(`${name} must be a URL string`);
  try {
    const u = new URL(v);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error();
  } catch {
    throw new ConfigError(`${name} must be an http(s) URL, got ${JSON.stringify(v)}`);
  }
  return v.replace(/\/+$/, "");
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
  return parsed;
}

function providers(env: NodeJS.ProcessEnv, file: JsonObject): Map<string, ProviderConfig> {
  const out = new Map<string, ProviderConfig>([
    ["openai", { name: "openai", style: ApiStyle.CHAT_COMPLETIONS, baseUrl: url(env.SVC_OPENAI_BASE_URL || "https://api.openai.com/v1", "SVC_OPENAI_BASE_URL"), apiKey: env.SVC_OPENAI_API_KEY ?? "" }],
    ["anthropic", { name: "anthropic", style: ApiStyle.MESSAGES, baseUrl: url(env.SVC_ANTHROPIC_BASE_URL || "https://api.anthropic.com", "SVC_ANTHROPIC_BASE_URL"), apiKey: env.SVC_ANTHROPIC_API_KEY ?? "" }],
  ]);
  const extra = file.providers;
  if (extra === undefined) return out;
  if (!isObject(extra)) throw new ConfigError("config `providers` must be an object of name -> {style, baseUrl, apiKeyEnv}");
  for (const [name, p] of Object.entries(extra)) {
    const where = `config providers.${name}`;
    if (!isObject(p)) throw new ConfigError(`${where} must be an object`);
    const style = styles[String(p.style)];
    if (!style) throw new ConfigError(`${where}.style must be "chat-completions" or "messages"`);
    const apiKey = typeof p.apiKeyEnv === "string" ? env[p.apiKeyEnv] ?? "" : "";
    out.set(name, { name, style, baseUrl: url(p.baseUrl, `${where}.baseUrl`), apiKey });
  }
  return out;
}

function models(file: JsonObject, known: Map<string, ProviderConfig>): Map<string, ModelRoute> {
  const out = new Map(defaultModels.map((m) => [m.id, { ...m }]));
  const extra = file.models;
  if (extra !== undefined) {
    if (!isObject(extra)) throw new ConfigError("config `models` must be an object of id -> {surface, provider, upstreamModel, inputPer1M, outputPer1M}");
    for (const [id, m] of Object.entries(extra)) {
      const where = `config models.${id}`;
      if (!isObject(m)) throw new ConfigError(`${where} must be an object`);
      const base = out.get(id);
      const surface = m.surface === undefined ? base?.surface : styles[String(m.surface)];
      if (!surface) throw new ConfigError(`${where}.surface must be "chat-completions" or "messages"`);
      const route: ModelRoute = {
        id,
        surface,
        provider: String(m.provider ?? base?.provider ?? ""),
        upstreamModel: String(m.upstreamModel ?? base?.upstreamModel ?? ""),
        inputPer1M: String(m.inputPer1M ?? base?.inputPer1M ?? ""),
        outputPer1M: String(m.outputPer1M ?? base?.outputPer1M ?? ""),
      };
      if (!route.upstreamModel) throw new ConfigError(`${where}.upstreamModel is required`);
      out.set(id, route);
    }
  }
  for (const m of out.values()) {
    if (!known.has(m.provider)) throw new ConfigError(`model ${m.id} names unknown provider ${JSON.stringify(m.provider)}`);
    for (const k of ["inputPer1M", "outputPer1M"] as const) {
      try {
        parsePrice(m[k]);
      } catch (e) {
        throw new ConfigError(`model ${m.id} ${k}: ${(e as Error).message}`);
      }
    }
  }
  return out;
}

function timeouts(env: NodeJS.ProcessEnv, file: JsonObject): Timeouts {
  const t = file.timeouts === undefined ? {} : file.timeouts;
  if (!isObject(t)) throw new ConfigError("config `timeouts` must be an object");
  const pick = (key: keyof Timeouts, envName: string) =>
    env[envName] ? positiveInt(env[envName], envName) : t[key] === undefined ? defaultTimeouts[key] : positiveInt(t[key], `config timeouts.${key}`);
  return {
    connectMs: pick("connectMs", "SVC_UPSTREAM_CONNECT_TIMEOUT_MS"),
    firstByteMs: pick("firstByteMs", "SVC_UPSTREAM_FIRST_BYTE_TIMEOUT_MS"),
    idleMs: pick("idleMs", "SVC_UPSTREAM_IDLE_TIMEOUT_MS"),
    totalMs: pick("totalMs", "SVC_UPSTREAM_TOTAL_TIMEOUT_MS"),
  };
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
  return {
    host: env.SVC_HOST || "127.0.0.1",
    gatewayPort: port(env, "SVC_GATEWAY_PORT", 8080),
    managementPort: port(env, "SVC_MANAGEMENT_PORT", 8081),
    grpcPort: port(env, "SVC_GRPC_PORT", 8090),
    dataDir: resolve(env.SVC_DATA_DIR || "data"),
    redisUrl: env.SVC_REDIS_URL || undefined,
    adminToken: env.SVC_ADMIN_TOKEN || undefined,
    maxRequestBytes: env.SVC_MAX_REQUEST_BYTES
      ? positiveInt(env.SVC_MAX_REQUEST_BYTES, "SVC_MAX_REQUEST_BYTES")
      : file.maxRequestBytes === undefined ? 4 * 1024 * 1024 : positiveInt(file.maxRequestBytes, "config maxRequestBytes"),
    timeouts: timeouts(env, file),
    providers: known,
    models: models(file, known),
  };
}
