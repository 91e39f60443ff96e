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
  return encode([LOGS, last.timeUs, last.requestId, fingerprint(query)]);
}

export function decodePageToken(token: string, query: unknown): LogCursor {
  const parsed = decode(token);
  if (!parsed || parsed[0] !== LOGS || !Number.isSafeInteger(parsed[1]) || typeof parsed[2] !== "string") throw notOurs();
  if (parsed[3] !== fingerprint(query)) throw otherListing();
  return { timeUs: parsed[1] as number, requestId: parsed[2] };
}

/**
 * Page tokens of ListPrompts, made the same way: the last name listed and a hash of the listing
 * (the project), so a made-up token, another listing's or another project's is refused rather
 * than paging from wherever it happens to point.
 */
export function encodePromptPageToken(lastName: string, projectId: string): string {
  return encode([PROMPTS, lastName, fingerprint(["prompts", projectId])]);
}

export function decodePromptPageToken(token: string, projectId: string): string {
  const parsed = decode(token);
  if (!parsed || parsed[0] !== PROMPTS || typeof parsed[1] !== "string" || parsed[1] === "") throw notOurs();
  if (parsed[2] !== fingerprint(["prompts", projectId])) throw otherListing();
  return parsed[1];
}

/** The first element of every token: which listing made it, and its format's version. */
const LOGS = 2;
const PROMPTS = "p1";

const encode = (parts: unknown[]): string => Buffer.from(JSON.stringify(parts)).toString("base64url");

/** The token's parts, or undefined when it is not a token of ours at all. */
function decode(token: string): unknown[] | undefined {
  // Buffer.from skips characters that are not base64url: a token with any is not one we made.
  if (!/^[A-Za-z0-9_-]+$/.test(token)) return undefined;
  try {
    const parsed: unknown = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
    return Array.isArray(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

const notOurs = () => invalidRequest("invalid_page_token", "`page_token` is not a token this listing returned.");
const otherListing = () => invalidRequest("invalid_page_token", "`page_token` belongs to a listing with other filters.");

const fingerprint = (query: unknown) => createHash("sha256").update(JSON.stringify(query)).digest("base64url").slice(0, 12);
