import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type Client, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { bearerAuth } from "../client/svc-client.js";
import { AuthService } from "../gen/svc/auth/v1/auth_service_pb.js";
import { LimitsService } from "../gen/svc/limits/v1/limits_service_pb.js";
import { TelemetryService } from "../gen/svc/telemetry/v1/telemetry_service_pb.js";

export interface AdminTarget {
  server: string;
  token: string;
}

/**
 * Finds the running server from the same settings `svc serve` reads: `--server`, else
 * SVC_SERVER_URL, else the local gRPC port (SVC_GRPC_PORT, 8090). The admin token comes from
 * `--admin-token`, SVC_ADMIN_TOKEN, or the file `svc serve` generated under the data dir.
 */
export function resolveAdminTarget(flags: { server?: string; adminToken?: string }, env = process.env): AdminTarget {
  const server = flags.server || env.SVC_SERVER_URL || `http://127.0.0.1:${env.SVC_GRPC_PORT || 8090}`;
  let url: URL | undefined;
  try {
    url = new URL(server);
  } catch {
    // refused below
  }
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) {
    throw new UsageError(`the server must be an http(s) URL such as http://127.0.0.1:8090 (the gRPC port), got '${server}'`);
  }
  let token = flags.adminToken || env.SVC_ADMIN_TOKEN || "";
  if (!token) {
    const path = join(resolve(env.SVC_DATA_DIR || "data"), "admin-token");
    try {
      token = readFileSync(path, "utf8").trim();
    } catch {
      throw new UsageError(`no admin token: set SVC_ADMIN_TOKEN, pass --admin-token, or run where ${path} exists (svc serve writes it at first start)`);
    }
  }
  return { server, token };
}

/** A bad command line; printed with usage and exit code 2. */
export class UsageError extends Error {}

// A deadline for every admin call: a server (or its Redis) that stops answering must not hang the CLI.
const transportFor = (target: AdminTarget) =>
  createConnectTransport({ baseUrl: target.server, httpVersion: "1.1", interceptors: [bearerAuth(target.token)], defaultTimeoutMs: 30_000 });

export function createAdminClient(target: AdminTarget): Client<typeof AuthService> {
  return createClient(AuthService, transportFor(target));
}

/** The TelemetryService of the running server, for prompts. */
export function createTelemetryAdminClient(target: AdminTarget): Client<typeof TelemetryService> {
  return createClient(TelemetryService, transportFor(target));
}

/** The LimitsService of the running server, for usage figures. */
export function createLimitsAdminClient(target: AdminTarget): Client<typeof LimitsService> {
  return createClient(LimitsService, transportFor(target));
}
