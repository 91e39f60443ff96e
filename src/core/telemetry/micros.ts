import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { invalidRequest } from "../errors.js";

/**
 * Request times are epoch microseconds (a JS number holds them exactly until the year 2255). Logs
 * list newest first by this time, so a millisecond clock would leave two requests that start in the
 * same millisecond (a cache hit answers in less) in request-id order rather than arrival order.
 */
let lastArrivalUs = 0;

/**
 * Now, in epoch microseconds, strictly increasing within this process: the wall clock's
 * millisecond, moved on by a microsecond when an earlier call already had it (or a later time, if the
 * wall clock stepped back). Requests one process took in turn list in the order they arrived.
 */
export function arrivalMicros(): number {
  const us = Date.now() * 1000;
  lastArrivalUs = us > lastArrivalUs ? us : lastArrivalUs + 1;
  return lastArrivalUs;
}

/** A complete Timestamp message, built as a literal: it is made for every request's log. */
export function timestampFromMicros(us: number): Timestamp {
  const seconds = Math.floor(us / 1_000_000);
  return { $typeName: "google.protobuf.Timestamp", seconds: BigInt(seconds), nanos: (us - seconds * 1_000_000) * 1000 };
}

export function microsOfTimestamp(t: Timestamp): number {
  return Number(t.seconds) * 1_000_000 + Math.floor(t.nanos / 1000);
}

/** The first whole microsecond at or after `t`: where a time filter's bound falls among log times. */
export function microsAtOrAfter(t: Pick<Timestamp, "seconds" | "nanos">): number {
  return Number(t.seconds) * 1_000_000 + Math.ceil(t.nanos / 1000);
}

/** Seconds of 0001-01-01T00:00:00Z and of 10000-01-01T00:00:00Z: the times the API reads. */
const FIRST_SECOND = -62_135_596_800n;
export const PAST_LAST_SECOND = 253_402_300_800n;
/** 10000-01-01T00:00:00Z in epoch microseconds: no time the API reads or writes reaches it. */
export const PAST_LAST_US = Number(PAST_LAST_SECOND) * 1_000_000;

/**
 * `microsAtOrAfter` of a time a caller gave as a bound (`field` names it in the refusal): a
 * Timestamp of the years 1 to 9999 with its nanos 0 to 999999999, as protobuf defines it. Further
 * out, its microseconds pass what a double holds exactly and the engine's Int64 (ListLogs answered
 * wrong rows, then a 500).
 */
export function boundMicros(t: Pick<Timestamp, "seconds" | "nanos">, field: string): number {
  if (!Number.isInteger(t.nanos) || t.nanos < 0 || t.nanos > 999_999_999) throw invalidRequest("invalid_value", `\`${field}.nanos\` must be 0 to 999999999.`);
  if (t.seconds < FIRST_SECOND || t.seconds >= PAST_LAST_SECOND) throw invalidRequest("invalid_value", `\`${field}\` must be within the years 1 to 9999.`);
  return microsAtOrAfter(t);
}

/**
 * UTC `YYYY-MM-DD HH:MM:SS` of whole epoch seconds, remembering the last second it formatted:
 * consecutive logs mostly fall in the same second, so its text is made once (toISOString is costly).
 * One per kind of time, so that two kinds formatted in turn do not evict each other.
 */
class SecondText {
  #second = NaN;
  #text = "";

  of(second: number): string {
    if (second !== this.#second) {
      this.#text = new Date(second * 1000).toISOString().slice(0, 19).replace("T", " ");
      this.#second = second;
    }
    return this.#text;
  }
}

const timeSeconds = new SecondText();
const expirySeconds = new SecondText();

/** UTC `YYYY-MM-DD HH:MM:SS.ffffff`, the text a DateTime64(6, 'UTC') column reads. */
export function utcMicrosText(us: number): string {
  const second = Math.floor(us / 1_000_000);
  return `${timeSeconds.of(second)}.${String(us - second * 1_000_000).padStart(6, "0")}`;
}

/** UTC `YYYY-MM-DD HH:MM:SS` of the second holding `us` (a DateTime column): a log's body expiry. */
export function utcSecondText(us: number): string {
  return expirySeconds.of(Math.floor(us / 1_000_000));
}

/** RFC 3339 UTC with microseconds, `YYYY-MM-DDTHH:MM:SS.ffffffZ`: a log's time as the management API shows it. */
export function isoMicros(t: Timestamp): string {
  return `${utcMicrosText(microsOfTimestamp(t)).replace(" ", "T")}Z`;
}
