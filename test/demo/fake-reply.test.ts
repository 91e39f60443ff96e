import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { fakeReply, structuredReply } from "../../src/demo/fake-script.js";
import { gatewayWithProject } from "../support/gateway.js";

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

/** Structured output (README, "The demo provider"): JSON the SDKs' parse() helpers accept. */
describe("demo provider: structured output", () => {
  it("answers a value of the json_schema given, json_object with the echo, anything else as text", () => {
    const schema = {
      type: "object",
      properties: {
        name: { type: "string" },
        age: { type: "integer", minimum: 18.5 },
        tags: { type: "array", items: { type: "string" } },
        kind: { enum: ["a", "b"] },
        nested: { $ref: "#/$defs/inner" },
        maybe: { anyOf: [{ type: "null" }, { type: "boolean" }] },
        fixed: { const: 7 },
      },
      required: ["name", "age", "tags", "kind", "nested", "maybe", "fixed"],
      $defs: { inner: { type: "object", properties: { score: { type: ["number", "null"] } } } },
    };
    assert.deepEqual(JSON.parse(structuredReply({ type: "json_schema", json_schema: { name: "t", schema } }, "hi there")!), {
      name: "Echo: hi there",
      age: 19,
      tags: ["Echo: hi there"],
      kind: "a",
      nested: { score: 0 },
      maybe: false,
      fixed: 7,
    });
    assert.deepEqual(JSON.parse(structuredReply({ type: "json_schema", schema: { type: "object", properties: { a: { type: "string" } } } }, "x")!), { a: "Echo: x" });
    assert.deepEqual(JSON.parse(structuredReply({ type: "json_object" }, "x")!), { echo: "Echo: x" });
    assert.equal(structuredReply({ type: "text" }, "x"), undefined);
    assert.equal(structuredReply(undefined, "x"), undefined);
    // A schema that refers to itself ends (null at the depth bound) rather than looping.
    assert.ok(structuredReply({ type: "json_schema", schema: { $ref: "#" } }, "x"));
  });

  it("bounds what it builds, whatever the schema: one request cannot take the process's memory", () => {
    const started = Date.now();
    // Twelve properties, each the root again: 12^8 values without a bound on the whole (tester 35).
    const bomb = { type: "object", properties: Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`p${i}`, { $ref: "#" }])) };
    const nested = { type: "array", minItems: 8, items: { $ref: "#" } };
    const bigConst = { type: "object", properties: { a: { const: "x".repeat(100_000) }, b: { $ref: "#" }, c: { $ref: "#" } } };
    for (const schema of [bomb, nested, bigConst]) {
      const text = structuredReply({ type: "json_schema", schema }, "y".repeat(50_000))!;
      assert.ok(text.length < 4_000_000, `${text.length} characters`);
      JSON.parse(text);
    }
    assert.ok(Date.now() - started < 5_000, `${Date.now() - started} ms`);
  });

  describe("through the gateway, with the official SDKs' parse()", () => {
    const g = gatewayWithProject();
    const schema = { type: "object", properties: { a: { type: "string" }, n: { type: "number" } }, required: ["a", "n"], additionalProperties: false };

    it("chat completions: parse() gets the parsed value, also past max_tokens, stream or not", async () => {
      const client = new OpenAI({ apiKey: g.keys.live, baseURL: `${g.gw.gatewayUrl}/v1`, maxRetries: 0 });
      const format = { type: "json_schema" as const, json_schema: { name: "t", strict: true, schema } };
      const parsed = await client.chat.completions.parse({ model: "chat-4o-mini", max_tokens: 2, messages: [{ role: "user", content: `json ${Date.now()}` }], response_format: format });
      const value = parsed.choices[0]!.message.parsed as unknown as { a: string; n: number };
      assert.equal(value.n, 0);
      assert.match(value.a, /^Echo: json \d+$/);
      // Streamed (the helper parses only a zod format: the text is the JSON).
      const streamed = await client.chat.completions.stream({ model: "chat-4o", messages: [{ role: "user", content: "json stream" }], response_format: format }).finalChatCompletion();
      assert.deepEqual(JSON.parse(streamed.choices[0]!.message.content!), { a: "Echo: json stream", n: 0 });
    });

    it("messages: parse() with output_config.format gets the parsed value", async () => {
      const client = new Anthropic({ apiKey: g.keys.live, baseURL: g.gw.gatewayUrl, maxRetries: 0 });
      const parsed = await client.messages.parse({ model: "assistant-3-5-haiku-20241022", max_tokens: 100, messages: [{ role: "user", content: "json please" }], output_config: { format: { type: "json_schema", schema } } } as never);
      assert.deepEqual((parsed as unknown as { parsed_output: unknown }).parsed_output, { a: "Echo: json please", n: 0 });
    });
  });
});
