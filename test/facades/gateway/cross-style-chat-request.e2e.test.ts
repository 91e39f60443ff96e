import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";

/**
 * What a chat-completions client's request becomes on an Anthropic-style upstream, with the official
 * openai SDK against a real gateway and a scripted upstream that keeps every body it was sent and
 * refuses what Anthropic's Messages API refuses (https://docs.anthropic.com/en/api/messages): a
 * whitespace-only stop sequence, an empty `messages`.
 */

interface Sent {
  max_tokens?: number;
  output_config?: unknown;
  stop_sequences?: string[];
  messages: Array<{ role: string; content: unknown }>;
}

function answerAnthropic(body: Sent & { model: string; stream?: boolean }, res: http.ServerResponse): void {
  const refuse = (message: string) => {
    res.writeHead(400, { "content-type": "application/json" });
    res.end(JSON.stringify({ type: "error", error: { type: "invalid_request_error", message } }));
  };
  if (body.stop_sequences?.some((s) => s.trim() === "")) return refuse("stop_sequences: each stop sequence must contain non-whitespace");
  if (!body.messages.length) return refuse("messages: at least one message is required");
  // As Anthropic does past a model's ceiling (claude-3-haiku writes at most 4096 tokens).
  if (body.model === "claude-3-haiku-20240307" && (body.max_tokens ?? 0) > 4096) return refuse(`max_tokens: ${body.max_tokens} > 4096, which is the maximum allowed number of output tokens for claude-3-haiku-20240307`);
  assert.ok(!body.stream, "these tests do not stream");
  res.writeHead(200, { "content-type": "application/json" });
  // Held to a schema (structured outputs): JSON, as Anthropic answers it.
  const text = body.output_config ? '{"a":1}' : "ok";
  res.end(JSON.stringify({
    id: "msg_X", type: "message", role: "assistant", model: body.model, content: [{ type: "text", text }],
    stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 },
  }));
}

