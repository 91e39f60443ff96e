import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson, rawRequest, sseEvents } from "../../support/http.js";

const chat = (content = "hi", extra: Record<string, unknown> = {}) => ({ model: "chat-4o", messages: [{ role: "user", content }], ...extra });
const msgs = (content = "hi", extra: Record<string, unknown> = {}) => ({ model: "assistant-3-5-haiku-20241022", max_tokens: 64, messages: [{ role: "user", content }], ...extra });

/** The spec's error object (section 2.6), exactly. */
function assertErrorShape(body: any): void {
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.deepEqual(Object.keys(body.error).sort(), ["code", "message", "type"]);
  for (const k of ["message", "type", "code"]) assert.equal(typeof body.error[k], "string");
  assert.ok(!/\bat .*\.ts:\d+/.test(body.error.message), "no stack trace");
}

describe("gateway errors: the spec's status and error object for every kind of bad input", () => {
  let gw: TestGateway;
  let key: string;
  let chatUrl: string;
  let msgUrl: string;

  before(async () => {
    gw = await startTestGateway({ SVC_MAX_REQUEST_BYTES: "20000" });
    key = (await gw.project()).live;
    chatUrl = `${gw.gatewayUrl}/v1/chat/completions`;
    msgUrl = `${gw.gatewayUrl}/v1/messages`;
  });
  after(() => gw.close());

  const cases: Array<[string, () => Promise<import("../../support/http.js").RawResponse>, number, string, string]> = [
    ["no key", () => rawRequest(chatUrl, { headers: { "content-type": "application/json" }, body: JSON.stringify(chat()) }), 401, "authentication_error", "invalid_api_key"],
    ["unknown key", () => postJson(chatUrl, `svc_sk_live_${"x".repeat(40)}`, chat()), 401, "authentication_error", "invalid_api_key"],
    ["malformed key", () => postJson(chatUrl, "sk-123", chat()), 401, "authentication_error", "invalid_api_key"],
    ["unknown key on /messages", () => postJson(msgUrl, "nope", msgs()), 401, "authentication_error", "invalid_api_key"],
  ];
  for (const [name, call, status, type, code] of cases) {
    it(`${name} -> ${status} ${type}/${code}`, async () => {
      const res = await call();
      assert.equal(res.status, status);
      assertErrorShape(res.json());
      assert.equal(res.json().error.type, type);
      assert.equal(res.json().error.code, code);
      assert.ok(res.headers["x-svc-request-id"]);
    });
  }

  const bad: Array<[string, "chat" | "messages", unknown, string, RegExp]> = [
    ["body not an object", "chat", [1, 2], "invalid_body", /object/],
    ["missing model", "chat", { messages: [{ role: "user", content: "x" }] }, "missing_required_field", /model/],
    ["model not a string", "chat", chat("x", { model: 4 }), "invalid_type", /model/],
    ["missing messages", "chat", { model: "chat-4o" }, "missing_required_field", /messages/],
    ["messages not an array", "chat", chat("x", { messages: "hi" }), "invalid_type", /messages/],
    ["empty messages", "chat", chat("x", { messages: [] }), "invalid_value", /messages/],
    ["bad role", "chat", chat("x", { messages: [{ role: "wizard", content: "x" }] }), "invalid_value", /role/],
    ["content a number", "chat", chat("x", { messages: [{ role: "user", content: 5 }] }), "invalid_type", /content/],
    ["temperature above 2", "chat", chat("x", { temperature: 2.5 }), "invalid_value", /temperature/],
    ["temperature a string", "chat", chat("x", { temperature: "hot" }), "invalid_type", /temperature/],
    ["max_tokens not an integer", "chat", chat("x", { max_tokens: 1.5 }), "invalid_type", /max_tokens/],
    ["max_tokens zero", "chat", chat("x", { max_tokens: 0 }), "invalid_value", /max_tokens/],
    ["stream not a boolean", "chat", chat("x", { stream: "yes" }), "invalid_type", /stream/],
    ["tools not an array", "chat", chat("x", { tools: {} }), "invalid_type", /tools/],
    ["unknown model", "chat", chat("x", { model: "gpt-9" }), "model_not_found", /gpt-9/],
    ["messages model on chat", "chat", chat("x", { model: "assistant-3-opus-20240229" }), "model_not_supported", /\/v1\/messages/],
    ["missing max_tokens", "messages", { model: "assistant-3-opus-20240229", messages: [{ role: "user", content: "x" }] }, "missing_required_field", /max_tokens/],
    ["temperature above 1", "messages", msgs("x", { temperature: 1.5 }), "invalid_value", /temperature/],
    ["tool role in messages", "messages", msgs("x", { messages: [{ role: "tool", content: "x" }] }), "invalid_value", /role/],
    ["system message holding an image", "messages", msgs("x", { messages: [{ role: "system", content: [{ type: "image", source: { type: "url", url: "https://example.com/a.png" } }] }, { role: "user", content: "x" }] }), "invalid_value", /system message holds text only/],
    ["chat model on messages", "messages", msgs("x", { model: "chat-4o" }), "model_not_supported", /\/v1\/chat\/completions/],
    ["unknown model on messages", "messages", msgs("x", { model: "assistant-9" }), "model_not_found", /assistant-9/],
  ];
  for (const [name, surface, body, code, mentions] of bad) {
    it(`${surface}: ${name} -> 400 invalid_request_error/${code}`, async () => {
      const res = await postJson(surface === "chat" ? chatUrl : msgUrl, key, body);
      assert.equal(res.status, 400, res.text);
      assertErrorShape(res.json());
      assert.equal(res.json().error.type, "invalid_request_error");
      assert.equal(res.json().error.code, code);
      assert.match(res.json().error.message, mentions);
    });
  }

  it("non-JSON body -> 400 invalid_json", async () => {
    const res = await rawRequest(chatUrl, { headers: { "content-type": "application/json", "x-svc-api-key": key }, body: "{not json" });
    assert.equal(res.status, 400);
    assert.equal(res.json().error.code, "invalid_json");
  });

  it("a body that starts with a UTF-8 byte order mark -> 400 invalid_json naming the mark (the parser quotes it as an invisible character)", async () => {
    const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"model":"chat-4o-mini","messages":[{"role":"user","content":"bom"}]}')]);
    const res = await rawRequest(chatUrl, { headers: { "content-type": "application/json", "x-svc-api-key": key }, body });
    assert.equal(res.status, 400);
    assert.deepEqual(res.json().error, { type: "invalid_request_error", code: "invalid_json", message: "The request body starts with a byte order mark (bytes EF BB BF), which JSON bodies must not have: send the body without it." });
  });

  it("a body that is not UTF-8 -> 400 invalid_json on both endpoints, never sent on with U+FFFD in its place", async () => {
    const demoBefore = gw.demo!.requests.length;
    for (const [url, extra] of [[chatUrl, {}], [msgUrl, { "provider-version": "2023-06-01" }]] as const) {
      const json = url === chatUrl
        ? '{"model":"chat-4o-mini","messages":[{"role":"user","content":"caf\u00e9 latin1 X"}]}'
        : '{"model":"assistant-3-haiku-20240307","max_tokens":5,"messages":[{"role":"user","content":"caf\u00e9 latin1 X"}]}';
      // The é as one latin1 byte (0xE9), as a client that did not encode as UTF-8 sends it.
      const body = Buffer.from(json, "latin1");
      const res = await rawRequest(url, { headers: { "content-type": "application/json; charset=latin1", "x-svc-api-key": key, ...extra }, body });
      assert.equal(res.status, 400, res.text);
      assertErrorShape(res.json());
      assert.equal(res.json().error.code, "invalid_json");
      assert.match(res.json().error.message, /UTF-8/);
    }
    assert.ok(!gw.demo!.requests.slice(demoBefore).some((r) => JSON.stringify(r.body).includes("latin1 X")), "nothing reached the upstream");
    // The same text as UTF-8 is answered.
    const ok = await rawRequest(chatUrl, { headers: { "content-type": "application/json", "x-svc-api-key": key }, body: Buffer.from('{"model":"chat-4o-mini","messages":[{"role":"user","content":"caf\u00e9 utf8"}]}', "utf8") });
    assert.equal(ok.status, 200, ok.text);
  });

  it("a compressed body (Content-Encoding) -> 400 unsupported_content_encoding; identity is plain", async () => {
    const { gzipSync } = await import("node:zlib");
    const body = JSON.stringify(chat());
    for (const [encoding, sent] of [["gzip", gzipSync(body)], ["br", Buffer.from(body)]] as const) {
      const res = await rawRequest(chatUrl, { headers: { "content-type": "application/json", "content-encoding": encoding, "x-svc-api-key": key }, body: sent });
      assert.equal(res.status, 400, res.text);
      assertErrorShape(res.json());
      assert.equal(res.json().error.code, "unsupported_content_encoding");
      assert.match(res.json().error.message, new RegExp(encoding));
    }
    const plain = await rawRequest(chatUrl, { headers: { "content-type": "application/json", "content-encoding": "identity", "x-svc-api-key": key }, body });
    assert.equal(plain.status, 200, plain.text);
  });

  it("wrong content type -> 400 invalid_content_type", async () => {
    const res = await rawRequest(chatUrl, { headers: { "content-type": "text/plain", "x-svc-api-key": key }, body: JSON.stringify(chat()) });
    assert.equal(res.status, 400);
    assert.equal(res.json().error.code, "invalid_content_type");
  });

  it("oversized body -> 400 request_too_large", async () => {
    const res = await postJson(chatUrl, key, chat("x".repeat(30_000)));
    assert.equal(res.status, 400);
    assert.equal(res.json().error.code, "request_too_large");
  });

  it("X-Svc-Metadata that is not a JSON object -> 400 invalid_metadata", async () => {
    for (const value of ["not json", "[1,2]", '"text"', "", "  "]) {
      const res = await postJson(chatUrl, key, chat(), { "x-svc-metadata": value });
      assert.equal(res.status, 400, value);
      assert.equal(res.json().error.code, "invalid_metadata");
    }
    const ok = await postJson(chatUrl, key, chat(), { "x-svc-metadata": '{"team":"search","n":3}' });
    assert.equal(ok.status, 200);
  });

  it("bounds an error message that quotes a long value, cut between characters", async () => {
    const huge = await postJson(chatUrl, key, { model: "m".repeat(15_000), messages: [{ role: "user", content: "x" }] });
    assert.equal(huge.status, 400);
    assert.equal(huge.json().error.code, "model_not_found");
    assert.ok(huge.json().error.message.length <= 1024, `a message of ${huge.json().error.message.length} characters`);
    assert.ok(huge.json().error.message.endsWith("…"));
    // A tool name of emoji, quoted cut: never half of a character (a lone surrogate).
    const emoji = await postJson(msgUrl, key, msgs("x", { tools: [{ name: "m😀".repeat(100), input_schema: { type: "object" } }] }));
    assert.equal(emoji.status, 400);
    assert.ok(emoji.json().error.message.isWellFormed(), emoji.json().error.message);
  });

  it("X-Svc-Metadata holding a number beyond a double's range -> 400 invalid_metadata naming it (it would be logged as null)", async () => {
    for (const [value, at] of [['{"a":1e400}', "`a`"], ['{"b":{"c":[1,-2E+999]}}', "`b.c[1]`"]] as const) {
      const res = await postJson(chatUrl, key, chat(), { "x-svc-metadata": value });
      assert.equal(res.status, 400, value);
      assert.equal(res.json().error.code, "invalid_metadata");
      assert.ok(res.json().error.message.includes(at), res.json().error.message);
    }
    assert.equal((await postJson(chatUrl, key, chat(), { "x-svc-metadata": '{"a":1e300,"t":"9e999"}' })).status, 200);
  });

  it("X-Svc-Metadata past what a log keeps (64 keys, keys of 256 and values of 1024 characters) -> 400 invalid_metadata, not cut in the log", async () => {
    const keys = (n: number) => JSON.stringify(Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"])));
    for (const [value, says] of [
      [keys(65), /65 keys; at most 64/],
      [JSON.stringify({ ["k".repeat(257)]: "v" }), /keys must be at most 256/],
      [JSON.stringify({ team: "v".repeat(1025) }), /values must be at most 1024 characters \(`team` has 1025\)/],
      [JSON.stringify({ nested: { a: "x".repeat(1020) } }), /values must be at most 1024/],
    ] as const) {
      const res = await postJson(chatUrl, key, chat(), { "x-svc-metadata": value });
      assert.equal(res.status, 400, value.slice(0, 40));
      assert.equal(res.json().error.code, "invalid_metadata");
      assert.match(res.json().error.message, says);
    }
    const most = await postJson(chatUrl, key, chat(), { "x-svc-metadata": JSON.stringify({ ...JSON.parse(keys(63)), ["k".repeat(256)]: "v".repeat(1024) }) });
    assert.equal(most.status, 200);
  });

  it("provider-version must be a real YYYY-MM-DD date", async () => {
    for (const v of ["2023-6-1", "yesterday", "2024-02-30"]) {
      const res = await postJson(msgUrl, key, msgs(), { "provider-version": v });
      assert.equal(res.status, 400, v);
      assert.equal(res.json().error.code, "invalid_provider_version");
    }
    assert.equal((await postJson(msgUrl, key, msgs(), { "provider-version": "2023-06-01" })).status, 200);
    assert.equal((await postJson(msgUrl, key, msgs())).status, 200, "the header is optional");
  });

  it("wrong method -> 405, unknown path -> 404, both in the error shape; without a key, 401 before either", async () => {
    const get = await rawRequest(chatUrl, { method: "GET", headers: { "x-svc-api-key": key } });
    assert.equal(get.status, 405);
    assertErrorShape(get.json());
    const unknown = await rawRequest(`${gw.gatewayUrl}/v1/embeddings`, { headers: { "content-type": "application/json", authorization: `Bearer ${key}` }, body: "{}" });
    assert.equal(unknown.status, 404);
    assertErrorShape(unknown.json());
    assert.equal(unknown.json().error.type, "not_found_error");
    // Spec 5.1: every request needs a key; without one nothing says which paths exist.
    for (const [method, path, headers] of [["GET", "/v1/chat/completions", {}], ["OPTIONS", "/v1/messages", {}], ["POST", "/v1/embeddings", {}], ["GET", "/V1/models", { "x-api-key": "svc_sk_live_nope" }]] as const) {
      const res = await rawRequest(`${gw.gatewayUrl}${path}`, { method, headers });
      assert.equal(res.status, 401, `${method} ${path}`);
      assert.equal(res.json().error.code, "invalid_api_key");
    }
    assert.equal((await rawRequest(`${gw.gatewayUrl}/nope`, { method: "GET" })).status, 404, "outside the API");
    // The request id under each SDK's own name too: the anthropic SDK's count_tokens, which the
    // gateway does not serve, reports it as the error's requestID.
    for (const r of [get, unknown, await rawRequest(`${gw.gatewayUrl}/v1/messages/count_tokens`, { headers: { "content-type": "application/json", "x-api-key": key }, body: "{}" })]) {
      assert.match(String(r.headers["x-svc-request-id"]), /^req_/);
      assert.equal(r.headers["request-id"], r.headers["x-svc-request-id"]);
      assert.equal(r.headers["x-request-id"], r.headers["x-svc-request-id"]);
    }
  });

  describe("upstream failures", () => {
    it("an upstream 4xx reaches the client with its status", async () => {
      for (const [surface, status] of [["chat", 400], ["chat", 404], ["messages", 400], ["messages", 404]] as const) {
        const res = await postJson(surface === "chat" ? chatUrl : msgUrl, key, surface === "chat" ? chat(`[[fake:status=${status}]]`) : msgs(`[[fake:status=${status}]]`));
        assert.equal(res.status, status, `${surface} ${status}`);
        assertErrorShape(res.json());
      }
    });

    it("an upstream 429 is a 429 rate_limit_error", async () => {
      const res = await postJson(chatUrl, key, chat("[[fake:status=429]]"));
      assert.equal(res.status, 429);
      assert.equal(res.json().error.type, "rate_limit_error");
      assert.equal(res.headers["retry-after"], undefined, "no guidance of the gateway's own on an upstream's refusal");
    });

    it("an upstream's retry guidance reaches the client, which the SDKs wait on", async () => {
      for (const [url, body, status, seconds] of [[chatUrl, chat("[[fake:status=429]] [[fake:retry=7]]"), 429, "7"], [msgUrl, msgs("[[fake:status=529]] [[fake:retry=3]]"), 502, "3"]] as const) {
        const res = await postJson(url, key, body);
        assert.equal(res.status, status);
        assert.equal(res.headers["retry-after"], seconds);
        assert.equal(res.headers["retry-after-ms"], `${seconds}000`);
        assert.equal(res.headers["x-should-retry"], undefined, "a short wait is the SDKs' to take");
        assertErrorShape(res.json());
      }
    });

    it("an upstream's wait of more than a minute is passed on with x-should-retry: false, so the SDKs raise at once instead of sleeping for it", async () => {
      const res = await postJson(chatUrl, key, chat("[[fake:status=429]] [[fake:retry=100000]]"));
      assert.equal(res.status, 429);
      assert.equal(res.headers["retry-after"], "100000", "the wait as the provider gave it");
      assert.equal(res.headers["x-should-retry"], "false");
      // The official SDK, with its default retries: it slept the whole wait (a day) before.
      const client = new OpenAI({ apiKey: key, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 2 });
      const started = Date.now();
      await assert.rejects(client.chat.completions.create(chat("[[fake:status=429]] [[fake:retry=100000]]") as never), (e: unknown) => e instanceof OpenAI.RateLimitError);
      assert.ok(Date.now() - started < 5_000, `${Date.now() - started} ms`);
      const anthropic = new Anthropic({ apiKey: key, baseURL: gw.gatewayUrl, maxRetries: 2 });
      const t = Date.now();
      await assert.rejects(anthropic.messages.create(msgs("[[fake:status=529]] [[fake:retry=90]]") as never), (e: unknown) => e instanceof Anthropic.APIError && e.status === 502);
      assert.ok(Date.now() - t < 5_000, `${Date.now() - t} ms`);
    });

    it("an upstream 5xx is a 502 without internals", async () => {
      for (const [url, body] of [[chatUrl, chat("[[fake:status=500]]")], [msgUrl, msgs("[[fake:status=529]]")]] as const) {
        const res = await postJson(url, key, body);
        assert.equal(res.status, 502);
        assertErrorShape(res.json());
      }
    });

    it("an upstream that refuses the gateway's own key is a 502, not the client's 401", async () => {
      const res = await postJson(chatUrl, key, chat("[[fake:status=401]]"));
      assert.equal(res.status, 502);
      assert.equal(res.json().error.code, "upstream_authentication_failed");
      assert.equal(res.headers["x-should-retry"], "false", "only the operator can clear it: the SDKs do not retry");
      // A 403 (what the provider account may use) is the operator's too; the upstream's words stay.
      for (const [url, body] of [[chatUrl, chat("[[fake:status=403]]")], [msgUrl, msgs("[[fake:status=403]]")]] as const) {
        const denied = await postJson(url, key, body);
        assert.equal(denied.status, 502);
        assert.equal(denied.json().error.code, "upstream_authentication_failed");
        assert.equal(denied.json().error.message, "The upstream provider refused the gateway's credentials (HTTP 403): Scripted failure 403.");
      }
    });

    it("an upstream that ends a stream early gives the SSE error event, upstream_stream_incomplete", async () => {
      const res = await postJson(chatUrl, key, chat("cut [[fake:drop]]", { stream: true }));
      assert.equal(res.status, 200);
      const last = sseEvents(res.text).at(-1)!;
      const err = JSON.parse(last.data).error;
      assert.deepEqual([err.type, err.code], ["api_error", "upstream_stream_incomplete"]);
      assert.match(err.message, /before the answer was complete/);
      const m = await postJson(msgUrl, key, msgs("cut [[fake:drop]]", { stream: true }));
      const lastM = sseEvents(m.text).at(-1)!;
      assert.equal(lastM.event, "error");
      assert.equal(JSON.parse(lastM.data).type, "error");
      assert.deepEqual([JSON.parse(lastM.data).error.type, JSON.parse(lastM.data).error.code], ["api_error", "upstream_stream_incomplete"]);
    });
  });

  /**
   * Sends raw bytes on a new connection, keeping its own side open, and reads the whole answer. The
   * gateway must close the connection entirely, not only its own side (a half-open socket would
   * keep it, and any request on it, alive for as long as the client likes): once its side has
   * ended, more bytes from this side must meet a reset.
   */
  const rawHttp = (text: string, url = gw.gatewayUrl) =>
    new Promise<{ head: string; body: string }>((resolve, reject) => {
      const { hostname, port } = new URL(url);
      const socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true }, () => socket.write(text));
      const timer = setTimeout(() => reject(new Error("the gateway left the connection open")), 5_000);
      let got = "";
      socket.setEncoding("utf8").on("data", (d: string) => (got += d));
      socket.on("end", () => {
        const poke = setInterval(() => socket.write("x"), 50);
        socket.once("error", () => {
          clearInterval(poke);
          clearTimeout(timer);
          socket.destroy();
          const at = got.indexOf("\r\n\r\n");
          resolve({ head: got.slice(0, at), body: got.slice(at + 4) });
        });
      });
    });

  it("a request node:http cannot parse still gets the spec's error object and the svc headers", async () => {
    const huge = await rawHttp(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`);
    const bad = await rawHttp("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n{}");
    for (const [res, status, code] of [[huge, 431, "headers_too_large"], [bad, 400, "malformed_request"]] as const) {
      assert.match(res.head, new RegExp(`^HTTP/1.1 ${status} `));
      const id = /\r\nX-Svc-Request-Id: (req_\w+)\r\n/.exec(res.head)?.[1];
      assert.ok(id, res.head);
      // The surface is unknown here: the id also goes out under both SDKs' names.
      assert.match(res.head, new RegExp(`\\r\\nx-request-id: ${id}\\r\\n`));
      assert.match(res.head, new RegExp(`\\r\\nrequest-id: ${id}\\r\\n`));
      assert.match(res.head, /\r\nX-Svc-Cost: 0\r\n/);
      const body = JSON.parse(res.body);
      assertErrorShape(body);
      assert.deepEqual([body.error.type, body.error.code], ["invalid_request_error", code]);
    }
  });

  it("so does one on the management port, with a request id of its own, as every management answer has", async () => {
    const ids = new Set<string>();
    for (const [text, status] of [
      [`GET /v1/logs HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`, 431],
      ["GET /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400],
      ["GET /v1/logs HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n", 417],
      ["CONNECT /v1/logs HTTP/1.1\r\nHost: x\r\n\r\n", 405],
    ] as const) {
      const res = await rawHttp(text, gw.managementUrl);
      assert.match(res.head, new RegExp(`^HTTP/1.1 ${status} `));
      const id = /\r\nX-Svc-Request-Id: (req_\w+)\r\n/.exec(res.head)?.[1];
      assert.ok(id, res.head);
      ids.add(id);
      assertErrorShape(JSON.parse(res.body));
    }
    assert.equal(ids.size, 4);
  });

  /** Sends raw bytes on a new connection (then, with `halfClose`, ends this side) and reads all that comes back until the gateway ends the connection. */
  const exchange = (text: string, halfClose = false) =>
    new Promise<string>((resolve, reject) => {
      const { hostname, port } = new URL(gw.gatewayUrl);
      const socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true }, () => {
        socket.write(text);
        if (halfClose) setTimeout(() => socket.end(), 300);
      });
      const timer = setTimeout(() => reject(new Error(`the gateway left the connection open; got ${got}`)), 8_000);
      let got = "";
      socket.setEncoding("utf8").on("data", (d: string) => (got += d));
      socket.on("error", () => {});
      socket.on("end", () => {
        clearTimeout(timer);
        socket.destroy();
        resolve(got);
      });
    });
  const statusLines = (raw: string) => raw.match(/HTTP\/1\.1 \d{3}/g) ?? [];
  const post = (body: string, headers = "") =>
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\n${headers}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

  it("answers a whole request before the bad one pipelined behind it, then the bad one, then closes", async () => {
    const good = post(JSON.stringify(chat("pipelined first [[fake:delay=200]]")));
    const raw = await exchange(`${good}GARBAGE \x01\r\n\r\n`);
    assert.deepEqual(statusLines(raw), ["HTTP/1.1 200", "HTTP/1.1 400"], raw);
    assert.match(raw, /"object":"chat.completion"/);
    assert.match(raw, /"code":"malformed_request"/);
    // The bad request has an id of its own.
    const ids = [...raw.matchAll(/\r\nX-Svc-Request-Id: (req_\w+)\r\n/g)].map((m) => m[1]);
    assert.equal(new Set(ids).size, 2, raw);
    // Every whole request before it is answered first, each served in its turn: the error is the bad one's.
    // Each first request slow and new (not a cache hit), so that the ones behind it wait their turn.
    const slow = (n: number) => post(JSON.stringify(chat(`pipelined slow ${n} [[fake:delay=300]]`)));
    const two = await exchange(`${slow(1)}${post(JSON.stringify(chat("pipelined second")))}GARBAGE \x01\r\n\r\n`);
    assert.deepEqual(statusLines(two), ["HTTP/1.1 200", "HTTP/1.1 200", "HTTP/1.1 400"], two);
    assert.match(two, /"object":"chat.completion"[\s\S]*"object":"chat.completion"[\s\S]*"code":"malformed_request"/);
    // Headers too large after several: the same order (431 last).
    const big = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: ${"a".repeat(20_000)}\r\n\r\n`;
    const tail = await exchange(`${slow(2)}${post(JSON.stringify(chat("pipelined third")))}${big}`);
    assert.deepEqual(statusLines(tail), ["HTTP/1.1 200", "HTTP/1.1 200", "HTTP/1.1 431"], tail);
    // A request that closes the connection ends it: it is answered, what follows it is not (RFC 9112 9.6).
    const closing = await exchange(`${slow(3)}${post(JSON.stringify(chat("pipelined closing")), "Connection: close\r\n")}${post(JSON.stringify(chat("pipelined after close")))}`);
    assert.deepEqual(statusLines(closing), ["HTTP/1.1 200", "HTTP/1.1 200"], closing);
    assert.match(closing, /Connection: close/);
    assert.doesNotMatch(closing, /pipelined after close/);
    // A CONNECT behind requests still being answered (node:http hands its socket over): answered
    // 405 after them, not written ahead in place of the first one's answer.
    const connectBehind = await exchange(`${slow(4)}${post(JSON.stringify(chat("pipelined before connect")))}CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n`);
    assert.deepEqual(statusLines(connectBehind), ["HTTP/1.1 200", "HTTP/1.1 200", "HTTP/1.1 405"], connectBehind);
    assert.match(connectBehind, /"object":"chat.completion"[\s\S]*"object":"chat.completion"[\s\S]*"code":"method_not_allowed"/);
    // Refused requests before the garbage are answered too.
    const bad = await exchange(`${post('{"model": ')}GARBAGE \x01\r\n\r\n`);
    assert.deepEqual(statusLines(bad), ["HTTP/1.1 400", "HTTP/1.1 400"], bad);
    assert.match(bad, /"code":"invalid_json"[\s\S]*"code":"malformed_request"/);
  });

  it("logs a request whose body broke off with what had come of it and the error it was answered", async () => {
    const own = await gw.project();
    const partial = '{"model":"chat-4o-mini","messages":[{"role":"user","content":"cut';
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${own.live}\r\nContent-Length: 9000\r\n\r\n`;
    const raw = await exchange(head + partial, true);
    assert.deepEqual(statusLines(raw), ["HTTP/1.1 400"], raw);
    const id = /\r\nX-Svc-Request-Id: (req_\w+)\r\n/.exec(raw)![1]!;
    let log: { status: number; requestBody: string; responseBody: string; errorCode: string; ttfbMs: number; latencyMs: number } | undefined;
    await eventually(async () => {
      log = (await gw.telemetry.getLog({ projectId: own.projectId, keyMode: KeyMode.LIVE, requestId: id }).catch(() => undefined))?.log;
      return log !== undefined;
    }, 5_000, "the broken request's log");
    assert.deepEqual([log!.status, log!.errorCode], [400, "malformed_request"]);
    // It was answered: its time to first byte is that answer's, not 0 (none sent).
    assert.ok(log!.ttfbMs > 0 && log!.ttfbMs <= log!.latencyMs, `ttfb ${log!.ttfbMs} of ${log!.latencyMs} ms`);
    assert.equal(log!.requestBody, partial);
    assert.equal(JSON.parse(log!.responseBody).error.code, "malformed_request");
  });

  it("closes the connection after refusing a request whose body it has not read, so a body cut short gets no second answer", async () => {
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\nContent-Length: 104857600\r\n\r\n{"model":`;
    const raw = await exchange(head, true);
    assert.deepEqual(statusLines(raw), ["HTTP/1.1 400"], raw);
    assert.match(raw, /"code":"request_too_large"/);
    assert.match(raw, /\r\nConnection: close\r\n/i);
    // A whole body, refused, keeps the connection (it was read).
    const whole = await rawRequest(`${gw.gatewayUrl}/v1/chat/completions`, { headers: { "content-type": "application/json", "x-svc-api-key": key }, body: "{" });
    assert.equal(whole.status, 400);
    assert.notEqual(String(whole.headers.connection).toLowerCase(), "close");
  });

  /**
   * Writes a request's head, then its body in 16 KiB pieces, a turn of the event loop apart (a client
   * still writing when the gateway has its answer ready), then `after`; reads until the gateway
   * closes the connection or `answers` answers have come.
   */
  const writeSlowly = (head: string, bodyBytes: number, after: string, answers: number, readAfterWriting = false) =>
    new Promise<{ raw: string; error: string }>((resolve) => {
      const { hostname, port } = new URL(gw.gatewayUrl);
      let raw = "";
      let error = "";
      const socket = connect({ port: Number(port), host: hostname }, async () => {
        // A client that reads only once it has written the whole request (Python's http.client,
        // most blocking clients): what came meanwhile waits in the kernel, and a reset drops it.
        if (readAfterWriting) socket.pause();
        socket.write(head);
        const piece = Buffer.alloc(16 * 1024, "a");
        for (let sent = 0; sent < bodyBytes && !socket.destroyed; sent += piece.length) {
          const wrote = new Promise((r) => socket.write(piece.subarray(0, Math.min(piece.length, bodyBytes - sent)), r));
          await (readAfterWriting ? wrote : new Promise((r) => setImmediate(r)));
        }
        if (!socket.destroyed) socket.write(after);
        if (readAfterWriting) socket.resume();
      });
      const end = () => {
        clearTimeout(timer);
        socket.destroy();
        resolve({ raw, error });
      };
      const timer = setTimeout(end, 8_000);
      socket.setEncoding("utf8").on("data", (d: string) => {
        raw += d;
        if (statusLines(raw).length >= answers && /\}\s*$/.test(raw)) end();
      });
      socket.on("error", (e) => (error = String(e)));
      socket.on("close", end);
    });

  it("answers a refused request once its body is in, so a client still writing it gets the answer, and keeps the connection", async () => {
    const size = 1024 * 1024; // the limit is 20000 bytes
    const whole = post(JSON.stringify(chat("after a refused one")));
    const head = (k: string) =>
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${k}\r\nContent-Length: ${size}\r\n\r\n`;
    // Too large; then a bad key (refused before the body is read at all).
    for (const [k, code] of [[key, "request_too_large"], [`svc_sk_live_${"x".repeat(40)}`, "invalid_api_key"]] as const) {
      const { raw, error } = await writeSlowly(head(k), size, whole, 2);
      assert.equal(error, "", `${code}: the client's writes failed`);
      assert.deepEqual(statusLines(raw), [code === "invalid_api_key" ? "HTTP/1.1 401" : "HTTP/1.1 400", "HTTP/1.1 200"], raw.slice(0, 600));
      assert.match(raw, new RegExp(`"code":"${code}"`));
      assert.doesNotMatch(raw, /\r\nConnection: close\r\n/i);
    }
  });

  it("on a connection that closes after its answer (Connection: close, HTTP/1.0), reads the refused body first, then answers", async function () {
    this.timeout(30_000);
    // Larger than the socket buffers hold: the client is still writing when the answer is ready.
    const size = 8 * 1024 * 1024;
    for (const [version, connection] of [["HTTP/1.1", "Connection: close\r\n"], ["HTTP/1.0", ""]] as const) {
      for (const [k, code] of [[key, "request_too_large"], [`svc_sk_live_${"x".repeat(40)}`, "invalid_api_key"]] as const) {
        const head = `POST /v1/chat/completions ${version}\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${k}\r\n${connection}Content-Length: ${size}\r\n\r\n`;
        const { raw, error } = await writeSlowly(head, size, "", 1, true);
        assert.equal(error, "", `${version} ${code}: the client's writes failed`);
        assert.equal(statusLines(raw).length, 1, raw.slice(0, 300));
        assert.match(raw, new RegExp(`"code":"${code}"`), `${version}: ${raw.slice(0, 300)}`);
      }
    }
  });

  it("gives a refused request one answer only, when its body breaks while it is read and dropped", async () => {
    const bad = `svc_sk_live_${"x".repeat(40)}`;
    const raw = await exchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${bad}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\nZZZ\r\nnot a chunk\r\n\r\n`);
    assert.deepEqual(statusLines(raw), ["HTTP/1.1 401"], raw);
  });

  it("an SDK sending a body over the limit gets the 400 every time, not a connection error", async function () {
    this.timeout(30_000);
    const big = "b".repeat(2 * 1024 * 1024);
    const openai = new OpenAI({ apiKey: key, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
    const anthropic = new Anthropic({ apiKey: key, baseURL: gw.gatewayUrl, maxRetries: 0 });
    const got: string[] = [];
    for (let i = 0; i < 4; i++) {
      for (const call of [
        () => openai.chat.completions.create({ model: "chat-4o-mini", messages: [{ role: "user", content: big }] }),
        () => anthropic.messages.create({ model: "assistant-3-haiku-20240307", max_tokens: 5, messages: [{ role: "user", content: big }] }),
      ]) {
        got.push(await call().then(() => "ok", (e: { status?: number; constructor: { name: string } }) => String(e.status ?? e.constructor.name)));
      }
    }
    assert.deepEqual(got, Array(8).fill("400"));
  });

  it("the health check carries the svc headers too", async () => {
    const res = await rawRequest(`${gw.gatewayUrl}/healthz`, { method: "GET" });
    assert.equal(res.status, 200);
    assert.ok(res.headers["x-svc-request-id"]);
    assert.equal(res.headers["x-svc-cost"], "0");
    const head = await rawRequest(`${gw.gatewayUrl}/healthz`, { method: "HEAD" });
    assert.equal(head.status, 200);
    for (const method of ["POST", "DELETE", "OPTIONS"]) {
      const wrong = await rawRequest(`${gw.gatewayUrl}/healthz`, { method });
      assert.equal(wrong.status, 405, method);
      assert.equal(wrong.headers.allow, "GET, HEAD");
      assertErrorShape(wrong.json());
      assert.equal(wrong.json().error.code, "method_not_allowed");
      assert.ok(wrong.headers["x-svc-request-id"]);
    }
  });
});

describe("gateway errors: unreachable and slow upstreams", () => {
  it("an unreachable upstream is 502 upstream_unreachable", async () => {
    // Port 1 (tcpmux), where nothing listens: a port found free and then left could be taken by
    // another process (another test's server) before the request.
    const gw = await startTestGateway({ SVC_OPENAI_BASE_URL: "http://127.0.0.1:1/v1", SVC_OPENAI_API_KEY: "k" }, false);
    try {
      const key = (await gw.project()).live;
      const res = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, chat());
      assert.equal(res.status, 502);
      assert.equal(res.json().error.code, "upstream_unreachable");
    } finally {
      await gw.close();
    }
  });

  it("an upstream slower than the first-byte timeout is 504 upstream_timeout; an idle stream ends in an error event", async () => {
    const gw = await startTestGateway({ SVC_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: "300", SVC_UPSTREAM_IDLE_TIMEOUT_MS: "300" });
    try {
      const key = (await gw.project()).live;
      const url = `${gw.gatewayUrl}/v1/chat/completions`;
      const slow = await postJson(url, key, chat("[[fake:delay=2000]]"));
      assert.equal(slow.status, 504);
      assert.equal(slow.json().error.code, "upstream_timeout");
      const idle = await postJson(url, key, chat("[[fake:stall]]", { stream: true }));
      const last = JSON.parse(sseEvents(idle.text).at(-1)!.data);
      assert.equal(last.error.code, "upstream_timeout");
    } finally {
      await gw.close();
    }
  });

  it("an upstream timeout after the request went out charges the month for the prompt, as a client that leaves does", async () => {
    const gw = await startTestGateway({ SVC_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: "300" });
    try {
      const { project } = await gw.admin.createProject({ name: "timeouts", plan: Plan.PRO, limitOverrides: { monthlySpendCapUsd: "100" } });
      const key = (await gw.admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE })).secret;
      const slow = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, chat(`[[fake:delay=2000]] ${"long prompt ".repeat(2000)}`));
      assert.equal(slow.status, 504);
      assert.equal(slow.json().error.code, "upstream_timeout");
      // The month is charged once the settle lands (off the request's path).
      await eventually(async () => Number((await gw.limits.getUsage({ projectId: project!.id })).spentUsd) > 0, 5000, "the prompt charged");
      const spent = Number((await gw.limits.getUsage({ projectId: project!.id })).spentUsd);
      // About 6,000 tokens of prompt at $2.50 per million, nothing of an answer.
      assert.ok(spent > 0.005 && spent < 0.05, String(spent));
    } finally {
      await gw.close();
    }
  });

  it("a provider with no configured key is 502 upstream_not_configured, not a call to the public API, naming the setting; the SDKs do not retry it", async () => {
    const gw = await startTestGateway({}, false);
    try {
      const key = (await gw.project()).live;
      const res = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, chat());
      assert.equal(res.status, 502);
      assert.equal(res.json().error.code, "upstream_not_configured");
      assert.match(res.json().error.message, /set SVC_OPENAI_API_KEY/);
      assert.equal(res.headers["x-should-retry"], "false");
      const msg = await postJson(`${gw.gatewayUrl}/v1/messages`, key, msgs());
      assert.match(msg.json().error.message, /set SVC_ANTHROPIC_API_KEY/);
      // The official SDK, with its default retries, sends it once.
      let sent = 0;
      const openai = new OpenAI({ apiKey: key, baseURL: `${gw.gatewayUrl}/v1`, fetch: (url, init) => (sent++, fetch(url, init)) });
      await assert.rejects(openai.chat.completions.create(chat() as never), (e: { status?: number }) => e.status === 502);
      assert.equal(sent, 1);
    } finally {
      await gw.close();
    }
  });

  it("a config file's provider whose key variable is unset is 502 upstream_not_configured naming it, at any address, and nothing is sent", async () => {
    let reached = 0;
    const upstream = createServer((_req, res) => {
      reached++;
      res.writeHead(500).end();
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    const dir = mkdtempSync(join(tmpdir(), "svc-config-"));
    const file = join(dir, "svc.config.json");
    const baseUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
    writeFileSync(file, JSON.stringify({ providers: { local: { style: "chat-completions", baseUrl, apiKeyEnv: "SVC_TEST_NO_SUCH_KEY" } }, models: { "chat-4o": { provider: "local" } } }));
    const gw = await startTestGateway({ SVC_CONFIG: file }, false);
    try {
      const res = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, (await gw.project()).live, chat());
      assert.equal(res.status, 502);
      assert.equal(res.json().error.code, "upstream_not_configured");
      assert.match(res.json().error.message, /set SVC_TEST_NO_SUCH_KEY/);
      assert.equal(reached, 0);
    } finally {
      await gw.close();
      upstream.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
