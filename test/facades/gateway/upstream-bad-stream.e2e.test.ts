import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import type http from "node:http";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { eventually, postJson, type RawResponse, sseEvents } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * A streamed request whose upstream answers 200 with something that is not an event stream (a JSON
 * object, an HTML page, or a JSON body labelled text/event-stream) is 502 upstream_invalid_response,
 * as the same body is for a non-stream request; a stream that started properly and then ended
 * early stays upstream_stream_incomplete. Both upstream styles, each a scripted node:http server.
 */
const completionJson = JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "gpt-4o", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
const messageJson = JSON.stringify({ id: "msg_1", type: "message", role: "assistant", model: "claude", content: [{ type: "text", text: "hi" }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } });

function answer(chatStyle: boolean, prompt: string, res: http.ServerResponse): void {
  const json = chatStyle ? completionJson : messageJson;
  if (prompt.startsWith("json")) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(json);
  } else if (prompt.startsWith("html")) {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end("<html><body>Gateway maintenance</body></html>");
  } else if (prompt.startsWith("sse-json")) {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(json);
  } else if (prompt.startsWith("cut")) {
    // A proper start, then the body ends cleanly without [DONE] / message_stop.
    res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8" });
    if (chatStyle) {
      res.write(`data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "gpt-4o", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`);
      res.end(`data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "gpt-4o", choices: [{ index: 0, delta: { content: "Hel" }, finish_reason: null }] })}\n\n`);
    } else {
      res.write(`event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_1", type: "message", role: "assistant", model: "claude", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } } })}\n\n`);
      res.write(`event: content_block_start\ndata: ${JSON.stringify({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } })}\n\n`);
      res.end(`event: content_block_delta\ndata: ${JSON.stringify({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hel" } })}\n\n`);
    }
  } else if (prompt.startsWith("unmarked")) {
    // A whole answer, its finish and usage said, then the body ends cleanly without [DONE] /
    // message_stop (as some OpenAI-compatible servers end their streams).
    res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8" });
    if (chatStyle) {
      const chunk = (choices: unknown[], usage?: unknown) => `data: ${JSON.stringify({ id: "c2", object: "chat.completion.chunk", created: 1, model: "gpt-4o", choices, ...(usage ? { usage } : {}) })}\n\n`;
      res.write(chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]));
      res.write(chunk([{ index: 0, delta: { content: "Hello there" }, finish_reason: null }]));
      res.write(chunk([{ index: 0, delta: {}, finish_reason: "stop" }]));
      res.end(chunk([], { prompt_tokens: 1000, completion_tokens: 2000, total_tokens: 3000 }));
    } else {
      res.write(`event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_2", type: "message", role: "assistant", model: "claude", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1000, output_tokens: 1 } } })}\n\n`);
      res.write(`event: content_block_start\ndata: ${JSON.stringify({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } })}\n\n`);
      res.write(`event: content_block_delta\ndata: ${JSON.stringify({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hello there" } })}\n\n`);
      res.write(`event: content_block_stop\ndata: ${JSON.stringify({ type: "content_block_stop", index: 0 })}\n\n`);
      res.end(`event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2000 } })}\n\n`);
    }
  } else if (prompt.startsWith("broken-json")) {
    // A 200 whose JSON body is cut off: the upstream had the prompt, and bills it.
    res.writeHead(200, { "content-type": "application/json" });
    res.end(json.slice(0, 40));
  } else if (prompt.startsWith("headers-then-close") || (chatStyle && prompt.startsWith("ping-then-end"))) {
    // A 200 and a keep-alive comment, then the connection broken before any event.
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(": ping\n\n", () => setTimeout(() => res.socket?.destroy(), 20));
  } else if (prompt.startsWith("ping-then-end")) {
    // A 200 and a ping event (Anthropic's), then the body ended cleanly before the answer's first event.
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(`event: ping\ndata: {"type":"ping"}\n\n`);
  } else if (prompt.startsWith("redirect")) {
    // A base URL that redirects (http to https, a path without /v1): the gateway does not follow it.
    res.writeHead(302, { location: "https://api.example.test/v1/chat/completions" });
    res.end();
  } else {
    res.writeHead(500).end();
  }
}

