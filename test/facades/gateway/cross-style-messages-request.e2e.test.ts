import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson } from "../../support/http.js";

/**
 * A messages-style client (the official Anthropic SDK) on a model routed to an OpenAI-style
 * upstream: what the upstream is sent, and what the client gets back, against a real gateway and a
 * scripted upstream that answers as OpenAI documents
 * (https://platform.openai.com/docs/api-reference/chat/create) and keeps every body it was sent.
 * `assistant-x-gpt` (messages surface) goes to the OpenAI-style upstream; `chat-4o` (chat, OpenAI)
 * and `assistant-3-5-haiku-20241022` (messages, Anthropic) are the same-style references.
 */

interface OaMessage {
  role: string;
  content?: unknown;
  tool_calls?: unknown[];
  tool_call_id?: string;
}
interface Sent {
  path: string;
  body: { messages: OaMessage[]; stream?: boolean; thread?: unknown; model: string; response_format?: unknown };
}

interface Answer {
  content?: string;
  calls?: Array<{ id: string; name: string; arguments: string }>;
  finish: string;
}

/**
 * The script, by what the conversation says: "forced" (a call forced by tool_choice, which OpenAI
 * ends with finish_reason "stop"), "cut" (a call cut off by max_tokens), "add" (a call, then an
 * answer once the result is in); anything else a short text answer.
 */
function scripted(messages: OaMessage[]): Answer {
  const said = JSON.stringify(messages);
  const answered = messages.at(-1)?.role === "tool";
  if (said.includes("forced")) {
    return answered ? { content: "Done.", finish: "stop" } : { calls: [{ id: "call_F", name: "get_time", arguments: '{"tz":"UTC"}' }], finish: "stop" };
  }
  if (said.includes("cut")) return { calls: [{ id: "call_C", name: "get_weather", arguments: '{"city":"Par' }], finish: "length" };
  if (said.includes("add")) {
    return answered ? { content: "2 + 3 = 5.", finish: "stop" } : { calls: [{ id: "call_A", name: "add", arguments: '{"a":2,"b":3}' }], finish: "tool_calls" };
  }
  return { content: "ok", finish: "stop" };
}

const usage = { prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 };

function answerOpenAi(body: Sent["body"], res: http.ServerResponse): void {
  // Asked for JSON (response_format): JSON, as OpenAI answers it; else the script's text.
  const a = body.response_format ? { content: '{"a":1}', finish: "stop" } : scripted(body.messages);
  const toolCalls = a.calls?.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
  const head = { id: "chatcmpl-X", created: 1750431388, model: "gpt-4o-2024-08-06" };
  if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    const message = { role: "assistant", content: a.content ?? null, refusal: null, ...(toolCalls ? { tool_calls: toolCalls } : {}) };
    res.end(JSON.stringify({ ...head, object: "chat.completion", choices: [{ index: 0, message, logprobs: null, finish_reason: a.finish }], usage }));
    return;
  }
  const chunk = (delta: object, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...head, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.write(chunk({ role: "assistant", content: a.content === undefined ? null : "", refusal: null }));
  if (a.content) res.write(chunk({ content: a.content }));
  a.calls?.forEach((c, index) => {
    res.write(chunk({ tool_calls: [{ index, id: c.id, type: "function", function: { name: c.name, arguments: "" } }] }));
    res.write(chunk({ tool_calls: [{ index, function: { arguments: c.arguments } }] }));
  });
  res.write(chunk({}, a.finish));
  res.end(`data: ${JSON.stringify({ ...head, object: "chat.completion.chunk", choices: [], usage })}\n\ndata: [DONE]\n\n`);
}

function answerAnthropic(body: Sent["body"], res: http.ServerResponse): void {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({
    id: "msg_T", type: "message", role: "assistant", model: body.model, content: [{ type: "text", text: "ok" }],
    stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 },
  }));
}

