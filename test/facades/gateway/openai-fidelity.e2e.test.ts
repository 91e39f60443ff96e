import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import OpenAI from "openai";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, sseEvents } from "../../support/http.js";

/**
 * What an OpenAI-style upstream answers beyond text and tool calls reaches a chat-completions client
 * as the upstream wrote it: the choice's logprobs, and a refusal as `refusal` (content null), both
 * whole and streamed. The upstream is a scripted node:http server speaking the documented shapes
 * (https://platform.openai.com/docs/api-reference/chat/object, .../chat-streaming).
 */
const logprob = (token: string) => ({ token, logprob: -0.25, bytes: [...Buffer.from(token)], top_logprobs: [] });
const head = { id: "chatcmpl-fid1", object: "chat.completion.chunk", created: 1750431502, model: "gpt-4o-2024-11-20", system_fingerprint: "fp_1" };
const chunk = (delta: object, finish: string | null = null, logprobs: object | null = null) =>
  `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, logprobs, finish_reason: finish }] })}\n\n`;

/** Fields OpenAI-style upstreams add that the canonical model does not name, at each level of an answer. */
const citation = { type: "url_citation", url_citation: { url: "https://example.test/a", title: "A", start_index: 0, end_index: 2 } };
const filtered = { hate: { filtered: false, severity: "safe" }, violence: { filtered: false, severity: "safe" } };
const extras = {
  top: { service_tier: "default", prompt_filter_results: [{ prompt_index: 0, content_filter_results: filtered }] },
  message: { annotations: [citation], reasoning_content: "Greet back.", audio: { id: "audio_1", data: "UklGRg==", transcript: "Hi there", expires_at: 1750435100 } },
  choice: { content_filter_results: filtered },
};

const extrasHead = { id: "chatcmpl-fidxs", object: "chat.completion.chunk", created: 1750431503, model: "gpt-4o-2024-11-20", system_fingerprint: "fp_1", ...extras.top };
const extrasChoice = (delta: object, more: object = {}, finish: string | null = null) => ({ index: 0, delta, logprobs: null, finish_reason: finish, ...more });
const extrasChunks = [
  extrasChoice({ role: "assistant", content: "", refusal: null }, { content_filter_results: {} }),
  extrasChoice({ reasoning_content: "Greet " }),
  extrasChoice({ reasoning_content: "back." }),
  extrasChoice({ content: "Hi", annotations: [citation] }, extras.choice),
  extrasChoice({ content: " there" }, extras.choice),
  extrasChoice({}, { content_filter_results: { violence: { filtered: false, severity: "low" } } }, "stop"),
].map((choice) => ({ ...extrasHead, choices: [choice], usage: null }));

function answer(body: { stream?: boolean; logprobs?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse): void {
  const refusal = body.messages.at(-1)!.content.includes("refuse");
  const usage = { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 };
  if (!body.stream && body.messages.at(-1)!.content.includes("extras")) {
    const message = { role: "assistant", content: "Hi there", refusal: null, ...extras.message };
    const logprobs = { content: [logprob("Hi"), logprob(" there")], refusal: null };
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "chatcmpl-fidx", object: "chat.completion", created: 1750431500, model: "gpt-4o-2024-11-20", system_fingerprint: "fp_1", ...extras.top, choices: [{ index: 0, message, logprobs, finish_reason: "stop", ...extras.choice }], usage }));
    return;
  }
  if (body.stream && body.messages.at(-1)!.content.includes("extras")) {
    // Chunks that carry fields of their own at the choice and the delta level, as OpenAI-compatible
    // upstreams send them: Azure's content_filter_results (empty on the role chunk), reasoning before
    // any text (DeepSeek's reasoning_content), annotations with the text they cite.
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (const c of extrasChunks) res.write(`data: ${JSON.stringify(c)}\n\n`);
    res.end(`data: ${JSON.stringify({ ...extrasHead, choices: [], usage })}\n\ndata: [DONE]\n\n`);
    return;
  }
  if (!body.stream) {
    const message = refusal ? { role: "assistant", content: null, refusal: "I can't help with that.", annotations: [] } : { role: "assistant", content: "Hi there", refusal: null, annotations: [] };
    const logprobs = refusal ? { content: null, refusal: [logprob("I")] } : { content: [logprob("Hi"), logprob(" there")], refusal: null };
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "chatcmpl-fid0", object: "chat.completion", created: 1750431500, model: "gpt-4o-2024-11-20", choices: [{ index: 0, message, logprobs, finish_reason: "stop" }], usage }));
    return;
  }
  // Per-chunk logprobs only when asked for, as OpenAI does.
  const lp = (l: object) => (body.logprobs ? l : null);
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.write(chunk({ role: "assistant", content: "", refusal: null }));
  if (refusal) {
    res.write(chunk({ refusal: "I can't" }, null, lp({ content: null, refusal: [logprob("I can't")] })));
    res.write(chunk({ refusal: " help." }, null, lp({ content: null, refusal: [logprob(" help.")] })));
  } else {
    res.write(chunk({ content: "Hi" }, null, lp({ content: [logprob("Hi")], refusal: null })));
    res.write(chunk({ content: " there" }, null, lp({ content: [logprob(" there")], refusal: null })));
  }
  res.write(chunk({}, "stop"));
  res.end(`data: ${JSON.stringify({ ...head, choices: [], usage })}\n\ndata: [DONE]\n\n`);
}