describe("gateway errors: an upstream that answers a streamed request with something other than an event stream", () => {
  const on = gatewayOnScriptedUpstream((body: { messages: Array<{ content: string | Array<{ text: string }> }> }, res, req) => {
    const last = body.messages.at(-1)!.content;
    answer(req.url!.includes("/chat/completions"), typeof last === "string" ? last : last[0]!.text, res);
  });
  let n = 0;

  const styles = [
    ["chat-completions (OpenAI-style upstream)", "/v1/chat/completions", (content: string, stream: boolean) => ({ model: "chat-4o", stream, messages: [{ role: "user", content }] })],
    ["messages (Anthropic-style upstream)", "/v1/messages", (content: string, stream: boolean) => ({ model: "assistant-3-5-haiku-20241022", max_tokens: 64, stream, messages: [{ role: "user", content }] })],
  ] as const;

  /** The error a response carries: its JSON error object, or the error event that ends its stream. */
  const errorOf = (res: RawResponse): { type: string; code: string; message: string } => {
    if (res.status !== 200) return res.json().error;
    const last = sseEvents(res.text).at(-1)!;
    return JSON.parse(last.data).error;
  };

  for (const [name, path, body] of styles) {
    for (const kind of ["json", "html", "sse-json"]) {
      it(`${name}: a stream answered with ${kind} is 502 upstream_invalid_response`, async () => {
        const res = await postJson(`${on.gw.gatewayUrl}${path}`, on.key, body(`${kind} ${++n}`, true));
        assert.equal(res.status, 502, res.text);
        const err = res.json().error;
        assert.deepEqual([err.type, err.code], ["api_error", "upstream_invalid_response"], res.text);
        assert.match(err.message, /invalid response/);
      });
    }

    it(`${name}: the same HTML for a non-stream request is upstream_invalid_response too`, async () => {
      const res = await postJson(`${on.gw.gatewayUrl}${path}`, on.key, body(`html ${++n}`, false));
      assert.equal(res.status, 502, res.text);
      assert.equal(res.json().error.code, "upstream_invalid_response");
    });

    for (const stream of [false, true]) {
      it(`${name}: a redirect is 502 upstream_redirected naming the status, where it points and the base URL setting (${stream ? "stream" : "whole"})`, async () => {
        const res = await postJson(`${on.gw.gatewayUrl}${path}`, on.key, body(`redirect ${++n}`, stream));
        assert.equal(res.status, 502, res.text);
        const err = res.json().error;
        assert.deepEqual([err.type, err.code], ["api_error", "upstream_redirected"], res.text);
        assert.match(err.message, /HTTP 302/);
        assert.match(err.message, /https:\/\/api\.example\.test\/v1\/chat\/completions/);
        assert.match(err.message, path === "/v1/messages" ? /SVC_ANTHROPIC_BASE_URL/ : /SVC_OPENAI_BASE_URL/);
        assert.equal(res.headers["x-should-retry"], "false");
      });
    }

    it(`${name}: a stream whose finish was said and whose body then ends cleanly without its end marker is a whole answer, billed on the upstream's usage and cached`, async () => {
      const prompt = `unmarked ${++n}`;
      const res = await postJson(`${on.gw.gatewayUrl}${path}`, on.key, body(prompt, true));
      assert.equal(res.status, 200, res.text);
      const events = sseEvents(res.text);
      const datas = events.map((e) => e.data);
      if (path === "/v1/messages") {
        assert.deepEqual(events.map((e) => e.event).slice(-2), ["message_delta", "message_stop"], res.text);
        assert.equal(JSON.parse(datas.at(-2)!).delta.stop_reason, "end_turn");
      } else {
        assert.equal(datas.at(-1), "[DONE]", res.text);
        assert.ok(datas.some((d) => d !== "[DONE]" && JSON.parse(d).choices[0]?.finish_reason === "stop"), res.text);
      }
      assert.match(res.text, /Hello there/);
      assert.ok(!res.text.includes("upstream_stream_incomplete"), res.text);
      // 1000 input and 2000 output tokens at chat-4o's 2.50/10.00 (assistant-3-5-haiku's 0.80/4) per 1M.
      const cost = path === "/v1/messages" ? "0.0088" : "0.0225";
      assert.equal(res.trailers["x-svc-cost"], cost, JSON.stringify(res.trailers));
      const again = await postJson(`${on.gw.gatewayUrl}${path}`, on.key, body(prompt, false));
      assert.equal(again.headers["x-svc-cache"], "HIT", again.text);
      assert.match(again.text, /Hello there/);
    });

    // A stream answered with something that is no event stream (HTML, JSON) or with events that are not the style's: unreadable, as the cut-off JSON is.
    // Or a stream broken off, or ended, after its 200 and before its first event: the upstream had the prompt all the same.
    for (const [kind, stream, code] of [
      ["broken-json", false, "upstream_invalid_response"],
      ["html", true, "upstream_invalid_response"],
      ["json", true, "upstream_invalid_response"],
      ["sse-json", true, "upstream_invalid_response"],
      ["headers-then-close", true, "upstream_stream_incomplete"],
      ["ping-then-end", true, "upstream_stream_incomplete"],
    ] as const) {
      it(`${name}: a 2xx answer that cannot be read (${kind}${stream ? ", streamed" : ""}) is 502 ${code}, and the month is charged for the prompt the upstream had`, async () => {
        const { project } = await on.gw.admin.createProject({ name: `broken ${n}`, plan: Plan.PRO, limitOverrides: { monthlySpendCapUsd: "100" } });
        const key = (await on.gw.admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE })).secret;
        const res = await postJson(`${on.gw.gatewayUrl}${path}`, key, body(`${kind} ${++n} ${"long prompt ".repeat(2000)}`, stream));
        assert.equal(res.status, 502, res.text);
        assert.equal(res.json().error.code, code);
        await eventually(async () => Number((await on.gw.limits.getUsage({ projectId: project!.id })).spentUsd) > 0, 5000, "the prompt charged");
        const spent = Number((await on.gw.limits.getUsage({ projectId: project!.id })).spentUsd);
        // About 6,000 tokens of prompt at $2.50 (chat-4o) or $0.80 (assistant-3-5-haiku) per million, nothing of an answer.
        assert.ok(spent > 0.003 && spent < 0.05, String(spent));
        assert.equal(res.headers["x-svc-cost"], String(spent), "the answer says what it cost");
      });
    }

    it(`${name}: a stream that started properly and then ended early stays upstream_stream_incomplete`, async () => {
      const res = await postJson(`${on.gw.gatewayUrl}${path}`, on.key, body(`cut ${++n}`, true));
      const err = errorOf(res);
      assert.deepEqual([err.type, err.code], ["api_error", "upstream_stream_incomplete"], res.text);
    });
  }
});

