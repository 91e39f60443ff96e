/**
 * Whether `YYYY-MM-DD` at the start of `text` names a real calendar day (2026-02-30 does not;
 * `Date` would roll it over to March 2). False when `text` does not start with such a date.
 */
export function startsWithCalendarDate(text: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})/.exec(text);
  if (!m) return false;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const day = new Date(Date.UTC(y, mo - 1, d));
  return day.getUTCFullYear() === y && day.getUTCMonth() === mo - 1 && day.getUTCDate() === d;
}
