import { create } from "@bufbuild/protobuf";
import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import { type RequestLog, RequestLogSchema } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import type { ModeName } from "../../stores/registry-store.js";
import type { LogRecord, LogRow } from "../../stores/telemetry-store.js";
import { invalidRequest } from "../errors.js";
import { REQUEST_ID } from "../ids.js";
import { setOwn } from "../json.js";
import { cutText, wellFormed } from "../text.js";
import { microsOfTimestamp, timestampFromMicros, utcMicrosText, utcSecondText } from "./micros.js";

/** The endpoints whose requests are logged. */
const GATEWAY_ENDPOINTS = new Set(["/v1/chat/completions", "/v1/messages"]);

/** Ids are letters, digits, `_` and `-`, like every id the gateway makes. */
export const ID = /^[A-Za-z0-9_-]{1,128}$/;
/** Fits Decimal(18, 12): at most 6 integer and 12 fractional digits. */
const COST_USD = /^\d{1,6}(\.\d{1,12})?$/;

/** Before 2200-01-01, where DateTime64(6) ends (2262) with room for the bodies' TTL. */
const MAX_TIME_US = Date.UTC(2200, 0, 1) * 1000;

/** Bounds that keep one log from bloating the store; longer values are cut, never refused. */
export const LIMITS = {
  text: 256,
  metadataPairs: 64,
  metadataKey: 256,
  metadataValue: 1024,
  bodyChars: 1024 * 1024,
} as const;

export function modeName(mode: KeyMode): ModeName {
  if (mode === KeyMode.LIVE) return "live";
  if (mode === KeyMode.TEST) return "test";
  throw invalidRequest("invalid_value", "`key_mode` must be live or test.");
}

export function checkId(v: string, field: string): string {
  if (!v) throw invalidRequest("missing_required_field", `\`${field}\` is required.`);
  if (!ID.test(v)) throw invalidRequest("invalid_value", `\`${field}\` must be 1 to 128 letters, digits, \`_\` or \`-\`.`);
  return v;
}

/**
 * Free text as stored: at most `n` UTF-16 code units, cut between characters, and well-formed (a
 * lone surrogate becomes U+FFFD). A lone surrogate (JSON's "\ud800" in X-Svc-Metadata, a body cut
 * inside a pair by a caller) is written by JSON.stringify as an escape ClickHouse refuses, and the
 * refusal would take the whole batch with it.
 */
const cut = (v: string, n: number) => wellFormed(cutText(v, n));

const cost = (v: string, field: string) => {
  if (v === "") return "0";
  if (!COST_USD.test(v)) throw invalidRequest("invalid_value", `\`${field}\` must be a plain decimal below 1000000 with at most 12 fractional digits.`);
  return v;
};

const nonNegative = (v: number, field: string) => {
  if (!Number.isFinite(v) || v < 0) throw invalidRequest("invalid_value", `\`${field}\` must be a non-negative number.`);
  return v;
};

/**
 * The stored row of a log, checked: its identity (request id, project, mode) and numbers must be
 * right, or the call is refused; free text (metadata, bodies, names) is cut to LIMITS and made
 * well-formed instead, so a large or odd request still gets its log.
 */
