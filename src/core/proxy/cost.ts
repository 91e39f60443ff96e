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

/** A model's parsed prices. */
export interface Prices {
  input: bigint;
  output: bigint;
}

/** Cost in pico-dollars for the given usage. */
export const costPico = (p: Prices, inputTokens: number, outputTokens: number): bigint =>
  BigInt(Math.max(0, Math.trunc(inputTokens))) * p.input + BigInt(Math.max(0, Math.trunc(outputTokens))) * p.output;

/** Formats pico-dollars as a plain decimal USD string ("0", "0.000025", "1.5"). */
export function formatUsd(pico: bigint): string {
  const whole = pico / 1_000_000_000_000n;
  const frac = (pico % 1_000_000_000_000n).toString().padStart(12, "0").replace(/0+$/, "");
  return frac ? `${whole}.${frac}` : `${whole}`;
}