describe("POST /v1/chat/completions: logprobs and refusals from an OpenAI-style upstream (official openai SDK)", () => {
  let upstream: http.Server;
  let gw: TestGateway;
  let client: OpenAI;
  let key: string;
  let upstreamUrl: string;
  let n = 0;

  before(async () => {
    upstream = http.createServer((req, res) => {
      let text = "";
      req.on("data", (d: Buffer) => (text += d));
      req.on("end", () => answer(JSON.parse(text), res));
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    const { port } = upstream.address() as AddressInfo;
    upstreamUrl = `http://127.0.0.1:${port}/v1/chat/completions`;
    gw = await startTestGateway({ SVC_OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`, SVC_OPENAI_API_KEY: "sk-test" }, false);
    key = (await gw.project()).live;
    client = new OpenAI({ apiKey: key, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
  });
  after(async () => {
    await gw.close();
    upstream.close();
  });

  const ask = (text: string) => ({ model: "chat-4o", logprobs: true, messages: [{ role: "user" as const, content: `${text} ${++n}` }] });

  it("passes a whole answer's logprobs, and serves them again from the cache", async () => {
    const body = ask("hello");
    for (const cache of ["MISS", "HIT"]) {
      const { data, response } = await client.chat.completions.create(body).withResponse();
      assert.equal(response.headers.get("x-svc-cache"), cache);
      assert.equal(data.choices[0]!.message.content, "Hi there");
      assert.deepEqual(data.choices[0]!.logprobs?.content?.map((l) => l.token), ["Hi", " there"]);
    }
  });

  it("passes a whole refusal as `refusal` with content null", async () => {
    const res = await client.chat.completions.create(ask("please refuse"));
    const choice = res.choices[0]!;
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.refusal, "I can't help with that.");
    assert.deepEqual(choice.logprobs?.refusal?.map((l) => l.token), ["I"]);
  });

  it("streams each chunk's logprobs with its text; such a stream is not cached", async () => {
    const body = ask("hello");
    for (let i = 0; i < 2; i++) {
      const { data: stream, response } = await client.chat.completions.create({ ...body, stream: true }).withResponse();
      assert.equal(response.headers.get("x-svc-cache"), "MISS", "per-chunk logprobs have no whole form to replay");
      const tokens: string[] = [];
      let text = "";
      for await (const c of stream) {
        text += c.choices[0]?.delta.content ?? "";
        for (const l of c.choices[0]?.logprobs?.content ?? []) tokens.push(l.token);
      }
      assert.equal(text, "Hi there");
      assert.deepEqual(tokens, ["Hi", " there"]);
    }
  });

  it("streams a refusal as delta.refusal, which the SDK's helper reads back as the message's refusal", async () => {
    const stream = client.chat.completions.stream(ask("please refuse"));
    const pieces: string[] = [];
    stream.on("chunk", (c) => {
      const r = c.choices[0]?.delta.refusal;
      if (r) pieces.push(r);
      assert.equal(c.choices[0]?.delta.content ?? "", "", "no refusal text as content");
    });
    const final = await stream.finalChatCompletion();
    assert.deepEqual(pieces, ["I can't", " help."]);
    assert.equal(final.choices[0]!.message.refusal, "I can't help.");
  });

  it("streams OpenAI's first chunk and, with include_usage, usage null on every chunk before the usage chunk; a cache hit replays the same", async () => {
    const body = { model: "chat-4o", stream: true as const, stream_options: { include_usage: true }, messages: [{ role: "user" as const, content: `fidelity ${++n}` }] };
    for (const cache of ["MISS", "HIT"]) {
      const { data: stream, response } = await client.chat.completions.create(body).withResponse();
      assert.equal(response.headers.get("x-svc-cache"), cache);
      const chunks: OpenAI.ChatCompletionChunk[] = [];
      for await (const c of stream) chunks.push(c);
      assert.deepEqual(chunks[0]!.choices[0]!.delta, { role: "assistant", content: "", refusal: null }, cache);
      const last = chunks.at(-1)!;
      assert.deepEqual([last.choices, last.usage?.total_tokens], [[], 11], cache);
      assert.ok(chunks.length >= 3, cache);
      for (const c of chunks.slice(0, -1)) assert.ok("usage" in c && c.usage === null, `${cache}: ${JSON.stringify(c)}`);
      assert.equal(chunks.map((c) => c.choices[0]?.delta.content ?? "").join(""), "Hi there");
    }
    // Without include_usage, no chunk names usage (OpenAI leaves it out).
    const raw = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { ...body, stream_options: undefined });
    assert.equal(raw.headers["x-svc-cache"], "HIT");
    const datas = sseEvents(raw.text).map((e) => e.data).filter((d) => d !== "[DONE]");
    assert.deepEqual(JSON.parse(datas[0]!).choices[0].delta, { role: "assistant", content: "", refusal: null });
    for (const d of datas) assert.ok(!("usage" in JSON.parse(d)), d);
  });

  it("replays a cached whole answer as a stream that the SDK assembles into the same answer: logprobs, the message's and the choice's own fields", async () => {
    const body = ask("extras");
    const { data: original, response } = await client.chat.completions.create(body).withResponse();
    assert.equal(response.headers.get("x-svc-cache"), "MISS");
    assert.deepEqual(original.choices[0]!.message, { role: "assistant", content: "Hi there", refusal: null, ...extras.message });
    const raw = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { ...body, stream: true });
    assert.equal(raw.headers["x-svc-cache"], "HIT");
    // The fields go out once, with the text: the chunk a live stream's text would come in.
    const choices = sseEvents(raw.text).filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data).choices[0]);
    assert.deepEqual(choices[1], { index: 0, delta: { content: "Hi there", ...extras.message }, logprobs: original.choices[0]!.logprobs, finish_reason: null, ...extras.choice });
    const final = await client.chat.completions.stream({ ...body, stream_options: { include_usage: true } }).finalChatCompletion();
    // The helper adds `parsed` (null without a response_format) to the message; nothing else differs.
    assert.equal(final.choices[0]!.message.parsed, null);
    delete (final.choices[0]!.message as { parsed?: unknown }).parsed;
    const plain = (c: object) => JSON.parse(JSON.stringify(c)) as object;
    assert.deepEqual(plain(final), plain(original));
  });

  it("streams the fields an upstream's chunks carry at the choice and the delta level on the chunks they came on; such a stream is not cached", async () => {
    const body = { model: "chat-4o", stream_options: { include_usage: true }, messages: [{ role: "user" as const, content: `extras ${++n}` }] };
    const datas = (text: string) => sseEvents(text).map((e) => (e.data === "[DONE]" ? e.data : (JSON.parse(e.data) as Record<string, unknown>)));
    const direct = datas((await postJson(upstreamUrl, "sk-test", { ...body, stream: true, model: "gpt-4o" })).text);
    for (let i = 0; i < 2; i++) {
      const res = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { ...body, stream: true });
      assert.equal(res.headers["x-svc-cache"], "MISS", "per-chunk fields have no whole form to replay: not cached");
      // The same chunks, but for the model's name: the gateway answers with the public one.
      assert.deepEqual(datas(res.text), direct.map((c) => (typeof c === "string" ? c : { ...c, model: "chat-4o" })));
    }
    // The SDK's stream helper assembles the same answer from the gateway as from the upstream itself.
    const upstreamClient = new OpenAI({ apiKey: "sk-test", baseURL: upstreamUrl.replace(/\/chat\/completions$/, ""), maxRetries: 0 });
    const fromUpstream = await upstreamClient.chat.completions.stream({ ...body, model: "gpt-4o" }).finalChatCompletion();
    const fromGateway = await client.chat.completions.stream(body).finalChatCompletion();
    assert.deepEqual(JSON.parse(JSON.stringify(fromGateway)), { ...JSON.parse(JSON.stringify(fromUpstream)), model: "chat-4o" });
  });

  it("replays a cached refusal as a stream with its refusal", async () => {
    const body = ask("please refuse");
    assert.equal((await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, body)).headers["x-svc-cache"], "MISS");
    const stream = client.chat.completions.stream(body);
    const final = await stream.finalChatCompletion();
    assert.equal(final.choices[0]!.message.refusal, "I can't help with that.");
    assert.equal(final.choices[0]!.message.content ?? "", "");
  });
});
