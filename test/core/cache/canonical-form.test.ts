import assert from "node:assert/strict";
import { canonicalText, writeCanonical } from "../../../src/core/cache/canonical-form.js";

describe("canonical form of JSON", () => {
  it("sorts keys at every depth, keeps array order and frames strings by length", () => {
    assert.equal(writeCanonical({ b: [{ y: 1, x: true }, "s"], a: { d: null, c: "é," } }), '{"1:a:{"1:c:"2:é,,"1:d:null},"1:b:[{"1:x:true,"1:y:1},"1:s]}');
  });

  it("writes one value one way, however its numbers and keys were spelled", () => {
    assert.equal(canonicalText('{"n": 1.0, "m": 1e2}'), canonicalText('{"m":100,"n":1}'));
    assert.equal(canonicalText('{"10": 1, "9": 2, "a": 3}'), canonicalText('{"a": 3, "9": 2, "10": 1}'));
    assert.equal(canonicalText('{"s": "\\u00e9"}'), canonicalText('{"s": "é"}'));
  });

  it("keeps values apart that framing could confuse", () => {
    assert.notEqual(writeCanonical(["a,b"]), writeCanonical(["a", "b"]));
    assert.notEqual(writeCanonical({ "a:b": "c" }), writeCanonical({ a: "b:c" }));
    assert.notEqual(writeCanonical("1"), writeCanonical(1));
    assert.notEqual(writeCanonical("null"), writeCanonical(null));
  });

  it("keeps a __proto__ key, which an object copy would lose", () => {
    assert.notEqual(canonicalText('{"__proto__": {"a": 1}}'), canonicalText('{"__proto__": {"a": 2}}'));
  });

  it("reads no text and an empty object alike", () => {
    assert.equal(canonicalText(""), "null");
    assert.equal(canonicalText("{}"), "null");
    assert.equal(canonicalText("{ }"), "null");
  });

  it("keeps a text that is not JSON as a string", () => {
    assert.equal(canonicalText("{oops"), '"5:{oops');
  });
});
