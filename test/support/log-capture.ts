/**
 * Collects this process's log lines (JSON on stderr) while `fn` runs, instead of printing them, so
 * a test can check what was logged, and how often, without cluttering the output. `fn` is given the
 * lines so far, to wait for one.
 */
export async function captureLog(fn: (lines: readonly string[]) => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  try {
    await fn(lines);
  } finally {
    process.stderr.write = write;
  }
  return lines;
}
