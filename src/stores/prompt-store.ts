/** One version of a project's prompt, as stored. */
export interface PromptRecord {
  projectId: string;
  name: string;
  /** From 1 up, per name. */
  version: number;
  content: string;
  description: string;
  createdAt: number;
}

/**
 * Where prompts live: beside the registry, in a file under the data dir (embedded) or in Redis
 * (cluster). Versions are append-only: a put never changes an older version.
 */
export interface PromptStore {
  /** Stores the next version of a name (1 for a new name), atomically with respect to other puts. */
  put(p: Omit<PromptRecord, "version">): Promise<PromptRecord>;
  /** One version (the latest when `version` is undefined), or undefined. */
  get(projectId: string, name: string, version?: number): Promise<PromptRecord | undefined>;
  /** Every name of a project at its latest version, sorted by name. */
  list(projectId: string): Promise<PromptRecord[]>;
  close(): Promise<void>;
}
