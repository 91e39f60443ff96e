import type { IncomingMessage } from "node:http";
import { invalidRequest } from "../../core/errors.js";
import { headerText } from "./request-input.js";

/** What a request lets the cache do. */
export interface CachePolicy {
  /** Look for a stored answer (false with `no-cache`). */
  lookup: boolean;
  /** Store the fresh answer (false with `no-store`). */
  store: boolean;
  /** Seconds to keep the stored answer; 0 uses the configured default. */
  ttlSeconds: number;
}

const defaults: CachePolicy = { lookup: true, store: true, ttlSeconds: 0 };
/** The longest TTL a request may ask for: 30 days, the cache service's own cap. */
const MAX_AGE_LIMIT = 30 * 24 * 3600;

/**
 * `X-Svc-Cache-Control` (spec 4.1), accepted on both endpoints, directives separated by commas:
 *   no-cache     skip the lookup; the fresh answer is still stored
 *   no-store     do not store the answer (a stored one may still be served)
 *   max-age=N    keep the stored answer N seconds (1 to 2592000) instead of the default TTL;
 *                max-age=0 keeps nothing (as no-store)
 * Any other directive or value is a 400, so a typo never silently caches what should not be. An
 * empty header asks for nothing and is ignored.
 */
export function cachePolicyOf(req: IncomingMessage): CachePolicy {
  const raw = req.headers["x-svc-cache-control"];
  if (raw === undefined || raw === "") return defaults;
  const policy = { ...defaults };
  for (const part of (Array.isArray(raw) ? raw.join(",") : raw).split(",")) {
    const original = part.trim();
    const d = original.toLowerCase();
    if (d === "") continue;
    if (d === "no-cache") policy.lookup = false;
    else if (d === "no-store") policy.store = false;
    else if (d.startsWith("max-age=")) {
      const v = d.slice(8);
      const n = Number(v);
      if (!/^\d+$/.test(v) || n > MAX_AGE_LIMIT) {
        throw invalidRequest("invalid_cache_control", `X-Svc-Cache-Control max-age must be a whole number of seconds from 0 to ${MAX_AGE_LIMIT}, got '${headerText(original.slice(8))}'.`);
      }
      // Kept 0 seconds is not kept at all: max-age=0 stores nothing, as no-store.
      if (n === 0) policy.store = false;
      else policy.ttlSeconds = n;
    } else {
      throw invalidRequest("invalid_cache_control", `X-Svc-Cache-Control accepts no-cache, no-store and max-age=N; got '${headerText(original)}'.`);
    }
  }
  return policy;
}
