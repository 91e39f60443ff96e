import assert from "node:assert/strict";
import { Cancellation, signalCancel } from "../../src/core/cancel.js";

describe("cancellation of a call", () => {
  it("calls each listener once on abort, and a listener added afterwards at once", () => {
    const c = new Cancellation();
    const calls: string[] = [];
    c.onAbort(() => calls.push("a"));
    c.onAbort(() => calls.push("b"));
    assert.equal(c.aborted, false);
    c.abort();
    c.abort();
    assert.equal(c.aborted, true);
    c.onAbort(() => calls.push("late"));
    assert.deepEqual(calls, ["a", "b", "late"]);
  });

  it("reads an AbortSignal the same way", () => {
    const a = new AbortController();
    const c = signalCancel(a.signal);
    const calls: string[] = [];
    c.onAbort(() => calls.push("a"));
    assert.equal(c.aborted, false);
    a.abort();
    assert.equal(c.aborted, true);
    c.onAbort(() => calls.push("late"));
    assert.deepEqual(calls, ["a", "late"]);
  });
});
