import assert from "node:assert/strict";
import OpenAI from "openai";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson, sseEvents } from "../../support/http.js";

const userMsg = (content: string) => [{ role: "user" as const, content }];

describe("POST /v1/chat/completions (official openai SDK, real HTTP to the demo upstream)", () => {
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  let client: OpenAI;
  let url: string;

  before(async () => {
    gw = await startTestGateway();
    keys = await gw.project();
    url = `${gw.gatewayUrl}/v1/chat/completions`;
    client = new OpenAI({ apiKey: "unused", baseURL: `${gw.gatewayUrl}/v1`, defaultHeaders: { "X-Svc-Api-Key": keys.live }, maxRetries: 0 });
  });
  after(() => gw.close());

  it("answers a non-stream request in the chat.completion shape", async () => {
    const res = await client.chat.completions.create({ model: "chat-4o", messages: userMsg("hello there") });
    assert.equal(res.object, "chat.completion");
    assert.match(res.id, /\S/);
    assert.equal(typeof res.created, "number");
    assert.equal(res.model, "chat-4o");
    assert.equal(res.choices.length, 1);
    assert.equal(res.choices[0]!.index, 0);
    assert.equal(res.choices[0]!.message.role, "assistant");
    assert.equal(res.choices[0]!.message.content, "Echo: hello there");
    assert.equal(res.choices[0]!.finish_reason, "stop");
    assert.equal(res.usage!.total_tokens, res.usage!.prompt_tokens + res.usage!.completion_tokens);
    assert.ok(res.usage!.prompt_tokens > 0 && res.usage!.completion_tokens > 0);
  });

  it("sends the request id, cache status and the cost priced from the upstream's usage", async () => {
    const { data, response } = await client.chat.completions.create({ model: "chat-4o", messages: userMsg("price me") }).withResponse();
    assert.match(response.headers.get("x-svc-request-id")!, /^req_[0-9A-Za-z]{24}$/);
    assert.equal(response.headers.get("x-svc-cache"), "MISS");
    const cost = response.headers.get("x-svc-cost")!;
    assert.match(cost, /^\d+(\.\d+)?$/, "a plain decimal, no exponent");
    const expected = (data.usage!.prompt_tokens * 2.5 + data.usage!.completion_tokens * 10) / 1e6;
    assert.ok(Math.abs(Number(cost) - expected) < 1e-12, `${cost} vs ${expected}`);
  });

  it("gives every response a different request id", async () => {
    const a = await postJson(url, keys.live, { model: "chat-4o-mini", messages: userMsg("a") });
    const b = await postJson(url, "bad", { model: "chat-4o-mini", messages: userMsg("a") });
    assert.ok(a.headers["x-svc-request-id"]);
    assert.ok(b.headers["x-svc-request-id"]);
    assert.notEqual(a.headers["x-svc-request-id"], b.headers["x-svc-request-id"]);
  });

  it("streams chunks the SDK parses into the same text as the non-stream answer", async () => {
    const stream = await client.chat.completions.create({ model: "chat-4o", messages: userMsg("stream this please"), stream: true });
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, "chat.completion.chunk");
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, "Echo: stream this please");
    assert.equal(finish, "stop");
  });

  it("ends the stream with data: [DONE] and sends the cost as a declared trailer", async () => {
    const res = await postJson(url, keys.live, { model: "chat-4o", messages: userMsg("trailer test"), stream: true });
    assert.equal(res.status, 200);
    assert.match(String(res.headers["content-type"]), /^text\/event-stream/);
    assert.equal(res.headers.trailer, "X-Svc-Cost");
    assert.match(res.trailers["x-svc-cost"]!, /^\d+(\.\d+)?$/);
    assert.ok(Number(res.trailers["x-svc-cost"]) > 0);
    const events = sseEvents(res.text);
    assert.equal(events.at(-1)!.data, "[DONE]");
    for (const e of events.slice(0, -1)) {
      const chunk = JSON.parse(e.data);
      assert.equal(chunk.object, "chat.completion.chunk");
      assert.equal(typeof chunk.id, "string");
      assert.ok(Array.isArray(chunk.choices));
    }
  });

  it("sends a usage chunk only when the client asks for it", async () => {
    const without = sseEvents((await postJson(url, keys.live, { model: "chat-4o", messages: userMsg("u"), stream: true })).text);
    assert.ok(without.every((e) => e.data === "[DONE]" || !JSON.parse(e.data).usage));
    const withUsage = sseEvents((await postJson(url, keys.live, { model: "chat-4o", messages: userMsg("u"), stream: true, stream_options: { include_usage: true } })).text);
    const usage = withUsage.filter((e) => e.data !== "[DONE]" && JSON.parse(e.data).usage);
    assert.equal(usage.length, 1);
    assert.deepEqual(JSON.parse(usage[0]!.data).choices, []);
  });

  it("passes fields the spec does not list to the upstream unchanged, with the provider's model name", async () => {
    const extra = { top_p: 0.5, stop: ["END"], seed: 7, response_format: { type: "json_object" as const }, user: "u-1", logit_bias: { "50256": -100 } };
    await client.chat.completions.create({ model: "chat-4o", messages: userMsg("passthrough"), temperature: 0.3, max_tokens: 50, ...extra });
    const sent = gw.demo!.requests.at(-1)!;
    assert.equal(sent.path, "/v1/chat/completions");
    assert.equal(sent.body.model, "gpt-4o");
    assert.equal(sent.body.temperature, 0.3);
    assert.equal(sent.body.max_tokens, 50);
    for (const [k, v] of Object.entries(extra)) assert.deepEqual(sent.body[k], v, k);
    assert.equal(sent.headers.authorization, "Bearer demo");
    assert.equal(sent.headers["x-svc-api-key"], undefined, "the service key never goes upstream");
  });

  it("round-trips tool definitions and tool calls", async () => {
    const tools = [{ type: "function" as const, function: { name: "lookup", description: "Look up", parameters: { type: "object", properties: { query: { type: "string" } } } } }];
    const first = await client.chat.completions.create({ model: "chat-4o", messages: userMsg("find it [[fake:tool]]"), tools, tool_choice: "auto" });
    const call = first.choices[0]!.message.tool_calls![0]!;
    assert.equal(first.choices[0]!.finish_reason, "tool_calls");
    assert.equal(call.type, "function");
    assert.equal((call as { function: { name: string } }).function.name, "lookup");
    assert.deepEqual(gw.demo!.requests.at(-1)!.body.tools, tools);
    assert.equal(gw.demo!.requests.at(-1)!.body.tool_choice, "auto");
    const fn = (call as { function: { name: string; arguments: string } }).function;
    await client.chat.completions.create({
      model: "chat-4o",
      tools,
      messages: [
        { role: "user", content: "find it" },
        { role: "assistant", content: null, tool_calls: [{ id: call.id, type: "function", function: fn }] },
        { role: "tool", tool_call_id: call.id, content: "found: 42" },
      ],
    });
    const sent = gw.demo!.requests.at(-1)!.body.messages as Array<Record<string, unknown>>;
    assert.deepEqual(sent[1]!.tool_calls, [{ id: call.id, type: "function", function: fn }]);
    assert.deepEqual(sent[2], { role: "tool", tool_call_id: call.id, content: "found: 42" });
  });

  it("runs the openai SDK's tool loop (runTools) to its text answer: the demo answers tool results in text", async () => {
    let calls = 0;
    const runner = client.chat.completions.runTools({
      model: "chat-4o",
      messages: userMsg(`weather ${Date.now()} [[fake:tool]]`),
      tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { query: { type: "string" } } }, function: () => (calls++, "sunny"), parse: JSON.parse } }] as never,
    });
    const final = await runner.finalChatCompletion();
    assert.equal(calls, 1);
    assert.equal(final.choices[0]!.finish_reason, "stop");
    assert.match(final.choices[0]!.message.content ?? "", /sunny/);
  });

  it("streams tool calls the SDK assembles", async () => {
    const tools = [{ type: "function" as const, function: { name: "lookup", parameters: { type: "object" } } }];
    const stream = client.chat.completions.stream({ model: "chat-4o", messages: userMsg("x [[fake:tool]]"), tools });
    const final = await stream.finalChatCompletion();
    const call = final.choices[0]!.message.tool_calls![0] as { function: { name: string; arguments: string } };
    assert.equal(call.function.name, "lookup");
    assert.deepEqual(JSON.parse(call.function.arguments), { query: "Echo: x" });
  });

  it("passes custom tools through and round-trips their calls, free-text input and all: JSON, stream, and both from the cache", async () => {
    const tools = [
      { type: "custom" as const, custom: { name: "grammar_tool", description: "Free text", format: { type: "text" as const } } },
      { type: "function" as const, function: { name: "lookup", parameters: { type: "object" } } },
    ];
    const prompt = `write it ${Date.now()} [[fake:tool]]`;
    const first = await client.chat.completions.create({ model: "chat-4o", messages: userMsg(prompt), tools });
    assert.deepEqual(gw.demo!.requests.at(-1)!.body.tools, tools, "the tools reach the upstream as sent");
    const call = first.choices[0]!.message.tool_calls![0]!;
    const wanted = { id: call.id, type: "custom", custom: { name: "grammar_tool", input: `Echo: ${prompt.replace(" [[fake:tool]]", "")}` } };
    assert.deepEqual(call, wanted);
    assert.equal(first.choices[0]!.finish_reason, "tool_calls");
    // The same answer from the cache, as JSON and as a stream; and a stream from the upstream.
    const again = await postJson(url, keys.live, { model: "chat-4o", messages: userMsg(prompt), tools });
    assert.equal(again.headers["x-svc-cache"], "HIT");
    assert.deepEqual({ ...again.json().choices[0].message.tool_calls[0], id: call.id }, wanted);
    const streamed = async (content: string) => {
      const res = await postJson(url, keys.live, { model: "chat-4o", messages: userMsg(content), tools, stream: true });
      const deltas = sseEvents(res.text).filter((e) => e.data !== "[DONE]").flatMap((e) => JSON.parse(e.data).choices[0]?.delta.tool_calls ?? []);
      assert.deepEqual({ ...deltas[0], id: "x", custom: { ...deltas[0].custom, input: "" } }, { index: 0, id: "x", type: "custom", custom: { name: "grammar_tool", input: "" } });
      return { cache: res.headers["x-svc-cache"], input: deltas.map((d: { custom: { input: string } }) => d.custom.input).join("") };
    };
    assert.deepEqual(await streamed(prompt), { cache: "HIT", input: wanted.custom.input });
    const fresh = `stream it ${Date.now()} [[fake:tool]]`;
    assert.deepEqual(await streamed(fresh), { cache: "MISS", input: `Echo: ${fresh.replace(" [[fake:tool]]", "")}` });
    assert.deepEqual(await streamed(fresh), { cache: "HIT", input: `Echo: ${fresh.replace(" [[fake:tool]]", "")}` });
    // The call and its result sent back: the upstream gets the custom call as it was.
    await client.chat.completions.create({
      model: "chat-4o",
      tools,
      messages: [
        { role: "user", content: "write it" },
        { role: "assistant", content: null, tool_calls: [wanted as never] },
        { role: "tool", tool_call_id: call.id, content: "done" },
      ],
    });
    const sent = gw.demo!.requests.at(-1)!.body.messages as Array<Record<string, unknown>>;
    assert.deepEqual(sent[1]!.tool_calls, [wanted]);
  });

  it("accepts the key as the SDK's own apiKey (Authorization: Bearer) and test keys", async () => {
    const viaBearer = new OpenAI({ apiKey: keys.test, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
    const res = await viaBearer.chat.completions.create({ model: "chat-3.5-turbo", messages: userMsg("hi") });
    assert.equal(res.model, "chat-3.5-turbo");
  });

  it("rejects a deleted key on its very next request", async () => {
    const p = await gw.project();
    const ok = await postJson(url, p.live, { model: "chat-4o", messages: userMsg("a") });
    assert.equal(ok.status, 200);
    await gw.admin.deleteKey({ keyId: p.liveKeyId });
    const res = await postJson(url, p.live, { model: "chat-4o", messages: userMsg("a") });
    assert.equal(res.status, 401);
    assert.deepEqual(res.json().error.type, "authentication_error");
  });

  it("aborts the upstream call when the client disconnects mid-stream", async () => {
    const ac = new AbortController();
    const stream = await client.chat.completions.create({ model: "chat-4o", messages: userMsg("slow [[fake:stall]]"), stream: true }, { signal: ac.signal });
    await eventually(() => gw.demo!.inFlight() === 1, 3000, "the upstream request to start");
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    ac.abort();
    await eventually(() => gw.demo!.inFlight() === 0, 3000, "the upstream request to be aborted");
  });
});
