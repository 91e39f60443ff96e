/** A project as stored. Plans are stored by name so the stored form reads plainly. */
export interface ProjectRecord {
  id: string;
  name: string;
  plan: PlanName;
  createdAt: number;
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

/**
 * Where projects and keys live: a file under the data dir (embedded) or Redis (cluster). Every
 * method reads the store itself, not a copy, so a deleted key fails on every replica at once.
 */
export interface RegistryStore {
  createProject(p: ProjectRecord): Promise<void>;
  getProject(id: string): Promise<ProjectRecord | undefined>;
  listProjects(): Promise<ProjectRecord[]>;
  /** Adds a key unless the project already has `maxKeys` keys; returns false when it has. */
  createKey(k: KeyRecord, maxKeys: number): Promise<boolean>;
  listKeys(projectId: string): Promise<KeyRecord[]>;
  /** Deletes a key; returns it, or undefined when there was none. */
  deleteKey(id: string): Promise<KeyRecord | undefined>;
  findKeyByHash(hash: string): Promise<KeyRecord | undefined>;
  close(): Promise<void>;
}
