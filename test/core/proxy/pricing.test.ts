import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../../src/config.js";
import { ApiStyle } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { chatMessage, contentBlock, usage } from "../../../src/core/proxy/canonical.js";
import type { ChatRequestBody } from "../../../src/core/proxy/canonical.js";
import { createPricing } from "../../../src/core/proxy/pricing.js";
import { costPico, formatUsd } from "../../../src/core/proxy/cost.js";
import { pricesOf } from "../../../src/core/proxy/models.js";
import { chatCompletionsCodec } from "../../../src/facades/gateway/chat-completions-codec.js";
import { messagesCodec } from "../../../src/facades/gateway/messages-codec.js";

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
    // A max_tokens above the model's own ceiling is refused by the upstream past it: the ceiling is reserved.
    assert.equal(pricing.worstCaseUsd(body("chat-4o-mini", prompt, 100_000)), pricing.worstCaseUsd(body("chat-4o-mini", prompt)));
  });

  it("reserves, for a request without max_tokens to a messages-style upstream, the limit it is sent: 4096, or the model's known ceiling when lower", () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-pricing-"));
    try {
      const file = join(dir, "svc.config.json");
      writeFileSync(file, JSON.stringify({ models: {
        "chat-x": { surface: "chat-completions", provider: "anthropic", upstreamModel: "claude-3-5-sonnet-20241022", inputPer1M: "3", outputPer1M: "15", maxOutputTokens: 8192 },
        "chat-small": { surface: "chat-completions", provider: "anthropic", upstreamModel: "claude-3-haiku-20240307", inputPer1M: "3", outputPer1M: "15", maxOutputTokens: 1000 },
        "chat-guess": { surface: "chat-completions", provider: "anthropic", upstreamModel: "claude-next", inputPer1M: "3", outputPer1M: "15" },
      } }));
      const config = loadConfig({ SVC_CONFIG: file });
      const styled = createPricing(config.models, config.providers);
      // 58 prompt tokens at the dearest input price, a one-hour cache write at $6 (0.000348), then the output at $15 per million.
      assert.equal(styled.worstCaseUsd(body("chat-x", "x".repeat(100))), "0.061788"); // 4096 tokens
      assert.equal(styled.worstCaseUsd(body("chat-small", "x".repeat(100))), "0.015348"); // 1000 tokens
      assert.equal(styled.worstCaseUsd(body("chat-guess", "x".repeat(100))), "0.061788"); // 4096 tokens: no ceiling stated
      assert.equal(styled.worstCaseUsd(body("chat-x", "x".repeat(100), 8000)), "0.120348");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reserves each image at the most tokens the model bills for one, however few bytes name it", () => {
    const url = "https://example.com/cat.png";
    const chat = (model: string, images: number) =>
      chatCompletionsCodec.parseRequest({ model, max_tokens: 5, messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, ...Array.from({ length: images }, () => ({ type: "image_url", image_url: { url, detail: "high" } }))] }] });
    const worst = (b: ChatRequestBody) => Number(pricing.worstCaseUsd(b));
    // gpt-4o: up to 85 + 170 x 8 tiles = 1,445 tokens an image at $2.50/M; gpt-4o-mini: 2,833 + 5,667 x 8 = 48,169 at $0.15/M.
    assert.ok(worst(chat("chat-4o", 1)) - worst(chat("chat-4o", 0)) >= 1445 * 2.5e-6, String(worst(chat("chat-4o", 1))));
    // Three images: three times that (and their few bytes of JSON).
    const three = worst(chat("chat-4o", 3)) - worst(chat("chat-4o", 0));
    assert.ok(three >= 3 * 1445 * 2.5e-6 && three < 3 * 1445 * 2.5e-6 * 1.1, String(three));
    assert.ok(worst(chat("chat-4o-mini", 1)) - worst(chat("chat-4o-mini", 0)) >= 48_169 * 0.15e-6);
    // Claude: about 1,600 tokens an image (at the dearest input price, a one-hour cache write: $6/M for 3.5 Sonnet).
    const image = { type: "image", source: { type: "url", url } };
    const messages = (content: unknown[]) => messagesCodec.parseRequest({ model: "assistant-3-5-sonnet-20241022", max_tokens: 5, messages: [{ role: "user", content }] });
    const text = { type: "text", text: "What is this?" };
    const one = worst(messages([text, image])) - worst(messages([text]));
    assert.ok(one >= 1600 * 6e-6 && one < 1600 * 6e-6 * 1.1, String(one));
    // An image a tool returned, inside its tool_result.
    const withResult = (content: unknown[]) => messagesCodec.parseRequest({
      model: "assistant-3-5-sonnet-20241022",
      max_tokens: 5,
      messages: [
        { role: "user", content: "Screenshot?" },
        { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "shot", input: {} }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content }] },
      ],
    });
    assert.ok(worst(withResult([text, image])) - worst(withResult([text])) >= 1600 * 6e-6);
  });

  it("counts a system prompt once, sent as a string or as blocks (which also ride in extra_json)", () => {
    const big = "lorem ipsum dolor ".repeat(2000);
    const worst = (system: unknown) =>
      Number(pricing.worstCaseUsd(messagesCodec.parseRequest({ model: "assistant-3-opus-20240229", max_tokens: 100, system, messages: [{ role: "user", content: "hi" }] })));
    const asText = worst(big);
    const asBlocks = worst([{ type: "text", text: big, cache_control: { type: "ephemeral" } }]);
    assert.ok(asBlocks >= asText && asBlocks < asText * 1.01, `blocks ${asBlocks} against text ${asText}`);
    // A key named system inside another field is no system prompt in extra_json.
    const nested = Number(pricing.worstCaseUsd(messagesCodec.parseRequest({
      model: "assistant-3-opus-20240229", max_tokens: 100, system: big, tool_choice: { type: "auto", system: [1] }, messages: [{ role: "user", content: "hi" }],
    })));
    assert.ok(nested >= asText, `nested ${nested} against ${asText}`);
  });

  it("counts a tool result's text once, sent as a string or as blocks (which also ride in extra_json or raw_json)", () => {
    const big = "lorem ipsum dolor ".repeat(2000);
    // The same tool result as a messages-style user block and as a chat-style tool message.
    const styles = [
      {
        codec: messagesCodec,
        model: "assistant-3-opus-20240229",
        call: { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "search", input: {} }] },
        result: (content: unknown) => ({ role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content }] }),
      },
      {
        codec: chatCompletionsCodec,
        model: "chat-4",
        call: { role: "assistant", content: null, tool_calls: [{ id: "t1", type: "function", function: { name: "search", arguments: "{}" } }] },
        result: (content: unknown) => ({ role: "tool", tool_call_id: "t1", content }),
      },
    ];
    for (const { codec, model, call, result } of styles) {
      const worst = (content: unknown) =>
        Number(pricing.worstCaseUsd(codec.parseRequest({ model, max_tokens: 100, messages: [{ role: "user", content: "look it up" }, call, result(content)] })));
      const asText = worst(big);
      const asBlocks = worst([{ type: "text", text: big }]);
      assert.ok(asBlocks >= asText && asBlocks < asText * 1.01, `${model}: blocks ${asBlocks} against text ${asText}`);
    }
  });

  it("takes a configured model's image ceiling, and refuses one that is not a positive integer", () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-pricing-"));
    try {
      const file = join(dir, "svc.config.json");
      writeFileSync(file, JSON.stringify({ models: { "chat-4o": { imageTokens: 10_000 } } }));
      assert.equal(loadConfig({ SVC_CONFIG: file }).models.get("chat-4o")?.imageTokens, 10_000);
      // Routed to another upstream model: the high fallback, unless set.
      writeFileSync(file, JSON.stringify({ models: { "chat-4o": { upstreamModel: "gpt-4.1" } } }));
      assert.equal(loadConfig({ SVC_CONFIG: file }).models.get("chat-4o")?.imageTokens, 50_000);
      writeFileSync(file, JSON.stringify({ models: { "chat-4o": { imageTokens: -1 } } }));
      assert.throws(() => loadConfig({ SVC_CONFIG: file }), ConfigError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
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
      // That guess is no ceiling: a max_tokens above it is reserved as asked.
      const guessed = createPricing(loadConfig({ SVC_CONFIG: file }).models);
      assert.ok(Number(guessed.worstCaseUsd(body("chat-4o-mini", "x", 100_000))) > Number(guessed.worstCaseUsd(body("chat-4o-mini", "x"))));
      // A stated ceiling bounds it.
      assert.equal(configured.worstCaseUsd(body("chat-4o-mini", "x".repeat(100), 5000)), "0.0000687");
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
    const part = pricing.partialAnswer(body("chat-4o", "y".repeat(400)), undefined, 40);
    assert.deepEqual([part.usage.inputTokens, part.usage.outputTokens, part.costUsd], [100, 10, "0.00035"]);
    // The upstream's own prompt count, when its stream began with one, wins over the local count.
    assert.equal(pricing.partialAnswer(body("chat-4o", "y".repeat(400)), usage({ inputTokens: 300, outputTokens: 1 }), 40).costUsd, "0.00085");
  });

  it("prices an answer cut short with the prompt-cache counts its stream began with", () => {
    // An Anthropic stream's message_start: 25 uncached + 7 written + 11 read. 40 characters streamed: 10 tokens.
    // assistant-3-5-sonnet: 25 x 3 + 7 x 3.75 + 11 x 0.30 + 10 x 15 = 254.55 per 1M.
    const started = usage({ inputTokens: 43, cacheWriteTokens: 7, cacheReadTokens: 11, outputTokens: 1 });
    const part = pricing.partialAnswer({ ...body("assistant-3-5-sonnet-20241022", "y".repeat(400)), style: ApiStyle.MESSAGES }, started, 40);
    assert.deepEqual([part.usage.inputTokens, part.usage.cacheWriteTokens, part.usage.cacheReadTokens, part.usage.outputTokens, part.costUsd], [43, 7, 11, 10, "0.00025455"]);
  });
});

