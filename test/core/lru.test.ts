import assert from "node:assert/strict";
import { Lru } from "../../src/core/lru.js";
import { prng } from "../support/prng.js";

describe("Lru", () => {
  it("keeps entries from the least to the most recently used; get and set make one the most recent, peek does not", () => {
    const lru = new Lru<string, number>();
    for (const [i, k] of ["a", "b", "c", "d"].entries()) lru.set(k, i);
    assert.deepEqual([...lru.keys()], ["a", "b", "c", "d"]);
    assert.equal(lru.get("b"), 1);
    assert.deepEqual([...lru.keys()], ["a", "c", "d", "b"]);
    assert.equal(lru.peek("a"), 0);
    assert.deepEqual([...lru.keys()], ["a", "c", "d", "b"]);
    lru.set("a", 10);
    assert.deepEqual([...lru.keys()], ["c", "d", "b", "a"]);
    assert.equal(lru.get("a"), 10);
    assert.equal(lru.size, 4);
    assert.equal(lru.get("zz"), undefined);
    assert.equal(lru.peek("zz"), undefined);
  });

  it("shift takes the least recently used entry, delete any; both on an empty one give undefined", () => {
    const lru = new Lru<string, number>();
    assert.equal(lru.shift(), undefined);
    assert.equal(lru.delete("x"), undefined);
    lru.set("a", 1);
    lru.set("b", 2);
    lru.set("c", 3);
    lru.get("a");
    assert.deepEqual(lru.shift(), ["b", 2]);
    assert.equal(lru.delete("a"), 1);
    assert.equal(lru.has("a"), false);
    assert.deepEqual([...lru.keys()], ["c"]);
    assert.deepEqual(lru.shift(), ["c", 3]);
    assert.equal(lru.size, 0);
    assert.equal(lru.shift(), undefined);
    lru.set("d", 4);
    lru.clear();
    assert.equal(lru.size, 0);
    assert.deepEqual([...lru.keys()], []);
    lru.set("e", 5);
    assert.deepEqual([...lru.keys()], ["e"]);
  });

  it("agrees with a plain list model over many random operations", () => {
    const random = prng(7);
    const lru = new Lru<number, number>();
    let model: Array<[number, number]> = [];
    const touch = (k: number) => {
      const at = model.findIndex((e) => e[0] === k);
      const [e] = model.splice(at, 1);
      model.push(e!);
    };
    for (let step = 0; step < 20_000; step++) {
      const k = Math.floor(random() * 50);
      const op = random();
      const known = model.some((e) => e[0] === k);
      if (op < 0.35) {
        lru.set(k, step);
        if (known) {
          model.find((e) => e[0] === k)![1] = step;
          touch(k);
        } else model.push([k, step]);
      } else if (op < 0.6) {
        const want = model.find((e) => e[0] === k)?.[1];
        assert.equal(lru.get(k), want);
        if (known) touch(k);
      } else if (op < 0.75) {
        assert.equal(lru.delete(k), model.find((e) => e[0] === k)?.[1]);
        model = model.filter((e) => e[0] !== k);
      } else if (op < 0.9) {
        assert.deepEqual(lru.shift(), model.shift());
      } else {
        assert.equal(lru.peek(k), model.find((e) => e[0] === k)?.[1]);
      }
      assert.equal(lru.size, model.length);
    }
    assert.deepEqual([...lru.keys()], model.map((e) => e[0]));
  });
});
