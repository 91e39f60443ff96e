import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { startsWithCalendarDate } from "../../core/calendar.js";
import { invalidRequest } from "../../core/errors.js";
import { setOwn } from "../../core/json.js";
import { PAST_LAST_SECOND } from "../../core/telemetry/micros.js";

/**
 * Reading management query parameters strictly: an unknown parameter, a repeated one, an empty one
 * or a bad value is a 400 that names it, so a typo (or a client that sends `model=` for "no
 * model") never silently widens a query.
 */
export class Query {
  readonly #params: URLSearchParams;
  readonly #used = new Set<string>();

  constructor(search: string) {
    this.#params = new URLSearchParams(search);
  }

  /**
   * The raw value of `name`, or undefined when absent. Empty (`model=`, or `model` alone) is
   * refused: an empty filter would match every row, which is never what was meant.
   */
  string(name: string): string | undefined {
    const v = this.#value(name);
    if (v === "") throw bad(name, "must not be empty (leave the parameter out to not filter on it)");
    return v;
  }

  #value(name: string): string | undefined {
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

  /**
   * A time, exact to the microsecond: RFC 3339 / ISO 8601 (`2026-11-22T10:00:00.123456Z`, any
   * number of fractional digits) or milliseconds since the epoch (`0`, `1795341600000`). Digits past
   * the microsecond round up to the next one: log times are whole microseconds, so `time >= t` and
   * `time < t` select exactly as with the time given.
   */
  time(name: string): Timestamp | undefined {
    const v = this.string(name);
    if (v === undefined) return undefined;
    const t = parseTime(v);
    if (t === undefined) throw bad(name, `must be an ISO 8601 time such as 2026-11-22T10:00:00Z or milliseconds since the epoch such as 1795341600000, got '${v}'`);
    return t;
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
      // A metadata value may be empty ({"team":""} is a pair like any other): it selects that pair.
      // A key named `__proto__` is a key like any other too (setOwn), not a filter dropped unseen.
      setOwn(out, key, this.#value(name)!);
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

/** Whole seconds, then the fraction (`.` or `,`), then the rest (a zone): ISO 8601 with a fraction. */
const FRACTION = /^(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})[.,](\d+)(.*)$/;

/** The whole text of an ISO 8601 date, or date and time (minutes, seconds, a fraction), with an optional zone. */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:[Zz]|[+-]\d{2}(?::?\d{2})?)?)?$/;

/** A date with a time of day (which Date.parse reads as local time when no zone follows). */
const HAS_TIME = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}/;
/** A zone designator at the end: `Z`, or an offset `+hh`, `+hhmm`, `+hh:mm`. */
const HAS_ZONE = /(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$/;

/**
 * An API time (see Query.time), or undefined when it is not one or is past the year 9999. Kept as
 * whole seconds and a fraction rather than epoch microseconds: those pass what a double holds
 * exactly after the year 2255, and the last microseconds of the year 9999 would round into 10000.
 */
export function parseTime(v: string): Timestamp | undefined {
  const t = readTime(v);
  if (t === undefined || t.seconds >= PAST_LAST_SECOND) return undefined;
  return { $typeName: "google.protobuf.Timestamp", seconds: t.seconds, nanos: t.micros * 1000 };
}

/** Whole epoch seconds and the microseconds past them (a fraction rounded up to 1000000 carries into the seconds). */
function readTime(v: string): { seconds: bigint; micros: number } | undefined {
  // Milliseconds since the epoch: any whole number, `0` included (no sign, no fraction).
  if (/^\d{1,16}$/.test(v)) {
    const ms = BigInt(v);
    return { seconds: ms / 1000n, micros: Number(ms % 1000n) * 1000 };
  }
  // An ISO time must name a real day: Date.parse rolls 2026-02-30 over to March 2. And it must be
  // one whole: Date.parse reads on past some characters it stops at (a NUL: "2026-11-27\0junk").
  if (!ISO_TIME.test(v) || !startsWithCalendarDate(v)) return undefined;
  // Date.parse keeps milliseconds only: the fraction is read here, the rest (whole seconds) there.
  const m = FRACTION.exec(v);
  const whole = m ? m[1]! + m[3]! : v;
  // A date and time without a zone is UTC, as a date alone is (Date.parse would read it in the
  // server's own time zone, so the same query would select other logs on another machine).
  const ms = Date.parse(HAS_TIME.test(whole) && !HAS_ZONE.test(whole) ? `${whole}Z` : whole);
  if (!Number.isFinite(ms)) return undefined;
  const seconds = Math.floor(ms / 1000);
  let micros = (ms - seconds * 1000) * 1000;
  if (m) {
    const digits = m[2]!;
    micros += Number(digits.slice(0, 6).padEnd(6, "0")) + (/[1-9]/.test(digits.slice(6)) ? 1 : 0);
  }
  return micros >= 1_000_000 ? { seconds: BigInt(seconds) + 1n, micros: micros - 1_000_000 } : { seconds: BigInt(seconds), micros };
}

const bad = (name: string, what: string) => invalidRequest("invalid_parameter", `Query parameter '${name}' ${what}.`);
