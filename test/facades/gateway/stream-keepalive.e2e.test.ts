import assert from "node:assert/strict";
import http from "node:http";
import { connect } from "node:net";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { eventually, postJson } from "../../support/http.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * A live stream the upstream leaves quiet (a long thinking step, a server tool; Anthropic sends
 * `ping` events meanwhile, which the gateway does not pass on) gets an SSE comment after
 * SVC_STREAM_KEEPALIVE_MS without a byte, so a proxy's idle timeout in front does not cut it. The
 * official SDKs skip comments: the answer they assemble is unchanged.
 */
describe("gateway streams: a keep-alive comment while the upstream is quiet", () => {
  const on = gatewayOnScriptedUpstream((body: { model: string }, res: http.ServerResponse, req) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (req.url!.includes("/chat/completions")) {
      const chunk = (delta: object, finish: string | null = null) => `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: body.model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.write(chunk({ role: "assistant", content: "Hel" }));
      setTimeout(() => res.end(chunk({ content: "lo" }) + chunk({}, "stop") + "data: [DONE]\n\n"), 900);
    } else {
      const sse = (event: string, data: object) => `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
      res.write(sse("message_start", { message: { id: "msg_k", type: "message", role: "assistant", model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }) + sse("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) + sse("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hel" } }));
      // Quiet but for the upstream's own pings, which the gateway does not pass on.
      const ping = setInterval(() => res.write(sse("ping", {})), 100);
      setTimeout(() => {
        clearInterval(ping);
        res.end(sse("content_block_delta", { index: 0, delta: { type: "text_delta", text: "lo" } }) + sse("content_block_stop", { index: 0 }) + sse("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2 } }) + sse("message_stop", {}));
      }, 900);
    }
  }, { SVC_STREAM_KEEPALIVE_MS: "250" });
  let n = 0;

  it("chat completions: comments while quiet, between the events, and the SDK's answer is whole", async () => {
    const raw = await postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { model: "chat-4o", stream: true, messages: [{ role: "user", content: `quiet ${++n}` }] }, { "X-Svc-Cache-Control": "no-store" });
    const comments = raw.text.split("\n\n").filter((e) => e === ": keep-alive").length;
    assert.ok(comments >= 2 && comments <= 4, `${comments} comments in ${raw.text}`);
    assert.ok(raw.text.indexOf(": keep-alive") > raw.text.indexOf("Hel") && raw.text.indexOf(": keep-alive") < raw.text.indexOf('"lo"'), raw.text);
    const client = new OpenAI({ apiKey: on.key, baseURL: `${on.gw.gatewayUrl}/v1`, maxRetries: 0 });
    const stream = client.chat.completions.stream({ model: "chat-4o", messages: [{ role: "user", content: `quiet ${++n}` }] });
    const done = await stream.finalChatCompletion();
    assert.equal(done.choices[0]!.message.content, "Hello");
  });

  it("messages: comments in place of the upstream's pings, and the SDK's answer is whole", async () => {
    const raw = await postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, { model: "assistant-3-5-haiku-20241022", max_tokens: 50, stream: true, messages: [{ role: "user", content: `quiet ${++n}` }] });
    assert.ok(raw.text.includes(": keep-alive\n\n"), raw.text);
    assert.ok(!raw.text.includes("ping"), raw.text);
    const client = new Anthropic({ apiKey: on.key, baseURL: on.gw.gatewayUrl, maxRetries: 0 });
    const message = await client.messages.stream({ model: "assistant-3-5-haiku-20241022", max_tokens: 50, messages: [{ role: "user", content: `quiet ${++n}` }] }).finalMessage();
    assert.equal(message.content[0]!.type === "text" && message.content[0]!.text, "Hello");
  });
});

/**
 * An upstream that answers at once and then says nothing before its first event (a reasoning model
 * thinking before its first token): the gateway begins the client's stream once that took longer
 * than SVC_STREAM_KEEPALIVE_MS, with keep-alive comments meanwhile, where it used to send not even
 * its headers until the first event (a proxy's idle timeout in front could cut it). An error that
 * comes first then is the stream's error event; one that comes within the interval is still a plain
 * HTTP error (errors.e2e).
 */
describe("gateway streams: a keep-alive comment before a slow first event", () => {
  const on = gatewayOnScriptedUpstream((body: { model: string; messages: Array<{ content: string }> }, res: http.ServerResponse) => {
    const prompt = body.messages.at(-1)!.content;
    res.writeHead(200, { "content-type": "text/event-stream" });
    const chunk = (delta: object, finish: string | null = null) => `data: ${JSON.stringify({ id: "c2", object: "chat.completion.chunk", created: 1, model: body.model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    setTimeout(() => {
      if (prompt.startsWith("refused")) res.end(`data: ${JSON.stringify({ error: { message: "Rate limit reached", type: "rate_limit_error", code: 429 } })}\n\n`);
      else res.end(chunk({ role: "assistant", content: "Hel" }) + chunk({ content: "lo" }) + chunk({}, "stop") + "data: [DONE]\n\n");
    }, 900);
  }, { SVC_STREAM_KEEPALIVE_MS: "250" });
  let n = 0;

  /** The response, and how long its headers took to come. */
  const timed = (content: string) =>
    new Promise<{ headersMs: number; status: number; text: string; trailers: NodeJS.Dict<string>; requestId: string }>((resolve, reject) => {
      const started = Date.now();
      const req = http.request(`${on.gw.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-svc-api-key": on.key } }, (res) => {
        const headersMs = Date.now() - started;
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ headersMs, status: res.statusCode!, text, trailers: res.trailers, requestId: String(res.headers["x-svc-request-id"]) }));
      });
      req.on("error", reject);
      req.end(JSON.stringify({ model: "chat-4o", stream: true, messages: [{ role: "user", content }] }));
    });

  it("begins the stream with keep-alive comments before the first event, and the SDK's answer is whole", async () => {
    const r = await timed(`slow ${++n}`);
    assert.equal(r.status, 200);
    assert.ok(r.headersMs < 700, `headers after ${r.headersMs} ms`);
    const comments = r.text.split("\n\n").filter((e) => e === ": keep-alive").length;
    assert.ok(comments >= 2 && comments <= 4, `${comments} comments in ${r.text}`);
    assert.ok(r.text.startsWith(": keep-alive\n\n"), r.text);
    assert.ok(Number(r.trailers["x-svc-cost"]) > 0, JSON.stringify(r.trailers));
    const client = new OpenAI({ apiKey: on.key, baseURL: `${on.gw.gatewayUrl}/v1`, maxRetries: 0 });
    const done = await client.chat.completions.stream({ model: "chat-4o", messages: [{ role: "user", content: `slow ${++n}` }] }).finalChatCompletion();
    assert.equal(done.choices[0]!.message.content, "Hello");
  });

  it("ends a stream begun so with the error event when the upstream's first event is an error, at no cost", async () => {
    const r = await timed(`refused ${++n}`);
    assert.equal(r.status, 200);
    const last = r.text.trim().split("\n\n").at(-1)!;
    const err = JSON.parse(last.replace(/^data: /, "")).error;
    assert.deepEqual([err.type, err.code], ["rate_limit_error", "upstream_rate_limited"], r.text);
    assert.equal(r.trailers["x-svc-cost"], "0");
    // Logged as the error in its stream, its first byte the one that began it (not 0: none sent).
    let log: { status: number; errorCode: string; ttfbMs: number; latencyMs: number; responseBody: string } | undefined;
    await eventually(async () => {
      log = (await on.gw.telemetry.getLog({ projectId: on.projectId, keyMode: KeyMode.LIVE, requestId: r.requestId }).catch(() => undefined))?.log;
      return log !== undefined;
    }, 5_000, "the stream's log");
    assert.deepEqual([log!.status, log!.errorCode], [200, "upstream_rate_limited"]);
    // Its response body, the error its client was sent (no answer had begun), as a refusal's log has.
    assert.deepEqual(JSON.parse(log!.responseBody).error, err);
    assert.ok(log!.ttfbMs > 200 && log!.ttfbMs < log!.latencyMs, `ttfb ${log!.ttfbMs} of ${log!.latencyMs} ms`);
    const client = new OpenAI({ apiKey: on.key, baseURL: `${on.gw.gatewayUrl}/v1`, maxRetries: 0 });
    await assert.rejects(client.chat.completions.stream({ model: "chat-4o", messages: [{ role: "user", content: `refused ${++n}` }] }).finalChatCompletion(), (e: unknown) => e instanceof OpenAI.APIError);
  });

  it("does the same for an HTTP/1.0 client (no chunked framing: the stream ends with its connection)", async () => {
    const url = new URL(on.gw.gatewayUrl);
    for (const prompt of [`slow ${++n}`, `refused ${++n}`]) {
      const body = JSON.stringify({ model: "chat-4o", stream: true, messages: [{ role: "user", content: prompt }] });
      const text = await new Promise<string>((resolve, reject) => {
        const sock = connect(Number(url.port), url.hostname, () => {
          sock.write(`POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${on.key}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
        });
        let got = "";
        sock.setEncoding("utf8");
        sock.on("data", (c: string) => (got += c));
        sock.on("end", () => resolve(got));
        sock.on("error", reject);
      });
      assert.match(text, /^HTTP\/1\.1 200 /, text);
      assert.ok(text.includes(": keep-alive\n\n"), text);
      if (prompt.startsWith("slow")) assert.ok(text.includes("data: [DONE]"), text);
      else assert.ok(text.includes('"code":"upstream_rate_limited"'), text);
    }
  });
});
