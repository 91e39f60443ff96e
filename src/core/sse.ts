/** One server-sent event: `event` is undefined when the stream names none (chat-completions style). */
export interface SseEvent {
  event: string | undefined;
  data: string;
}

/**
 * An incremental server-sent-events parser (https://html.spec.whatwg.org/multipage/server-sent-events.html):
 * feed it text chunks as they arrive; it returns the events each chunk completes. Lines may end in
 * LF, CR or CRLF; `data:` lines of one event are joined with "\n"; comments (`:`) are ignored.
 */
export class SseParser {
  #buf = "";
  #event: string | undefined;
  #data: string[] = [];

  push(chunk: string): SseEvent[] {
    this.#buf += chunk;
    const out: SseEvent[] = [];
    let start = 0;
    for (;;) {
      let i = start;
      const n = this.#buf.length;
      while (i < n && this.#buf.charCodeAt(i) !== 10 && this.#buf.charCodeAt(i) !== 13) i++;
      if (i >= n) break;
      // A lone CR at the very end may be the first half of a CRLF: wait for more.
      if (this.#buf.charCodeAt(i) === 13 && i + 1 >= n) break;
      const line = this.#buf.slice(start, i);
      start = this.#buf.charCodeAt(i) === 13 && this.#buf.charCodeAt(i + 1) === 10 ? i + 2 : i + 1;
      this.#line(line, out);
    }
    this.#buf = this.#buf.slice(start);
    return out;
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
