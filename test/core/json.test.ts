import assert from "node:assert/strict";
import { parseExtra, readExtra } from "../../src/core/json.js";

describe("extra_json texts", () => {
  it("reads extras as one deeply frozen object per text, equal to what parseExtra gives", () => {
    const text = `{"system_fingerprint":"fp_1","usage_details":{"cached_tokens":0,"list":[1,2]}}`;
    const a = readExtra(text);
    assert.deepEqual(a, parseExtra(text));
    assert.equal(readExtra(text), a, "the same text gives the same object");
    assert.ok(Object.isFrozen(a) && Object.isFrozen(a.usage_details) && Object.isFrozen((a.usage_details as { list: number[] }).list));
    assert.throws(() => {
      (a as Record<string, unknown>).system_fingerprint = "changed";
    }, TypeError);
    // A spread copy (what renderers make) is the caller's own to change.
    const copy: Record<string, unknown> = { ...a, id: "x" };
    copy.system_fingerprint = "mine";
    assert.equal(readExtra(text).system_fingerprint, "fp_1");
  });

  it("gives an empty object for an empty text, and a fresh changeable object from parseExtra", () => {
    assert.deepEqual(readExtra(""), {});
    const p = parseExtra(`{"a":1}`);
    p.a = 2;
    assert.equal(parseExtra(`{"a":1}`).a, 1);
  });
});
