import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type Client, Code, type ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { bearerAuth } from "../client/svc-client.js";
import { connectHost, DEFAULT_HOST, localCoreUrl } from "../config.js";
import { carriesErrorInfo } from "../core/errors.js";
import { shownUrl } from "../core/text.js";
import { AuthService } from "../gen/svc/auth/v1/auth_service_pb.js";
import { LimitsService } from "../gen/svc/limits/v1/limits_service_pb.js";
import { TelemetryService } from "../gen/svc/telemetry/v1/telemetry_service_pb.js";

export interface AdminTarget {
  server: string;
  token: string;
}

/**
 * Where the CLI looks for the core when neither --server nor SVC_SERVER_URL is set: where `svc
 * serve` listens with the same SVC_HOST and SVC_GRPC_PORT (a wildcard host is reached on loopback).
 * For messages: a bad setting is shown as written here, and refused by resolveAdminTarget.
 */
export function defaultServerUrl(env = process.env): string {
  try {
    return localCoreUrl(env);
  } catch {
    return `http://${connectHost(env.SVC_HOST || DEFAULT_HOST)}:${env.SVC_GRPC_PORT || 8090}`;
  }
}

/** The server the admin commands talk to: `--server`, else SVC_SERVER_URL, else the local gRPC port. */
export const serverOf = (flags: { server?: string }, env = process.env): string => flags.server || env.SVC_SERVER_URL || defaultServerUrl(env);

/**
 * Finds the running server from the same settings `svc serve` reads: `--server`, else
 * SVC_SERVER_URL, else the local gRPC address (SVC_HOST, 127.0.0.1; SVC_GRPC_PORT, 8090); a bad
 * one of those is a ConfigError naming it. The admin token comes from `--admin-token`,
 * SVC_ADMIN_TOKEN, or the file `svc serve` generated under the data dir: that one only for the
 * local server (the default address, or a loopback one), never sent to a server named elsewhere.
 */
export function resolveAdminTarget(flags: { server?: string; adminToken?: string }, env = process.env): AdminTarget {
  const server = flags.server || env.SVC_SERVER_URL || localCoreUrl(env);
  let url: URL | undefined;
  try {
    url = new URL(server);
  } catch {
    // refused below
  }
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) {
    throw new UsageError(`the server must be an http(s) URL such as ${defaultServerUrl(env)} (the core's gRPC port), got '${shownUrl(server)}'`);
  }
  // Looked for as written: an empty query or fragment (`...:8090/?`) parses to none, yet every
  // call's path would follow it.
  if (/[?#]/.test(server)) {
    throw new UsageError(`the server must not have a query or fragment (the core answers at the root of its port, such as ${defaultServerUrl(env)}), got '${shownUrl(server)}'`);
  }
  let token = flags.adminToken || env.SVC_ADMIN_TOKEN || "";
  if (!token) {
    const path = adminTokenFile(env);
    // The data dir's token is the local server's: a server named elsewhere has its own.
    if ((flags.server || env.SVC_SERVER_URL) && !isLoopback(url.hostname)) {
      throw new UsageError(`no admin token for ${shownUrl(server)}: set SVC_ADMIN_TOKEN (or pass --admin-token) to that server's token; the local data dir's (${path}) is only sent to a server on this machine`);
    }
    try {
      token = readFileSync(path, "utf8").trim();
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      if (err.code !== "ENOENT") {
        throw new UsageError(`no admin token: ${path} cannot be read (${err.message}); run as the user that runs svc serve, or set SVC_ADMIN_TOKEN or pass --admin-token`);
      }
      throw new UsageError(`no admin token: set SVC_ADMIN_TOKEN or pass --admin-token (the server's own SVC_ADMIN_TOKEN, when it has one), or run where ${path} exists (svc serve without SVC_ADMIN_TOKEN writes it at first start; set SVC_DATA_DIR to the server's data dir)`);
    }
    if (!token) throw new UsageError(`no admin token: ${path} is empty (svc serve fills it at its next start); set SVC_ADMIN_TOKEN or pass --admin-token`);
  }
  // Sent as `authorization: Bearer <token>`: a token no header can carry is refused here, without
  // being printed (the HTTP layer's own error quotes the header value).
  if (!/^[\x21-\x7e]+$/.test(token)) {
    throw new UsageError(`the admin token from ${adminTokenSource(flags, env)} must be printable ASCII without spaces or control characters; check it`);
  }
  return { server, token };
}

const isLoopback = (host: string): boolean => host === "localhost" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);

/** The file `svc serve` generates the admin token into, when none is configured. */
const adminTokenFile = (env: NodeJS.ProcessEnv) => join(resolve(env.SVC_DATA_DIR || "data"), "admin-token");

