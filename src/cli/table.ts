import { CONTROL } from "../core/text.js";

/**
 * Code points East Asian Width calls Wide or Fullwidth, outside the emoji (those are found by their
 * Emoji_Presentation property): CJK, kana, Hangul, Yi, fullwidth forms. JS has no property for it.
 */
const WIDE: ReadonlyArray<readonly [number, number]> = [
  [0x1100, 0x115f], // Hangul Jamo initial consonants
  [0x2e80, 0x303e], // CJK radicals, Kangxi, ideographic description, CJK symbols and punctuation
  [0x3041, 0x33ff], // kana, Bopomofo, Hangul compatibility Jamo, Kanbun, CJK strokes, enclosed and compatibility
  [0x3400, 0x4dbf], // CJK extension A
  [0x4e00, 0x9fff], // CJK unified ideographs
  [0xa000, 0xa4cf], // Yi
  [0xa960, 0xa97f], // Hangul Jamo extended A
  [0xac00, 0xd7a3], // Hangul syllables
  [0xf900, 0xfaff], // CJK compatibility ideographs
  [0xfe10, 0xfe19], // vertical forms
  [0xfe30, 0xfe6f], // CJK compatibility forms, small form variants
  [0xff00, 0xff60], // fullwidth forms
  [0xffe0, 0xffe6], // fullwidth signs
  [0x16fe0, 0x16fe4], // ideographic symbols
  [0x17000, 0x18cff], // Tangut, Khitan
  [0x1b000, 0x1b2ff], // kana supplement and extensions, Nushu
  [0x1f200, 0x1f2ff], // enclosed ideographic supplement
  [0x20000, 0x3fffd], // CJK extensions B and later
];

const isWide = (cp: number): boolean => WIDE.some(([from, to]) => cp >= from && cp <= to);

/** Marks drawn on the character before them, and invisible format characters (ZWJ, variation selectors). */
const ZERO_WIDTH = /^[\p{Mn}\p{Me}\p{Cf}]$/u;
const EMOJI = /\p{Emoji_Presentation}|\p{Extended_Pictographic}\uFE0F|\u20E3/u; // U+20E3: a keycap (1️⃣, #️⃣)

const graphemes = new Intl.Segmenter(undefined, { granularity: "grapheme" });

/**
 * The columns a terminal gives `s`: 2 for a wide or fullwidth character or an emoji (a ZWJ
 * sequence, a flag or a skin tone is one), 0 for a combining mark, 1 otherwise. A table padded by
 * `length` (UTF-16 code units) put every column after a CJK or emoji name out of line.
 */
export function displayWidth(s: string): number {
  let width = 0;
  for (const { segment } of graphemes.segment(s)) {
    if (EMOJI.test(segment)) width += 2;
    else {
      const base = segment.codePointAt(0)!;
      width += ZERO_WIDTH.test(String.fromCodePoint(base)) ? 0 : isWide(base) ? 2 : 1;
    }
  }
  return width;
}

/** `s` with spaces after it up to `width` display columns. */
const pad = (s: string, width: number): string => s + " ".repeat(Math.max(0, width - displayWidth(s)));

/** The characters names and descriptions may not hold (core/text.ts), every one of them. */
const REFUSED = new RegExp(CONTROL.source, "g");
const ESCAPES: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/**
 * `s` with the characters names and descriptions may no longer hold (CONTROL: controls, line
 * separators, bidirectional overrides) written as escapes (`\n`, `\t`, `\x1b`, `\x85`, `\u202e`):
 * one stored by an earlier release, which took them, would otherwise break a table's row, reach
 * the terminal as a command (ESC) or reorder what it shows.
 */
export const printable = (s: string): string =>
  s.replace(REFUSED, (c) => {
    const code = c.charCodeAt(0);
    return ESCAPES[c] ?? (code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`);
  });

/**
 * Left-aligned columns, two spaces apart, for human-readable CLI output (aligned by display width);
 * control characters in a cell are shown escaped (`printable`).
 */
export const table = (input: string[][]): string => {
  const rows = input.map((r) => r.map(printable));
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => displayWidth(r[i]!))));
  return rows.map((r) => r.map((c, i) => pad(c, widths[i]!)).join("  ").trimEnd()).join("\n");
};
