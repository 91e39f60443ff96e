import assert from "node:assert/strict";
import { arrivalMicros, microsOfTimestamp, timestampFromMicros, utcMicrosText, utcSecondText } from "../../../src/core/telemetry/micros.js";

describe("request times in microseconds", () => {
  it("gives every arrival a later time than the one before, though many share a millisecond", () => {
    const times = Array.from({ length: 20_000 }, arrivalMicros);
    for (let i = 1; i < times.length; i++) assert.ok(times[i]! > times[i - 1]!, `${times[i]} after ${times[i - 1]}`);
    const ms = new Set(times.map((t) => Math.floor(t / 1000)));
    assert.ok(ms.size < times.length, "the calls shared milliseconds, so the test exercised the tie");
    assert.ok(Math.abs(times.at(-1)! / 1000 - Date.now()) < 1000, "stays on the wall clock");
  });

  it("writes the UTC text a DateTime64(6) column reads, and converts to and from protobuf Timestamps", () => {
    const us = Date.UTC(2026, 10, 20, 12, 0, 5, 7) * 1000 + 42;
    assert.equal(utcMicrosText(us), "2026-11-20 12:00:05.007042");
    assert.equal(utcMicrosText(Date.UTC(1999, 11, 31, 23, 59, 59) * 1000 + 999_999), "1999-12-31 23:59:59.999999");
    assert.equal(utcMicrosText(us + 1_000_000), "2026-11-20 12:00:06.007042", "the next second, after another second's text");
    assert.equal(utcMicrosText(us), "2026-11-20 12:00:05.007042");
    // A log's time and its body expiry, formatted in turn (each remembers its own last second).
    const expiry = us + 30 * 86_400_000_000;
    for (let i = 0; i < 2; i++) {
      assert.equal(utcMicrosText(us + i), `2026-11-20 12:00:05.00704${2 + i}`);
      assert.equal(utcSecondText(expiry + i), "2026-12-20 12:00:05");
    }
    assert.equal(utcSecondText(Date.UTC(2027, 0, 1) * 1000 - 1), "2026-12-31 23:59:59", "the second holding the time, never rounded up");
    const ts = timestampFromMicros(us);
    assert.equal(ts.seconds, BigInt(Math.floor(us / 1e6)));
    assert.equal(ts.nanos, 7_042_000);
    assert.equal(microsOfTimestamp(ts), us);
  });
});