/** Where the CLI took its admin token from, for a refusal's message. */
export function adminTokenSource(flags: { adminToken?: string }, env = process.env): string {
  if (flags.adminToken) return "--admin-token";
  if (env.SVC_ADMIN_TOKEN) return "SVC_ADMIN_TOKEN";
  return `the file ${adminTokenFile(env)}`;
}

/** Errors of a TLS handshake with a server that does not speak TLS on that port. */
const TLS_MISMATCH = /EPROTO|wrong version number|packet length too long|SSL routines|ERR_SSL_/;

/**
 * What to print for a failed admin call. The core's own refusals carry its message, printed as it
 * is; a server that is not the core (the gateway's or management port, another service, a path
 * the core does not serve) answers without one, and a TLS handshake with a plain-HTTP port fails
 * with OpenSSL's words: both are told as "this is not the core's address", with the default.
 */
export function adminCallMessage(e: ConnectError, server: string, env = process.env, tokenSource?: string): string {
  const where = `the default is ${defaultServerUrl(env)} (the core's gRPC port: SVC_HOST and SVC_GRPC_PORT, as \`svc serve\` reads them); set --server or SVC_SERVER_URL`;
  let url: URL | undefined;
  try {
    url = new URL(server);
  } catch {
    // resolveAdminTarget refused it before any call
  }
  const cause = e.cause as NodeJS.ErrnoException | undefined;
  if (url?.protocol === "https:" && (TLS_MISMATCH.test(e.rawMessage) || TLS_MISMATCH.test(cause?.code ?? ""))) {
    return `${shownUrl(server)} does not look like the svc core's gRPC address: it does not speak TLS (https) on that port. The core serves plain HTTP (h2c) unless a TLS proxy is put in front of it: use http://; ${where}`;
  }
  if (!carriesErrorInfo(e) && (e.rawMessage === "" || /^HTTP \d{3}$/.test(e.rawMessage))) {
    const answered = e.rawMessage ? `it answered ${e.rawMessage}` : `it answered ${Code[e.code]} with no message, as the gateway's and management ports do`;
    const path = url && url.pathname !== "/" ? ` (the core answers at the root of its port, with no path: drop '${url.pathname}')` : "";
    return `${shownUrl(server)} does not look like the svc core's gRPC address: ${answered}${path}; ${where}`;
  }
  // The server's own 503 (its registry's Redis is unreachable) says so itself: only a server
  // that did not answer at all gets the hint.
  const hint =
    (e.code === Code.Unavailable && !carriesErrorInfo(e)) || (e.code === Code.Unknown && /ECONNREFUSED|fetch failed/.test(e.rawMessage))
      ? " (is `svc serve` running? set --server or SVC_SERVER_URL)"
      : e.code === Code.Unauthenticated
        ? tokenSource
          ? ` (the token from ${tokenSource} was refused; the server's is SVC_ADMIN_TOKEN as it was started, else the file it generated into its data dir: set SVC_ADMIN_TOKEN or --admin-token to it)`
          : " (check SVC_ADMIN_TOKEN or --admin-token)"
        : "";
  return `${e.rawMessage}${hint}`;
}

/** A bad command line; printed with usage and exit code 2. */
export class UsageError extends Error {}

// A deadline for every admin call: a server (or its Redis) that stops answering must not hang the CLI.
const transportFor = (target: AdminTarget) =>
  createConnectTransport({ baseUrl: target.server, httpVersion: "1.1", interceptors: [bearerAuth(target.token)], defaultTimeoutMs: 30_000 });

export function createAdminClient(target: AdminTarget): Client<typeof AuthService> {
  return createClient(AuthService, transportFor(target));
}

/**
 * A client made at its first call, once the command's own arguments are read: a usage error
 * (`--mode is required`) is told before a missing admin token, which resolveAdminTarget reports.
 */
export function madeAtFirstCall<T extends object>(make: () => T): T {
  let made: T | undefined;
  return new Proxy({} as T, {
    get: (_target, method) => (...args: unknown[]) => {
      made ??= make();
      return (made as Record<PropertyKey, (...a: unknown[]) => unknown>)[method]!(...args);
    },
  });
}

/** The TelemetryService of the running server, for prompts. */
export function createTelemetryAdminClient(target: AdminTarget): Client<typeof TelemetryService> {
  return createClient(TelemetryService, transportFor(target));
}

/** The LimitsService of the running server, for usage figures. */
export function createLimitsAdminClient(target: AdminTarget): Client<typeof LimitsService> {
  return createClient(LimitsService, transportFor(target));
}
