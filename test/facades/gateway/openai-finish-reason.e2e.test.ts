import assert from "node:assert/strict";
import type http from "node:http";
import { postJson, sseEvents } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * A chat-style upstream's `finish_reason` the canonical reasons do not give back as sent (the
 * legacy `functions` API's `function_call`, a value newer than the gateway) reaches a chat client
 * as sent, whole and streamed, and so does a message's `content: null`
 * (https://platform.openai.com/docs/api-reference/chat/object).
 */
const functionCall = { name: "get_weather", arguments: '{"city":"Paris"}' };

function answer(body: { stream?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse): void {
  const reason = body.messages.at(-1)!.content.split(" ")[0]!;
  const head = { id: "chatcmpl-fr", created: 1750431500, model: "gpt-4o-2024-11-20" };
  if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    const message = { role: "assistant", content: null, function_call: functionCall, refusal: null };
    res.end(JSON.stringify({ ...head, object: "chat.completion", choices: [{ index: 0, message, logprobs: null, finish_reason: reason }], usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 } }));
    return;
  }
  const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ ...head, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.end(chunk({ role: "assistant", content: null, function_call: { name: "get_weather", arguments: "" } }, null) + chunk({ function_call: { arguments: '{"city":"Paris"}' } }, null) + chunk({}, reason) + "data: [DONE]\n\n");
}

describe("POST /v1/chat/completions: finish reasons passed on as the upstream sent them", () => {
  const on = gatewayOnScriptedUpstream(answer);
  let n = 0;

  const ask = (reason: string, extra: object = {}) => postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { model: "chat-4o", messages: [{ role: "user", content: `${reason} ${++n}` }], ...extra });

  it("keeps the legacy function_call answer whole: its finish_reason, content null and function_call", async () => {
    for (const reason of ["function_call", "some_future_reason"]) {
      const res = await ask(reason);
      assert.equal(res.status, 200, res.text);
      const choice = res.json().choices[0];
      assert.equal(choice.finish_reason, reason);
      assert.equal(choice.message.content, null);
      assert.deepEqual(choice.message.function_call, functionCall);
    }
  });

  it("streams the finish_reason as sent", async () => {
    const res = await ask("function_call", { stream: true });
    assert.equal(res.status, 200, res.text);
    const finishes = sseEvents(res.text).filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data).choices[0]?.finish_reason).filter((f) => f !== null && f !== undefined);
    assert.deepEqual(finishes, ["function_call"]);
  });
});

describe("POST /v1/chat/completions: a cached answer's finish_reason as sent, served as a stream", () => {
  const on = gatewayOnScriptedUpstream(answer);

  it("goes on the finish chunk only, once, as a live stream has it", async () => {
    for (const reason of ["function_call", "some_future_reason"]) {
      const body = { model: "chat-4o", messages: [{ role: "user", content: `${reason} cached` }] };
      const first = await postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, body);
      assert.equal(first.status, 200, first.text);
      const hit = await postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { ...body, stream: true });
      assert.equal(hit.headers["x-svc-cache"], "HIT");
      const chunks = sseEvents(hit.text).filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data).choices[0]);
      assert.deepEqual(chunks.map((c) => c.finish_reason), [...chunks.slice(1).map(() => null), reason], JSON.stringify(chunks));
    }
  });
});

/**
 * OpenAI-compatible servers (TGI, vLLM) end a stream with the last text and the finish reason in
 * one chunk, their own word for it (`eos`); vLLM sends an error as a chunk that is itself the error
 * object (`{"object":"error",...}`).
 */
describe("POST /v1/chat/completions: OpenAI-compatible streams' last chunk and error chunk", () => {
  const on = gatewayOnScriptedUpstream((body: { stream?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse) => {
    const prompt = body.messages.at(-1)!.content;
    const head = { id: "cmpl-tgi", object: "chat.completion.chunk", created: 1750431500, model: "tgi" };
    const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (prompt.startsWith("vllm-error")) {
      const error = `data: ${JSON.stringify({ object: "error", message: "vllm mid fail", type: "BadRequestError", param: null, code: 400 })}\n\n`;
      res.end((prompt.includes("first") ? "" : chunk({ role: "assistant", content: "abc" }, null)) + error + "data: [DONE]\n\n");
      return;
    }
    res.end(chunk({ role: "assistant", content: "abc" }, null) + chunk({ content: "def" }, "eos") + "data: [DONE]\n\n");
  });
  const ask = (content: string, stream: boolean) => postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { model: "chat-4o", stream, messages: [{ role: "user", content }] });

  it("gives the finish reason sent with the last text once, as sent, and caches the answer", async () => {
    const res = await ask("eos with text", true);
    assert.equal(res.status, 200, res.text);
    const chunks = sseEvents(res.text).filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data).choices[0]).filter(Boolean);
    assert.deepEqual(chunks.map((c) => c.finish_reason).filter((f) => f !== null), ["eos"], JSON.stringify(chunks));
    assert.equal(chunks.map((c) => c.delta?.content ?? "").join(""), "abcdef");
    const again = await ask("eos with text", false);
    assert.equal(again.headers["x-svc-cache"], "HIT", again.text);
    assert.equal(again.json().choices[0].finish_reason, "eos");
    assert.equal(again.json().choices[0].message.content, "abcdef");
  });

  it("ends the stream with the error event for vLLM's error chunk, after text or first", async () => {
    const mid = await ask("vllm-error mid", true);
    assert.equal(mid.status, 200, mid.text);
    const last = sseEvents(mid.text).filter((e) => e.data !== "[DONE]").at(-1)!;
    const err = JSON.parse(last.data).error;
    assert.equal(err?.code, "upstream_error", mid.text);
    assert.match(err.message, /vllm mid fail/);
    const first = await ask("vllm-error first", true);
    assert.equal(first.status, 502, first.text);
    assert.equal(first.json().error.code, "upstream_error");
    assert.match(first.json().error.message, /vllm mid fail/);
  });
});
