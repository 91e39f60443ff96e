import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, sseEvents } from "../../support/http.js";

const model = "assistant-3-5-sonnet-20241022";
const userMsg = (content: string) => [{ role: "user" as const, content }];

describe("POST /v1/messages (official @anthropic-ai/sdk, real HTTP to the demo upstream)", () => {
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  let client: Anthropic;
  let url: string;

  before(async () => {
    gw = await startTestGateway();
    keys = await gw.project();
    url = `${gw.gatewayUrl}/v1/messages`;
    client = new Anthropic({ apiKey: "unused", baseURL: gw.gatewayUrl, defaultHeaders: { "X-Svc-Api-Key": keys.live, "provider-version": "2023-06-01" }, maxRetries: 0 });
  });
  after(() => gw.close());

  it("answers a non-stream request in the message shape", async () => {
    const res = await client.messages.create({ model, max_tokens: 100, messages: userMsg("hello there") });
    assert.equal(res.type, "message");
    assert.equal(res.role, "assistant");
    assert.equal(res.model, model);
    assert.deepEqual(res.content, [{ type: "text", text: "Echo: hello there" }]);
    assert.equal(res.stop_reason, "end_turn");
    assert.ok(res.usage.input_tokens > 0 && res.usage.output_tokens > 0);
  });

  it("sends the request id, cache status and the cost priced from the upstream's usage", async () => {
    const { data, response } = await client.messages.create({ model, max_tokens: 100, messages: userMsg("price me") }).withResponse();
    assert.match(response.headers.get("x-svc-request-id")!, /^req_/);
    assert.equal(response.headers.get("x-svc-cache"), "MISS");
    const cost = response.headers.get("x-svc-cost")!;
    assert.match(cost, /^\d+(\.\d+)?$/);
    const expected = (data.usage.input_tokens * 3 + data.usage.output_tokens * 15) / 1e6;
    assert.ok(Math.abs(Number(cost) - expected) < 1e-12, `${cost} vs ${expected}`);
  });

  it("reports max_tokens when the answer is cut", async () => {
    const res = await client.messages.create({ model, max_tokens: 2, messages: userMsg("one two three four five") });
    assert.equal(res.stop_reason, "max_tokens");
    assert.ok(res.usage.output_tokens <= 2, `output_tokens ${res.usage.output_tokens} within max_tokens`);
  });

  it("streams events the SDK assembles into the same message", async () => {
    const stream = client.messages.stream({ model, max_tokens: 100, messages: userMsg("stream this please") });
    const seen: string[] = [];
    stream.on("streamEvent", (e) => seen.push(e.type));
    const final = await stream.finalMessage();
    assert.deepEqual(final.content, [{ type: "text", text: "Echo: stream this please" }]);
    assert.equal(final.stop_reason, "end_turn");
    assert.equal(seen[0], "message_start");
    assert.equal(seen.at(-1), "message_stop");
    for (const t of ["content_block_start", "content_block_delta", "content_block_stop", "message_delta"]) assert.ok(seen.includes(t), t);
  });

  it("writes each event as an event: line and a data: line, with the cost as a trailer", async () => {
    const res = await postJson(url, keys.live, { model, max_tokens: 50, messages: userMsg("raw stream"), stream: true });
    assert.match(String(res.headers["content-type"]), /^text\/event-stream/);
    const events = sseEvents(res.text);
    for (const e of events) assert.equal(JSON.parse(e.data).type, e.event);
    const names = events.map((e) => e.event).filter((n) => n !== "ping");
    assert.equal(names[0], "message_start");
    assert.equal(names[1], "content_block_start");
    assert.deepEqual(names.slice(-3), ["content_block_stop", "message_delta", "message_stop"]);
    const delta = JSON.parse(events.find((e) => e.event === "content_block_delta")!.data);
    assert.equal(delta.delta.type, "text_delta");
    assert.equal(typeof delta.delta.text, "string");
    assert.equal(res.headers.trailer, "X-Svc-Cost");
    assert.ok(Number(res.trailers["x-svc-cost"]) > 0);
  });

  it("passes fields the spec does not list to the upstream unchanged", async () => {
    const extra = { top_k: 5, top_p: 0.9, stop_sequences: ["END"], metadata: { user_id: "u-1" } };
    await client.messages.create({ model, max_tokens: 77, system: "be brief", temperature: 0.2, messages: userMsg("passthrough"), ...extra } as Anthropic.MessageCreateParamsNonStreaming);
    const sent = gw.demo!.requests.at(-1)!;
    assert.equal(sent.path, "/v1/messages");
    assert.equal(sent.body.model, "claude-3-5-sonnet-20241022");
    assert.equal(sent.body.max_tokens, 77);
    assert.equal(sent.body.system, "be brief");
    assert.equal(sent.body.temperature, 0.2);
    for (const [k, v] of Object.entries(extra)) assert.deepEqual(sent.body[k], v, k);
    assert.equal(sent.headers["x-api-key"], "demo");
    assert.equal(sent.headers["x-svc-api-key"], undefined);
  });

  it("passes the SDK's betas (anthropic-beta) to the upstream, and caches answers apart by their betas", async () => {
    const params = { model, max_tokens: 50, messages: userMsg(`betas ${Date.now()}`), betas: ["token-efficient-tools-2025-02-19", "prompt-caching-2024-07-31"] };
    const first = await client.beta.messages.create(params).withResponse();
    assert.equal(gw.demo!.requests.at(-1)!.headers["anthropic-beta"], "prompt-caching-2024-07-31,token-efficient-tools-2025-02-19");
    assert.equal(first.response.headers.get("x-svc-cache"), "MISS");
    // The same betas in another order are the same request; other betas, or none, are not.
    const again = await client.beta.messages.create({ ...params, betas: [...params.betas].reverse() }).withResponse();
    assert.equal(again.response.headers.get("x-svc-cache"), "HIT");
    const other = await client.beta.messages.create({ ...params, betas: ["prompt-caching-2024-07-31"] }).withResponse();
    assert.equal(other.response.headers.get("x-svc-cache"), "MISS");
    assert.equal(gw.demo!.requests.at(-1)!.headers["anthropic-beta"], "prompt-caching-2024-07-31");
    const none = await client.messages.create({ model, max_tokens: 50, messages: params.messages }).withResponse();
    assert.equal(none.response.headers.get("x-svc-cache"), "MISS");
    assert.equal(gw.demo!.requests.at(-1)!.headers["anthropic-beta"], undefined);
    // Repeated hits (served from prepared bodies) still tell the betas apart.
    const hit = await client.beta.messages.create(params).withResponse();
    assert.equal(hit.response.headers.get("x-svc-cache"), "HIT");
    const bad = await postJson(url, keys.live, { model, max_tokens: 10, messages: userMsg("x") }, { "anthropic-beta": "ok-name, not a name" });
    assert.equal(bad.status, 400);
    assert.equal(bad.json().error.code, "invalid_beta");
  });

  it("round-trips tool definitions, tool_use and tool_result", async () => {
    const tools = [{ name: "lookup", description: "Look up", input_schema: { type: "object" as const, properties: { query: { type: "string" } } } }];
    const first = await client.messages.create({ model, max_tokens: 100, tools, messages: userMsg("find [[fake:tool]]") });
    assert.equal(first.stop_reason, "tool_use");
    const use = first.content.find((b) => b.type === "tool_use")!;
    assert.ok(use.type === "tool_use");
    assert.equal(use.name, "lookup");
    assert.deepEqual(use.input, { query: "Echo: find" });
    assert.deepEqual(gw.demo!.requests.at(-1)!.body.tools, tools);
    await client.messages.create({
      model,
      max_tokens: 100,
      tools,
      messages: [
        { role: "user", content: "find" },
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "42" }] },
      ],
    });
    const sent = gw.demo!.requests.at(-1)!.body.messages as Array<{ role: string; content: unknown }>;
    assert.deepEqual(sent[1]!.content, first.content);
    assert.deepEqual(sent[2]!.content, [{ type: "tool_result", tool_use_id: use.id, content: "42" }]);
  });

  it("streams a tool call the SDK assembles", async () => {
    const tools = [{ name: "lookup", input_schema: { type: "object" as const } }];
    const final = await client.messages.stream({ model, max_tokens: 100, tools, messages: userMsg("q [[fake:tool]]") }).finalMessage();
    const use = final.content.find((b) => b.type === "tool_use");
    assert.ok(use && use.type === "tool_use");
    assert.deepEqual(use.input, { query: "Echo: q" });
  });

  it("accepts the key as the SDK's own apiKey (x-api-key) and test keys", async () => {
    const direct = new Anthropic({ apiKey: keys.test, baseURL: gw.gatewayUrl, maxRetries: 0 });
    const res = await direct.messages.create({ model: "assistant-3-haiku-20240307", max_tokens: 10, messages: userMsg("hi") });
    assert.equal(res.model, "assistant-3-haiku-20240307");
  });
});
