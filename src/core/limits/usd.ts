/**
 * Money for limits: whole nano-dollars (1e-9 USD). Spend counters and reservations live in Redis
 * and are compared inside a Lua script, whose numbers are doubles, exact only up to 2^53; in
 * nano-dollars that is about 9 million USD, so caps up to MAX_CAP_USD stay exact with room for
 * the month's reservations. Pico-dollars (what cost.ts computes) would overflow at ~9,000 USD.
 * Amounts finer than a nano-dollar are rounded up, so a cap is never overshot by rounding; the
 * most a request is overcharged is 1e-9 USD.
 */
export const NANO_PER_USD = 1_000_000_000n;

/** The largest monthly spend cap accepted, in USD (5e15 nano-dollars, below 2^53 ~ 9.007e15). */
export const MAX_CAP_USD = 5_000_000;

/**
 * The most one request's worst case or cost counts against the month, in nano-dollars: a
 * nano-dollar above the largest cap, so an amount beyond it still stops any capped project, and
 * sums of such amounts stay integers in the Lua's doubles (a larger one, possible with a high
 * custom price and a huge max_tokens or usage, is charged as this; X-Svc-Cost says its full
 * cost, and its log too up to the 999,999.999999999999 USD a log holds).
 */
export const MAX_CHARGE_NANO = BigInt(MAX_CAP_USD) * NANO_PER_USD + 1n;

/** A plain decimal; its whole part up to 100 digits (any amount past the largest charge counts as that). */
const decimal = /^(\d{1,100})(?:\.(\d+))?$/;

/**
 * A USD amount as a plain decimal, in nano-dollars rounded up; undefined when it is not one (as
 * when it has whitespace around it: " 5" is refused, not read as 5).
 */
export function usdToNanoCeil(text: string): bigint | undefined {
  const m = decimal.exec(text);
  if (!m) return undefined;
  const frac = m[2] ?? "";
  const head = BigInt(m[1]!) * NANO_PER_USD + BigInt(frac.slice(0, 9).padEnd(9, "0"));
  return /[1-9]/.test(frac.slice(9)) ? head + 1n : head;
}

/**
 * A spend cap as an admin writes it: a non-negative decimal with at most 9 decimal places, at most
 * MAX_CAP_USD. Returns nano-dollars, or undefined when the text is not such an amount.
 */
export function parseCapNano(text: string): bigint | undefined {
  const m = decimal.exec(text);
  if (!m || (m[2] ?? "").length > 9) return undefined;
  const nano = usdToNanoCeil(text)!;
  return nano <= BigInt(MAX_CAP_USD) * NANO_PER_USD ? nano : undefined;
}

/** Formats nano-dollars as a plain decimal USD string ("0", "0.000000125", "12.5"). */
export function formatNano(nano: bigint | number): string {
  const n = BigInt(nano);
  const sign = n < 0n ? "-" : "";
  const abs = n < 0n ? -n : n;
  const frac = (abs % NANO_PER_USD).toString().padStart(9, "0").replace(/0+$/, "");
  return `${sign}${abs / NANO_PER_USD}${frac ? `.${frac}` : ""}`;
}
