import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { type Prompt, PromptSchema, type TelemetryService } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { log } from "../../logger.js";
import { type PromptRecord, type PromptStore, PromptsUnavailableError, type PromptSummary } from "../../stores/prompt-store.js";
import { type LogFilter, type TelemetryStore, TelemetryUnavailableError } from "../../stores/telemetry-store.js";
import { apiError, invalidRequest, notFound, withRetryGuidance } from "../errors.js";
import { CONTROL, characters } from "../text.js";
import { analyticsQueryOf, analyticsResponseOf } from "./analytics-request.js";
import { checkId, logOfRecord, modeName, rowOfLog } from "./log-row.js";
import { boundMicros } from "./micros.js";
import type { LogWriter } from "./log-writer.js";
import { decodePageToken, decodePromptPageToken, encodePageToken, encodePromptPageToken } from "./page-token.js";

export interface TelemetryDeps {
  store: TelemetryStore;
  writer: Pick<LogWriter, "record">;
  prompts: PromptStore;
  /**
   * Resolves when a project exists; rejects with 404 `project_not_found` when it does not (or the
   * registry's 503 while it cannot be reached). The prompt calls check their project with it, as
   * the AuthService's calls do, so no prompt is filed under, or looked up in, a project that is not
   * there.
   */
  checkProject: (projectId: string) => Promise<void>;
  /** How long request and response bodies are kept, in days. */
  bodyTtlDays: number;
  now?: () => number;
}

const PROMPT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** The largest prompt version stored, in UTF-8 bytes (the CLI checks a file against it before sending). */
export const MAX_PROMPT_BYTES = 1024 * 1024;
/** The longest prompt description, in characters (code points: an emoji is one, not its two UTF-16 units). */
export const MAX_PROMPT_DESCRIPTION_CHARS = 1024;
const STATUS_CLASS = /^([1-5])xx$/;

/**
 * Creates the TelemetryService implementation. RecordRequest checks the log and queues it on the
 * writer, so it costs the caller microseconds and never waits on ClickHouse; the reads go to the
 * store and answer 503 `telemetry_unavailable` while it cannot be reached.
 */
export function createTelemetryService({ store, writer, prompts, checkProject, bodyTtlDays, now = Date.now }: TelemetryDeps): ServiceImpl<typeof TelemetryService> {
  // Whether reads are failing now: an outage is logged when the first read fails and when one
  // succeeds again, not on every read meanwhile (a dashboard polling the logs would flood the log).
  let readsDown = false;
  const read = async <T>(fn: () => Promise<T>): Promise<T> => {
    let got: T;
    try {
      got = await fn();
    } catch (err) {
      if (err instanceof TelemetryUnavailableError) {
        if (!readsDown) log.warn("telemetry reads failing: store unavailable; answering 503 telemetry_unavailable until it is back", { err: err.message });
        readsDown = true;
        // Retry-After as the other outages' 503s (auth_unavailable, limits_unavailable) say it.
        throw withRetryGuidance(apiError(503, "api_error", "telemetry_unavailable", "Logs and analytics are unavailable right now; try again shortly."), { "retry-after": "1" });
      }
      throw err;
    }
    if (readsDown) {
      readsDown = false;
      log.info("telemetry reads are back");
    }
    return got;
  };

  return {
    recordRequest(req) {
      if (!req.log) throw invalidRequest("missing_required_field", "`log` is required.");
      const { mode, row } = rowOfLog(req.log, { bodyTtlDays, nowMs: now() });
      writer.record(mode, row);
      return { $typeName: "svc.telemetry.v1.RecordRequestResponse" };
    },

    async listLogs(req) {
      const projectId = checkId(req.projectId, "project_id");
      const mode = modeName(req.keyMode);
      const limit = req.pageSize === 0 ? 50 : req.pageSize;
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw invalidRequest("invalid_value", "`page_size` must be 1 to 1000.");
      const filter = filterOf(req);
      const scope = [projectId, mode, filter];
      const after = req.pageToken ? decodePageToken(req.pageToken, scope) : undefined;
      const { logs, more } = await read(() => store.listLogs({ projectId, mode, filter, limit, after }));
      const last = logs.at(-1);
      return {
        logs: logs.map((r) => logOfRecord(r, mode)),
        nextPageToken: more && last ? encodePageToken({ timeUs: last.time_us, requestId: last.request_id }, scope) : "",
      };
    },

    async getLog(req) {
      const projectId = checkId(req.projectId, "project_id");
      const mode = modeName(req.keyMode);
      const requestId = checkId(req.requestId, "request_id");
      const r = await read(() => store.getLog(projectId, mode, requestId));
      if (!r) throw notFound("log_not_found", `No log with id ${requestId}.`);
      return { log: logOfRecord(r, mode) };
    },

    async getAnalytics(req) {
      const q = analyticsQueryOf(req, now());
      return analyticsResponseOf(q, await read(() => store.analytics(q)));
    },

    async putPrompt(req) {
      const projectId = checkId(req.projectId, "project_id");
      const name = checkPromptName(req.name);
      if (!req.content) throw invalidRequest("missing_required_field", "`content` is required.");
      if (Buffer.byteLength(req.content) > MAX_PROMPT_BYTES) throw invalidRequest("invalid_value", "`content` must be at most 1 MiB.");
      if (characters(req.description) > MAX_PROMPT_DESCRIPTION_CHARS) throw invalidRequest("invalid_value", `\`description\` must be at most ${MAX_PROMPT_DESCRIPTION_CHARS} characters.`);
      if (CONTROL.test(req.description)) throw invalidRequest("invalid_value", "`description` must not hold control characters (newlines, tabs, escapes).");
      await checkProject(projectId);
      const p = await promptCall(() => prompts.put({ projectId, name, content: req.content, description: req.description, createdAt: now() }), true);
      return { prompt: promptMessage(p, true) };
    },

    async getPrompt(req) {
      const projectId = checkId(req.projectId, "project_id");
      const name = checkPromptName(req.name);
      if (!Number.isInteger(req.version) || req.version < 0) throw invalidRequest("invalid_value", "`version` must be 0 (the latest) or a version number.");
      await checkProject(projectId);
      const p = await promptCall(() => prompts.get(projectId, name, req.version || undefined));
      if (!p) {
        throw notFound("prompt_not_found", req.version ? `No version ${req.version} of prompt ${name}.` : `No prompt named ${name}.`);
      }
      return { prompt: promptMessage(p, true) };
    },

    async listPrompts(req) {
      const projectId = checkId(req.projectId, "project_id");
      const limit = req.pageSize === 0 ? 100 : req.pageSize;
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw invalidRequest("invalid_value", "`page_size` must be 1 to 1000.");
      const after = req.pageToken ? decodePromptPageToken(req.pageToken, projectId) : "";
      await checkProject(projectId);
      const { prompts: page, more } = await promptCall(() => prompts.list(projectId, { after, limit }));
      return {
        prompts: page.map((p) => promptMessage(p, false)),
        nextPageToken: more && page.length ? encodePromptPageToken(page.at(-1)!.name, projectId) : "",
      };
    },
  };
}

