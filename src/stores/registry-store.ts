/** A project as stored. Plans are stored by name so the stored form reads plainly. */
export interface ProjectRecord {
  id: string;
  name: string;
  plan: PlanName;
  createdAt: number;
  /** The project's own limits; absent (as in records older than limits) means the plan's defaults. */
  limits?: LimitOverrides;
  /** False when the project turned body logging off; absent means on. */
  logBodies?: boolean;
}

/**
 * Limit overrides as stored; a missing field follows the plan's default. The spend cap is kept as
 * the canonical decimal USD string it was validated into, so it stays exact.
 */
export interface LimitOverrides {
  requestsPerMinute?: number;
  requestsPerDay?: number;
  userRequestsPerMinute?: number;
  monthlySpendCapUsd?: string;
}

export type PlanName = "free" | "pro" | "enterprise";
export type ModeName = "live" | "test";

/** A key as stored: never its value, only the value's hash. */
export interface KeyRecord {
  id: string;
  projectId: string;
  mode: ModeName;
  description: string;
  displayPrefix: string;
  hash: string;
  createdAt: number;
}

/** A key as found for verification, with the project it belongs to. */
export interface KeyWithProject {
  key: KeyRecord;
  project: ProjectRecord | undefined;
}

/**
 * Where projects and keys live: a file under the data dir (embedded) or Redis (cluster). Every
 * method reads the store itself, not a copy, so a deleted key fails on every replica at once. A
 * store that cannot be reached (Redis down or stalled) throws RegistryUnavailableError, and the
 * auth service answers 503 `auth_unavailable`.
 */
export interface RegistryStore {
  createProject(p: ProjectRecord): Promise<void>;
  getProject(id: string): Promise<ProjectRecord | undefined>;
  listProjects(): Promise<ProjectRecord[]>;
  /**
   * Replaces a project with `change(current, keyCount)`, where keyCount is how many keys the project
   * has, atomically with respect to other updates and to keys created or deleted meanwhile (a
   * replica that changed either makes `change` run again on the newer state). `change` may throw to
   * refuse the update, which then writes nothing. Returns the new record, or undefined when there is
   * no such project.
   */
  updateProject(id: string, change: (p: ProjectRecord, keyCount: number) => ProjectRecord): Promise<ProjectRecord | undefined>;
  /**
   * Adds a key unless the project already has `maxKeys` keys; returns false when it has. Given as a
   * function, the limit is taken from the project as it is when the key is written (so a plan
   * changed meanwhile cannot let one key too many in); a project that is gone then allows none.
   */
  createKey(k: KeyRecord, maxKeys: number | ((p: ProjectRecord) => number)): Promise<boolean>;
  listKeys(projectId: string): Promise<KeyRecord[]>;
  /** Deletes a key; returns it, or undefined when there was none. */
  deleteKey(id: string): Promise<KeyRecord | undefined>;
  /**
   * The key with this secret hash and its project (undefined when the project is gone), or
   * undefined when there is no such key: what verifying a request's key needs, in one read.
   */
  findKeyByHash(hash: string): Promise<KeyWithProject | undefined>;
  close(): Promise<void>;
}

/**
 * The registry could not be reached: Redis is down, stalled, or refused the command for a passing
 * reason (loading, read-only, out of memory). The store logs the outage once; the caller may retry.
 */
export class RegistryUnavailableError extends Error {
  /**
   * True when the store answered but refused to write (Redis full or read-only): reads still work,
   * and the change was not applied. False when it could not be reached.
   */
  readonly writesRefused: boolean;

  constructor(message: string, options?: ErrorOptions & { writesRefused?: boolean }) {
    super(message, options);
    this.name = "RegistryUnavailableError";
    this.writesRefused = options?.writesRefused ?? false;
  }
}
