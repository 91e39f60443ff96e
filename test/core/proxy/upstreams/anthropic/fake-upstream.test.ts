import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  ApiStyle,
  BlockType,
  FinishReason,
  StreamChatRequestSchema,
  type StreamChatRequest,
  type StreamChatResponse,
} from "../../../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { toErrorInfo } from "../../../../../src/core/errors.js";
import { isObject } from "../../../../../src/core/json.js";
import { SseParser } from "../../../../../src/core/sse.js";
import type { UpstreamTarget } from "../../../../../src/core/proxy/upstreams/adapter.js";
import { createAnthropicAdapter } from "../../../../../src/core/proxy/upstreams/anthropic/adapter.js";
import { serveAnthropicFake } from "../../../../../src/demo/anthropic-fake.js";

/**
 * The adapter against the demo provider over real HTTP: what the adapter sends, the fake accepts,
 * and what the fake answers, the adapter reads (the fake stands in for api.anthropic.com elsewhere).
 */
const adapter = createAnthropicAdapter();
let server: http.Server;
let target: UpstreamTarget;
let handled: Promise<void>[] = [];

type Init = Exclude<MessageInitShape<typeof StreamChatRequestSchema>, StreamChatRequest>;

const request = (text: string, init: Init = {}): StreamChatRequest =>
  create(StreamChatRequestSchema, {
    model: "assistant-3-5-haiku-20241022",
    style: ApiStyle.MESSAGES,
    maxTokens: 100,
    messages: [{ role: "user", contentIsString: true, blocks: [{ type: BlockType.TEXT, text, style: ApiStyle.MESSAGES }] }],
    ...init,
  });

function send(req: StreamChatRequest, signal?: AbortSignal): Promise<Response> {
  const r = adapter.buildRequest(req, target);
  return fetch(r.url, { method: "POST", headers: r.headers, body: r.body, signal });
}

/** Reads a streamed answer into canonical events; stops early after `limit` events. */
async function events(res: Response, req: StreamChatRequest, limit = Infinity): Promise<{ events: StreamChatResponse[]; complete: boolean }> {
  const parser = new SseParser();
  const conv = adapter.createStreamConverter(req);
  const out: StreamChatResponse[] = [];
  const decoder = new TextDecoder();
  for await (const chunk of res.body!) {
    for (const sse of parser.push(decoder.decode(chunk, { stream: true }))) out.push(...conv.push(sse));
    if (out.length >= limit) break;
  }
  return { events: out, complete: conv.complete };
}

const text = (evs: StreamChatResponse[]) => evs.map((e) => (e.event.case === "blockDelta" ? e.event.value.text : "")).join("");

describe("anthropic adapter against the demo provider", () => {
  before(async () => {
    server = http.createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as unknown;
      if (!isObject(body)) throw new Error("test sent a non-object");
      handled.push(serveAnthropicFake(req, res, body));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const { port } = server.address() as AddressInfo;
    target = { provider: "demo", style: ApiStyle.MESSAGES, baseUrl: `http://127.0.0.1:${port}`, apiKey: "", upstreamModel: "claude-3-5-haiku-20241022" };
  });

  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  beforeEach(() => {
    handled = [];
  });

  it("reads a non-stream answer", async () => {
    const req = request("hello there");
    const res = await send(req);
    const c = adapter.parseCompletion(await res.json(), req);
    assert.deepEqual(
      [c.model, c.blocks[0]?.text, c.finishReason, c.usage!.outputTokens > 0, c.usage!.inputTokens > 0],
      ["assistant-3-5-haiku-20241022", "Echo: hello there", FinishReason.END_TURN, true, true],
    );
  });

  it("reads a streamed answer word by word, complete at message_stop", async () => {
    const req = request("one two three", { stream: true });
    const r = await events(await send(req), req);
    assert.equal(text(r.events), "Echo: one two three");
    assert.equal(r.events.filter((e) => e.event.case === "blockDelta").length, 4);
    assert.equal(r.complete, true);
  });

  it("reports max_tokens when the reply is cut", async () => {
    const req = request("one two three four", { maxTokens: 2 });
    const c = adapter.parseCompletion(await (await send(req)).json(), req);
    assert.deepEqual([c.blocks[0]?.text, c.finishReason], ["Echo:", FinishReason.MAX_TOKENS]);
    assert.ok(c.usage!.outputTokens <= 2, `output tokens ${c.usage!.outputTokens} within max_tokens`);
  });

  it("streams a scripted tool call as input_json_delta fragments", async () => {
    const req = request("weather [[fake:tool]]", { stream: true, tools: [{ name: "lookup", inputSchemaJson: '{"type":"object"}' }] });
    const r = await events(await send(req), req);
    const start = r.events.find((e) => e.event.case === "blockStart")!.event.value as { block: { type: BlockType; toolName: string } };
    const fragments = r.events.flatMap((e) => (e.event.case === "blockDelta" && e.event.value.partialJson ? [e.event.value.partialJson] : []));
    const end = r.events.at(-1)!.event;
    assert.deepEqual([start.block.type, start.block.toolName], [BlockType.TOOL_USE, "lookup"]);
    assert.ok(fragments.length >= 2);
    assert.deepEqual(JSON.parse(fragments.join("")), { query: "Echo: weather" });
    assert.equal(end.case === "messageEnd" && end.value.finishReason, FinishReason.TOOL_USE);
  });

  for (const [status, info] of [
    [400, { status: 400, type: "invalid_request_error", code: "upstream_invalid_request_error" }],
    [429, { status: 429, type: "rate_limit_error", code: "upstream_rate_limited" }],
    [529, { status: 502, type: "api_error", code: "upstream_overloaded" }],
    [500, { status: 502, type: "api_error", code: "upstream_error" }],
  ] as const) {
    it(`turns a scripted ${status} into ${info.status} ${info.code}`, async () => {
      const res = await send(request(`[[fake:status=${status}]] hi`));
      const got = toErrorInfo(adapter.convertError(res.status, await res.text()));
      assert.deepEqual({ status: got.status, type: got.type, code: got.code }, info);
    });
  }

  it("leaves a dropped stream incomplete", async () => {
    const req = request("a b c [[fake:drop]]", { stream: true });
    const r = await events(await send(req), req).catch(() => ({ events: [], complete: false }));
    assert.equal(r.complete, false);
  });

  it("keeps a stalled stream open after its first events until the client leaves", async () => {
    const req = request("a b c [[fake:stall]]", { stream: true });
    const ac = new AbortController();
    const r = await events(await send(req, ac.signal), req, 3);
    assert.deepEqual(r.events.map((e) => e.event.case), ["messageStart", "blockStart", "blockDelta"]);
    ac.abort();
    await Promise.all(handled); // the fake's handler returns once the client has gone
  });

  it("accepts a request translated from the chat-completions style", async () => {
    const req = request("hi", {
      style: ApiStyle.CHAT_COMPLETIONS,
      maxTokens: undefined,
      messages: [
        { role: "system", blocks: [{ type: BlockType.TEXT, text: "Be brief." }] },
        { role: "user", blocks: [{ type: BlockType.TEXT, text: "ping" }] },
      ],
    });
    const res = await send(req);
    assert.equal(res.status, 200);
    assert.equal(adapter.parseCompletion(await res.json(), req).blocks[0]?.text, "Echo: ping");
  });
});
