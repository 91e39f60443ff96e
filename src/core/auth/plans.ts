import { Plan } from "../../gen/svc/auth/v1/auth_service_pb.js";
import type { PlanName } from "../../stores/registry-store.js";

/** A plan's limits (spec section 8). `undefined` limits are set per project (enterprise). */
export interface PlanLimits {
  requestsPerMinute: number | undefined;
  requestsPerDay: number | undefined;
  maxKeys: number;
}

/** Enterprise projects have unlimited keys; stores take a number, so "unlimited" is a very large one. */
export const UNLIMITED = 1_000_000_000;

export const planLimits: Record<PlanName, PlanLimits> = {
  free: { requestsPerMinute: 60, requestsPerDay: 1_000, maxKeys: 2 },
  pro: { requestsPerMinute: 600, requestsPerDay: 100_000, maxKeys: 10 },
  enterprise: { requestsPerMinute: undefined, requestsPerDay: undefined, maxKeys: UNLIMITED },
};

const toName: Partial<Record<Plan, PlanName>> = { [Plan.FREE]: "free", [Plan.PRO]: "pro", [Plan.ENTERPRISE]: "enterprise" };
const fromName: Record<PlanName, Plan> = { free: Plan.FREE, pro: Plan.PRO, enterprise: Plan.ENTERPRISE };

export const planName = (p: Plan): PlanName | undefined => toName[p];
export const planOf = (name: PlanName): Plan => fromName[name];