describe("messages requests on an OpenAI-style upstream (official anthropic SDK, scripted upstream)", () => {
  let upstream: http.Server;
  let gw: TestGateway;
  let dir: string;
  let key: string;
  let anthropic: Anthropic;
  let openai: OpenAI;
  const sent: Sent[] = [];
  let n = 0;
  const nonce = () => `#${++n}`;
  /** The bodies the upstream was sent for the conversation that carried `tag`. */
  const sentFor = (tag: string) => sent.filter((s) => JSON.stringify(s.body.messages).includes(`${tag}"`)).map((s) => s.body);

  before(async () => {
    upstream = http.createServer((req, res) => {
      let text = "";
      req.on("data", (d: Buffer) => (text += d));
      req.on("end", () => {
        const s: Sent = { path: req.url!, body: JSON.parse(text) as Sent["body"] };
        sent.push(s);
        (s.path.includes("/chat/completions") ? answerOpenAi : answerAnthropic)(s.body, res);
      });
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    const base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    dir = mkdtempSync(join(tmpdir(), "svc-cross-msg-"));
    const config = join(dir, "svc.config.json");
    writeFileSync(config, JSON.stringify({
      models: { "assistant-x-gpt": { surface: "messages", provider: "openai", upstreamModel: "gpt-4o", inputPer1M: "2.50", outputPer1M: "10", maxOutputTokens: 16384 } },
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

  const tools = [
    { name: "get_time", input_schema: { type: "object" as const, properties: { tz: { type: "string" } } } },
    { name: "get_weather", input_schema: { type: "object" as const, properties: { city: { type: "string" } } } },
  ];

  /** The SDK's error for a request the gateway refused: [status, type, code, message]. */
  async function refused(body: Anthropic.MessageCreateParamsNonStreaming): Promise<unknown[]> {
    try {
      await anthropic.messages.create(body);
    } catch (e) {
      assert.ok(e instanceof Anthropic.APIError, String(e));
      const err = (e.error as { error?: { type?: string; code?: string; message?: string } } | undefined)?.error;
      return [e.status, err?.type, err?.code, err?.message];
    }
    assert.fail("the request was not refused");
  }

  /** A stream request with the SDK's helper: the final message, its message_delta, and the cache header. */
  async function stream(body: Anthropic.MessageCreateParamsNonStreaming) {
    const { data: s, response } = await anthropic.messages.stream(body).withResponse();
    const events: Anthropic.MessageStreamEvent[] = [];
    s.on("streamEvent", (e) => events.push(e));
    const final = await s.finalMessage();
    return { final, events, cache: response.headers.get("x-svc-cache") };
  }

  describe("a tool call forced by tool_choice (finish_reason \"stop\")", () => {
    const forced = (tag: string): Anthropic.MessageCreateParamsNonStreaming => ({
      model: "assistant-x-gpt", max_tokens: 50, tools, tool_choice: { type: "tool", name: "get_time" },
      messages: [{ role: "user", content: `forced ${tag}` }],
    });
    const call = { type: "tool_use", id: "call_F", name: "get_time", input: { tz: "UTC" } };

    it("is stop_reason tool_use in the JSON answer and its cache hit, served either way", async () => {
      const body = forced(nonce());
      for (const cache of ["MISS", "HIT"]) {
        const { data, response } = await anthropic.messages.create(body).withResponse();
        assert.equal(response.headers.get("x-svc-cache"), cache);
        assert.deepEqual([data.stop_reason, data.content], ["tool_use", [call]], cache);
      }
      const hit = await stream(body);
      assert.equal(hit.cache, "HIT");
      assert.deepEqual([hit.final.stop_reason, hit.final.content], ["tool_use", [call]], "the JSON entry served as a stream");
      assert.equal(hit.events.find((e) => e.type === "message_delta")?.delta.stop_reason, "tool_use");
      assert.equal(sentFor(body.messages[0]!.content as string).length, 1);
    });

    it("is stop_reason tool_use in the stream's message_delta and its cache hit, served either way", async () => {
      const body = forced(nonce());
      for (const cache of ["MISS", "HIT"]) {
        const got = await stream(body);
        assert.equal(got.cache, cache);
        assert.equal(got.events.find((e) => e.type === "message_delta")?.delta.stop_reason, "tool_use", cache);
        assert.deepEqual([got.final.stop_reason, got.final.content], ["tool_use", [call]], cache);
      }
      const { data, response } = await anthropic.messages.create(body).withResponse();
      assert.equal(response.headers.get("x-svc-cache"), "HIT");
      assert.deepEqual([data.stop_reason, data.content], ["tool_use", [call]], "the stream's entry served as JSON");
    });

    it("lets the SDK's tool runner run the tool", async () => {
      const tag = nonce();
      const ran: unknown[] = [];
      const runner = anthropic.beta.messages.toolRunner({
        model: "assistant-x-gpt", max_tokens: 50, thread: false, max_iterations: 3, tool_choice: { type: "tool", name: "get_time" },
        messages: [{ role: "user", content: `forced ${tag}` }],
        tools: [{ ...tools[0]!, run: (input: unknown) => (ran.push(input), "12:00"), parse: (x: unknown) => x }],
      });
      const stops: Array<string | null> = [];
      for await (const m of runner) stops.push(m.stop_reason);
      assert.deepEqual(stops, ["tool_use", "end_turn"]);
      assert.deepEqual(ran, [{ tz: "UTC" }]);
      assert.deepEqual(sentFor(tag).at(-1)!.messages.at(-1), { role: "tool", tool_call_id: "call_F", content: "12:00" });
    });

    it("keeps finish_reason \"stop\" for a chat client of the same style", async () => {
      const res = await openai.chat.completions.create({
        model: "chat-4o", tools: [{ type: "function", function: { name: "get_time", parameters: { type: "object" } } }],
        tool_choice: { type: "function", function: { name: "get_time" } }, messages: [{ role: "user", content: `forced ${nonce()}` }],
      });
      assert.equal(res.choices[0]!.finish_reason, "stop");
      assert.equal(res.choices[0]!.message.tool_calls?.length, 1);
    });

    it("still says max_tokens for a call cut off by the token limit", async () => {
      const data = await anthropic.messages.create({ model: "assistant-x-gpt", max_tokens: 5, tools, messages: [{ role: "user", content: `cut ${nonce()}` }] });
      assert.equal(data.stop_reason, "max_tokens");
    });
  });

  describe("a tool call whose arguments are not a JSON object (cut off)", () => {
    it("has the same input, {}, in the JSON answer and in its cache hit served as a stream", async () => {
      const body: Anthropic.MessageCreateParamsNonStreaming = { model: "assistant-x-gpt", max_tokens: 5, tools, messages: [{ role: "user", content: `cut ${nonce()}` }] };
      const call = { type: "tool_use", id: "call_C", name: "get_weather", input: {} };
      const whole = await anthropic.messages.create(body);
      assert.deepEqual(whole.content, [call]);
      const hit = await stream(body);
      assert.equal(hit.cache, "HIT");
      assert.deepEqual(hit.final.content, whole.content);
      assert.deepEqual(hit.events.filter((e) => e.type === "content_block_delta"), [], "no input fragment");
    });
  });

  describe("system messages in the conversation (role \"system\", the SDK's SystemMessageParam)", () => {
    it("passes one to an Anthropic-style upstream as sent, and gives an OpenAI-style one a system message in its place", async () => {
      const tag = nonce();
      const messages: Anthropic.MessageParam[] = [
        { role: "user", content: `first ${tag}` },
        { role: "assistant", content: "ok" },
        { role: "system", content: [{ type: "text", text: "Be brief." }, { type: "text", text: "Use French." }] },
        { role: "user", content: "again" },
      ];
      const same = await anthropic.messages.create({ model: "assistant-3-5-haiku-20241022", max_tokens: 20, system: "top", messages });
      assert.equal(same.content[0]?.type, "text");
      const toAnthropic = sent.filter((x) => !x.path.includes("/chat/completions")).at(-1)!.body;
      assert.deepEqual(toAnthropic.messages, messages);
      await anthropic.messages.create({ model: "assistant-x-gpt", max_tokens: 20, system: "top", messages });
      assert.deepEqual(sentFor(tag).at(-1)!.messages, [
        { role: "system", content: "top" },
        { role: "user", content: `first ${tag}` },
        { role: "assistant", content: "ok" },
        { role: "system", content: "Be brief.\n\nUse French." },
        { role: "user", content: "again" },
      ]);
    });

    it("refuses a system message holding anything but text", async () => {
      const res = await postJson(`${gw.gatewayUrl}/v1/messages`, key, {
        model: "assistant-3-5-haiku-20241022", max_tokens: 5,
        messages: [{ role: "system", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }, { role: "user", content: "x" }],
      });
      assert.equal(res.status, 400, res.text);
      assert.deepEqual(res.json().error, { type: "invalid_request_error", code: "invalid_value", message: "`messages[0].content[0]` must be a text block: a system message holds text only." });
    });
  });

  describe("message threads (the `thread` field)", () => {
    const continued = (tag: string) => ({
      model: "assistant-x-gpt", max_tokens: 20,
      thread: { type: "continue", previous_message_id: "msg_prev" },
      messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: `5 ${tag}` }] }],
    });

    it("are refused, 400 unsupported_parameter with the details the SDK reads, before the upstream is asked", async () => {
      const tag = nonce();
      const res = await postJson(`${gw.gatewayUrl}/v1/messages`, key, continued(tag), { "anthropic-version": "2023-06-01", "anthropic-beta": "message-threads-2026-08-12" });
      assert.equal(res.status, 400);
      const { error } = res.json() as { error: { type: string; code: string; message: string; details: unknown } };
      assert.deepEqual([error.type, error.code, error.details], ["invalid_request_error", "unsupported_parameter", { error_code: "thread_unsupported_request" }]);
      assert.match(error.message, /`thread`.*assistant-x-gpt/);
      assert.deepEqual(sentFor(tag), []);
      const stream = await postJson(`${gw.gatewayUrl}/v1/messages`, key, { ...continued(tag), stream: true, thread: { type: "create" } });
      assert.deepEqual([stream.status, (stream.json() as { error: { code: string } }).error.code], [400, "unsupported_parameter"]);
      assert.deepEqual(sentFor(tag), []);
    });

    it("let the SDK's threaded tool runner go on with the whole history, which the upstream is sent", async () => {
      const tag = nonce();
      // What the SDK sends and is answered: its first turn creates a thread.
      const turns: Array<[thread: unknown, status: number]> = [];
      const client = new Anthropic({
        apiKey: key, baseURL: gw.gatewayUrl, maxRetries: 0,
        fetch: async (url: string | URL | Request, init?: RequestInit) => {
          const res = await fetch(url, init);
          turns.push([(JSON.parse(String(init?.body)) as { thread?: unknown }).thread, res.status]);
          return res;
        },
      });
      const runner = client.beta.messages.toolRunner({
        model: "assistant-x-gpt", max_tokens: 50, messages: [{ role: "user", content: `add ${tag}` }],
        tools: [{ name: "add", input_schema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } }, run: ({ a, b }: { a: number; b: number }) => String(a + b), parse: (x: unknown) => x as { a: number; b: number } }],
      });
      const stops: Array<string | null> = [];
      for await (const m of runner) stops.push(m.stop_reason);
      assert.deepEqual(stops, ["tool_use", "end_turn"]);
      assert.deepEqual(turns, [[{ type: "create" }, 400], [undefined, 200], [undefined, 200]]);
      const bodies = sentFor(tag);
      assert.equal(bodies.length, 2);
      assert.deepEqual(bodies[1]!.messages.map((m) => m.role), ["user", "assistant", "tool"]);
      assert.deepEqual(bodies[1]!.messages[2], { role: "tool", tool_call_id: "call_A", content: "5" });
      assert.ok(bodies.every((b) => !("thread" in b)));
    });

    it("still reach a messages-style upstream", async () => {
      const tag = nonce();
      const res = await postJson(`${gw.gatewayUrl}/v1/messages`, key, { ...continued(tag), model: "assistant-3-5-haiku-20241022" });
      assert.equal(res.status, 200);
      assert.deepEqual(sentFor(tag).map((b) => b.thread), [{ type: "continue", previous_message_id: "msg_prev" }]);
    });
  });

  describe("documents, tool results", () => {
    const ask = (content: Anthropic.ContentBlockParam[]): Anthropic.MessageCreateParamsNonStreaming => ({ model: "assistant-x-gpt", max_tokens: 20, messages: [{ role: "user", content }] });
    const history = (result: Anthropic.ToolResultBlockParam, tag: string): Anthropic.MessageCreateParamsNonStreaming => ({
      model: "assistant-x-gpt", max_tokens: 20, tools,
      messages: [
        { role: "user", content: `What time is it? ${tag}` },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_T", name: "get_time", input: {} }] },
        { role: "user", content: [result, { type: "text", text: "Go on." }] },
      ],
    });

    it("sends a base64 PDF document as a file part, in its place", async () => {
      const tag = nonce();
      await anthropic.messages.create(ask([
        { type: "text", text: "Summarise" },
        { type: "document", title: "report.pdf", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0xLjQ=" } },
        { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0xLjU=" } },
        { type: "text", text: tag },
      ]));
      assert.deepEqual(sentFor(tag)[0]!.messages, [{
        role: "user",
        content: [
          { type: "text", text: "Summarise" },
          { type: "file", file: { filename: "report.pdf", file_data: "data:application/pdf;base64,JVBERi0xLjQ=" } },
          { type: "file", file: { filename: "document.pdf", file_data: "data:application/pdf;base64,JVBERi0xLjU=" } },
          { type: "text", text: tag },
        ],
      }]);
    });

    it("sends a plain-text document as a text part", async () => {
      const tag = nonce();
      await anthropic.messages.create(ask([{ type: "document", source: { type: "text", media_type: "text/plain", data: "The grass is green." } }, { type: "text", text: tag }]));
      assert.deepEqual(sentFor(tag)[0]!.messages, [{ role: "user", content: [{ type: "text", text: "The grass is green." }, { type: "text", text: tag }] }]);
    });

    it("refuses a document OpenAI cannot be given, naming it", async () => {
      const tag = nonce();
      assert.deepEqual(await refused(ask([{ type: "text", text: tag }, { type: "document", source: { type: "url", url: "https://example.com/a.pdf" } }])), [
        400, "invalid_request_error", "unsupported_parameter",
        "`messages[0].content[1]` is a document with a `url` source: the model 'assistant-x-gpt' is served by a chat-completions-style (OpenAI) upstream, which reads a document only as a base64 PDF or plain text (`source.type` \"base64\" or \"text\").",
      ]);
      assert.deepEqual(sentFor(tag), []);
    });

    it("marks an error result, so the upstream still reads it as a failure", async () => {
      const tag = nonce();
      await anthropic.messages.create(history({ type: "tool_result", tool_use_id: "toolu_T", content: "clock unreachable", is_error: true }, tag));
      const tag2 = nonce();
      await anthropic.messages.create(history({ type: "tool_result", tool_use_id: "toolu_T", content: "Error: clock unreachable", is_error: true }, tag2));
      const tag3 = nonce();
      await anthropic.messages.create(history({ type: "tool_result", tool_use_id: "toolu_T", content: "12:00" }, tag3));
      assert.deepEqual([tag, tag2, tag3].map((t) => sentFor(t)[0]!.messages[2]!.content), ["Error: clock unreachable", "Error: clock unreachable", "12:00"]);
    });

    it("refuses an image in a tool result, which an OpenAI tool message cannot carry, naming it", async () => {
      const tag = nonce();
      const result: Anthropic.ToolResultBlockParam = {
        type: "tool_result", tool_use_id: "toolu_T",
        content: [{ type: "text", text: "screenshot:" }, { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }],
      };
      const [status, type, code, message] = await refused(history(result, tag));
      assert.deepEqual([status, type, code], [400, "invalid_request_error", "unsupported_parameter"]);
      assert.match(String(message), /^`messages\[2\]\.content\[0\]\.content\[1\]` is a block of type `image` inside a tool_result/);
      assert.deepEqual(sentFor(tag), []);
    });

    it("sends a tool result's text blocks as its tool message's text", async () => {
      const tag = nonce();
      await anthropic.messages.create(history({ type: "tool_result", tool_use_id: "toolu_T", content: [{ type: "text", text: "12:00" }, { type: "text", text: "UTC" }] }, tag));
      assert.deepEqual(sentFor(tag)[0]!.messages[2], { role: "tool", tool_call_id: "toolu_T", content: "12:00\n\nUTC" });
    });
  });

  describe("structured outputs (output_config.format)", () => {
    const schema = { type: "object", properties: { a: { type: "number" } }, required: ["a"], additionalProperties: false };
    const ask = (tag: string) => ({
      model: "assistant-x-gpt", max_tokens: 50, messages: [{ role: "user" as const, content: `give me a ${tag}` }],
      output_config: { format: { type: "json_schema" as const, schema } },
    });

    it("reach the upstream as a strict json_schema response_format, so the SDK's parse() gets JSON", async () => {
      const tag = nonce();
      const parsed = await anthropic.messages.parse(ask(tag));
      assert.deepEqual(parsed.parsed_output, { a: 1 });
      assert.deepEqual(sentFor(tag)[0]!.response_format, { type: "json_schema", json_schema: { name: "output", schema, strict: true } });
    });

    it("refuse a format with no counterpart, before the upstream is asked", async () => {
      const tag = nonce();
      const [status, type, code, message] = await refused({ ...ask(tag), output_config: { format: { type: "xml" } } } as never);
      assert.deepEqual([status, type, code], [400, "invalid_request_error", "invalid_value"]);
      assert.match(String(message), /^`output_config\.format` must be \{"type": "json_schema"/);
      assert.deepEqual(sentFor(tag), []);
    });
  });

  it("writes no `details` on other errors", async () => {
    const res = await postJson(`${gw.gatewayUrl}/v1/messages`, key, { model: "assistant-x-gpt", max_tokens: 0, messages: [{ role: "user", content: "x" }] });
    assert.equal(res.status, 400);
    assert.deepEqual(Object.keys((res.json() as { error: object }).error), ["message", "type", "code"]);
  });
});
