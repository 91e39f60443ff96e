import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { LimitField, type Project, type UpdateProjectRequestSchema } from "../gen/svc/auth/v1/auth_service_pb.js";
import type { ProjectLimits, ProjectLimitsSchema } from "../gen/svc/common/v1/project_limits_pb.js";
import type { GetUsageResponse } from "../gen/svc/limits/v1/limits_service_pb.js";
import { hasLimits, MAX_REQUESTS_PER_DAY, MAX_REQUESTS_PER_MINUTE } from "../core/auth/project-limits.js";
import { planName, planOf } from "../core/auth/plans.js";
import { MAX_CAP_USD, parseCapNano } from "../core/limits/usd.js";
import type { PlanName } from "../stores/registry-store.js";
import { UsageError } from "./admin-client.js";
import { printable, table } from "./table.js";

/** The flags of `svc projects create` and `svc projects update`. */
export interface LimitFlags {
  plan?: string;
  rpm?: string;
  rpd?: string;
  userRpm?: string;
  spendCapUsd?: string;
  logBodies?: string;
}

/** The word that clears an override back to the plan's default. */
const DEFAULT = "default";

function count(flag: string, v: string | undefined, max: number): number | "clear" | undefined {
  if (v === undefined) return undefined;
  if (v === DEFAULT) return "clear";
  const n = /^\d+$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= max)) throw new UsageError(`${flag} must be a whole number from 1 to ${max}, or "${DEFAULT}" for the plan's default; got '${v}'`);
  return n;
}

/** The limit and body-logging flags, checked: overrides to set, overrides to clear ("default"). */
export interface LimitChange {
  plan: PlanName | undefined;
  overrides: MessageInitShape<typeof ProjectLimitsSchema>;
  cleared: LimitField[];
  logBodies: boolean | undefined;
}

/** Reads the limit flags of `svc projects create` and `update`; refuses bad values. */
export function limitChangeFromFlags(f: LimitFlags): LimitChange {
  const overrides: MessageInitShape<typeof ProjectLimitsSchema> = {};
  const cleared: LimitField[] = [];
  let plan: PlanName | undefined;
  if (f.plan !== undefined) {
    if (!["free", "pro", "enterprise"].includes(f.plan)) throw new UsageError(`--plan must be free, pro or enterprise, got '${f.plan}'`);
    plan = f.plan as PlanName;
  }
  const counts = [
    ["--rpm", f.rpm, MAX_REQUESTS_PER_MINUTE, "requestsPerMinute", LimitField.REQUESTS_PER_MINUTE],
    ["--rpd", f.rpd, MAX_REQUESTS_PER_DAY, "requestsPerDay", LimitField.REQUESTS_PER_DAY],
    ["--user-rpm", f.userRpm, MAX_REQUESTS_PER_MINUTE, "userRequestsPerMinute", LimitField.USER_REQUESTS_PER_MINUTE],
  ] as const;
  for (const [flag, v, max, field, clearAs] of counts) {
    const n = count(flag, v, max);
    if (n === "clear") cleared.push(clearAs);
    else if (n !== undefined) overrides[field] = n;
  }
  if (f.spendCapUsd === DEFAULT) cleared.push(LimitField.MONTHLY_SPEND_CAP_USD);
  else if (f.spendCapUsd !== undefined) {
    if (parseCapNano(f.spendCapUsd) === undefined) {
      throw new UsageError(`--spend-cap-usd must be a USD amount from 0 to ${MAX_CAP_USD} (at most 9 decimal places, e.g. 250 or 12.50), or "${DEFAULT}" for none; got '${f.spendCapUsd}'`);
    }
    overrides.monthlySpendCapUsd = f.spendCapUsd;
  }
  let logBodies: boolean | undefined;
  if (f.logBodies !== undefined) {
    if (f.logBodies !== "on" && f.logBodies !== "off") throw new UsageError(`--log-bodies must be on or off, got '${f.logBodies}'`);
    logBodies = f.logBodies === "on";
  }
  return { plan, overrides, cleared, logBodies };
}

