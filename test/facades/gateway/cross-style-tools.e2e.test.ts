import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, sseEvents } from "../../support/http.js";

/**
 * Streamed tool calls across styles, with the official SDKs against a real gateway and a scripted
 * upstream that speaks both styles as documented
 * (https://platform.openai.com/docs/api-reference/chat-streaming,
 * https://docs.anthropic.com/en/api/messages-streaming). The config routes `assistant-x-gpt`
 * (messages surface) to the OpenAI-style upstream and `chat-x-claude` (chat surface) to the
 * Anthropic-style one; `chat-4o` is the same-style reference.
 */

// ---- OpenAI style: parallel tool calls, interleaved as OpenAI may send them ----------------------

const oaHead = { id: "chatcmpl-par1", object: "chat.completion.chunk", created: 1750431388, model: "gpt-4o-2024-08-06", system_fingerprint: "fp_1" };
const oaChunk = (delta: object, finish: string | null = null) =>
  `data: ${JSON.stringify({ ...oaHead, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
const call = (index: number, args: string, id?: string, name?: string) => ({
  tool_calls: [{ index, ...(id ? { id, type: "function" } : {}), function: { ...(name ? { name } : {}), arguments: args } }],
});

/** tool_calls indexes 0, 1, 0, 2, 1, 0, 2: each call's fragments arrive between the others'. */
const interleaved = [
  call(0, "", "call_P0", "get_weather"),
  call(1, "", "call_P1", "get_time"),
  call(0, '{"city":'),
  call(2, '{"ci', "call_P2", "get_weather"),
  call(1, '{"tz":"Europe/Berlin"}'),
  call(0, '"Paris"}'),
  call(2, 'ty":"Oslo"}'),
];
const interleavedCalls = [
  { id: "call_P0", name: "get_weather", input: { city: "Paris" } },
  { id: "call_P1", name: "get_time", input: { tz: "Europe/Berlin" } },
  { id: "call_P2", name: "get_weather", input: { city: "Oslo" } },
];

/** Text first, then two calls one after the other (OpenAI's usual order). */
const textThenCalls = [
  { content: "Let me " },
  { content: "check." },
  call(0, "", "call_S0", "get_weather"),
  call(0, '{"city":"Rome"}'),
  call(1, "", "call_S1", "get_time"),
  call(1, '{"tz":"UTC"}'),
];

/** A call whose arguments never come (arguments "" throughout). */
const noArguments = [call(0, "", "call_E0", "get_time")];

function answerOpenAi(body: { stream?: boolean; messages: Array<{ content: unknown }> }, res: http.ServerResponse): void {
  const said = JSON.stringify(body.messages.at(-1)!.content);
  const pieces = said.includes("interleave") ? interleaved : said.includes("text then") ? textThenCalls : noArguments;
  assert.ok(body.stream, "these tests stream");
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.write(oaChunk({ role: "assistant", content: null, refusal: null }));
  for (const p of pieces) res.write(oaChunk(p));
  res.write(oaChunk({}, "tool_calls"));
  res.end(`data: ${JSON.stringify({ ...oaHead, choices: [], usage: { prompt_tokens: 9, completion_tokens: 12, total_tokens: 21 } })}\n\ndata: [DONE]\n\n`);
}

// ---- Anthropic style: a tool call with no input -------------------------------------------------

function answerAnthropic(body: { stream?: boolean; model: string; messages: Array<{ content: unknown }> }, res: http.ServerResponse): void {
  const said = JSON.stringify(body.messages.at(-1)!.content);
  // Anthropic streams a call without input as `input: {}` and then either no input_json_delta or one empty one.
  const deltas = said.includes("empty delta") ? [{ type: "input_json_delta", partial_json: "" }] : [];
  const usage = { input_tokens: 25, output_tokens: 12 };
  const tool = { type: "tool_use", id: "toolu_01E", name: "get_time", input: {} };
  if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "msg_E", type: "message", role: "assistant", model: body.model, content: [tool], stop_reason: "tool_use", stop_sequence: null, usage }));
    return;
  }
  const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.write(ev("message_start", { message: { id: "msg_E", type: "message", role: "assistant", model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } }));
  res.write(ev("content_block_start", { index: 0, content_block: tool }));
  for (const delta of deltas) res.write(ev("content_block_delta", { index: 0, delta }));
  res.write(ev("content_block_stop", { index: 0 }));
  res.write(ev("message_delta", { delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 12 } }));
  res.end(ev("message_stop", {}));
}

/** Checks a messages-style event sequence is strictly sequential: each block starts, takes its deltas and stops before the next. */
function assertSequential(events: Array<{ type: string; index?: number }>): void {
  let open: number | undefined;
  let next = 0;
  for (const e of events) {
    if (e.type === "content_block_start") {
      assert.equal(open, undefined, `block ${e.index} starts while ${open} is open: ${JSON.stringify(events)}`);
      assert.equal(e.index, next++, "blocks start in index order");
      open = e.index;
    } else if (e.type === "content_block_delta" || e.type === "content_block_stop") {
      assert.equal(e.index, open, `${e.type} for block ${e.index} while ${open} is open: ${JSON.stringify(events)}`);
      if (e.type === "content_block_stop") open = undefined;
    } else if (e.type === "message_delta") assert.equal(open, undefined, "every block stopped before message_delta");
  }
}

describe("streamed tool calls across styles (official openai and anthropic SDKs, scripted upstreams)", () => {
  let upstream: http.Server;
  let gw: TestGateway;
  let dir: string;
  let key: string;
  let anthropic: Anthropic;
  let openai: OpenAI;
  let n = 0;
  const nonce = () => `#${++n}`;

  before(async () => {
    upstream = http.createServer((req, res) => {
      let text = "";
      req.on("data", (d: Buffer) => (text += d));
      req.on("end", () => (req.url!.includes("/chat/completions") ? answerOpenAi : answerAnthropic)(JSON.parse(text), res));
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    const base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    dir = mkdtempSync(join(tmpdir(), "svc-cross-tools-"));
    const config = join(dir, "svc.config.json");
    writeFileSync(config, JSON.stringify({
      models: {
        "chat-x-claude": { surface: "chat-completions", provider: "anthropic", upstreamModel: "claude-3-5-haiku-20241022", inputPer1M: "0.80", outputPer1M: "4", maxOutputTokens: 8192 },
        "assistant-x-gpt": { surface: "messages", provider: "openai", upstreamModel: "gpt-4o", inputPer1M: "2.50", outputPer1M: "10", maxOutputTokens: 16384 },
      },
    }));
    gw = await startTestGateway({
      SVC_CONFIG: config,
      SVC_OPENAI_BASE_URL: `${base}/v1`,
      SVC_OPENAI_API_KEY: "sk-test",
      SVC_ANTHROPIC_BASE_URL: base,
      SVC_ANTHROPIC_API_KEY: "sk-ant-test",
    }, false);
    key = (await gw.project()).live;
    anthropic = new Anthropic({ apiKey: key, baseURL: gw.gatewayUrl, maxRetries: 0 });
    openai = new OpenAI({ apiKey: key, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
  });
  after(async () => {
    await gw?.close();
    upstream?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  describe("messages client, OpenAI-style upstream", () => {
    const anTools = [
      { name: "get_weather", input_schema: { type: "object" as const, properties: { city: { type: "string" } } } },
      { name: "get_time", input_schema: { type: "object" as const, properties: { tz: { type: "string" } } } },
    ];
    const ask = (text: string) => ({ model: "assistant-x-gpt", max_tokens: 50, tools: anTools, messages: [{ role: "user" as const, content: `${text} ${nonce()}` }] });

    /** Streams with the SDK's helper: the raw events, the blocks its `contentBlock` event gave, the final message. */
    async function stream(body: ReturnType<typeof ask>) {
      const { data: s, response } = await anthropic.messages.stream(body).withResponse();
      const events: Array<{ type: string; index?: number }> = [];
      const blocks: unknown[] = [];
      s.on("streamEvent", (e) => events.push(e as { type: string; index?: number }));
      s.on("contentBlock", (b) => blocks.push(b));
      const final = await s.finalMessage();
      return { events, blocks, final, cache: response.headers.get("x-svc-cache") };
    }

    it("turns interleaved parallel tool calls into sequential blocks, each with its whole input, live and from the cache", async () => {
      const body = ask("interleave");
      const want = interleavedCalls.map((c) => ({ type: "tool_use", ...c }));
      for (const cache of ["MISS", "HIT"]) {
        const got = await stream(body);
        assert.equal(got.cache, cache);
        assertSequential(got.events);
        assert.deepEqual(got.blocks, want, `${cache}: the SDK's contentBlock events`);
        assert.deepEqual(got.final.content, want, cache);
        assert.equal(got.final.stop_reason, "tool_use");
      }
    });

    it("streams text and then sequential tool calls as sequential blocks", async () => {
      const got = await stream(ask("text then calls"));
      assertSequential(got.events);
      assert.deepEqual(got.final.content, [
        { type: "text", text: "Let me check." },
        { type: "tool_use", id: "call_S0", name: "get_weather", input: { city: "Rome" } },
        { type: "tool_use", id: "call_S1", name: "get_time", input: { tz: "UTC" } },
      ]);
      // The text streamed live, fragment by fragment, before any tool block.
      const texts = got.events.filter((e) => e.type === "content_block_delta" && e.index === 0).length;
      assert.equal(texts, 2);
    });
  });

  describe("chat client, OpenAI-style upstream (same style)", () => {
    it("still gets each interleaved fragment as it arrives, in the upstream's order", async () => {
      const raw = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, {
        model: "chat-4o",
        stream: true,
        tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }],
        messages: [{ role: "user", content: `interleave ${nonce()}` }],
      });
      assert.equal(raw.status, 200);
      const calls = sseEvents(raw.text)
        .map((e) => e.data)
        .filter((d) => d !== "[DONE]")
        .flatMap((d) => (JSON.parse(d).choices[0]?.delta.tool_calls ?? []) as Array<{ index: number; id?: string; function: { arguments: string } }>)
        .map((c) => [c.index, c.id ?? "", c.function.arguments]);
      // The upstream's order (a call's first chunk, which also carries arguments, goes out as the call's start and then its arguments).
      assert.deepEqual(calls, [
        [0, "call_P0", ""],
        [1, "call_P1", ""],
        [0, "", '{"city":'],
        [2, "call_P2", ""],
        [2, "", '{"ci'],
        [1, "", '{"tz":"Europe/Berlin"}'],
        [0, "", '"Paris"}'],
        [2, "", 'ty":"Oslo"}'],
      ]);
    });

    it("keeps a call's arguments as the upstream sent them, even none", async () => {
      const stream = openai.chat.completions.stream({
        model: "chat-4o",
        tools: [{ type: "function", function: { name: "get_time", parameters: { type: "object" } } }],
        messages: [{ role: "user", content: `no arguments ${nonce()}` }],
      });
      const final = await stream.finalChatCompletion();
      assert.equal(final.choices[0]!.message.tool_calls?.[0]?.type === "function" && final.choices[0]!.message.tool_calls[0].function.arguments, "");
    });
  });

  describe("chat client, Anthropic-style upstream", () => {
    const oaTools = [{ type: "function" as const, function: { name: "get_time", parameters: { type: "object", properties: {} } } }];

    for (const how of ["no delta", "empty delta"]) {
      it(`streams a call with no input (${how}) as arguments "{}", as the whole answer and a cache hit do`, async () => {
        const body = { model: "chat-x-claude", tools: oaTools, messages: [{ role: "user" as const, content: `${how} ${nonce()}` }] };
        const args = (m: OpenAI.ChatCompletionMessage) => {
          const c = m.tool_calls?.[0];
          return c?.type === "function" ? [c.id, c.function.name, c.function.arguments] : c;
        };
        for (const cache of ["MISS", "HIT"]) {
          const { data: s, response } = await openai.chat.completions.create({ ...body, stream: true }).withResponse();
          assert.equal(response.headers.get("x-svc-cache"), cache);
          let streamed = "";
          for await (const c of s) for (const t of c.choices[0]?.delta.tool_calls ?? []) streamed += t.function?.arguments ?? "";
          assert.equal(streamed, "{}", cache);
        }
        const final = await openai.chat.completions.stream({ ...body, messages: [{ role: "user", content: `${how} ${nonce()}` }] }).finalChatCompletion();
        assert.deepEqual(args(final.choices[0]!.message), ["toolu_01E", "get_time", "{}"], "the SDK's stream helper");
        const whole = await openai.chat.completions.create({ ...body, messages: [{ role: "user", content: `${how} ${nonce()}` }] });
        assert.deepEqual(args(whole.choices[0]!.message), ["toolu_01E", "get_time", "{}"], "whole");
      });

      it(`lets the openai SDK's runTools call the tool (${how})`, async () => {
        let called: unknown;
        const runner = openai.chat.completions.runTools({
          model: "chat-x-claude",
          stream: true,
          messages: [{ role: "user", content: `${how} ${nonce()}` }],
          tools: [{ type: "function", function: { name: "get_time", description: "The time now.", parameters: { type: "object", properties: {} }, parse: (args: string) => JSON.parse(args) as object, function: (a: object) => ((called = a), "noon") } }],
        }, { maxChatCompletions: 1 });
        const errors: string[] = [];
        runner.on("error", (e) => errors.push(e.message));
        await runner.done().catch((e: Error) => errors.push(e.message));
        assert.deepEqual(errors, []);
        assert.deepEqual(called, {});
        assert.deepEqual(runner.messages.filter((m) => m.role === "tool").map((m) => m.content), ["noon"]);
      });
    }
  });
});
