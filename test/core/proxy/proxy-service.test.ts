import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { createContextValues } from "@connectrpc/connect";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { ApiStyle, ProxyService } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { Cancellation, cancellationKey } from "../../../src/core/cancel.js";
import { createDirectClient } from "../../../src/core/direct-client.js";
import { loadConfig } from "../../../src/config.js";
import { createProxyService } from "../../../src/core/proxy/proxy-service.js";
import { createUpstreamHttp } from "../../../src/core/proxy/upstream-http.js";
import { createAnthropicAdapter } from "../../../src/core/proxy/upstreams/anthropic/adapter.js";
import { createOpenAiAdapter } from "../../../src/core/proxy/upstreams/openai/adapter.js";
import { toErrorInfo } from "../../../src/core/errors.js";
import { captureLog } from "../../support/log-capture.js";

/** An OpenAI-style upstream that answers every request with `body`, written in one piece. */
async function upstreamSending(body: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(body);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(() => r())) };
}

const chunk = (delta: object, extra: object = {}) =>
  `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 1_700_000_000, model: "gpt-4o", choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;

describe("ProxyService streams", () => {
  async function streamFrom(body: string, stream = true) {
    const upstream = await upstreamSending(body);
    const config = loadConfig({ SVC_OPENAI_BASE_URL: `${upstream.url}/v1`, SVC_OPENAI_API_KEY: "k" });
    const httpClient = createUpstreamHttp(config.timeouts);
    const adapters = new Map([[ApiStyle.CHAT_COMPLETIONS, createOpenAiAdapter()], [ApiStyle.MESSAGES, createAnthropicAdapter()]]);
    const proxy = createDirectClient(ProxyService, createProxyService({ models: config.models, providers: config.providers, adapters, http: httpClient }));
    const req = {
      requestId: "req_R1",
      projectId: "proj_1",
      keyId: "key_1",
      keyMode: KeyMode.LIVE,
      style: ApiStyle.CHAT_COMPLETIONS,
      model: "chat-4o",
      stream,
      messages: [{ role: "user", blocks: [{ type: 1, text: "hi" }], contentIsString: true }],
    };
    const events: string[] = [];
    let created = -1;
    let id: string | undefined;
    let error: unknown;
    try {
      const calls = proxy.streamChat(req, { contextValues: createContextValues().set(cancellationKey, new Cancellation()) });
      for await (const ev of calls) {
        const e = ev.event;
        if (e.case === "messageStart") [created, id] = [e.value.created, e.value.id];
        if (e.case === "completion") id = e.value.id;
        events.push(e.case === "blockDelta" ? `delta:${e.value.text}` : e.case === "messageEnd" ? `messageEnd:${e.value.costUsd}` : String(e.case));
      }
    } catch (e) {
      error = e;
    } finally {
      await httpClient.close();
      await upstream.close();
    }
    return { events, error, created, id };
  }

  it("passes on the events that came before an upstream error in the same chunk, then fails", async () => {
    const body = chunk({ role: "assistant", content: "" }) + chunk({ content: "Hel" }) + chunk({ content: "lo" }) +
      `data: ${JSON.stringify({ error: { message: "overloaded", type: "server_error" } })}\n\n`;
    const { events, error } = await streamFrom(body);
    assert.deepEqual(events, ["messageStart", "blockStart", "delta:Hel", "delta:lo"]);
    assert.ok(error, "the upstream's error event ends the stream with an error");
  });

  it("passes on every event of a cut-short stream before failing it as incomplete", async () => {
    const { events, error } = await streamFrom(chunk({ role: "assistant", content: "" }) + chunk({ content: "Hi" }));
    assert.deepEqual(events, ["messageStart", "blockStart", "delta:Hi"]);
    assert.match(String((error as Error)?.message), /ended the stream before the answer was complete/);
  });

  it("settles usage and cost on the final event of a whole stream", async () => {
    const body = chunk({ role: "assistant", content: "" }) + chunk({ content: "Hi" }) + chunk({}, { choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }) +
      chunk({}, { choices: [], usage: { prompt_tokens: 1000, completion_tokens: 100, total_tokens: 1100 } }) + "data: [DONE]\n\n";
    const { events, error } = await streamFrom(body);
    assert.equal(error, undefined);
    // chat-4o's list prices: 1,000 input tokens at $2.50/1M and 100 output tokens at $10/1M.
    assert.deepEqual(events, ["messageStart", "blockStart", "delta:Hi", "blockStop", "messageEnd:0.0035"]);
  });

  it("gives an answer the upstream left without an id one made from the request id (an empty one reads as none to the SDKs)", async () => {
    assert.equal((await streamFrom(chunk({ content: "Hi" }) + "data: [DONE]\n\n")).id, "chatcmpl-1");
    assert.equal((await streamFrom(chunk({ content: "Hi" }, { id: undefined }) + "data: [DONE]\n\n")).id, "chatcmpl-R1", "req_R1's");
    const answer = (id?: string) => JSON.stringify({ id, object: "chat.completion", created: 1, model: "gpt-4o", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }] });
    assert.equal((await streamFrom(answer("chatcmpl-up"), false)).id, "chatcmpl-up");
    assert.equal((await streamFrom(answer(), false)).id, "chatcmpl-R1");
  });

  it("reads an answer that starts with a byte order mark, as fetch's json() and so the SDKs do", async () => {
    const answer = JSON.stringify({ id: "chatcmpl-bom", object: "chat.completion", created: 1, model: "gpt-4o", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }] });
    const { id, error } = await streamFrom(`\ufeff${answer}`, false);
    assert.equal(error, undefined);
    assert.equal(id, "chatcmpl-bom");
  });

  it("reads a stream that starts with a byte order mark whole: the mark is skipped, not its first event", async () => {
    const body = chunk({ role: "assistant", content: "The answer is 42." }) + chunk({}, { choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }) + "data: [DONE]\n\n";
    const { events, error } = await streamFrom(`\ufeff${body}`);
    assert.equal(error, undefined);
    assert.deepEqual(events.slice(0, 3), ["messageStart", "blockStart", "delta:The answer is 42."]);
  });

  it("gives an answer the upstream left undated the gateway's time, so every rendering of it agrees", async () => {
    const dated = await streamFrom(chunk({ content: "Hi" }) + "data: [DONE]\n\n");
    assert.equal(dated.created, 1_700_000_000);
    const before = Math.floor(Date.now() / 1000);
    const undated = await streamFrom(chunk({ content: "Hi" }, { created: undefined }) + "data: [DONE]\n\n");
    assert.ok(undated.created >= before && undated.created <= Math.floor(Date.now() / 1000) + 1, String(undated.created));
  });
});

describe("ProxyService: failures only the operator can clear", () => {
  it("are logged once a minute per model and kind, not per request, naming the model and the code; a client's bad request is not logged", async () => {
    // An upstream that refuses the gateway's key, as a provider does a revoked one.
    const server = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        res.writeHead(401, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: "Incorrect API key provided", type: "invalid_request_error", code: "invalid_api_key" } }));
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const config = loadConfig({ SVC_OPENAI_BASE_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, SVC_OPENAI_API_KEY: "k" });
    const httpClient = createUpstreamHttp(config.timeouts);
    const adapters = new Map([[ApiStyle.CHAT_COMPLETIONS, createOpenAiAdapter()], [ApiStyle.MESSAGES, createAnthropicAdapter()]]);
    const proxy = createDirectClient(ProxyService, createProxyService({ models: config.models, providers: config.providers, adapters, http: httpClient }));
    const ask = async (model: string) => {
      const req = { projectId: "proj_1", keyId: "key_1", keyMode: KeyMode.LIVE, style: ApiStyle.CHAT_COMPLETIONS, model, messages: [{ role: "user", blocks: [{ type: 1, text: "hi" }], contentIsString: true }] };
      try {
        for await (const _ of proxy.streamChat(req, { contextValues: createContextValues().set(cancellationKey, new Cancellation()) }));
      } catch (e) {
        return toErrorInfo(e).code;
      }
      return "answered";
    };
    try {
      const codes: string[] = [];
      const lines = await captureLog(async () => {
        for (let i = 0; i < 5; i++) codes.push(await ask("chat-4o-mini"));
        codes.push(await ask("no-such-model"));
      });
      assert.deepEqual(codes, [...Array(5).fill("upstream_authentication_failed"), "model_not_found"]);
      const warned = lines.map((l) => JSON.parse(l) as Record<string, string>).filter((l) => l.level === "warn");
      assert.equal(warned.length, 1, lines.join(""));
      assert.deepEqual([warned[0]!.model, warned[0]!.code], ["chat-4o-mini", "upstream_authentication_failed"]);
      assert.match(warned[0]!.message, /Incorrect API key provided/);
      assert.deepEqual([warned[0]!.provider, warned[0]!.baseUrl], ["openai", config.providers.get("openai")!.baseUrl]);
    } finally {
      await httpClient.close();
      await new Promise((r) => server.close(r));
    }
  });

  it("name the provider, its address and the reason it cannot be reached", async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r)); // nothing listens there now
    const config = loadConfig({ SVC_OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`, SVC_OPENAI_API_KEY: "k" });
    const httpClient = createUpstreamHttp(config.timeouts);
    const adapters = new Map([[ApiStyle.CHAT_COMPLETIONS, createOpenAiAdapter()], [ApiStyle.MESSAGES, createAnthropicAdapter()]]);
    const proxy = createDirectClient(ProxyService, createProxyService({ models: config.models, providers: config.providers, adapters, http: httpClient }));
    const req = { projectId: "proj_1", keyId: "key_1", keyMode: KeyMode.LIVE, style: ApiStyle.CHAT_COMPLETIONS, model: "chat-4o", messages: [{ role: "user", blocks: [{ type: 1, text: "hi" }], contentIsString: true }] };
    try {
      const lines = await captureLog(async () => {
        await assert.rejects((async () => {
          for await (const _ of proxy.streamChat(req, { contextValues: createContextValues().set(cancellationKey, new Cancellation()) }));
        })(), (e: unknown) => toErrorInfo(e).code === "upstream_unreachable");
      });
      const [warned] = lines.map((l) => JSON.parse(l) as Record<string, string>).filter((l) => l.level === "warn");
      assert.deepEqual([warned!.provider, warned!.baseUrl, warned!.code], ["openai", `http://127.0.0.1:${port}/v1`, "upstream_unreachable"]);
      assert.match(warned!.cause!, /ECONNREFUSED/);
    } finally {
      await httpClient.close();
    }
  });
});
