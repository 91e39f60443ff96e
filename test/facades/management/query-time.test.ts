import assert from "node:assert/strict";
import { parseTime } from "../../../src/facades/management/query.js";

/** The time read, in epoch microseconds (a bigint: exact over the whole range), or undefined. */
const parseMicros = (v: string): number | bigint | undefined => {
  const t = parseTime(v);
  if (t === undefined) return undefined;
  assert.ok(Number.isInteger(t.nanos) && t.nanos >= 0 && t.nanos < 1e9 && t.nanos % 1000 === 0, `${v}: nanos ${t.nanos}`);
  const us = t.seconds * 1_000_000n + BigInt(t.nanos / 1000);
  return us <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(us) : us;
};

describe("management API times", () => {
  const tz = process.env.TZ;
  // Node reads a changed TZ at once: the server's zone must not change what a time selects.
  before(() => (process.env.TZ = "America/New_York"));
  after(() => {
    if (tz === undefined) delete process.env.TZ;
    else process.env.TZ = tz;
  });

  const utc = Date.UTC(2026, 10, 22, 10, 0, 0) * 1000;

  it("a date and time without a zone is UTC, not the server's local time", () => {
    assert.notEqual(new Date(2026, 10, 22, 10).getTime() * 1000, utc, "the test runs in a zone other than UTC");
    assert.equal(parseMicros("2026-11-22T10:00:00"), utc);
    assert.equal(parseMicros("2026-11-22 10:00:00"), utc);
    assert.equal(parseMicros("2026-11-22T10:00"), utc);
    assert.equal(parseMicros("2026-11-22T10:00:00.123456"), utc + 123_456);
  });

  it("a zone or offset, when given, is kept", () => {
    assert.equal(parseMicros("2026-11-22T10:00:00Z"), utc);
    assert.equal(parseMicros("2026-11-22T05:00:00-05:00"), utc);
    assert.equal(parseMicros("2026-11-22T11:00:00.5+01:00"), utc + 500_000);
    assert.equal(parseMicros("2026-11-22"), Date.UTC(2026, 10, 22) * 1000);
    assert.equal(parseMicros(String(utc / 1000)), utc);
  });

  it("milliseconds since the epoch are read whatever their number of digits, 0 included", () => {
    for (const [v, ms] of [["0", 0], ["1", 1], ["1000", 1000], ["86400000", 86_400_000], ["000123", 123], ["999999999", 999_999_999], ["1795341600000", 1_795_341_600_000]] as const) {
      assert.equal(parseMicros(v), ms * 1000, v);
    }
    // The last millisecond of the year 9999 is the latest time read, in either form.
    assert.equal(parseMicros("253402300799999"), 253_402_300_799_999_000n);
    assert.equal(parseMicros("9999-12-31T23:59:59.999Z"), 253_402_300_799_999_000n);
  });

  it("is exact to the microsecond up to the end of the year 9999 (past the year 2255, where a double's microseconds are not)", () => {
    assert.equal(parseMicros("9999-12-31T23:59:59.999999Z"), 253_402_300_799_999_999n);
    assert.equal(parseMicros("9999-12-31T23:59:59.999990Z"), 253_402_300_799_999_990n);
    assert.equal(parseMicros("3000-01-01T00:00:00.000001Z"), BigInt(Date.UTC(3000, 0, 1)) * 1000n + 1n);
    assert.equal(parseMicros("2026-11-22T10:00:00.9999991Z"), utc + 1_000_000, "a fraction rounded up to a whole second carries");
    assert.equal(parseMicros("1969-12-31T23:59:59.5Z"), -500_000);
    // Rounded up into the year 10000: past the last time read.
    assert.equal(parseMicros("9999-12-31T23:59:59.9999991Z"), undefined);
  });

  it("what is not a time is refused", () => {
    for (const v of [
      "2026-02-30T10:00:00", "yesterday", "2026-11-22T25:00:00", "2026-11-22T10:00:00Zx",
      // Milliseconds: no sign, no fraction or exponent, at most 16 digits, not past the year 9999.
      "-1", "+1", "1.5", "1e3", "0x10", " 1", "", "12345678901234567", "253402300800000", "9999999999999999",
      // An offset that carries the last day of 9999 into the year 10000, in UTC.
      "9999-12-31T23:00:00-05:00",
      // Only a whole time: Date.parse stops at a NUL and reads what came before it.
      "2026-11-27T05:12:30Z\u0000junk", "2026-11-27\u0000anything", "2026-11-27T05:12:30Z junk", "2026-11-27T05",
    ]) assert.equal(parseMicros(v), undefined, v);
  });
});
