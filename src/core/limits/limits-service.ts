import { createHash } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { ProjectLimits } from "../../gen/svc/common/v1/project_limits_pb.js";
import { type AdmitResponseSchema, Decision, LimitWindow, LimitsService } from "../../gen/svc/limits/v1/limits_service_pb.js";
import { type AdmitInput, type AdmitOutcome, type LimitsStore, StoreUnavailableError } from "../../stores/limits-store.js";
import { apiError, invalidRequest, notFound } from "../errors.js";
import { ALPHABET, randomBase62 } from "../ids.js";
import { cutText } from "../text.js";
import { formatNano, MAX_CHARGE_NANO, parseCapNano, usdToNanoCeil } from "./usd.js";
import { monthEndMs, monthOf, type WindowName } from "./windows.js";

export interface LimitsDeps {
  store: LimitsStore;
  /** Refuse requests (DECISION_UNAVAILABLE) rather than admit them unchecked while the store is down. */
  failClosed?: boolean;
  /** How long an unsettled reservation counts; longer than the longest upstream call. */
  reservationTtlMs?: number;
  /** Milliseconds since the epoch; injectable for tests. */
  now?: () => number;
  /** A project's effective limits, for an AdmitRequest that carries none; undefined: no such project. */
  resolveLimits?: (projectId: string) => Promise<ProjectLimits | undefined>;
}

/** 15 minutes: above the default 10-minute total upstream timeout, so live requests keep theirs. */
export const DEFAULT_RESERVATION_TTL_MS = 15 * 60_000;

const MAX_USER_ID = 256;
/**
 * `rsv_<month>_<20 random><4 check>`: the check is a hash of the project, the month and the random
 * part, so an id names the project Admit made it for. Settle and Rescind refuse an id of another
 * project (a caller's mix-up would charge the wrong one) or one Admit never gave out.
 */
const reservationPattern = /^rsv_(\d{4}-\d{2})_([0-9A-Za-z]{20})([0-9A-Za-z]{4})$/;

function reservationCheck(projectId: string, month: string, random: string): string {
  const d = createHash("sha256").update(`${projectId}\n${month}\n${random}`).digest();
  return ALPHABET[d[0]! % 62]! + ALPHABET[d[1]! % 62]! + ALPHABET[d[2]! % 62]! + ALPHABET[d[3]! % 62]!;
}

/** A new reservation id of the project, in the month. */
function newReservationId(projectId: string, month: string): string {
  const random = randomBase62(20);
  return `rsv_${month}_${random}${reservationCheck(projectId, month, random)}`;
}

const windowOf: Record<WindowName, LimitWindow> = {
  minute: LimitWindow.MINUTE,
  day: LimitWindow.DAY,
  user_minute: LimitWindow.USER_MINUTE,
  month: LimitWindow.MONTH,
};
const decisionOf: Record<WindowName, Decision> = {
  minute: Decision.PLAN_LIMITED,
  day: Decision.PLAN_LIMITED,
  user_minute: Decision.USER_LIMITED,
  month: Decision.SPEND_CAPPED,
};

/** The month a reservation id names; refuses an id Admit cannot have returned for the project. */
function monthOfReservation(id: string, projectId: string): string {
  const m = reservationPattern.exec(id);
  if (!m || reservationCheck(projectId, m[1]!, m[2]!) !== m[3]) {
    throw invalidRequest("invalid_value", `\`reservation_id\` ${JSON.stringify(cutText(id, 100))} is not one Admit returned for project '${projectId}'.`);
  }
  return m[1]!;
}

const seconds = (ms: number) => Math.max(0, Math.ceil(ms / 1000));

function rate(v: number | undefined, field: string): number | undefined {
  if (v === undefined) return undefined;
  if (!Number.isInteger(v) || v < 1) throw invalidRequest("invalid_value", `\`limits.${field}\` must be a whole number of at least 1, got ${v}.`);
  return v;
}

/** A worst case or cost in nano-dollars, at most MAX_CHARGE_NANO (see there). */
function money(text: string, field: string): number {
  if (text === "" || text === "0") return 0;
  const nano = usdToNanoCeil(text);
  if (nano === undefined) {
    throw invalidRequest("invalid_value", `\`${field}\` must be a USD amount as a plain decimal (such as "0.25"), got ${JSON.stringify(cutText(text, 100))}.`);
  }
  return Number(nano < MAX_CHARGE_NANO ? nano : MAX_CHARGE_NANO);
}

/**
 * Creates the LimitsService implementation over a limits store (memory or Redis). A gateway calls
 * Admit before the upstream call and Settle after it; everything else (windows, reservations,
 * expiry, the month) is decided here and in the store.
 */
