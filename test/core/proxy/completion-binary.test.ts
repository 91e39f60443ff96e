import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  CompletionSchema,
  ContentBlockSchema,
  type Completion,
  UsageSchema,
} from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { encodeCompletion, encodedCompletionBytes } from "../../../src/core/proxy/completion-binary.js";
import { prng } from "../../support/prng.js";

describe("encodeCompletion", () => {
  it("knows every field of Completion, ContentBlock and Usage (a field added to the .proto must be added to the encoder)", () => {
    const names = (schema: { fields: { name: string; number: number }[] }) => schema.fields.map((f) => `${f.number}:${f.name}`);
    assert.deepEqual(names(CompletionSchema), ["1:id", "2:model", "3:created", "4:blocks", "5:finish_reason", "6:stop_sequence", "7:usage", "8:cost_usd", "9:upstream_style", "10:extra_json", "11:message_extra_json", "12:choice_extra_json"]);
    assert.deepEqual(names(ContentBlockSchema), ["1:type", "2:text", "3:tool_call_id", "4:tool_name", "5:tool_input_json", "6:is_error", "7:raw_json", "8:extra_json", "9:style"]);
    assert.deepEqual(names(UsageSchema), ["1:input_tokens", "2:output_tokens", "3:extra_json", "4:cache_read_tokens", "5:cache_write_tokens", "6:cache_write_1h_tokens"]);
  });

  it("writes exactly what toBinary writes, for random answers", () => {
    const rand = prng(20261122);
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const pieces = ["", "a", "Hello, world", "ünïcödé", "日本語のテキスト", "emoji 🎉👍", "pairs \ud83d\ude00 𝄞", '{"k":[1,2,{"x":null}]}', "x".repeat(200), "y".repeat(20_000)];
    const str = () => (rand() < 0.3 ? "" : Array.from({ length: 1 + Math.floor(rand() * 3) }, () => pick(pieces)).join(""));
    const int = () => pick([0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 268_435_455, 268_435_456, 2_147_483_647, -1, -2_147_483_648, Math.floor(rand() * 1e6)]);
    const uint = () => pick([0, 1, 127, 128, 1_700_000_000, 4_294_967_295]);
    for (let i = 0; i < 500; i++) {
      const c = create(CompletionSchema, {
        id: str(),
        model: str(),
        created: uint(),
        blocks: Array.from({ length: Math.floor(rand() * 4) }, () => ({
          type: pick([0, 1, 2, 3, 4, 5, 6]),
          text: str(),
          toolCallId: str(),
          toolName: str(),
          toolInputJson: str(),
          isError: rand() < 0.5,
          rawJson: str(),
          extraJson: str(),
          style: pick([0, 1, 2]),
        })),
        finishReason: pick([0, 1, 2, 3, 4, 5, 6]),
        stopSequence: str(),
        usage: rand() < 0.8 ? { inputTokens: int(), outputTokens: int(), extraJson: str(), cacheReadTokens: int(), cacheWriteTokens: int(), cacheWrite1hTokens: int() } : undefined,
        costUsd: str(),
        upstreamStyle: pick([0, 1, 2]),
        extraJson: str(),
        messageExtraJson: str(),
        choiceExtraJson: str(),
      });
      const mine = encodeCompletion(c);
      assert.ok(mine, `answer ${i}`);
      assert.deepEqual(Buffer.from(mine), Buffer.from(toBinary(CompletionSchema, c)), `answer ${i}`);
      assert.equal(mine.byteLength, mine.buffer.byteLength, "the bytes own their whole buffer");
      assert.deepEqual(fromBinary(CompletionSchema, mine), c, `answer ${i} comes back as it was`);
      assert.equal(encodedCompletionBytes(c), mine.byteLength, `answer ${i}: its size, reckoned without writing it`);
    }
  });

  it("gives no bytes for an answer with a lone surrogate in any string: UTF-8 would bring it back as U+FFFD", () => {
    const strings = (lone: string) => [
      { id: lone },
      { model: lone },
      { stopSequence: lone },
      { costUsd: lone },
      { extraJson: lone },
      { messageExtraJson: lone },
      { choiceExtraJson: lone },
      { usage: { extraJson: lone } },
      ...["text", "toolCallId", "toolName", "toolInputJson", "rawJson", "extraJson"].map((f) => ({ blocks: [{ text: "ok" }, { [f]: lone }] })),
    ];
    for (const lone of ["\ud800", "a\udfffb", "😀\ud83d", "\ude00😀"]) {
      for (const fields of strings(lone)) {
        const c = create(CompletionSchema, { id: "chatcmpl-1", ...fields });
        assert.equal(encodeCompletion(c), undefined, JSON.stringify(fields));
        assert.ok(Number.isNaN(encodedCompletionBytes(c)), JSON.stringify(fields));
        // Through protobuf-es too (an answer with fields this build does not know).
        assert.equal(encodeCompletion({ ...c, $unknown: [{ no: 99, wireType: 2, data: new Uint8Array([1, 65]) }] }), undefined, JSON.stringify(fields));
      }
    }
    // Whole emoji and other non-ASCII text come back exactly.
    const c = create(CompletionSchema, { id: "x", blocks: [{ text: "😀 ünï 日本 \u2028" }], usage: { extraJson: '{"e":"😀"}' } });
    assert.deepEqual(fromBinary(CompletionSchema, encodeCompletion(c)!), c);
  });

  it("keeps fields it does not know, through protobuf-es", () => {
    const c: Completion = { ...create(CompletionSchema, { id: "x" }), $unknown: [{ no: 99, wireType: 2, data: new Uint8Array([1, 65]) }] };
    const back = fromBinary(CompletionSchema, encodeCompletion(c)!);
    assert.deepEqual(back.$unknown, c.$unknown);
    assert.equal(back.id, "x");
  });
});