export function rowOfLog(l: RequestLog, opts: { bodyTtlDays: number; nowMs: number }): { mode: ModeName; row: LogRow } {
  const mode = modeName(l.keyMode);
  const timeUs = l.time ? microsOfTimestamp(l.time) : opts.nowMs * 1000;
  if (!Number.isFinite(timeUs) || timeUs < 0 || timeUs >= MAX_TIME_US) throw invalidRequest("invalid_value", "`time` is out of range.");
  if (l.status < 0 || l.status > 999) throw invalidRequest("invalid_value", "`status` must be an HTTP status.");
  const metadata: Record<string, string> = {};
  let pairs = 0;
  for (const [k, v] of Object.entries(l.metadata)) {
    if (pairs++ >= LIMITS.metadataPairs) break;
    setOwn(metadata, cut(k, LIMITS.metadataKey), cut(v, LIMITS.metadataValue));
  }
  const row: LogRow = {
    project_id: checkId(l.projectId, "project_id"),
    time: utcMicrosText(timeUs),
    request_id: checkId(l.requestId, "request_id"),
    key_id: cut(l.keyId, LIMITS.text),
    endpoint: cut(l.endpoint, LIMITS.text),
    model: cut(l.model, LIMITS.text),
    provider: cut(l.provider, LIMITS.text),
    stream: l.stream,
    status: l.status,
    error_type: cut(l.errorType, LIMITS.text),
    error_code: cut(l.errorCode, LIMITS.text),
    cache: cut(l.cache.toUpperCase(), LIMITS.text),
    user_id: cut(l.userId, LIMITS.text),
    metadata,
    prompt_tokens: nonNegative(l.promptTokens, "prompt_tokens"),
    completion_tokens: nonNegative(l.completionTokens, "completion_tokens"),
    cost_usd: cost(l.costUsd, "cost_usd"),
    cost_saved_usd: cost(l.costSavedUsd, "cost_saved_usd"),
    latency_ms: nonNegative(l.latencyMs, "latency_ms"),
    ttfb_ms: nonNegative(l.ttfbMs, "ttfb_ms"),
    upstream_latency_ms: nonNegative(l.upstreamLatencyMs, "upstream_latency_ms"),
    bodies_expire_at: utcSecondText(timeUs + opts.bodyTtlDays * 86_400_000_000),
    request_body: cut(l.requestBody, LIMITS.bodyChars),
    response_body: cut(l.responseBody, LIMITS.bodyChars),
  };
  return { mode, row };
}

/**
 * What a log recorded over the network must also be, beyond `rowOfLog`'s checks: what the gateway
 * records for each of its requests. Its id is a gateway request id (`GET /v1/logs/{id}` finds it by
 * that), it has its time, an HTTP status and the cache result, HIT or MISS. The gateway's own
 * records (in process, on every request) are built that way and skip this; whether the project
 * exists is asked of the registry after this (src/core/served.ts).
 */
export function checkWireLog(l: RequestLog): void {
  if (!l.requestId) throw invalidRequest("missing_required_field", "`request_id` is required.");
  if (!REQUEST_ID.test(l.requestId)) throw invalidRequest("invalid_value", "`request_id` must be a gateway request id (`req_` and 24 letters or digits).");
  if (!l.projectId) throw invalidRequest("missing_required_field", "`project_id` is required.");
  // Every logged request came with a key (a request refused before its key named a project is not
  // logged) to one of the gateway's two endpoints. Its model may be empty: a body without one.
  checkId(l.keyId, "key_id");
  if (!GATEWAY_ENDPOINTS.has(l.endpoint)) throw invalidRequest(l.endpoint ? "invalid_value" : "missing_required_field", "`endpoint` must be /v1/chat/completions or /v1/messages.");
  if (!l.time) throw invalidRequest("missing_required_field", "`time` is required.");
  if (!Number.isInteger(l.time.nanos) || l.time.nanos < 0 || l.time.nanos > 999_999_999) throw invalidRequest("invalid_value", "`time.nanos` must be 0 to 999999999.");
  if (!Number.isInteger(l.status) || l.status < 100 || l.status > 599) throw invalidRequest("invalid_value", "`status` must be an HTTP status (100 to 599).");
  if (!l.cache) throw invalidRequest("missing_required_field", "`cache` is required.");
  if (l.cache !== "HIT" && l.cache !== "MISS") throw invalidRequest("invalid_value", "`cache` must be HIT or MISS.");
}

/** The proto log of a stored record. */
export function logOfRecord(r: LogRecord, mode: ModeName): RequestLog {
  return create(RequestLogSchema, {
    requestId: r.request_id,
    time: timestampFromMicros(r.time_us),
    projectId: r.project_id,
    keyId: r.key_id,
    keyMode: mode === "live" ? KeyMode.LIVE : KeyMode.TEST,
    endpoint: r.endpoint,
    model: r.model,
    provider: r.provider,
    stream: r.stream,
    status: r.status,
    errorType: r.error_type,
    errorCode: r.error_code,
    cache: r.cache,
    userId: r.user_id,
    metadata: r.metadata,
    promptTokens: r.prompt_tokens,
    completionTokens: r.completion_tokens,
    costUsd: r.cost_usd,
    costSavedUsd: r.cost_saved_usd,
    latencyMs: r.latency_ms,
    ttfbMs: r.ttfb_ms,
    upstreamLatencyMs: r.upstream_latency_ms,
    requestBody: r.request_body,
    responseBody: r.response_body,
  });
}
