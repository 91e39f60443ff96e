import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/config.js";

describe("limits configuration", () => {
  it("fails open by default, keeps unsettled reservations 15 minutes and admits in turn in memory", () => {
    assert.deepEqual(loadConfig({}).limits, { failClosed: false, reservationTtlMs: 15 * 60_000, admitAhead: false });
  });

  it("admits ahead of the key's verdict by default on Redis; SVC_LIMITS_ADMIT_AHEAD sets it either way", () => {
    const redis = { SVC_REDIS_URL: "redis://127.0.0.1:6379" };
    assert.equal(loadConfig(redis).limits.admitAhead, true);
    assert.equal(loadConfig({ ...redis, SVC_LIMITS_ADMIT_AHEAD: "0" }).limits.admitAhead, false);
    assert.equal(loadConfig({ SVC_LIMITS_ADMIT_AHEAD: "1" }).limits.admitAhead, true);
  });

  it("fails closed with SVC_LIMITS_FAIL_CLOSED=1 (or true)", () => {
    assert.equal(loadConfig({ SVC_LIMITS_FAIL_CLOSED: "1" }).limits.failClosed, true);
    assert.equal(loadConfig({ SVC_LIMITS_FAIL_CLOSED: "true" }).limits.failClosed, true);
    assert.equal(loadConfig({ SVC_LIMITS_FAIL_CLOSED: "0" }).limits.failClosed, false);
  });

  it("reads SVC_LIMITS_RESERVATION_TTL_MS", () => {
    assert.equal(loadConfig({ SVC_LIMITS_RESERVATION_TTL_MS: "60000" }).limits.reservationTtlMs, 60_000);
  });

  for (const [name, value] of [
    ["SVC_LIMITS_FAIL_CLOSED", "maybe"],
    ["SVC_LIMITS_ADMIT_AHEAD", "later"],
    ["SVC_LIMITS_RESERVATION_TTL_MS", "0"],
    ["SVC_LIMITS_RESERVATION_TTL_MS", "soon"],
  ] as const) {
    it(`refuses ${name}=${value}, naming the setting`, () => {
      assert.throws(() => loadConfig({ [name]: value }), (e) => e instanceof ConfigError && e.message.includes(name));
    });
  }
});