describe("chat-completions requests on an Anthropic-style upstream (official openai SDK, scripted upstream)", () => {
  let upstream: http.Server;
  let gw: TestGateway;
  let dir: string;
  let openai: OpenAI;
  const sent: Sent[] = [];
  let n = 0;
  const nonce = () => `#${++n}`;
  /** The bodies the upstream was sent for the request that carried `tag`. */
  const sentFor = (tag: string) => sent.filter((b) => JSON.stringify(b.messages).includes(`${tag}"`));

  before(async () => {
    upstream = http.createServer((req, res) => {
      let text = "";
      req.on("data", (d: Buffer) => (text += d));
      req.on("end", () => {
        const body = JSON.parse(text) as Sent & { model: string };
        sent.push(body);
        answerAnthropic(body, res);
      });
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    const base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    dir = mkdtempSync(join(tmpdir(), "svc-cross-chat-"));
    const config = join(dir, "svc.config.json");
    writeFileSync(config, JSON.stringify({
      models: { "chat-x": { surface: "chat-completions", provider: "anthropic", upstreamModel: "claude-3-5-sonnet-20241022", inputPer1M: "3", outputPer1M: "15", maxOutputTokens: 8192 },
        "chat-small": { surface: "chat-completions", provider: "anthropic", upstreamModel: "claude-3-haiku-20240307", inputPer1M: "0.25", outputPer1M: "1.25", maxOutputTokens: 1000 } },
    }));
    gw = await startTestGateway({ SVC_CONFIG: config, SVC_ANTHROPIC_BASE_URL: base, SVC_ANTHROPIC_API_KEY: "sk-ant-test" }, false);
    openai = new OpenAI({ apiKey: (await gw.project()).live, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
  });
  after(async () => {
    await gw?.close();
    upstream?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The SDK's error for a request the gateway refused: [status, type, code, message]. */
  async function refused(body: OpenAI.ChatCompletionCreateParamsNonStreaming): Promise<unknown[]> {
    try {
      await openai.chat.completions.create(body);
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      return [e.status, e.type, e.code, (e.error as { message?: string } | undefined)?.message];
    }
    return assert.fail("the request was answered, not refused");
  }

  describe("max_tokens", () => {
    it("sends a request without one the default 4096, or the model's own ceiling when lower (the upstream refuses more)", async () => {
      const [a, b] = [nonce(), nonce()];
      assert.equal((await openai.chat.completions.create({ model: "chat-x", messages: [{ role: "user", content: `q ${a}` }] })).choices[0]!.message.content, "ok");
      assert.equal((await openai.chat.completions.create({ model: "chat-small", messages: [{ role: "user", content: `q ${b}` }] })).choices[0]!.message.content, "ok");
      assert.deepEqual([...sentFor(a), ...sentFor(b)].map((s) => s.max_tokens), [4096, 1000]);
    });
  });

  describe("stop", () => {
    it("leaves whitespace-only values of an array stop out of stop_sequences, so the request is answered", async () => {
      const tag = nonce();
      const c = await openai.chat.completions.create({ model: "chat-x", stop: ["\n", "\n\n", " ", "END"], messages: [{ role: "user", content: `q ${tag}` }] });
      assert.equal(c.choices[0]!.message.content, "ok");
      assert.deepEqual(sentFor(tag).map((b) => b.stop_sequences), [["END"]]);
    });

    it("sends no stop_sequences for a string stop that is only whitespace", async () => {
      const tag = nonce();
      const c = await openai.chat.completions.create({ model: "chat-x", stop: "\n", messages: [{ role: "user", content: `q ${tag}` }] });
      assert.equal(c.choices[0]!.message.content, "ok");
      const bodies = sentFor(tag);
      assert.equal(bodies.length, 1);
      assert.equal("stop_sequences" in bodies[0]!, false);
    });
  });

  describe("tool call arguments in the history", () => {
    const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "f", parameters: { type: "object" } } }];
    const history = (args: string, tag: string): OpenAI.ChatCompletionMessageParam[] => [
      { role: "user", content: `call f ${tag}` },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: args } }] },
      { role: "tool", tool_call_id: "call_1", content: "done" },
    ];

    for (const args of ["not json", "[1,2]", '"s"']) {
      it(`refuses arguments ${JSON.stringify(args)} with a 400 naming the message, and sends nothing upstream`, async () => {
        const tag = nonce();
        const [status, type, code, message] = await refused({ model: "chat-x", tools, messages: history(args, tag) });
        assert.deepEqual([status, type, code], [400, "invalid_request_error", "invalid_value"]);
        assert.match(String(message), /^`messages\[1\]\.tool_calls\[0\]\.function\.arguments` must be the text of a JSON object/);
        assert.deepEqual(sentFor(tag), []);
      });
    }

    it("refuses them on a streamed request too, before the stream starts", async () => {
      const tag = nonce();
      await assert.rejects(
        openai.chat.completions.create({ model: "chat-x", stream: true, tools, messages: history("[1,2]", tag) }),
        (e) => e instanceof OpenAI.APIError && e.status === 400 && e.code === "invalid_value",
      );
      assert.deepEqual(sentFor(tag), []);
    });

    it("sends empty arguments as input {}, and a JSON object as itself", async () => {
      for (const [args, input] of [["", {}], ['{"a":1}', { a: 1 }]] as const) {
        const tag = nonce();
        await openai.chat.completions.create({ model: "chat-x", tools, messages: history(args, tag) });
        const [body] = sentFor(tag);
        assert.deepEqual(body?.messages[1], { role: "assistant", content: [{ type: "tool_use", id: "call_1", name: "f", input }] }, JSON.stringify(args));
      }
    });
  });

  describe("file and audio parts", () => {
    it("sends a PDF file part as a base64 document block, in its place", async () => {
      const tag = nonce();
      const c = await openai.chat.completions.create({
        model: "chat-x",
        messages: [{
          role: "user",
          content: [
            { type: "text", text: "Summarize" },
            { type: "file", file: { file_data: "data:application/pdf;base64,JVBERi0xLjQ=", filename: "a.pdf" } },
            { type: "text", text: `briefly ${tag}` },
          ],
        }],
      });
      assert.equal(c.choices[0]!.message.content, "ok");
      assert.deepEqual(sentFor(tag).map((b) => b.messages), [[{
        role: "user",
        content: [
          { type: "text", text: "Summarize" },
          { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0xLjQ=" } },
          { type: "text", text: `briefly ${tag}` },
        ],
      }]]);
    });

    const only = (part: OpenAI.ChatCompletionContentPart, tag: string): OpenAI.ChatCompletionCreateParamsNonStreaming => ({
      model: "chat-x",
      messages: [{ role: "system", content: `Be brief. ${tag}` }, { role: "user", content: [part] }],
    });

    it("refuses a file part known only by file_id with a 400 saying why", async () => {
      const tag = nonce();
      const [status, type, code, message] = await refused(only({ type: "file", file: { file_id: "file-abc123" } }, tag));
      assert.deepEqual([status, type, code], [400, "invalid_request_error", "unsupported_parameter"]);
      assert.match(String(message), /^`messages\[1\]\.content\[0\]` names a file by `file_id` \(OpenAI's Files API\): the model 'chat-x' is served by a messages-style \(Anthropic\) upstream/);
      assert.equal(sent.filter((b) => JSON.stringify(b).includes(`${tag}"`)).length, 0);
    });

    it("refuses a custom tool (no messages-style form) with a 400 saying why", async () => {
      const tag = nonce();
      const body = { model: "chat-x", messages: [{ role: "user" as const, content: `write ${tag}` }], tools: [{ type: "custom" as const, custom: { name: "grammar" } }] };
      const [status, type, code, message] = await refused(body);
      assert.deepEqual([status, type, code], [400, "invalid_request_error", "unsupported_parameter"]);
      assert.match(String(message), /^`tools\[0\]\.type` "custom" is not supported: the model 'chat-x' is served by a messages-style \(Anthropic\) upstream, which takes function tools only\.$/);
      assert.equal(sent.filter((b) => JSON.stringify(b).includes(`${tag}"`)).length, 0);
      // A custom tool's call sent back in the conversation, whatever its input (JSON-looking or not).
      for (const input of ['{"a":1}', "", "abc"]) {
        const call = { id: "c1", type: "custom", custom: { name: "grammar", input } };
        const history = {
          model: "chat-x",
          messages: [{ role: "user", content: `write ${tag}` }, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: "c1", content: "ok" }],
        } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming;
        const [s2, , c2, m2] = await refused(history);
        assert.deepEqual([s2, c2], [400, "unsupported_parameter"], input);
        assert.match(String(m2), /^`messages\[1\]\.tool_calls\[0\]` is a custom tool's call: the model 'chat-x' is served by a messages-style \(Anthropic\) upstream/);
      }
      assert.equal(sent.filter((b) => JSON.stringify(b).includes(`${tag}"`)).length, 0);
    });

    it("sends a json_schema response_format as output_config.format, so the SDK's parse() gets JSON; refuses json_object and audio output", async () => {
      const tag = nonce();
      const schema = { type: "object", properties: { a: { type: "number" } }, required: ["a"], additionalProperties: false };
      const ask = { model: "chat-x", messages: [{ role: "user" as const, content: `give me a ${tag}` }] };
      const parsed = await openai.chat.completions.parse({ ...ask, response_format: { type: "json_schema", json_schema: { name: "a", schema, strict: true } } });
      assert.deepEqual(parsed.choices[0]!.message.parsed, { a: 1 });
      assert.deepEqual(sentFor(tag).map((b) => b.output_config), [{ format: { type: "json_schema", schema } }]);
      const tag2 = nonce();
      const ask2 = { model: "chat-x", messages: [{ role: "user" as const, content: `give me a ${tag2}` }] };
      assert.deepEqual((await refused({ ...ask2, response_format: { type: "json_object" } })).slice(0, 3), [400, "invalid_request_error", "unsupported_parameter"]);
      assert.deepEqual((await refused({ ...ask2, modalities: ["text", "audio"], audio: { voice: "alloy", format: "wav" } })).slice(0, 3), [400, "invalid_request_error", "unsupported_parameter"]);
      assert.deepEqual(sentFor(tag2), []);
    });

    it("refuses an input_audio part with a 400 saying why", async () => {
      const tag = nonce();
      const [status, type, code, message] = await refused(only({ type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }, tag));
      assert.deepEqual([status, type, code], [400, "invalid_request_error", "unsupported_parameter"]);
      assert.match(String(message), /^`messages\[1\]\.content\[0\]` is an `input_audio` part: the model 'chat-x' is served by a messages-style \(Anthropic\) upstream, which takes no audio input\.$/);
      assert.equal(sent.filter((b) => JSON.stringify(b).includes(`${tag}"`)).length, 0);
    });
  });
});