export function createLimitsService(deps: LimitsDeps): ServiceImpl<typeof LimitsService> {
  const { store, failClosed = false, reservationTtlMs = DEFAULT_RESERVATION_TTL_MS, now = Date.now, resolveLimits } = deps;

  const project = (id: string) => {
    if (!id) throw invalidRequest("missing_required_field", "`project_id` is required.");
    return id;
  };

  async function limitsFor(projectId: string, given: ProjectLimits | undefined): Promise<ProjectLimits | undefined> {
    if (given || !resolveLimits) return given;
    const found = await resolveLimits(projectId);
    if (!found) throw notFound("project_not_found", `No project with id '${projectId}'.`);
    return found;
  }

  const toResponse = (o: AdmitOutcome, capNano: number | undefined, reservationId: string): MessageInitShape<typeof AdmitResponseSchema> => ({
    decision: o.allowed ? Decision.ALLOWED : decisionOf[o.window!],
    window: o.window ? windowOf[o.window] : LimitWindow.UNSPECIFIED,
    limit: o.limit,
    remaining: Math.max(0, o.remaining),
    resetSeconds: seconds(o.resetMs),
    retryAfterSeconds: o.allowed ? 0 : Math.max(1, seconds(o.retryAfterMs)),
    reservationId: o.allowed ? reservationId : "",
    spendCapUsd: capNano === undefined ? "" : formatNano(capNano),
    spendRemainingUsd: o.spendRemainingNano === undefined ? "" : formatNano(Math.max(0, o.spendRemainingNano)),
  });

  return {
    async admit(req) {
      const projectId = project(req.projectId);
      if (req.userId.length > MAX_USER_ID) throw invalidRequest("invalid_value", `\`user_id\` must be at most ${MAX_USER_ID} characters.`);
      const limits = await limitsFor(projectId, req.limits);
      const capText = limits?.monthlySpendCapUsd;
      const cap = capText === undefined ? undefined : parseCapNano(capText);
      if (capText !== undefined && cap === undefined) throw invalidRequest("invalid_value", `\`limits.monthly_spend_cap_usd\` is not a valid cap: ${JSON.stringify(capText)}.`);
      const capNano = cap === undefined ? undefined : Number(cap);
      const worstNano = money(req.maxCostUsd, "max_cost_usd");
      const t = now();
      const month = monthOf(t);
      const reservationId = newReservationId(projectId, month);
      const input: AdmitInput = {
        projectId,
        userId: req.userId,
        nowMs: t,
        minuteLimit: rate(limits?.requestsPerMinute, "requests_per_minute"),
        dayLimit: rate(limits?.requestsPerDay, "requests_per_day"),
        userMinuteLimit: rate(limits?.userRequestsPerMinute, "user_requests_per_minute"),
        capNano,
        worstNano,
        reservationId,
        month,
        monthEndMs: monthEndMs(t),
        reservationTtlMs,
        rescindable: req.rescindable,
      };
      try {
        return toResponse(await store.admit(input), capNano, reservationId);
      } catch (e) {
        if (!(e instanceof StoreUnavailableError)) throw e;
        // The connection logs the outage once; each request only learns how to proceed.
        return failClosed
          ? { decision: Decision.UNAVAILABLE, degraded: true, retryAfterSeconds: 1 }
          : { decision: Decision.ALLOWED, degraded: true };
      }
    },

    async settle(req) {
      const projectId = project(req.projectId);
      const costNano = money(req.costUsd, "cost_usd");
      const t = now();
      let month = monthOf(t);
      if (req.reservationId) {
        month = monthOfReservation(req.reservationId, projectId);
        // A reservation is settled within its TTL of being made: in this month, or in the next
        // one for a request that spanned midnight at a month's end. Another month is no id Admit
        // gave out lately, and would charge a month that is not being spent.
        const d = new Date(t);
        const last = monthOf(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 0)); // the last day of the month before
        if (month !== monthOf(t) && month !== last) {
          throw invalidRequest("invalid_value", `\`reservation_id\` names the month ${month}; a reservation is settled in the month it was made or the next.`);
        }
      }
      try {
        await store.settle({ projectId, reservationId: req.reservationId, month, costNano, nowMs: t });
        return { recorded: true };
      } catch (e) {
        if (!(e instanceof StoreUnavailableError)) throw e;
        return { recorded: false };
      }
    },

    async rescind(req) {
      const projectId = project(req.projectId);
      if (!req.reservationId) throw invalidRequest("missing_required_field", "`reservation_id` is required.");
      monthOfReservation(req.reservationId, projectId);
      if (req.userId.length > MAX_USER_ID) throw invalidRequest("invalid_value", `\`user_id\` must be at most ${MAX_USER_ID} characters.`);
      try {
        return { rescinded: await store.rescind({ projectId, userId: req.userId, reservationId: req.reservationId, nowMs: now() }) };
      } catch (e) {
        if (!(e instanceof StoreUnavailableError)) throw e;
        return { rescinded: false };
      }
    },

    async getUsage(req) {
      const projectId = project(req.projectId);
      const t = now();
      const month = monthOf(t);
      try {
        const u = await store.usage(projectId, month, t);
        return { month, spentUsd: formatNano(u.spentNano), reservedUsd: formatNano(u.reservedNano), requestsLastMinute: u.minuteCount, requestsLastDay: u.dayCount };
      } catch (e) {
        if (!(e instanceof StoreUnavailableError)) throw e;
        throw apiError(503, "api_error", "limits_unavailable", "The limits store is unreachable; usage cannot be read now.");
      }
    },
  };
}
