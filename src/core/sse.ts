/** One server-sent event: `event` is undefined when the stream names none (chat-completions style). */
export interface SseEvent {
  event: string | undefined;
  data: string;
}

/**
 * An incremental server-sent-events parser (https://html.spec.whatwg.org/multipage/server-sent-events.html):
 * feed it text chunks as they arrive; it returns the events each chunk completes. Lines may end in
 * LF, CR or CRLF; `data:` lines of one event are joined with "\n"; comments (`:`) are ignored; a
 * byte order mark that opens the stream is skipped.
 */
export class SseParser {
  #buf = "";
  #event: string | undefined;
  #data: string[] = [];
  /** Whether any text has come yet: a byte order mark (U+FEFF) that opens the stream is skipped, as the spec says. */
  #begun = false;

  push(chunk: string): SseEvent[] {
    if (!this.#begun) {
      if (chunk === "") return [];
      this.#begun = true;
      // Kept, it made the first line's field "\uFEFFdata": that event (an answer's first words, or
      // all of them) was dropped, and what was left read as a whole answer, cached.
      if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
    }
    const buf = this.#buf ? this.#buf + chunk : chunk;
    const out: SseEvent[] = [];
    // Providers end lines with LF; the per-character scan that CR needs is only paid when one occurs.
    const start = buf.indexOf("\r") === -1 ? this.#pushLf(buf, out) : this.#pushAny(buf, out);
    this.#buf = start < buf.length ? buf.slice(start) : "";
    return out;
  }

  #pushLf(buf: string, out: SseEvent[]): number {
    let start = 0;
    for (let nl = buf.indexOf("\n"); nl !== -1; nl = buf.indexOf("\n", start)) {
      this.#line(buf.slice(start, nl), out);
      start = nl + 1;
    }
    return start;
  }

  #pushAny(buf: string, out: SseEvent[]): number {
    let start = 0;
    const n = buf.length;
    for (;;) {
      let i = start;
      while (i < n && buf.charCodeAt(i) !== 10 && buf.charCodeAt(i) !== 13) i++;
      if (i >= n) break;
      // A lone CR at the very end may be the first half of a CRLF: wait for more.
      if (buf.charCodeAt(i) === 13 && i + 1 >= n) break;
      this.#line(buf.slice(start, i), out);
      start = buf.charCodeAt(i) === 13 && buf.charCodeAt(i + 1) === 10 ? i + 2 : i + 1;
    }
    return start;
  }

  /** Flushes an event the stream ended without its closing blank line. */
  end(): SseEvent[] {
    const out: SseEvent[] = [];
    if (this.#buf.length) this.#line(this.#buf, out);
    this.#buf = "";
    this.#line("", out);
    return out;
  }

  #line(line: string, out: SseEvent[]): void {
    if (line === "") {
      if (this.#data.length || this.#event !== undefined) {
        out.push({ event: this.#event, data: this.#data.join("\n") });
      }
      this.#event = undefined;
      this.#data = [];
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ":" comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === "data") this.#data.push(value);
    else if (field === "event") this.#event = value;
  }
}

/** Writes one SSE event as text: `event:` line when named, then `data:`, then a blank line. */
export function formatSse(data: string, event?: string): string {
  return event === undefined ? `data: ${data}\n\n` : `event: ${event}\ndata: ${data}\n\n`;
}
