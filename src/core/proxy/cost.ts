import type { Usage } from "../../gen/svc/proxy/v1/proxy_service_pb.js";

/**
 * Exact USD cost arithmetic. Prices are decimals per 1M tokens; cost = tokens x price / 1e6. Working
 * in integer pico-dollars (1e-12 USD) keeps every result exact for prices with up to 6 decimals, and
 * the result prints as a plain decimal, never with an exponent.
 */
const SCALE = 1_000_000n; // price units: 1e-6 USD per 1M tokens

/** Parses a non-negative decimal with at most 6 fraction digits into micro-units; throws on bad input. */
export function parsePrice(text: string): bigint {
  const m = /^(\d+)(?:\.(\d{1,6}))?$/.exec(text.trim());
  if (!m) throw new Error(`invalid price ${JSON.stringify(text)}: expected a non-negative decimal with at most 6 fraction digits`);
  return BigInt(m[1]!) * SCALE + BigInt((m[2] ?? "").padEnd(6, "0"));
}

/** Formats micro-units as the plain decimal `parsePrice` reads ("2.5", "0.075", "3"). */
export function formatPrice(micro: bigint): string {
  const whole = micro / SCALE;
  const frac = (micro % SCALE).toString().padStart(6, "0").replace(/0+$/, "");
  return frac ? `${whole}.${frac}` : `${whole}`;
}

/** `price` x `num` / `den`, rounded up to the price's unit (so a derived price never undercharges). */
export function scalePrice(text: string, num: bigint, den: bigint): string {
  const micro = parsePrice(text) * num;
  return formatPrice((micro + den - 1n) / den);
}

/** A model's parsed prices, per 1M tokens. */
export interface Prices {
  input: bigint;
  output: bigint;
  /** Input tokens read from the provider's prompt cache. */
  cacheRead: bigint;
  /** Input tokens written to the provider's prompt cache (a five-minute entry). */
  cacheWrite: bigint;
  /** Input tokens written to a one-hour entry of the provider's prompt cache. */
  cacheWrite1h: bigint;
}

/** The token counts a cost is computed from: `inputTokens` counts all input, the cache's reads and writes included. */
export type TokenCounts = Pick<Usage, "inputTokens" | "outputTokens"> & Partial<Pick<Usage, "cacheReadTokens" | "cacheWriteTokens" | "cacheWrite1hTokens">>;

const tokens = (n: number | undefined): bigint => BigInt(Math.max(0, Math.trunc(n ?? 0)));
const min = (a: bigint, b: bigint): bigint => (a < b ? a : b);

/**
 * Cost in pico-dollars for the given usage: the input tokens read from the prompt cache at the
 * cache-read price, those written to it at the cache-write price (one-hour writes at theirs), the
 * rest of the input at the input price, and the output at the output price. The cache counts are
 * parts of `inputTokens` (one-hour writes, of the writes), never more than it (a count beyond it is
 * cut to what is left).
 */
export function costPico(p: Prices, u: TokenCounts): bigint {
  const input = tokens(u.inputTokens);
  const read = min(tokens(u.cacheReadTokens), input);
  const write = min(tokens(u.cacheWriteTokens), input - read);
  const write1h = min(tokens(u.cacheWrite1hTokens), write);
  return (input - read - write) * p.input + read * p.cacheRead + (write - write1h) * p.cacheWrite + write1h * p.cacheWrite1h + tokens(u.outputTokens) * p.output;
}

/** Formats pico-dollars as a plain decimal USD string ("0", "0.000025", "1.5"). */
export function formatUsd(pico: bigint): string {
  const whole = pico / 1_000_000_000_000n;
  const frac = (pico % 1_000_000_000_000n).toString().padStart(12, "0").replace(/0+$/, "");
  return frac ? `${whole}.${frac}` : `${whole}`;
}
