import type { WindowName } from "../core/limits/windows.js";

/**
 * One admission to decide. Limits that are undefined do not apply. Money is in nano-dollars
 * (src/core/limits/usd.ts), as safe integers.
 */
export interface AdmitInput {
  projectId: string;
  /** The end user; empty skips the per-user window. */
  userId: string;
  /** The caller's clock, in ms since the epoch; a store may use its own clock for windows. */
  nowMs: number;
  minuteLimit: number | undefined;
  dayLimit: number | undefined;
  userMinuteLimit: number | undefined;
  /** The monthly spend cap; undefined: no cap (spend is still tracked). */
  capNano: number | undefined;
  /** The worst-case cost to reserve when admitted. */
  worstNano: number;
  reservationId: string;
  /** The month the request is charged to, `YYYY-MM`. */
  month: string;
  /** When the month ends: what a spend-capped client waits for. */
  monthEndMs: number;
  /** How long a reservation counts when it is never settled (its process died). */
  reservationTtlMs: number;
  /**
   * Whether `rescind` may take the admission back: it is then recorded under its reservation id,
   * with the buckets it was counted in, even when it reserves nothing.
   */
  rescindable: boolean;
}

/** The decision, in store terms; the service maps it to the proto. */
export interface AdmitOutcome {
  allowed: boolean;
  /**
   * The window of the decision: the tightest when allowed, the rejecting one otherwise. The counters
   * describe it, except on a spend-cap refusal ("month"): they are then the tightest request
   * window's, this request not counted (limit 0 when no request limit applies).
   */
  window: WindowName | undefined;
  limit: number;
  remaining: number;
  resetMs: number;
  retryAfterMs: number;
  /** Cap left after this reservation, when a cap applies. */
  spendRemainingNano: number | undefined;
}

export interface SettleInput {
  projectId: string;
  /** Empty when there was no reservation (a degraded admission). */
  reservationId: string;
  /** The month to charge, `YYYY-MM`. */
  month: string;
  costNano: number;
  nowMs: number;
}

/** A rescindable admission to take back: the user it was counted for and its reservation. */
export interface RescindInput {
  projectId: string;
  userId: string;
  reservationId: string;
  nowMs: number;
}

export interface Usage {
  minuteCount: number;
  dayCount: number;
  spentNano: number;
  reservedNano: number;
}

/**
 * Where counters, spend and reservations live: process memory (embedded) or Redis (cluster). Both
 * decide exactly alike; a store that cannot be reached throws StoreUnavailableError and the
 * service fails open or closed.
 */
export interface LimitsStore {
  /** Checks every window and the cap, and only when all pass counts the request and reserves. */
  admit(input: AdmitInput): Promise<AdmitOutcome>;
  /** Releases a reservation and charges the real cost to its month. */
  settle(input: SettleInput): Promise<void>;
  /**
   * Takes back a rescindable admission still outstanding (neither settled, rescinded nor expired):
   * its counts leave the buckets they were added to, where those are still in their window, and
   * its reservation is released. Returns whether there was one to take back.
   */
  rescind(input: RescindInput): Promise<boolean>;
  usage(projectId: string, month: string, nowMs: number): Promise<Usage>;
  close(): Promise<void>;
}

/** The store could not be reached (or failed); the service decides what that means. */
export class StoreUnavailableError extends Error {}

/** Expired windows and reservations of a project are dropped this many at most per call. */
export const EXPIRE_BATCH = 100;

/**
 * The Retry-After of a spend-cap refusal that only reservations of requests still in flight cause
 * (what is spent plus this request's worst case fits the cap): they settle, usually to much less,
 * within seconds. A refusal that what is already spent causes waits for the month's end.
 */
export const RESERVED_RETRY_MS = 5_000;