const promptsUnreachable = "The prompt registry is unavailable right now (its store cannot be reached); try again shortly.";
/** A put that failed so may have been stored (the store took it, and its answer was lost): said to a put only. */
const putUnreachable = `${promptsUnreachable} The put may have been stored all the same: list the prompt's versions to see before putting it again.`;
const promptsRefuseWrites = "The prompt registry cannot store prompts right now (its store refuses writes: full or read-only); nothing was stored. Reading prompts still works. Retry later.";

/**
 * A prompt store call, its store out of reach, or refusing a put, answered 503 `prompts_unavailable`
 * (Retry-After as the other outages' 503s).
 */
async function promptCall<T>(fn: () => Promise<T>, put = false): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (!(e instanceof PromptsUnavailableError)) throw e;
    throw withRetryGuidance(apiError(503, "api_error", "prompts_unavailable", e.writesRefused ? promptsRefuseWrites : put ? putUnreachable : promptsUnreachable), { "retry-after": "1" });
  }
}

function filterOf(req: {
  startTime?: { seconds: bigint; nanos: number };
  endTime?: { seconds: bigint; nanos: number };
  model: string;
  status: number;
  statusClass: string;
  endpoint: string;
  cache: string;
  userId: string;
  metadata: Record<string, string>;
}): LogFilter {
  const f: LogFilter = {};
  // Log times are whole microseconds: a bound rounded up to one selects exactly as the bound itself.
  if (req.startTime) f.fromUs = boundMicros(req.startTime, "start_time");
  if (req.endTime) f.toUs = boundMicros(req.endTime, "end_time");
  if (f.fromUs !== undefined && f.toUs !== undefined && f.fromUs >= f.toUs) throw invalidRequest("invalid_value", "`start_time` must be before `end_time`.");
  if (req.model) f.model = req.model;
  if (req.status) {
    if (req.status < 100 || req.status > 599) throw invalidRequest("invalid_value", "`status` must be an HTTP status (100 to 599).");
    f.status = req.status;
  }
  if (req.statusClass) {
    const m = STATUS_CLASS.exec(req.statusClass.toLowerCase());
    if (!m) throw invalidRequest("invalid_value", "`status_class` must be 1xx, 2xx, 3xx, 4xx or 5xx.");
    f.statusClass = Number(m[1]);
  }
  if (req.endpoint) f.endpoint = req.endpoint;
  if (req.cache) {
    const c = req.cache.toUpperCase();
    if (c !== "HIT" && c !== "MISS") throw invalidRequest("invalid_value", "`cache` must be HIT or MISS.");
    f.cache = c;
  }
  if (req.userId) f.userId = req.userId;
  const pairs = Object.entries(req.metadata).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (pairs.length > 16) throw invalidRequest("invalid_value", "at most 16 `metadata` filters.");
  if (pairs.length) f.metadata = pairs;
  return f;
}

function checkPromptName(name: string): string {
  if (!name) throw invalidRequest("missing_required_field", "`name` is required.");
  if (!PROMPT_NAME.test(name)) throw invalidRequest("invalid_value", "`name` must be 1 to 128 letters, digits, `.`, `_` or `-`, starting with a letter or digit.");
  return name;
}

/** A prompt's message; a summary (a listing's) has no content. */
function promptMessage(p: PromptRecord | PromptSummary, withContent: boolean): Prompt {
  return create(PromptSchema, {
    name: p.name,
    version: p.version,
    content: withContent && "content" in p ? p.content : "",
    description: p.description,
    createTime: timestampFromMs(p.createdAt),
  });
}
