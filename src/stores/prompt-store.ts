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

/** A version without its content: what a listing shows. */
export type PromptSummary = Omit<PromptRecord, "content">;

/**
 * Where prompts live: beside the registry, in a file under the data dir (embedded) or in Redis
 * (cluster). Versions are append-only: a put never changes an older version. A put costs in
 * proportion to the prompt it stores, never to the prompts already stored, and a listing page in
 * proportion to the page.
 */
export interface PromptStore {
  /** Stores the next version of a name (1 for a new name), atomically with respect to other puts. */
  put(p: Omit<PromptRecord, "version">): Promise<PromptRecord>;
  /** One version (the latest when `version` is undefined), or undefined. */
  get(projectId: string, name: string, version?: number): Promise<PromptRecord | undefined>;
  /**
   * Up to `limit` names of a project that sort after `after` ("" for the first page), each at its
   * latest version and without content, sorted by name; `more` when names follow the page.
   */
  list(projectId: string, page: { after: string; limit: number }): Promise<{ prompts: PromptSummary[]; more: boolean }>;
  close(): Promise<void>;
}

/**
 * The prompt store cannot be reached (cluster mode: Redis down): the call was not applied, or, for
 * a put that was on its way when the connection broke, may have been. With `writesRefused`, Redis
 * answered but refused a put (full: `maxmemory` under noeviction; a read-only replica): nothing of
 * it was stored, and reads still work. TelemetryService answers 503 `prompts_unavailable`, at once
 * rather than after the client's retries.
 */
export class PromptsUnavailableError extends Error {
  readonly writesRefused: boolean;
  constructor(message: string, options?: { cause?: unknown; writesRefused?: boolean }) {
    super(message, options);
    this.name = "PromptsUnavailableError";
    this.writesRefused = options?.writesRefused ?? false;
  }
}
