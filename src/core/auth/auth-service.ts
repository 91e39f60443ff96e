import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type ApiKey,
  ApiKeySchema,
  AuthService,
  type Project,
  ProjectSchema,
} from "../../gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import { type KeyRecord, type ProjectRecord, type RegistryStore, RegistryUnavailableError } from "../../stores/registry-store.js";
import { apiError, invalidApiKey, invalidRequest, notFound, withRetryGuidance } from "../errors.js";
import { CONTROL, characters } from "../text.js";
import { randomBase62 } from "../ids.js";
import { displayPrefix, hashSecret, hashSecretForLookup, modeOfSecret, newSecret } from "./keys.js";
import { planLimits, planName, planOf } from "./plans.js";
import { applyProjectChange, effectiveLimits, overridesMessage, parseLimitOverrides, parseProjectChange } from "./project-limits.js";

export interface AuthDeps {
  store: RegistryStore;
  /** Milliseconds since the epoch; injectable for tests. */
  now?: () => number;
}

/**
 * Builds each stored record's message once: a file-store record is the same object until it
 * changes, so VerifyKey, on every request, does not rebuild its key's and project's messages.
 */
function perRecord<R extends object, M>(build: (r: R) => M): (r: R) => M {
  const built = new WeakMap<R, M>();
  return (r) => {
    let m = built.get(r);
    if (m === undefined) {
      m = build(r);
      built.set(r, m);
    }
    return m;
  };
}

/** The message of a stored project, with its effective limits. */
const toProject = perRecord((p: ProjectRecord): Project =>
  create(ProjectSchema, {
    id: p.id,
    name: p.name,
    plan: planOf(p.plan),
    createTime: timestampFromMs(p.createdAt),
    limitOverrides: overridesMessage(p.limits),
    effectiveLimits: effectiveLimits(p.plan, p.limits),
    logBodies: p.logBodies !== false,
  }),
);

/** The message of a stored key. */
const toKey = perRecord((k: KeyRecord): ApiKey =>
  create(ApiKeySchema, {
    id: k.id,
    projectId: k.projectId,
    mode: k.mode === "test" ? KeyMode.TEST : KeyMode.LIVE,
    description: k.description,
    displayPrefix: k.displayPrefix,
    createTime: timestampFromMs(k.createdAt),
  }),
);

/**
 * The answer while the registry cannot be reached (Redis down or stalled): 503 `auth_unavailable`
 * (Connect code `unavailable`) with `Retry-After: 1`, as for `limits_unavailable`. The store logs
 * the outage once; no request logs it again. The message reaches gateway clients, so it names no
 * internals.
 */
function registryUnavailable(message: string) {
  return withRetryGuidance(apiError(503, "api_error", "auth_unavailable", message), { "retry-after": "1" });
}
const cannotVerify = "The API key cannot be verified right now. Retry shortly.";
const cannotReach = "The registry of projects and keys cannot be reached right now. Retry shortly.";
const cannotChange = "The registry of projects and keys cannot take changes right now (its store refuses writes); nothing was changed. Retry later.";

/** The store's answer, with an outage turned into the spec's 503 (any other error left as it is). */
async function registry<T>(read: Promise<T>): Promise<T> {
  try {
    return await read;
  } catch (e) {
    if (!(e instanceof RegistryUnavailableError)) throw e;
    throw registryUnavailable(e.writesRefused ? cannotChange : cannotReach);
  }
}

