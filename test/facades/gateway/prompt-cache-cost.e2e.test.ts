import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import type http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, rawRequest, type RawResponse, sseEvents } from "../../support/http.js";
import { scriptedUpstream, type ScriptedUpstream } from "../../support/upstream.js";

/**
 * Prompt-cache tokens through a real gateway, against a scripted upstream that speaks both styles
 * (https://docs.anthropic.com/en/api/messages, https://platform.openai.com/docs/api-reference/chat)
 * and reports prompt caching as each provider does: Anthropic's `input_tokens` leave out
 * `cache_creation_input_tokens` and `cache_read_input_tokens`; OpenAI's `prompt_tokens` include
 * `prompt_tokens_details.cached_tokens`. The cost follows each provider's billing, the usage reaches a
 * same-style client as sent and a client of the other style in its own terms, and the log's
 * `prompt_tokens` counts all input in both.
 */
const anthropicUsage = { input_tokens: 25, cache_creation_input_tokens: 7, cache_read_input_tokens: 11, output_tokens: 12 };
const openaiUsage = { prompt_tokens: 19, completion_tokens: 5, total_tokens: 24, prompt_tokens_details: { cached_tokens: 3, audio_tokens: 0 } };
// assistant-3-5-sonnet (and chat-x-claude, priced alike): 25 x 3 + 7 x 3.75 + 11 x 0.30 + 12 x 15 per 1M.
const ANTHROPIC_COST = "0.00028455";
// chat-4o (and assistant-x-gpt, priced alike): 16 x 2.50 + 3 x 1.25 + 5 x 10 per 1M.
const OPENAI_COST = "0.00009375";

