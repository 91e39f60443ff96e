import { startsWithCalendarDate } from "../../core/calendar.js";
import { invalidRequest } from "../../core/errors.js";

/**
 * Reading management query parameters strictly: an unknown parameter, a repeated one or a bad value
 * is a 400 that names it, so a typo never silently widens a query.
 */
export class Query {
  readonly #params: URLSearchParams;
  readonly #used = new Set<string>();

  constructor(search: string) {
    this.#params = new URLSearchParams(search);
  }

  /** The raw value of `name`, or undefined when absent. */
  string(name: string): string | undefined {
    this.#used.add(name);
    const all = this.#params.getAll(name);
    if (all.length > 1) throw bad(name, "must be given once");
    return all[0];
  }

  /** A whole number from `min` to `max`. */
  int(name: string, min: number, max: number): number | undefined {
    const v = this.string(name);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!/^\d+$/.test(v) || n < min || n > max) throw bad(name, `must be a whole number from ${min} to ${max}, got '${v}'`);
    return n;
  }

  /** A time: RFC 3339 / ISO 8601 (`2026-11-22T10:00:00Z`) or milliseconds since the epoch. */
  time(name: string): number | undefined {
    const v = this.string(name);
    if (v === undefined) return undefined;
    // An ISO time must name a real day: Date.parse rolls 2026-02-30 over to March 2.
    const ms = /^\d{10,16}$/.test(v) ? Number(v) : startsWithCalendarDate(v) ? Date.parse(v) : NaN;
    if (!Number.isFinite(ms)) throw bad(name, `must be an ISO 8601 time such as 2026-11-22T10:00:00Z, got '${v}'`);
    return ms;
  }

  /** One of `allowed` (compared without case). */
  oneOf<T extends string>(name: string, allowed: readonly T[]): T | undefined {
    const v = this.string(name);
    if (v === undefined) return undefined;
    const found = allowed.find((a) => a.toLowerCase() === v.toLowerCase());
    if (!found) throw bad(name, `must be one of ${allowed.join(", ")}, got '${v}'`);
    return found;
  }

  /** Every `prefix.KEY=VALUE` parameter, as KEY -> VALUE. */
  prefixed(prefix: string): Record<string, string> {
    const out: Record<string, string> = {};
    for (const name of new Set(this.#params.keys())) {
      if (!name.startsWith(`${prefix}.`)) continue;
      const key = name.slice(prefix.length + 1);
      if (!key) throw bad(name, "needs a key after the dot");
      out[key] = this.string(name)!;
    }
    return out;
  }

  /** Refuses parameters nothing read. */
  done(): void {
    for (const name of this.#params.keys()) {
      if (!this.#used.has(name)) throw invalidRequest("unknown_parameter", `Unknown query parameter '${name}'.`);
    }
  }
}

const bad = (name: string, what: string) => invalidRequest("invalid_parameter", `Query parameter '${name}' ${what}.`);
