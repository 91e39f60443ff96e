import assert from "node:assert/strict";
import { fakeReply } from "../../src/demo/fake-script.js";

/** What the README says of the demo provider's echo: cut to at most max_tokens × 4 characters, at a word's end. */
describe("demo provider: the echo and max_tokens", () => {
  it("cuts the echo to at most max_tokens x 4 characters, at the last word's end within them", () => {
    const text = "one two three four five six seven eight nine ten";
    assert.deepEqual(fakeReply(text), { text: `Echo: ${text}`, truncated: false });
    // 3 tokens: 12 characters, "Echo: one tw", cut back to the last word's end.
    assert.deepEqual(fakeReply(text, 3), { text: "Echo: one", truncated: true });
    // 5 tokens: 20 characters, "Echo: one two three " (not 5 words).
    assert.deepEqual(fakeReply(text, 5), { text: "Echo: one two three", truncated: true });
    assert.deepEqual(fakeReply("short", 100), { text: "Echo: short", truncated: false });
  });
});
