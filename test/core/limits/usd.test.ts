import assert from "node:assert/strict";
import { formatNano, parseCapNano, usdToNanoCeil } from "../../../src/core/limits/usd.js";

describe("nano-dollar money", () => {
  it("rounds amounts finer than a nano-dollar up", () => {
    assert.equal(usdToNanoCeil("0.0000000001"), 1n);
    assert.equal(usdToNanoCeil("0.000000001000"), 1n);
    assert.equal(usdToNanoCeil("1.0000000010001"), 1_000_000_002n);
    assert.equal(usdToNanoCeil("0"), 0n);
  });

  it("reads an amount of any size up to 100 whole digits (a charge past the largest counts as that), and a cap past 5,000,000 as none", () => {
    assert.equal(usdToNanoCeil("99999999999999999999"), 99_999_999_999_999_999_999_000_000_000n);
    assert.equal(usdToNanoCeil("9".repeat(100)), BigInt("9".repeat(100)) * 1_000_000_000n);
    assert.equal(usdToNanoCeil("9".repeat(101)), undefined);
    assert.equal(parseCapNano("99999999999999999999"), undefined);
  });

  it("refuses what is not a plain non-negative decimal", () => {
    for (const bad of ["", "-1", "1e3", "abc", "1.", ".5", "0x10", "1,5", " 5", "5 ", "\t5", "5\n", " "]) {
      assert.equal(usdToNanoCeil(bad), undefined, JSON.stringify(bad));
      assert.equal(parseCapNano(bad), undefined, JSON.stringify(bad));
    }
  });

  it("accepts caps from 0 to 5,000,000 USD with at most 9 decimal places", () => {
    assert.equal(parseCapNano("5000000"), 5_000_000_000_000_000n);
    assert.equal(parseCapNano("12.50"), 12_500_000_000n);
    assert.equal(parseCapNano("5000000.000000001"), undefined);
    assert.equal(parseCapNano("0.0000000001"), undefined);
  });

  it("prints plain decimals without trailing zeros or exponents", () => {
    assert.equal(formatNano(0n), "0");
    assert.equal(formatNano(125n), "0.000000125");
    assert.equal(formatNano(12_500_000_000), "12.5");
    assert.equal(formatNano(4_999_999_999_999_999n), "4999999.999999999");
  });
});