describe("gateway errors: an upstream's words never carry the gateway's provider credentials to the client", () => {
  const openAiKey = "sk-proj-OPERATORSECRET0123456789";
  const anthropicKey = "operator-anthropic-secret-0123456789";
  const on = gatewayOnScriptedUpstream((body: { messages: Array<{ content: string }> }, res, req) => {
    const prompt = body.messages.at(-1)!.content;
    const sent = JSON.stringify(req.headers);
    if (prompt.startsWith("echo")) {
      // A server that quotes the request's headers back in its error message.
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: `bad request, your headers were ${sent}` } }));
    } else if (prompt.startsWith("refused")) {
      // OpenAI's 401 names the refused key, masked to its last characters.
      res.writeHead(401, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "Incorrect API key provided: sk-proj-********************6789. You can find your API key at ...", type: "invalid_request_error", code: "invalid_api_key" } }));
    } else if (prompt.startsWith("redirect")) {
      res.writeHead(302, { location: `http://elsewhere.test/?k=${encodeURIComponent(String(req.headers.authorization ?? req.headers["x-api-key"]))}` });
      res.end();
    } else {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`event: error\ndata: ${JSON.stringify({ type: "error", error: { type: "api_error", message: `failed with ${sent}` } })}\n\n`);
    }
  }, { SVC_OPENAI_API_KEY: openAiKey, SVC_ANTHROPIC_API_KEY: anthropicKey });

  const cases = [
    ["/v1/chat/completions", (content: string, stream = false) => ({ model: "chat-4o", stream, messages: [{ role: "user", content }] })],
    ["/v1/messages", (content: string, stream = false) => ({ model: "assistant-3-5-haiku-20241022", max_tokens: 64, stream, messages: [{ role: "user", content }] })],
  ] as const;
  for (const [path, body] of cases) {
    it(`${path}: a message, a redirect or a stream's error event quoting the key is relayed with the key redacted`, async () => {
      for (const [prompt, stream] of [["echo", false], ["refused", false], ["redirect", false], ["event", true]] as const) {
        const res = await postJson(`${on.gw.gatewayUrl}${path}`, on.key, body(prompt, stream));
        const text = res.text;
        assert.ok(!text.includes("OPERATORSECRET") && !text.includes(anthropicKey) && !text.includes("6789"), `${prompt}: ${text}`);
        if (prompt === "redirect") assert.match(text, /a redirect to http:\/\/elsewhere\.test\/, /, `${prompt}: ${text}`); // its query (a token) left out
        else if (prompt !== "refused") assert.match(text, /\[redacted\]/, `${prompt}: ${text}`);
      }
    });
  }
});