describe("pricing: prompt-cache prices", () => {
  const withConfig = <T>(models: object, fn: (load: () => ReturnType<typeof loadConfig>) => T): T => {
    const dir = mkdtempSync(join(tmpdir(), "svc-pricing-"));
    try {
      const file = join(dir, "svc.config.json");
      writeFileSync(file, JSON.stringify({ models }));
      return fn(() => loadConfig({ SVC_CONFIG: file }));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  const cachePrices = (m: { cacheReadPer1M: string; cacheWritePer1M: string; cacheWrite1hPer1M: string } | undefined) => m && [m.cacheReadPer1M, m.cacheWritePer1M, m.cacheWrite1hPer1M];

  it("defaults to the providers' list prices: Anthropic writes 1.25x (2x for an hour) and reads 0.1x the input price, OpenAI cached input 0.5x", () => {
    const models = loadConfig({}).models;
    const table = Object.fromEntries([...models.values()].map((m) => [m.id, [m.inputPer1M, m.cacheReadPer1M, m.cacheWritePer1M, m.cacheWrite1hPer1M]]));
    assert.deepEqual(table, {
      "chat-4o": ["2.50", "1.25", "2.50", "2.50"],
      "chat-4o-mini": ["0.15", "0.075", "0.15", "0.15"],
      "chat-4-turbo": ["10", "5", "10", "10"],
      "chat-4": ["30", "15", "30", "30"],
      "chat-3.5-turbo": ["0.50", "0.25", "0.50", "0.50"],
      "assistant-3-5-sonnet-20241022": ["3", "0.30", "3.75", "6"],
      "assistant-3-5-haiku-20241022": ["0.80", "0.08", "1", "1.6"],
      "assistant-3-opus-20240229": ["15", "1.50", "18.75", "30"],
      "assistant-3-sonnet-20240229": ["3", "0.30", "3.75", "6"],
      // Anthropic lists Claude 3 Haiku's cache prices rounded ($0.30, $0.03), not 0.3125 and 0.025.
      "assistant-3-haiku-20240307": ["0.25", "0.03", "0.30", "0.50"],
    });
  });

  it("takes configured cache prices; an unset one follows the model's input price and its provider's style", () => {
    withConfig(
      {
        "chat-4o": { cacheReadPer1M: "0.5" },
        "chat-4o-mini": { inputPer1M: "0.2" },
        "assistant-3-haiku-20240307": { maxOutputTokens: 100 },
        "assistant-3-opus-20240229": { inputPer1M: "0.000001" },
        "chat-x-claude": { surface: "chat-completions", provider: "anthropic", upstreamModel: "claude-3-5-sonnet-20241022", inputPer1M: "3", outputPer1M: "15" },
        "assistant-x-gpt": { surface: "messages", provider: "openai", upstreamModel: "gpt-4o", inputPer1M: "2.5", outputPer1M: "10", cacheWritePer1M: 4 },
        "assistant-3-sonnet-20240229": { cacheWrite1hPer1M: "7" },
      },
      (load) => {
        const models = load().models;
        assert.deepEqual(cachePrices(models.get("chat-4o")), ["0.5", "2.50", "2.50"]);
        assert.deepEqual(cachePrices(models.get("chat-4o-mini")), ["0.1", "0.2", "0.2"], "a new input price: the multiples of it");
        assert.deepEqual(cachePrices(models.get("assistant-3-haiku-20240307")), ["0.03", "0.30", "0.50"], "the same model at the same input price keeps its list prices");
        assert.deepEqual(cachePrices(models.get("assistant-3-opus-20240229")), ["0.000001", "0.000002", "0.000002"], "rounded up to the 6th decimal");
        assert.deepEqual(cachePrices(models.get("chat-x-claude")), ["0.3", "3.75", "6"], "routed to a messages-style provider: Anthropic's multiples");
        assert.deepEqual(cachePrices(models.get("assistant-x-gpt")), ["1.25", "4", "2.5"], "routed to a chat-completions-style provider: OpenAI's");
        assert.deepEqual(cachePrices(models.get("assistant-3-sonnet-20240229")), ["0.30", "3.75", "7"], "a one-hour write price set alone");
      },
    );
  });

  it("refuses a cache price that is not a price, naming it", () => {
    for (const bad of ["-1", "1.1234567", "abc", "", "1e3"]) {
      for (const key of ["cacheReadPer1M", "cacheWritePer1M", "cacheWrite1hPer1M"]) {
        withConfig({ "chat-4o": { [key]: bad } }, (load) =>
          assert.throws(load, (e: Error) => e instanceof ConfigError && e.message.includes(`model chat-4o ${key}`), `${key} ${JSON.stringify(bad)}`),
        );
      }
    }
    withConfig({ "chat-4o": { cacheRed: "1" } }, (load) => assert.throws(load, (e: Error) => e instanceof ConfigError && e.message.includes('"cacheRed"')));
  });

  it("computes the cost as plain input + cache reads + cache writes + output, each at its price; cache counts never beyond the input", () => {
    const p = pricesOf(loadConfig({}).models.get("assistant-3-5-sonnet-20241022")!);
    const cost = (inputTokens: number, cacheWriteTokens: number, cacheReadTokens: number, outputTokens: number) =>
      formatUsd(costPico(p, { inputTokens, cacheWriteTokens, cacheReadTokens, outputTokens }));
    assert.equal(cost(43, 7, 11, 12), "0.00028455");
    assert.equal(cost(43, 0, 0, 12), "0.000309", "nothing cached: all input at the input price");
    assert.equal(cost(10, 0, 50, 0), "0.000003", "reads beyond the input are cut to it: 10 x 0.30");
    assert.equal(cost(10, 50, 4, 0), "0.0000237", "writes beyond what is left are cut to it: 4 x 0.30 + 6 x 3.75");
    const withHour = (write: number, write1h: number) => formatUsd(costPico(p, { inputTokens: 100, cacheWriteTokens: write, cacheWrite1hTokens: write1h, outputTokens: 0 }));
    assert.equal(withHour(40, 10), "0.0003525", "one-hour writes at 2x input: 60 x 3 + 30 x 3.75 + 10 x 6");
    assert.equal(withHour(40, 90), "0.00042", "one-hour writes beyond the writes are cut to them: 60 x 3 + 40 x 6");
  });

  it("reserves for a spend cap no less than what a request can cost, cached or not", () => {
    const pricing = createPricing(loadConfig({}).models);
    const prompt = "x".repeat(100); // reserved as 58 prompt tokens
    for (const model of ["chat-4o", "assistant-3-5-sonnet-20241022", "assistant-3-haiku-20240307"]) {
      const b = { ...body(model, prompt, 100), style: model.startsWith("chat") ? ApiStyle.CHAT_COMPLETIONS : ApiStyle.MESSAGES };
      const reserved = Number(pricing.worstCaseUsd(b));
      const p = pricesOf(loadConfig({}).models.get(model)!);
      for (const [write, read, write1h] of [[0, 0, 0], [58, 0, 0], [0, 58, 0], [29, 29, 0], [58, 0, 58], [40, 0, 20]]) {
        const cost = Number(formatUsd(costPico(p, { inputTokens: 58, cacheWriteTokens: write, cacheReadTokens: read, cacheWrite1hTokens: write1h, outputTokens: 100 })));
        assert.ok(reserved >= cost, `${model}: reserved ${reserved} < ${cost} (writes ${write}, reads ${read})`);
      }
    }
    // The prompt at the one-hour cache-write price where that is the dearest: 58 x 6 + 100 x 15 per 1M.
    assert.equal(pricing.worstCaseUsd({ ...body("assistant-3-5-sonnet-20241022", prompt, 100), style: ApiStyle.MESSAGES }), "0.001848");
    // A chat-completions-style model's dearest input is plain input, as before: 58 x 2.50 + 100 x 10.
    assert.equal(pricing.worstCaseUsd(body("chat-4o", prompt, 100)), "0.001145");
  });
});
