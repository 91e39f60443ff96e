import assert from "node:assert/strict";
import { toBinary } from "@bufbuild/protobuf";
import { ApiStyle, BlockType, CompletionSchema, FinishReason } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { completion, contentBlock, usage } from "../../../src/core/proxy/canonical.js";
import { cacheKeyOf } from "../../../src/core/cache/cache-key.js";
import { chatCompletionsCodec } from "../../../src/facades/gateway/chat-completions-codec.js";
import { deepFreeze } from "../../../src/core/freeze.js";
import { CachedAnswer, CachedAnswers, PreparedRequests } from "../../../src/facades/gateway/hit-memo.js";
import { messagesCodec } from "../../../src/facades/gateway/messages-codec.js";

const answer = (created: number) =>
  completion({
    id: "chatcmpl-1",
    model: "chat-4o",
    created,
    blocks: [contentBlock({ type: BlockType.TEXT, text: "Hello" })],
    finishReason: FinishReason.END_TURN,
    usage: usage({ inputTokens: 3, outputTokens: 1 }),
    costUsd: "0.000017",
    upstreamStyle: ApiStyle.CHAT_COMPLETIONS,
  });

const prepare = (text: string) => {
  const value = JSON.parse(text);
  const parsed = chatCompletionsCodec.parseRequest(value);
  return { value, parsed, cacheKey: cacheKeyOf(parsed) };
};
const body = (i: number) => JSON.stringify({ model: "chat-4o", messages: [{ role: "user", content: `hi ${i}` }] });

describe("hit memo", () => {
  describe("PreparedRequests", () => {
    it("finds a body only on the endpoint it was seen on, frozen", () => {
      const memo = new PreparedRequests();
      const text = body(1);
      memo.remember("/v1/chat/completions", text, prepare(text));
      const got = memo.get("/v1/chat/completions", text)!;
      assert.equal(got.cacheKey, prepare(text).cacheKey);
      assert.equal(memo.get("/v1/messages", text), undefined);
      assert.equal(memo.get("/v1/chat/completions", body(2)), undefined);
      assert.ok(Object.isFrozen(got.parsed) && Object.isFrozen(got.parsed.messages[0]!.blocks[0]));
      assert.throws(() => {
        (got.value as { model: string }).model = "other";
      }, TypeError);
    });

    it("keeps at most MAX_ENTRIES bodies, dropping the oldest, and none longer than MAX_BODY_CHARS", () => {
      const memo = new PreparedRequests();
      for (let i = 0; i < PreparedRequests.MAX_ENTRIES + 10; i++) memo.remember("/v1/chat/completions", body(i), prepare(body(i)));
      assert.equal(memo.size, PreparedRequests.MAX_ENTRIES);
      assert.equal(memo.get("/v1/chat/completions", body(0)), undefined);
      assert.ok(memo.get("/v1/chat/completions", body(PreparedRequests.MAX_ENTRIES + 9)));
      const long = JSON.stringify({ model: "chat-4o", messages: [{ role: "user", content: "x".repeat(PreparedRequests.MAX_BODY_CHARS) }] });
      memo.remember("/v1/chat/completions", long, prepare(long));
      assert.equal(memo.get("/v1/chat/completions", long), undefined);
      assert.equal(memo.size, PreparedRequests.MAX_ENTRIES);
    });

    it("drops a path (an endpoint with betas) once eviction has emptied it", () => {
      const memo = new PreparedRequests();
      // Every body under betas of its own: each eviction empties a path.
      for (let i = 0; i < PreparedRequests.MAX_ENTRIES + 60; i++) memo.remember(`/v1/messages beta-${i}`, body(i), prepare(body(i)));
      assert.equal(memo.size, PreparedRequests.MAX_ENTRIES);
      assert.equal(memo.paths, PreparedRequests.MAX_ENTRIES, "no empty path is kept");
      assert.equal(memo.get("/v1/messages beta-0", body(0)), undefined);
      assert.ok(memo.get(`/v1/messages beta-${PreparedRequests.MAX_ENTRIES + 59}`, body(PreparedRequests.MAX_ENTRIES + 59)));
    });
  });

  describe("CachedAnswers", () => {
    it("refuses a payload that decodes to no whole answer (empty, or without a finish reason): a damaged entry, answered as a miss", () => {
      const answers = new CachedAnswers();
      assert.throws(() => answers.of(new Uint8Array(0)), /no finish reason/);
      assert.throws(() => answers.of(toBinary(CompletionSchema, completion({ id: "x", blocks: [contentBlock({ type: BlockType.TEXT, text: "Hi" })] }))), /no finish reason/);
    });

    it("decodes the same payload once and a replaced one anew", () => {
      const answers = new CachedAnswers();
      const payload = toBinary(CompletionSchema, answer(1_700_000_000));
      const a = answers.of(payload);
      assert.equal(answers.of(payload), a);
      assert.equal(a.completion.blocks[0]!.text, "Hello");
      assert.ok(Object.isFrozen(a.completion.blocks[0]));
      assert.notEqual(answers.of(payload.slice()), a, "other bytes, even equal ones, are another entry");
    });

    it("keeps no decoded copy of a large payload (the cache's byte budget does not count copies): decoded per hit", () => {
      const answers = new CachedAnswers();
      const big = answer(1_700_000_000);
      big.blocks = [contentBlock({ type: BlockType.TEXT, text: "x".repeat(CachedAnswers.MAX_KEPT_BYTES) })];
      const payload = toBinary(CompletionSchema, big);
      const a = answers.of(payload);
      assert.equal(a.completion.blocks[0]!.text.length, CachedAnswers.MAX_KEPT_BYTES);
      assert.notEqual(answers.of(payload), a);
    });

    it("renders the JSON body the asking style would, kept for repeats in that style", () => {
      const c = answer(1_700_000_000);
      const a = new CachedAnswer(c);
      const chat = a.json(chatCompletionsCodec);
      assert.equal(chat, JSON.stringify(chatCompletionsCodec.renderCompletion(c)));
      assert.equal(a.json(chatCompletionsCodec), chat);
      assert.equal(a.json(messagesCodec), JSON.stringify(messagesCodec.renderCompletion(c)));
      assert.equal(JSON.parse(a.json(chatCompletionsCodec)).created, 1_700_000_000);
    });

    it("does not keep the rendering of an answer without a creation time (it carries the current time)", () => {
      const a = new CachedAnswer(answer(0));
      const realNow = Date.now;
      try {
        Date.now = () => 1_000_000_000_000;
        assert.equal(JSON.parse(a.json(chatCompletionsCodec)).created, 1_000_000_000);
        Date.now = () => 2_000_000_000_000;
        assert.equal(JSON.parse(a.json(chatCompletionsCodec)).created, 2_000_000_000);
      } finally {
        Date.now = realNow;
      }
    });
  });

  it("deepFreeze leaves byte arrays writable and freezes everything else", () => {
    const v = deepFreeze({ a: [{ b: 1 }], bytes: new Uint8Array(2) });
    assert.ok(Object.isFrozen(v.a[0]));
    v.bytes[0] = 7;
    assert.equal(v.bytes[0], 7);
  });
});
