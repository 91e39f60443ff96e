import assert from "node:assert/strict";
import { parseMicros } from "../../../src/facades/management/query.js";

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

  it("what is not a time is refused", () => {
    for (const v of ["2026-02-30T10:00:00", "yesterday", "2026-11-22T25:00:00", "2026-11-22T10:00:00Zx"]) assert.equal(parseMicros(v), undefined, v);
  });
});
