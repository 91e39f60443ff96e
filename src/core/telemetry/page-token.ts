import { createHash } from "node:crypto";
import type { LogCursor } from "../../stores/telemetry-store.js";
import { invalidRequest } from "../errors.js";

/**
 * Page tokens of ListLogs: opaque to callers, base64url of the last row's (time, request id), a
 * short hash of the query it belongs to, and a seal: a hash of all of them. A page starts strictly
 * after that row in newest-first order, so logs that arrive meanwhile (newer) never shift later
 * pages; a token given with other filters is refused instead of silently paging another listing,
 * and so is one whose parts were edited (its seal no longer matches), instead of paging from
 * wherever the edit points (a time in the future would start over at the newest row, repeating
 * rows already read).
 */
export function encodePageToken(last: LogCursor, query: unknown): string {
  return seal([LOGS, last.timeUs, last.requestId, fingerprint(query)]);
}

export function decodePageToken(token: string, query: unknown): LogCursor {
  const parsed = unseal(token);
  if (!parsed || parsed.length !== 4 || parsed[0] !== LOGS || !Number.isSafeInteger(parsed[1]) || (parsed[1] as number) < 0 || typeof parsed[2] !== "string" || parsed[2] === "") throw notOurs();
  if (parsed[3] !== fingerprint(query)) throw otherListing("another listing: one with other filters, or another project's or key mode's");
  return { timeUs: parsed[1] as number, requestId: parsed[2] };
}

/**
 * Page tokens of ListPrompts, made the same way: the last name listed, a hash of the listing (the
 * project) and the seal, so a made-up token, an edited one, another listing's or another project's
 * is refused rather than paging from wherever it happens to point.
 */
export function encodePromptPageToken(lastName: string, projectId: string): string {
  return seal([PROMPTS, lastName, fingerprint(["prompts", projectId])]);
}

export function decodePromptPageToken(token: string, projectId: string): string {
  const parsed = unseal(token);
  if (!parsed || parsed.length !== 3 || parsed[0] !== PROMPTS || typeof parsed[1] !== "string" || parsed[1] === "") throw notOurs();
  if (parsed[2] !== fingerprint(["prompts", projectId])) throw otherListing("another project's listing");
  return parsed[1];
}

/**
 * The first element of every token: which listing made it, and its format's version. Tokens of the
 * earlier, unsealed formats (2 and "p1") are refused as not ours: a listing they paged is started
 * again from its first page.
 */
const LOGS = 3;
const PROMPTS = "p2";

/**
 * The token of `parts`: base64url of their JSON with the seal appended. The seal is a checksum, not
 * a signature (there is no secret every replica shares and keeps across restarts, and a cursor must
 * page on any replica): it refuses a token whose parts were edited or made up, while a caller who
 * knows this format could still forge one for a listing of their own, which only pages from a row
 * of their choosing in a listing they may read in full anyway.
 */
const seal = (parts: unknown[]): string => Buffer.from(JSON.stringify([...parts, sealOf(parts)])).toString("base64url");

/** The token's parts without the seal, or undefined when it is not a token of ours at all (or was edited). */
function unseal(token: string): unknown[] | undefined {
  // Buffer.from skips characters that are not base64url: a token with any is not one we made.
  if (!/^[A-Za-z0-9_-]+$/.test(token)) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
  if (!Array.isArray(parsed) || parsed.length < 2) return undefined;
  const parts = parsed.slice(0, -1);
  return parsed.at(-1) === sealOf(parts) ? parts : undefined;
}

const notOurs = () => invalidRequest("invalid_page_token", "`page_token` is not a token this listing returned.");
const otherListing = (whose: string) => invalidRequest("invalid_page_token", `\`page_token\` belongs to ${whose}.`);

const hash = (value: unknown) => createHash("sha256").update(JSON.stringify(value)).digest("base64url");
const fingerprint = (query: unknown) => hash(query).slice(0, 12);
const sealOf = (parts: unknown[]) => hash(["svc page token", parts]).slice(0, 16);