const sse = (event: string, data: object) => `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
const chunk = (o: object) => `data: ${JSON.stringify({ id: "chatcmpl-pc", object: "chat.completion.chunk", created: 1750431500, model: "gpt-4o-2024-11-20", ...o })}\n\n`;

// Of the 7 writes, 4 to a one-hour entry (`cache_control: {type: "ephemeral", ttl: "1h"}`), billed at 2x input:
// 25 x 3 + 3 x 3.75 + 4 x 6 + 11 x 0.30 + 12 x 15 per 1M.
const oneHourUsage = { ...anthropicUsage, cache_creation: { ephemeral_5m_input_tokens: 3, ephemeral_1h_input_tokens: 4 } };
const ONE_HOUR_COST = "0.00029355";

function answer(path: string, body: { stream?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse): void {
  const usage = body.messages.at(-1)!.content.includes("[[1h]]") ? oneHourUsage : anthropicUsage;
  const message = { id: "msg_pc", type: "message", role: "assistant", model: "claude-3-5-sonnet-20241022", content: [{ type: "text", text: "Hi" }], stop_reason: "end_turn", stop_sequence: null, usage };
  if (path === "/v1/messages" && !body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(message));
  } else if (path === "/v1/messages" && body.messages.at(-1)!.content.includes("[[drop]]")) {
    // The stream's start (its usage) and one piece of text, then the connection cut.
    res.writeHead(200, { "content-type": "text/event-stream" });
    const start =
      sse("message_start", { message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } } }) +
      sse("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
      sse("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hi" } });
    res.write(start, () => setTimeout(() => res.destroy(), 20));
  } else if (path === "/v1/messages") {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(
      sse("message_start", { message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } } }) +
        sse("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
        sse("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hi" } }) +
        sse("content_block_stop", { index: 0 }) +
        sse("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 12 } }) +
        sse("message_stop", {}),
    );
  } else if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    const choice = { index: 0, message: { role: "assistant", content: "Hi", refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" };
    res.end(JSON.stringify({ id: "chatcmpl-pc", object: "chat.completion", created: 1750431500, model: "gpt-4o-2024-11-20", choices: [choice], usage: openaiUsage }));
  } else {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(
      chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "", refusal: null }, logprobs: null, finish_reason: null }], usage: null }) +
        chunk({ choices: [{ index: 0, delta: { content: "Hi" }, logprobs: null, finish_reason: null }], usage: null }) +
        chunk({ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }], usage: null }) +
        chunk({ choices: [], usage: openaiUsage }) +
        "data: [DONE]\n\n",
    );
  }
}

describe("prompt-cache tokens: cost and usage through the gateway (scripted upstream of both styles)", function () {
  this.timeout(60_000);
  let upstream: ScriptedUpstream;
  let gw: TestGateway;
  let key: string;
  let dir: string;
  let n = 0;

  before(async () => {
    upstream = await scriptedUpstream((body: Parameters<typeof answer>[1], res, req) => answer(req.url ?? "", body, res));
    const base = upstream.base;
    dir = mkdtempSync(join(tmpdir(), "svc-prompt-cache-"));
    const config = join(dir, "svc.config.json");
    // Each style's model routed to the other style's provider; no cache prices set: the provider's multiples of the input price.
    writeFileSync(config, JSON.stringify({
      models: {
        "chat-x-claude": { surface: "chat-completions", provider: "anthropic", upstreamModel: "claude-3-5-sonnet-20241022", inputPer1M: "3", outputPer1M: "15" },
        "assistant-x-gpt": { surface: "messages", provider: "openai", upstreamModel: "gpt-4o", inputPer1M: "2.50", outputPer1M: "10" },
      },
    }));
    gw = await startTestGateway({ SVC_CONFIG: config, SVC_OPENAI_BASE_URL: `${base}/v1`, SVC_OPENAI_API_KEY: "sk-test", SVC_ANTHROPIC_BASE_URL: base, SVC_ANTHROPIC_API_KEY: "sk-ant-test" }, false);
    key = (await gw.project()).live;
  });
  after(async () => {
    await gw.close();
    await upstream.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const chat = (model: string, extra: object = {}) => postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { model, messages: [{ role: "user", content: `cached prompt ${++n}` }], ...extra });
  const messages = (model: string, extra: object = {}) =>
    postJson(`${gw.gatewayUrl}/v1/messages`, key, { model, max_tokens: 100, messages: [{ role: "user", content: `cached prompt ${++n}` }], ...extra });
  /** The usage of a chat stream's usage chunk, and of a messages stream's message_delta. */
  const chatStreamUsage = (r: RawResponse) => JSON.parse(sseEvents(r.text).at(-2)!.data).usage;
  const messagesStreamUsage = (r: RawResponse) => JSON.parse(sseEvents(r.text).find((e) => e.event === "message_delta")!.data).usage;
  const logOf = async (r: RawResponse) => {
    const id = String(r.headers["x-svc-request-id"]);
    const end = Date.now() + 10_000;
    for (;;) {
      const res = await rawRequest(`${gw.managementUrl}/v1/logs/${id}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
      if (res.status === 200) return res.json();
      if (Date.now() > end) assert.fail(`no log for ${id}: ${res.status} ${res.text}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  it("prices one-hour cache writes at 2x input, five-minute ones at 1.25x, streamed or not, and passes cache_creation on as sent", async () => {
    const messages1h = (extra: object = {}) =>
      postJson(`${gw.gatewayUrl}/v1/messages`, key, { model: "assistant-3-5-sonnet-20241022", max_tokens: 100, messages: [{ role: "user", content: `cached prompt ${++n} [[1h]]` }], ...extra });
    const whole = await messages1h();
    assert.equal(whole.status, 200, whole.text);
    assert.equal(whole.headers["x-svc-cost"], ONE_HOUR_COST);
    assert.deepEqual(whole.json().usage, oneHourUsage);
    const streamed = await messages1h({ stream: true });
    assert.equal(streamed.status, 200, streamed.text);
    assert.equal(streamed.trailers["x-svc-cost"], ONE_HOUR_COST);
    // A chat client of an Anthropic upstream is billed the same.
    const chatWhole = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { model: "chat-x-claude", messages: [{ role: "user", content: `cached prompt ${++n} [[1h]]` }] });
    assert.equal(chatWhole.headers["x-svc-cost"], ONE_HOUR_COST);
    assert.equal((await logOf(whole)).cost_usd, ONE_HOUR_COST);
  });

  it("messages client, Anthropic upstream: cache writes and reads priced at 1.25x and 0.1x, the usage as sent, prompt_tokens logged as all input", async () => {
    const whole = await messages("assistant-3-5-sonnet-20241022");
    assert.equal(whole.status, 200, whole.text);
    assert.deepEqual(whole.json().usage, anthropicUsage);
    assert.equal(whole.headers["x-svc-cost"], ANTHROPIC_COST);
    const stream = await messages("assistant-3-5-sonnet-20241022", { stream: true });
    assert.equal(stream.trailers["x-svc-cost"], ANTHROPIC_COST);
    assert.deepEqual(JSON.parse(sseEvents(stream.text)[0]!.data).message.usage, { ...anthropicUsage, output_tokens: 1 });
    for (const r of [whole, stream]) {
      const log = await logOf(r);
      assert.deepEqual([log.usage.prompt_tokens, log.usage.completion_tokens, log.cost_usd], [43, 12, ANTHROPIC_COST]);
    }
  });

  it("a stream the upstream broke off is priced on its start's usage, cache counts included", async () => {
    const r = await postJson(`${gw.gatewayUrl}/v1/messages`, key, { model: "assistant-3-5-sonnet-20241022", max_tokens: 100, stream: true, messages: [{ role: "user", content: `[[drop]] ${++n}` }] });
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(sseEvents(r.text).at(-1)!.data).error.code, "upstream_stream_incomplete");
    // 25 x 3 + 7 x 3.75 + 11 x 0.30 for the prompt, and "Hi" (1 token, counted locally) x 15, per 1M.
    assert.equal(r.trailers["x-svc-cost"], "0.00011955");
    const log = await logOf(r);
    assert.deepEqual([log.usage.prompt_tokens, log.usage.completion_tokens, log.cost_usd], [43, 1, "0.00011955"]);
  });

  it("chat client, OpenAI upstream: cached input priced at 0.5x, the usage as sent, prompt_tokens logged as sent", async () => {
    const whole = await chat("chat-4o");
    assert.equal(whole.status, 200, whole.text);
    assert.deepEqual(whole.json().usage, openaiUsage);
    assert.equal(whole.headers["x-svc-cost"], OPENAI_COST);
    const stream = await chat("chat-4o", { stream: true, stream_options: { include_usage: true } });
    assert.equal(stream.trailers["x-svc-cost"], OPENAI_COST);
    assert.deepEqual(chatStreamUsage(stream), openaiUsage);
    const log = await logOf(whole);
    assert.deepEqual([log.usage.prompt_tokens, log.usage.completion_tokens, log.cost_usd], [19, 5, OPENAI_COST]);
  });

  it("chat client, Anthropic upstream: prompt_tokens all input, cache reads as prompt_tokens_details.cached_tokens; a cache hit answers the same", async () => {
    const expected = { prompt_tokens: 43, completion_tokens: 12, total_tokens: 55, prompt_tokens_details: { cached_tokens: 11 } };
    const body = { model: "chat-x-claude", messages: [{ role: "user", content: `cached prompt ${++n}` }] };
    const url = `${gw.gatewayUrl}/v1/chat/completions`;
    const whole = await postJson(url, key, body);
    assert.deepEqual([whole.headers["x-svc-cache"], whole.json().usage, whole.headers["x-svc-cost"]], ["MISS", expected, ANTHROPIC_COST]);
    const hit = await postJson(url, key, body);
    assert.deepEqual([hit.headers["x-svc-cache"], hit.json().usage, hit.headers["x-svc-cost"]], ["HIT", expected, "0"]);
    const stream = await chat("chat-x-claude", { stream: true, stream_options: { include_usage: true } });
    assert.deepEqual(chatStreamUsage(stream), expected);
    assert.equal(stream.trailers["x-svc-cost"], ANTHROPIC_COST);
  });

  it("messages client, OpenAI upstream: input_tokens without the cached tokens, which are cache_read_input_tokens; a cache hit answers the same", async () => {
    const expected = { input_tokens: 16, cache_read_input_tokens: 3, output_tokens: 5 };
    const body = { model: "assistant-x-gpt", max_tokens: 100, messages: [{ role: "user", content: `cached prompt ${++n}` }] };
    const url = `${gw.gatewayUrl}/v1/messages`;
    const whole = await postJson(url, key, body);
    assert.deepEqual([whole.headers["x-svc-cache"], whole.json().usage, whole.headers["x-svc-cost"]], ["MISS", expected, OPENAI_COST]);
    const hit = await postJson(url, key, body);
    assert.deepEqual([hit.headers["x-svc-cache"], hit.json().usage], ["HIT", expected]);
    const stream = await messages("assistant-x-gpt", { stream: true });
    assert.deepEqual(messagesStreamUsage(stream), expected);
    assert.equal(stream.trailers["x-svc-cost"], OPENAI_COST);
    const log = await logOf(whole);
    assert.deepEqual([log.usage.prompt_tokens, log.cost_usd], [19, OPENAI_COST], "the log counts all input, as for a chat client");
  });
});
