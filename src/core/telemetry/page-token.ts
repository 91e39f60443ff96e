import { createHash } from "node:crypto";
import type { LogCursor } from "../../stores/telemetry-store.js";
import { invalidRequest } from "../errors.js";

/**
 * Page tokens of ListLogs: opaque to callers, base64url of the last row's (time, request id) and a
 * short hash of the query it belongs to. A page starts strictly after that row in newest-first
 * order, so logs that arrive meanwhile (newer) never shift later pages, and a token given with other
 * filters is refused instead of silently paging another listing.
 */
export function encodePageToken(last: LogCursor, query: unknown): string {
  return Buffer.from(JSON.stringify([2, last.timeUs, last.requestId, fingerprint(query)])).toString("base64url");
}

export function decodePageToken(token: string, query: unknown): LogCursor {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    parsed = undefined;
  }
  if (!Array.isArray(parsed) || parsed[0] !== 2 || !Number.isSafeInteger(parsed[1]) || typeof parsed[2] !== "string") {
    throw invalidRequest("invalid_page_token", "`page_token` is not a token this listing returned.");
  }
  if (parsed[3] !== fingerprint(query)) {
    throw invalidRequest("invalid_page_token", "`page_token` belongs to a listing with other filters.");
  }
  return { timeUs: parsed[1], requestId: parsed[2] };
}

const fingerprint = (query: unknown) => createHash("sha256").update(JSON.stringify(query)).digest("base64url").slice(0, 12);
