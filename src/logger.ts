/** JSON-lines logging to stderr; one object per line, so log shippers need no parser of ours. */
type Level = "debug" | "info" | "warn" | "error";

const order: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
let threshold = order[(process.env.SVC_LOG_LEVEL as Level) || "info"] ?? order.info;

/** Whether `v` names a log level (SVC_LOG_LEVEL is checked with the other settings, config.ts). */
export const isLogLevel = (v: string): v is Level => Object.hasOwn(order, v);

function write(level: Level, msg: string, fields?: Record<string, unknown>): void {
  if (order[level] < threshold) return;
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`);
}

/**
 * A gate that opens at most once per `intervalMs` (true then, false until the interval has passed):
 * for a message that would otherwise be logged once per request while its cause lasts.
 */
export function atMostEvery(intervalMs: number): () => boolean {
  let last = -Infinity;
  return () => {
    const at = Date.now();
    if (at - last < intervalMs) return false;
    last = at;
    return true;
  };
}

export const log = {
  debug: (msg: string, fields?: Record<string, unknown>) => write("debug", msg, fields),
  info: (msg: string, fields?: Record<string, unknown>) => write("info", msg, fields),
  warn: (msg: string, fields?: Record<string, unknown>) => write("warn", msg, fields),
  error: (msg: string, fields?: Record<string, unknown>) => write("error", msg, fields),
  /** Whether a message at `level` is written: for one whose fields cost something to gather. */
  enabled: (level: Level): boolean => order[level] >= threshold,
  setLevel: (level: Level) => {
    threshold = order[level];
  },
};
