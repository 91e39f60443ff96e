import { hash } from "node:crypto";
import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import { randomBase62 } from "../ids.js";

/** Key values: `svc_sk_live_` / `svc_sk_test_` and 40 base62 characters (~238 bits) from the CSPRNG. */
const SECRET_CHARS = 40;
const keyPattern = /^svc_sk_(live|test)_[0-9A-Za-z]{32,128}$/;

export const prefixFor = (mode: KeyMode): string => (mode === KeyMode.TEST ? "svc_sk_test_" : "svc_sk_live_");

/** Makes a new key value for a mode. */
export const newSecret = (mode: KeyMode): string => prefixFor(mode) + randomBase62(SECRET_CHARS);

/** The mode a well-formed key value claims, or undefined for a malformed value. */
export function modeOfSecret(secret: string): KeyMode | undefined {
  const m = keyPattern.exec(secret);
  if (!m) return undefined;
  return m[1] === "test" ? KeyMode.TEST : KeyMode.LIVE;
}

/**
 * What is stored in place of the key: its SHA-256. The value carries ~238 random bits, so a fast
 * hash is enough (no password stretching needed) and keeps verification cheap on every request
 * (one-shot `crypto.hash`, not a Hash object per request).
 */
export const hashSecret = (secret: string): string => hash("sha256", secret, "hex");

/** The part shown in listings: the prefix and 4 characters, e.g. `svc_sk_live_Ab3x…`. */
export const displayPrefix = (secret: string): string => `${secret.slice(0, 16)}…`;

/**
 * `hashSecret` for verification, remembering the last few thousand values: a client sends the same
 * key on every request, and hashing it each time is a measurable part of a gateway request. Only
 * well-formed keys reach it; the memo is emptied when full, so it stays bounded whatever is sent.
 */
const recent = new Map<string, string>();
const RECENT_MAX = 4096;
export function hashSecretForLookup(secret: string): string {
  let h = recent.get(secret);
  if (h === undefined) {
    h = hashSecret(secret);
    if (recent.size >= RECENT_MAX) recent.clear();
    recent.set(secret, h);
  }
  return h;
}
