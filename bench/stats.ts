/** Small statistics helpers for the bench. */

/** The q-quantile (0..1) of sorted numbers, nearest-rank; NaN for none. */
export function quantile(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length;
  if (n === 0) return NaN;
  const i = Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1));
  return sorted[i]!;
}

export function sortedCopy(xs: ArrayLike<number>): Float64Array {
  return Float64Array.from(xs as ArrayLike<number>).sort();
}

/** The median of numbers (NaN ignored); NaN for none. */
export function median(xs: number[]): number {
  const s = xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}
