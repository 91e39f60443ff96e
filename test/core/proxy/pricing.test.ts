import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../../src/config.js";
import { ApiStyle } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { chatMessage, contentBlock } from "../../../src/core/proxy/canonical.js";
import type { ChatRequestBody } from "../../../src/core/proxy/canonical.js";
import { createPricing } from "../../../src/core/proxy/pricing.js";

const body = (model: string, text: string, maxTokens?: number): ChatRequestBody => ({
  style: ApiStyle.CHAT_COMPLETIONS,
  model,
  system: "",
  messages: [chatMessage({ role: "user", blocks: [contentBlock({ text })] })],
  temperature: undefined,
  maxTokens,
  stream: false,
  tools: [],
  extraJson: "",
});

describe("pricing: what a spend cap reserves, and what an answer cut short costs", () => {
  const pricing = createPricing(loadConfig({}).models);

  it("reserves max_tokens at the output price, or the model's own output ceiling when the request sets none", () => {
    // chat-4o-mini: $0.15 / $0.60 per million. A 100-byte prompt is reserved as 16 + 100 bytes / 2 = 58 tokens.
    const prompt = "x".repeat(100);
    assert.equal(pricing.worstCaseUsd(body("chat-4o-mini", prompt, 1000)), "0.0006087");
    // Without max_tokens: gpt-4o-mini writes at most 16,384 tokens, so that is what is reserved.
    assert.equal(pricing.worstCaseUsd(body("chat-4o-mini", prompt)), "0.0098391");
    // gpt-4 stops at 8,192 ($60 per million).
    assert.equal(pricing.worstCaseUsd(body("chat-4", prompt)), "0.49326");
  });

  it("takes a configured model's output ceiling, and refuses one that is not a positive integer", () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-pricing-"));
    try {
      const file = join(dir, "svc.config.json");
      writeFileSync(file, JSON.stringify({ models: { "chat-4o-mini": { maxOutputTokens: 100 } } }));
      const configured = createPricing(loadConfig({ SVC_CONFIG: file }).models);
      assert.equal(configured.worstCaseUsd(body("chat-4o-mini", "x".repeat(100))), "0.0000687");
      // Routed to another upstream model, a default model's ceiling no longer holds: 32,768 unless set.
      writeFileSync(file, JSON.stringify({ models: { "chat-4o-mini": { upstreamModel: "gpt-4.1-mini" } } }));
      assert.equal(loadConfig({ SVC_CONFIG: file }).models.get("chat-4o-mini")?.maxOutputTokens, 32_768);
      writeFileSync(file, JSON.stringify({ models: { "chat-4o-mini": { inputPer1M: "0.2" } } }));
      assert.equal(loadConfig({ SVC_CONFIG: file }).models.get("chat-4o-mini")?.maxOutputTokens, 16_384);
      writeFileSync(file, JSON.stringify({ models: { "chat-4o-mini": { maxOutputTokens: 0 } } }));
      assert.throws(() => loadConfig({ SVC_CONFIG: file }), ConfigError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("prices an answer cut short on the prompt and the characters streamed", () => {
    // 400 characters of prompt (100 tokens, counted locally) and 40 streamed (10 tokens) at chat-4o's $2.50 / $10.
    const part = pricing.partialAnswer(body("chat-4o", "y".repeat(400)), 0, 40);
    assert.deepEqual([part.usage.inputTokens, part.usage.outputTokens, part.costUsd], [100, 10, "0.00035"]);
    // The upstream's own prompt count, when its stream began with one, wins over the local count.
    assert.equal(pricing.partialAnswer(body("chat-4o", "y".repeat(400)), 300, 40).costUsd, "0.00085");
  });
});
