import assert from "node:assert/strict";
import { displayWidth, printable, table } from "../../src/cli/table.js";

describe("CLI tables (svc projects list, keys list, prompts list): columns aligned by display width", () => {
  it("counts the columns a terminal gives: 2 for CJK, fullwidth and emoji, 0 for combining marks", () => {
    for (const [text, width] of [
      ["abc", 3],
      ["日本語", 6],
      ["한국", 4],
      ["ｶﾀｶﾅ", 4], // halfwidth katakana: 1 each
      ["ＡＢ", 4], // fullwidth Latin
      ["🚀", 2],
      ["❤️", 2], // a text-style symbol with VS16: shown as an emoji
      ["👨‍👩‍👧", 2], // one ZWJ sequence
      ["🇯🇵", 2], // a flag: two regional indicators
      ["👍🏽", 2], // with a skin tone
      ["1\uFE0F\u20E3", 2], // a keycap
      ["#\uFE0F\u20E3 x", 4],
      ["e\u0301", 1], // e and a combining acute
      ["\u0301", 0],
      ["a\u200bb", 2], // a zero-width space
      ["", 0],
    ] as const) {
      assert.equal(displayWidth(text), width, JSON.stringify(text));
    }
  });

  it("shows control characters escaped (a name stored by an earlier release that took them): one line a row, no escape sequence reaches the terminal", () => {
    assert.equal(printable("tab\there\nnl\r\x1b[31mred\x7f\x85 é 日"), "tab\\there\\nnl\\r\\x1b[31mred\\x7f\\x85 é 日");
    assert.equal(printable("abc\u202edcba\u2028x"), "abc\\u202edcba\\u2028x", "a bidirectional override and a line separator too");
    const out = table([["ID", "NAME"], ["proj_1", "a\nb\x1b[2J"], ["proj_2", "ok"]]);
    assert.deepEqual(out.split("\n"), ["ID      NAME", "proj_1  a\\nb\\x1b[2J", "proj_2  ok"]);
    assert.doesNotMatch(out, /[\x00-\x09\x0b-\x1f\x7f-\x9f]/);
  });

  it("pads each cell to its column's display width, so the columns after a wide name line up", () => {
    const rows = [
      ["ID", "NAME", "PLAN"],
      ["proj_1", "日本語のプロジェクト", "pro"],
      ["proj_2", "🚀 launch", "free"],
      ["proj_3", "cafe\u0301", "enterprise"],
      ["proj_4", "plain", "pro"],
    ];
    const lines = table(rows).split("\n");
    const planColumn = lines.map((line, i) => displayWidth(line.slice(0, line.lastIndexOf(rows[i]![2]!))));
    assert.equal(new Set(planColumn).size, 1, table(rows));
    assert.equal(planColumn[0], displayWidth("proj_1  日本語のプロジェクト  "));
  });
});