/** Creates the AuthService implementation over a registry store. */
export function createAuthService({ store, now = Date.now }: AuthDeps): ServiceImpl<typeof AuthService> {
  async function project(id: string): Promise<ProjectRecord> {
    if (!id) throw invalidRequest("missing_required_field", "`project_id` is required.");
    const p = await registry(store.getProject(id));
    if (!p) throw notFound("project_not_found", `No project with id '${id}'.`);
    return p;
  }

  return {
    async createProject(req) {
      const name = req.name.trim();
      if (!name) throw invalidRequest(req.name ? "invalid_value" : "missing_required_field", req.name ? "`name` must not be blank." : "`name` is required.");
      if (characters(name) > 200) throw invalidRequest("invalid_value", "`name` must be 1 to 200 characters.");
      if (CONTROL.test(name)) throw invalidRequest("invalid_value", "`name` must not hold control characters (newlines, tabs).");
      const plan = planName(req.plan);
      if (!plan) throw invalidRequest("invalid_value", "`plan` must be one of free, pro, enterprise.");
      // Limits and body logging may be set at creation, checked as UpdateProject checks them: the
      // project is made with them or not at all.
      const limits = parseLimitOverrides(req.limitOverrides);
      const record: ProjectRecord = { id: `proj_${randomBase62(16)}`, name, plan, createdAt: now() };
      if (Object.keys(limits).length > 0) record.limits = limits;
      if (req.logBodies === false) record.logBodies = false;
      await registry(store.createProject(record));
      return { project: toProject(record) };
    },

    async getProject(req) {
      return { project: toProject(await project(req.projectId)) };
    },

    async updateProject(req) {
      if (!req.projectId) throw invalidRequest("missing_required_field", "`project_id` is required.");
      const change = parseProjectChange(req);
      // A plan that allows fewer keys than the project has is refused, not applied: the project
      // would be over its plan's limit with nothing to tell. Checked against the keys as they are
      // when the change is written (a key created meanwhile makes the store check again).
      const p = await registry(store.updateProject(req.projectId, (current, keyCount) => {
        const next = applyProjectChange(current, change);
        const max = planLimits[next.plan].maxKeys;
        if (next.plan !== current.plan && keyCount > max) {
          const over = keyCount - max;
          throw apiError(
            403,
            "permission_error",
            "key_limit_reached",
            `The ${next.plan} plan allows ${max} keys per project and project '${current.id}' has ${keyCount}; delete ${over} key${over === 1 ? "" : "s"}, then change the plan.`,
          );
        }
        return next;
      }));
      if (!p) throw notFound("project_not_found", `No project with id '${req.projectId}'.`);
      return { project: toProject(p) };
    },

    async listProjects() {
      return { projects: (await registry(store.listProjects())).map(toProject) };
    },

    async createKey(req) {
      const p = await project(req.projectId);
      if (req.mode !== KeyMode.LIVE && req.mode !== KeyMode.TEST) throw invalidRequest("invalid_value", "`mode` must be live or test.");
      if (characters(req.description) > 500) throw invalidRequest("invalid_value", "`description` must be at most 500 characters.");
      // Printed in `svc keys list`'s table: a newline would split its row, an escape reach the terminal.
      if (CONTROL.test(req.description)) throw invalidRequest("invalid_value", "`description` must not hold control characters (newlines, tabs, escapes).");
      const secret = newSecret(req.mode);
      const record: KeyRecord = {
        id: `key_${randomBase62(16)}`,
        projectId: p.id,
        mode: req.mode === KeyMode.TEST ? "test" : "live",
        description: req.description,
        displayPrefix: displayPrefix(secret),
        hash: hashSecret(secret),
        createdAt: now(),
      };
      // The limit is that of the plan the project is on when the key is written, not when it was read.
      if (!(await registry(store.createKey(record, (current) => planLimits[current.plan].maxKeys)))) {
        const plan = (await registry(store.getProject(p.id)))?.plan ?? p.plan;
        throw apiError(403, "permission_error", "key_limit_reached", `The ${plan} plan allows ${planLimits[plan].maxKeys} keys per project; delete a key or change the plan.`);
      }
      return { key: toKey(record), secret };
    },

    async listKeys(req) {
      const p = await project(req.projectId);
      return { keys: (await registry(store.listKeys(p.id))).map(toKey) };
    },

    async deleteKey(req) {
      if (!req.keyId) throw invalidRequest("missing_required_field", "`key_id` is required.");
      if (!(await registry(store.deleteKey(req.keyId)))) throw notFound("key_not_found", `No key with id '${req.keyId}'.`);
      return {};
    },

    async verifyKey(req) {
      const mode = modeOfSecret(req.secret);
      if (mode === undefined) throw invalidApiKey(req.secret ? "Invalid API key." : "Missing API key: send it in the X-Svc-Api-Key header.");
      let found;
      try {
        found = await store.findKeyByHash(hashSecretForLookup(req.secret));
      } catch (e) {
        // A key this replica has not verified before, while Redis is out of reach. Inline rather
        // than through registry(): this is every gateway request's path, and needs no extra promise.
        throw e instanceof RegistryUnavailableError ? registryUnavailable(cannotVerify) : e;
      }
      if (!found?.project) throw invalidApiKey();
      return { $typeName: "svc.auth.v1.VerifyKeyResponse", key: toKey(found.key), project: toProject(found.project) };
    },
  };
}
