import assert from "node:assert/strict";
import type http from "node:http";
import OpenAI from "openai";
import { postJson, sseEvents } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * A chat-style upstream's tool call may carry fields of its own that a client must send back:
 * Gemini's OpenAI-compatible API puts the thought signature in `extra_content`
 * (https://ai.google.dev/gemini-api/docs/openai, "thought signatures"). They reach a chat client
 * as sent, whole and streamed, live and from the cache, whichever way the answer was first made.
 */
const extra = { google: { thought_signature: "c2lnLTE=" } };
const call = { id: "call_x", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}', x_fn: 7 }, extra_content: extra };

function answer(body: { stream?: boolean }, res: http.ServerResponse): void {
  const head = { id: "chatcmpl-tx", created: 1750431500, model: "gemini-2.5-flash" };
  if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    const message = { role: "assistant", content: null, tool_calls: [call] };
    res.end(JSON.stringify({ ...head, object: "chat.completion", choices: [{ index: 0, message, finish_reason: "tool_calls" }], usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 } }));
    return;
  }
  const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ ...head, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const first = { index: 0, id: call.id, type: "function", function: { name: "get_weather", arguments: "", x_fn: 7 }, extra_content: extra };
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.end(
    chunk({ role: "assistant", tool_calls: [first] }, null) +
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }, null) +
      chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }, null) +
      chunk({}, "tool_calls") +
      `data: ${JSON.stringify({ ...head, object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 } })}\n\n` +
      "data: [DONE]\n\n",
  );
}

describe("POST /v1/chat/completions: a tool call's own fields (Gemini's extra_content)", () => {
  const on = gatewayOnScriptedUpstream(answer);
  let n = 0;
  const body = (stream: boolean, tag: string) => ({ model: "chat-4o", messages: [{ role: "user", content: `weather ${tag}` }], tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }], ...(stream ? { stream } : {}) });
  /** The tool call as a stream's chunks give it: the first fragment's fields, the arguments joined. */
  const streamedCall = (text: string) => {
    const calls = sseEvents(text).filter((e) => e.data !== "[DONE]").flatMap((e) => JSON.parse(e.data).choices[0]?.delta?.tool_calls ?? []);
    const { index, ...firstFields } = calls[0];
    assert.equal(index, 0);
    return { ...firstFields, function: { ...firstFields.function, arguments: calls.map((c: { function?: { arguments?: string } }) => c.function?.arguments ?? "").join("") } };
  };

  for (const firstStream of [false, true]) {
    it(`keeps them on an answer first made ${firstStream ? "streamed" : "whole"}: live, then from the cache as JSON and as a stream`, async () => {
      const tag = `${firstStream}-${++n}`;
      const live = await postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, body(firstStream, tag));
      assert.equal(live.status, 200, live.text);
      assert.deepEqual(firstStream ? streamedCall(live.text) : live.json().choices[0].message.tool_calls[0], call);
      const json = await postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, body(false, tag));
      assert.equal(json.headers["x-svc-cache"], "HIT");
      assert.deepEqual(json.json().choices[0].message.tool_calls, [call]);
      const streamed = await postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, body(true, tag));
      assert.equal(streamed.headers["x-svc-cache"], "HIT");
      assert.deepEqual(streamedCall(streamed.text), call);
    });
  }

  it("reaches the openai SDK, whose stream helper keeps them in the final message", async () => {
    const client = new OpenAI({ apiKey: on.key, baseURL: `${on.gw.gatewayUrl}/v1`, maxRetries: 0 });
    const whole = await client.chat.completions.create(body(false, "sdk") as OpenAI.ChatCompletionCreateParamsNonStreaming);
    assert.deepEqual((whole.choices[0]!.message.tool_calls![0] as unknown as { extra_content: unknown }).extra_content, extra);
    const final = await client.chat.completions.stream(body(true, "sdk-stream") as OpenAI.ChatCompletionCreateParamsStreaming).finalChatCompletion();
    // The helper keeps a call's own fields (not its function's: x_fn is the gateway's to keep, above).
    assert.deepEqual((final.choices[0]!.message.tool_calls![0] as unknown as { extra_content: unknown }).extra_content, extra);
  });
});
