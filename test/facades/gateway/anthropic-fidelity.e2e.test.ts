import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import Anthropic from "@anthropic-ai/sdk";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, sseEvents } from "../../support/http.js";

/**
 * A messages-style answer with blocks beyond text and tool use (thinking with its signature,
 * redacted thinking, a server tool's call and result, text with citations), answered whole by a
 * scripted upstream in the documented shape (https://docs.anthropic.com/en/api/messages), cached,
 * then served to a stream request: it streams as the API streams such blocks
 * (https://docs.anthropic.com/en/api/messages-streaming), so the official SDK's stream events fire.
 */
const citation = { type: "char_location", cited_text: "The sky is blue.", document_index: 0, document_title: "Sky", start_char_index: 0, end_char_index: 16 };
const content = [
  { type: "thinking", thinking: "The user asks about the sky.", signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrk" },
  { type: "redacted_thinking", data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5" },
  { type: "server_tool_use", id: "srvtoolu_01", name: "web_search", input: { query: "sky colour" } },
  { type: "web_search_tool_result", tool_use_id: "srvtoolu_01", content: [{ type: "web_search_result", title: "Sky", url: "https://example.test/sky", encrypted_content: "ENC", page_age: null }] },
  { type: "text", text: "It is blue.", citations: [citation] },
  { type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } },
];

function answer(res: http.ServerResponse): void {
  const usage = { input_tokens: 25, output_tokens: 40 };
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ id: "msg_fid1", type: "message", role: "assistant", model: "claude-3-5-sonnet-20241022", content, stop_reason: "tool_use", stop_sequence: null, usage }));
}

describe("POST /v1/messages: a cached answer with thinking, citations and server tools served as a stream (official anthropic SDK)", () => {
  let upstream: http.Server;
  let gw: TestGateway;
  let client: Anthropic;
  let key: string;

  before(async () => {
    upstream = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => answer(res));
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    const { port } = upstream.address() as AddressInfo;
    gw = await startTestGateway({ SVC_ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}`, SVC_ANTHROPIC_API_KEY: "sk-ant-test" }, false);
    key = (await gw.project()).live;
    client = new Anthropic({ apiKey: key, baseURL: gw.gatewayUrl, maxRetries: 0 });
  });
  after(async () => {
    await gw.close();
    upstream.close();
  });

  const body = { model: "assistant-3-5-sonnet-20241022", max_tokens: 2048, thinking: { type: "enabled" as const, budget_tokens: 1024 }, messages: [{ role: "user" as const, content: "What colour is the sky?" }] };

  it("streams each block as the API does: opened empty, its content in deltas; redacted thinking and tool results whole", async () => {
    const first = await client.messages.create(body).withResponse();
    assert.equal(first.response.headers.get("x-svc-cache"), "MISS");
    assert.deepEqual(first.data.content, content);

    const raw = await postJson(`${gw.gatewayUrl}/v1/messages`, key, { ...body, stream: true });
    assert.equal(raw.headers["x-svc-cache"], "HIT");
    const blockEvents = sseEvents(raw.text)
      .map((e) => JSON.parse(e.data) as { type: string; index?: number; content_block?: unknown; delta?: unknown })
      .filter((e) => e.type.startsWith("content_block_"))
      .map((e) => [e.type, e.index, e.content_block ?? e.delta ?? null]);
    assert.deepEqual(blockEvents, [
      ["content_block_start", 0, { type: "thinking", thinking: "", signature: "" }],
      ["content_block_delta", 0, { type: "thinking_delta", thinking: "The user asks about the sky." }],
      ["content_block_delta", 0, { type: "signature_delta", signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrk" }],
      ["content_block_stop", 0, null],
      ["content_block_start", 1, content[1]],
      ["content_block_stop", 1, null],
      ["content_block_start", 2, { type: "server_tool_use", id: "srvtoolu_01", name: "web_search", input: {} }],
      ["content_block_delta", 2, { type: "input_json_delta", partial_json: '{"query":"sky colour"}' }],
      ["content_block_stop", 2, null],
      ["content_block_start", 3, content[3]],
      ["content_block_stop", 3, null],
      ["content_block_start", 4, { type: "text", text: "", citations: [] }],
      ["content_block_delta", 4, { type: "citations_delta", citation }],
      ["content_block_delta", 4, { type: "text_delta", text: "It is blue." }],
      ["content_block_stop", 4, null],
      ["content_block_start", 5, { type: "tool_use", id: "toolu_01", name: "get_weather", input: {} }],
      ["content_block_delta", 5, { type: "input_json_delta", partial_json: '{"city":"Paris"}' }],
      ["content_block_stop", 5, null],
    ]);
  });

  it("fires the SDK's thinking, signature, citation and inputJson events, and assembles the same message", async () => {
    const stream = client.messages.stream(body);
    const seen: unknown[][] = [];
    stream.on("thinking", (delta, snapshot) => seen.push(["thinking", delta, snapshot]));
    stream.on("signature", (signature) => seen.push(["signature", signature]));
    stream.on("citation", (c, all) => seen.push(["citation", c, all.length]));
    stream.on("text", (delta, snapshot) => seen.push(["text", delta, snapshot]));
    stream.on("inputJson", (partial, snapshot) => seen.push(["inputJson", partial, snapshot]));
    const { response } = await stream.withResponse();
    assert.equal(response.headers.get("x-svc-cache"), "HIT");
    const message = await stream.finalMessage();
    assert.deepEqual(seen, [
      ["thinking", "The user asks about the sky.", "The user asks about the sky."],
      ["signature", "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrk"],
      ["inputJson", '{"query":"sky colour"}', { query: "sky colour" }],
      ["citation", citation, 1],
      ["text", "It is blue.", "It is blue."],
      ["inputJson", '{"city":"Paris"}', { city: "Paris" }],
    ]);
    assert.deepEqual(JSON.parse(JSON.stringify(message.content)), content);
    assert.equal(message.stop_reason, "tool_use");
  });
});
