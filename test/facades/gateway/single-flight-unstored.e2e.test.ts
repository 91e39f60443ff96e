import assert from "node:assert/strict";
import type http from "node:http";
import { postJson } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * Single flight shares an answer the cache would store. Identical requests in flight behind one
 * whose answer it would not store (a stream with per-chunk logprobs, which has no whole form; an
 * answer that does not say how it finished) are not served that answer: they call the upstream
 * themselves, as a later identical request would, and a stream's waiters are let go as soon as the
 * stream shows it cannot be stored, not made to wait for its end first. Behind one that failed,
 * likewise: each at once, not one waiter's call first and the others waiting on it.
 */
const calls: number[] = [];

function answer(body: { stream?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse): void {
  calls.push(Date.now());
  const prompt = body.messages.at(-1)!.content;
  const chunk = (delta: object, finish: string | null, extra: object = {}) =>
    `data: ${JSON.stringify({ id: "chatcmpl-sf", object: "chat.completion.chunk", created: 1, model: "gpt-4o", choices: [{ index: 0, delta, finish_reason: finish, ...extra }] })}\n\n`;
  if (prompt.startsWith("logprobs")) {
    // The first chunk shows it (logprobs), then the answer takes 600 ms more.
    res.writeHead(200, { "content-type": "text/event-stream" });
    const logprobs = { logprobs: { content: [{ token: "Hi", logprob: -0.1, bytes: [72, 105], top_logprobs: [] }] } };
    res.write(chunk({ role: "assistant", content: "Hi" }, null, logprobs));
    setTimeout(() => res.end(chunk({}, "stop", { logprobs: null }) + "data: [DONE]\n\n"), 600);
    return;
  }
  if (prompt.startsWith("fails")) {
    // A failure, after 300 ms.
    setTimeout(() => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "boom", type: "server_error" } }));
    }, 300);
    return;
  }
  if (prompt.startsWith("big")) {
    // A whole answer past the cache's entry limit (SVC_CACHE_MAX_ENTRY_BYTES below), after 300 ms: é is 2 bytes.
    setTimeout(() => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: "chatcmpl-big", object: "chat.completion", created: 1, model: "gpt-4o", choices: [{ index: 0, message: { role: "assistant", content: "é".repeat(1500) }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 1500, total_tokens: 1503 } }));
    }, 300);
    return;
  }
  // No finish reason, after 300 ms.
  setTimeout(() => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: `chatcmpl-${calls.length}`, object: "chat.completion", created: 1, model: "gpt-4o", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: null }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }));
  }, 300);
}

describe("single flight: identical requests behind an answer the cache would not store", () => {
  const on = gatewayOnScriptedUpstream(answer);
  let n = 0;
  const ask = (content: string, stream: boolean) =>
    postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { model: "chat-4o", stream, messages: [{ role: "user", content }] });
  /** One request, then two identical ones `gapMs` later (while the first is with the upstream): all three answers. */
  const burst = async (content: string, stream: boolean, gapMs: number) => {
    const first = ask(content, stream);
    await new Promise((r) => setTimeout(r, gapMs));
    const rest = await Promise.all([ask(content, stream), ask(content, stream)]);
    return [await first, ...rest];
  };

  it("lets the waiters of a stream that shows it cannot be stored go at once, each to the upstream", async () => {
    calls.length = 0;
    const content = `logprobs ${++n}`;
    const started = Date.now();
    const all = await burst(content, true, 100);
    assert.deepEqual(all.map((r) => [r.status, r.headers["x-svc-cache"]]), [[200, "MISS"], [200, "MISS"], [200, "MISS"]]);
    assert.equal(calls.length, 3);
    // The waiters called the upstream once the leader's first chunk came, not after its 600 ms end.
    for (const at of calls.slice(1)) assert.ok(at - started < 500, `a waiter called the upstream ${at - started} ms in`);
  });

  it("lets the waiters of a request that failed go at once, each to the upstream, not one after another", async () => {
    calls.length = 0;
    const content = `fails ${++n}`;
    const started = Date.now();
    const first = ask(content, false);
    await new Promise((r) => setTimeout(r, 100));
    const rest = await Promise.all([ask(content, false), ask(content, true), ask(content, false)]);
    const all = [await first, ...rest];
    assert.deepEqual(all.map((r) => r.status), [502, 502, 502, 502], all.map((r) => r.text).join("\n"));
    assert.equal(calls.length, 4);
    // Each waiter called the upstream when the first failed (300 ms in), not behind another waiter's call (600, 900 ms).
    for (const at of calls.slice(1)) assert.ok(at - started < 550, `a waiter called the upstream ${calls.map((c) => c - started).join(", ")} ms in`);
  });

  it("does not serve the waiters an answer without a finish reason as a hit", async () => {
    calls.length = 0;
    const content = `unfinished ${++n}`;
    const all = await burst(content, false, 50);
    assert.deepEqual(all.map((r) => [r.status, r.headers["x-svc-cache"]]), [[200, "MISS"], [200, "MISS"], [200, "MISS"]]);
    assert.equal(calls.length, 3);
    assert.ok(all.every((r) => r.headers["x-svc-cost"] !== "0"), "each was charged as the miss it was");
  });
});

describe("single flight: identical requests behind an answer over the cache's entry limit", () => {
  const on = gatewayOnScriptedUpstream(answer, { SVC_CACHE_MAX_ENTRY_BYTES: "2048" });
  it("does not serve the waiters an answer the cache does not store for its size (3,000 bytes of text, 1,500 characters): each calls the upstream", async () => {
    calls.length = 0;
    const ask = (stream: boolean) => postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, { model: "chat-4o", stream, messages: [{ role: "user", content: "big one" }] });
    const first = ask(false);
    await new Promise((r) => setTimeout(r, 100));
    const all = [await first, ...(await Promise.all([ask(false), ask(false)]))];
    assert.deepEqual(all.map((r) => [r.status, r.headers["x-svc-cache"]]), [[200, "MISS"], [200, "MISS"], [200, "MISS"]]);
    assert.equal(calls.length, 3);
    // Not stored either: the next one is a miss too.
    assert.equal((await ask(false)).headers["x-svc-cache"], "MISS");
  });
});