/** Turns `svc projects update` flags into an UpdateProject request; refuses bad values. */
export function projectChangeFromFlags(projectId: string, f: LimitFlags): MessageInitShape<typeof UpdateProjectRequestSchema> {
  const { plan, overrides, cleared, logBodies } = limitChangeFromFlags(f);
  if (plan === undefined && cleared.length === 0 && Object.keys(overrides).length === 0 && logBodies === undefined) {
    throw new UsageError("nothing to update: give --plan, --rpm, --rpd, --user-rpm, --spend-cap-usd or --log-bodies");
  }
  return { projectId, plan: plan === undefined ? undefined : planOf(plan), limitOverrides: overrides, clearedLimits: cleared, logBodies };
}

/** Limits as the CLI prints them with --json; null: plan default (overrides) or no limit (effective). */
const limitsJson = (l: ProjectLimits | undefined) => ({
  requests_per_minute: l?.requestsPerMinute ?? null,
  requests_per_day: l?.requestsPerDay ?? null,
  user_requests_per_minute: l?.userRequestsPerMinute ?? null,
  monthly_spend_cap_usd: l?.monthlySpendCapUsd ?? null,
});

/**
 * This month's usage as the limits count it; null for what they do not count (docs/limits.md): a
 * window whose limit is not set, and spend while the project has no limit or cap at all (its
 * requests are not admitted through the limits; their costs are in the logs and analytics).
 */
function usageJson(u: GetUsageResponse, limits: ProjectLimits | undefined) {
  const counted = (v: unknown) => v !== undefined && v !== null;
  const spend = hasLimits(limits);
  return {
    month: u.month,
    spent_usd: spend ? u.spentUsd : null,
    reserved_usd: spend ? u.reservedUsd : null,
    requests_last_minute: counted(limits?.requestsPerMinute) ? u.requestsLastMinute : null,
    requests_last_day: counted(limits?.requestsPerDay) ? u.requestsLastDay : null,
  };
}

/** A project with its plan, overrides and effective limits, and usage when it could be read. */
export function projectDetailJson(p: Project, extra: { keys?: number; usage?: GetUsageResponse } = {}) {
  return {
    id: p.id,
    name: p.name,
    plan: planName(p.plan),
    created_at: p.createTime ? timestampDate(p.createTime).toISOString() : null,
    ...(extra.keys === undefined ? {} : { keys: extra.keys }),
    limit_overrides: limitsJson(p.limitOverrides),
    effective_limits: limitsJson(p.effectiveLimits),
    log_bodies: p.logBodies,
    ...(extra.usage ? { usage: usageJson(extra.usage, p.effectiveLimits) } : {}),
  };
}

/** The human-readable form of projectDetailJson. */
export function projectDetailText(j: ReturnType<typeof projectDetailJson>): string {
  const lines = [`${j.id}  ${printable(j.name)}`, `plan:    ${j.plan}`, `created: ${j.created_at}`];
  if (j.keys !== undefined) lines.push(`keys:    ${j.keys}`);
  lines.push(`bodies:  ${j.log_bodies ? "logged" : "not logged"}`);
  const row = (label: string, key: keyof typeof j.effective_limits, none: string) => [
    label,
    String(j.effective_limits[key] ?? none),
    j.limit_overrides[key] === null ? "(plan default)" : String(j.limit_overrides[key]),
  ];
  lines.push(
    "",
    table([
      ["LIMIT", "EFFECTIVE", "OVERRIDE"],
      row("requests per minute", "requests_per_minute", "unlimited"),
      row("requests per day", "requests_per_day", "unlimited"),
      row("per-user requests per minute", "user_requests_per_minute", "unlimited"),
      row("monthly spend cap (USD)", "monthly_spend_cap_usd", "none"),
    ]),
  );
  const u = j.usage;
  if (u) {
    const spend = u.spent_usd === null ? "spend not counted here (no limit or cap set: each request's cost is in the logs and analytics)" : `spent ${u.spent_usd} USD (${u.reserved_usd} reserved by running requests)`;
    const minute = u.requests_last_minute === null ? "requests in the last minute not counted (no limit set)" : `${u.requests_last_minute} request${u.requests_last_minute === 1 ? "" : "s"} in the last minute`;
    const day = u.requests_last_day === null ? "in the last day not counted (no limit set)" : `${u.requests_last_day} in the last day`;
    lines.push("", `${u.month}: ${spend}; ${minute}, ${day}`);
  }
  return lines.join("\n");
}
