/**
 * UTF-16 text that must become UTF-8 (a log row's JSON, a cached answer's protobuf bytes, a cache
 * key's hashed material). A JS string can hold a lone surrogate (JSON allows "\ud800"; a cut can
 * fall inside a pair), which UTF-8 cannot carry: encoders write U+FFFD for it, and ClickHouse
 * refuses the `\ud800` escape that JSON.stringify writes for it.
 *
 * `isWellFormed`/`toWellFormed` are Node 20+ (ES2024); the project's TypeScript lib predates them.
 * V8 answers isWellFormed at once for a one-byte string (every Latin-1 text) and scans a two-byte one.
 */
type WellFormedString = string & { isWellFormed(): boolean; toWellFormed(): string };

/** Whether `s` has no lone surrogate. */
export const isWellFormed = (s: string): boolean => (s as WellFormedString).isWellFormed();

/** `s` with each lone surrogate replaced by U+FFFD; `s` itself (no copy) when it has none. */
export const wellFormed = (s: string): string => ((s as WellFormedString).isWellFormed() ? s : (s as WellFormedString).toWellFormed());

/**
 * The first `n` UTF-16 code units of `s` at most, one fewer where the n-th is the first half of a
 * surrogate pair: a cut never leaves half a character behind.
 */
export function cutText(s: string, n: number): string {
  if (s.length <= n) return s;
  const last = s.charCodeAt(n - 1);
  return s.slice(0, last >= 0xd800 && last <= 0xdbff ? n - 1 : n);
}

/** `s` cut to `n` code units as cutText cuts it, with `…` after when it was cut. */
export const cutMarked = (s: string, n: number): string => (s.length > n ? `${cutText(s, n)}…` : s);

/** A value a client sent, as a short quoted word for a message (a `type` it named): at most 40 characters of its text. */
export const quotedWord = (v: unknown): string => JSON.stringify(cutText(String(v ?? ""), 40));

/**
 * Characters refused in names and descriptions, which tables and logs print: C0 and C1 controls and
 * DEL (a terminal acts on ESC and CSI), line and paragraph separators, and the bidirectional
 * overrides and isolates (which reorder what a terminal shows).
 */
export const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

/**
 * A URL as a message may show it: a user name and password in it masked (`http://***@host`), that
 * is everything from the scheme to the last `@`, and a query or fragment (`?***`). The last `@`,
 * not the first before a `/`, `?` or `#`: the URLs messages show are mostly ones that did not
 * parse, and a password holding one of those (`http://u:pa/ss@host`) is why; masking a path's `@`
 * too only hides more.
 */
export function shownUrl(v: string): string {
  // A query (or fragment) may carry a key too (`?key=...`, as some providers take theirs): masked,
  // after the credentials (a password may hold `?` or `#`).
  const query = (rest: string) => rest.replace(/([?#])[^]*$/, (_, mark: string) => `${mark}***`);
  const at = v.lastIndexOf("@");
  if (at < 0) return query(v);
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(v)?.[0] ?? "";
  return `${scheme}***${query(v.slice(at))}`;
}

/** How many characters (code points) `s` holds; a string's `length` counts UTF-16 units (an emoji two). */
export function characters(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}