describe("gateway errors: an upstream that refuses the gateway's credentials in its stream's error event", () => {
  const on = gatewayOnScriptedUpstream((body: { messages: Array<{ content: string }> }, res) => {
    const [type, when] = body.messages.at(-1)!.content.split(" ");
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (when === "later") {
      res.write(`event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_3", type: "message", role: "assistant", model: "claude", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } } })}\n\n`);
    }
    res.end(`event: error\ndata: ${JSON.stringify({ type: "error", error: { type, message: "invalid x-api-key" } })}\n\n`);
  });
  const request = (content: string) => ({ model: "assistant-3-5-haiku-20241022", max_tokens: 64, stream: true, messages: [{ role: "user", content }] });

  for (const type of ["authentication_error", "permission_error"]) {
    it(`${type}: a 502 the SDK does not retry, not the client's own ${type === "authentication_error" ? 401 : 403}; after message_start, the same in the error event`, async () => {
      const client = new Anthropic({ apiKey: on.key, baseURL: on.gw.gatewayUrl, maxRetries: 2 });
      await assert.rejects(client.messages.create(request(`${type} first`) as never), (e: unknown) => {
        assert.ok(e instanceof Anthropic.InternalServerError, String(e));
        assert.equal((e as InstanceType<typeof Anthropic.APIError>).status, 502);
        assert.equal(((e as InstanceType<typeof Anthropic.APIError>).error as { error: { code: string } }).error.code, "upstream_authentication_failed");
        return true;
      });
      const first = await postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, request(`${type} first`));
      assert.equal(first.headers["x-should-retry"], "false");
      const later = await postJson(`${on.gw.gatewayUrl}/v1/messages`, on.key, request(`${type} later`));
      assert.equal(later.status, 200);
      const last = sseEvents(later.text).at(-1)!;
      assert.equal(last.event, "error");
      const err = JSON.parse(last.data).error;
      assert.deepEqual([err.type, err.code], ["api_error", "upstream_authentication_failed"], later.text);
    });
  }
});
