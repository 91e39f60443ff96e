import { create } from "@bufbuild/protobuf";
import { LimitField, Plan, type UpdateProjectRequest } from "../../gen/svc/auth/v1/auth_service_pb.js";
import { type ProjectLimits, ProjectLimitsSchema } from "../../gen/svc/common/v1/project_limits_pb.js";
import type { LimitOverrides, PlanName, ProjectRecord } from "../../stores/registry-store.js";
import { invalidRequest } from "../errors.js";
import { formatNano, MAX_CAP_USD, parseCapNano } from "../limits/usd.js";
import { planLimits, planName } from "./plans.js";

/** The largest rate overrides accepted: far above any real need, well inside int32. */
export const MAX_REQUESTS_PER_MINUTE = 100_000_000;
export const MAX_REQUESTS_PER_DAY = 1_000_000_000;

type Field = keyof LimitOverrides;

const wireName: Record<Field, string> = {
  requestsPerMinute: "requests_per_minute",
  requestsPerDay: "requests_per_day",
  userRequestsPerMinute: "user_requests_per_minute",
  monthlySpendCapUsd: "monthly_spend_cap_usd",
};

const fieldOf: Partial<Record<LimitField, Field>> = {
  [LimitField.REQUESTS_PER_MINUTE]: "requestsPerMinute",
  [LimitField.REQUESTS_PER_DAY]: "requestsPerDay",
  [LimitField.USER_REQUESTS_PER_MINUTE]: "userRequestsPerMinute",
  [LimitField.MONTHLY_SPEND_CAP_USD]: "monthlySpendCapUsd",
};

/**
 * Whether any limit or cap is set: a project with none is not admitted through the limits (nothing
 * of its requests is counted there: docs/limits.md).
 */
export const hasLimits = (l: ProjectLimits | undefined): l is ProjectLimits =>
  l !== undefined && (l.requestsPerMinute !== undefined || l.requestsPerDay !== undefined || l.userRequestsPerMinute !== undefined || l.monthlySpendCapUsd !== undefined);

/** The stored overrides as the proto message (unset: the plan's default). */
export const overridesMessage = (o: LimitOverrides | undefined): ProjectLimits => create(ProjectLimitsSchema, o ?? {});

/**
 * What applies to live traffic: each override, else the plan's default. No plan has a per-user
 * limit or a spend cap by default, and enterprise has no rate limit until one is set.
 */
export function effectiveLimits(plan: PlanName, o: LimitOverrides | undefined): ProjectLimits {
  const d = planLimits[plan];
  return create(ProjectLimitsSchema, {
    requestsPerMinute: o?.requestsPerMinute ?? d.requestsPerMinute,
    requestsPerDay: o?.requestsPerDay ?? d.requestsPerDay,
    userRequestsPerMinute: o?.userRequestsPerMinute,
    monthlySpendCapUsd: o?.monthlySpendCapUsd,
  });
}

/** A validated UpdateProject: apply it to the current record with `apply`. */
export interface ProjectChange {
  plan: PlanName | undefined;
  set: LimitOverrides;
  clear: Field[];
  /** Body logging on or off; undefined keeps it. */
  logBodies?: boolean;
}

function count(v: number | undefined, field: Field, max: number): number | undefined {
  if (v === undefined) return undefined;
  if (!Number.isInteger(v) || v < 1 || v > max) {
    throw invalidRequest("invalid_value", `\`limit_overrides.${wireName[field]}\` must be a whole number from 1 to ${max}, got ${v}.`);
  }
  return v;
}

/**
 * Checks limit overrides as CreateProject and UpdateProject take them; throws a 400 naming the
 * first bad field. Returns the overrides to store (the spend cap in its canonical form).
 */
export function parseLimitOverrides(o: ProjectLimits | undefined): LimitOverrides {
  const set: LimitOverrides = {};
  const rpm = count(o?.requestsPerMinute, "requestsPerMinute", MAX_REQUESTS_PER_MINUTE);
  const rpd = count(o?.requestsPerDay, "requestsPerDay", MAX_REQUESTS_PER_DAY);
  const user = count(o?.userRequestsPerMinute, "userRequestsPerMinute", MAX_REQUESTS_PER_MINUTE);
  if (rpm !== undefined) set.requestsPerMinute = rpm;
  if (rpd !== undefined) set.requestsPerDay = rpd;
  if (user !== undefined) set.userRequestsPerMinute = user;
  if (o?.monthlySpendCapUsd !== undefined) {
    const nano = parseCapNano(o.monthlySpendCapUsd);
    if (nano === undefined) {
      throw invalidRequest(
        "invalid_value",
        `\`limit_overrides.monthly_spend_cap_usd\` must be a USD amount from 0 to ${MAX_CAP_USD} with at most 9 decimal places, such as "250" or "12.50", got ${JSON.stringify(o.monthlySpendCapUsd)}.`,
      );
    }
    set.monthlySpendCapUsd = formatNano(nano);
  }
  return set;
}

/** Checks an UpdateProject request; throws a 400 naming the first bad field. */
export function parseProjectChange(req: UpdateProjectRequest): ProjectChange {
  let plan: PlanName | undefined;
  if (req.plan !== Plan.UNSPECIFIED) {
    plan = planName(req.plan);
    if (!plan) throw invalidRequest("invalid_value", "`plan` must be one of free, pro, enterprise.");
  }
  const set = parseLimitOverrides(req.limitOverrides);
  const clear: Field[] = [];
  for (const f of req.clearedLimits) {
    const field = fieldOf[f];
    if (!field) throw invalidRequest("invalid_value", `\`cleared_limits\` holds an unknown limit (${f}).`);
    if (set[field] !== undefined) throw invalidRequest("invalid_value", `\`limit_overrides.${wireName[field]}\` cannot be both set and cleared.`);
    clear.push(field);
  }
  return { plan, set, clear, logBodies: req.logBodies };
}

/** The record after the change; overrides that end up empty are dropped from the stored form. */
export function applyProjectChange(p: ProjectRecord, c: ProjectChange): ProjectRecord {
  const limits: LimitOverrides = { ...p.limits, ...c.set };
  for (const f of c.clear) delete limits[f];
  const next: ProjectRecord = { ...p, plan: c.plan ?? p.plan, limits };
  if (Object.keys(limits).length === 0) delete next.limits;
  if (c.logBodies === false) next.logBodies = false;
  else if (c.logBodies === true) delete next.logBodies;
  return next;
}
