import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, rawRequest } from "../../support/http.js";

/**
 * Each surface sends the gateway's request id (X-Svc-Request-Id) under the name its provider's SDK
 * reads (`_request_id`, `request_id`, `requestID` on errors): `x-request-id` on chat completions
 * (openai), `request-id` on messages (anthropic); on answers, cache hits, streams and errors alike,
 * so a user can quote what their SDK shows and the log is found by it.
 */
describe("the request id under each SDK's own header name (official openai and anthropic SDKs)", () => {
  let gw: TestGateway;
  let key: string;
  let openai: OpenAI;
  let anthropic: Anthropic;
  let n = 0;
  const svcId = (h: Headers) => {
    const id = h.get("x-svc-request-id");
    assert.match(id ?? "", /^req_[0-9A-Za-z]{24}$/);
    return id!;
  };

  before(async () => {
    gw = await startTestGateway();
    key = (await gw.project()).live;
    openai = new OpenAI({ apiKey: key, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
    anthropic = new Anthropic({ apiKey: key, baseURL: gw.gatewayUrl, maxRetries: 0 });
  });
  after(() => gw.close());

  describe("chat completions: x-request-id", () => {
    const chat = () => ({ model: "chat-4o-mini", messages: [{ role: "user" as const, content: `request id ${++n}` }] });

    it("on an answer and on its cache hit, as completion._request_id", async () => {
      const body = chat();
      const seen: string[] = [];
      for (const cache of ["MISS", "HIT"]) {
        // One request: the promise's answer and its response.
        const sent = openai.chat.completions.create(body);
        const completion = await sent;
        const { response } = await sent.withResponse();
        assert.equal(response.headers.get("x-svc-cache"), cache);
        assert.equal(completion._request_id, svcId(response.headers), cache);
        assert.equal(response.headers.get("request-id"), null, "only the surface's own name");
        seen.push(completion._request_id!);
      }
      assert.notEqual(seen[0], seen[1]);
    });

    it("on a stream and on a cache hit served as one, as request_id", async () => {
      const body = { ...chat(), stream: true as const };
      for (const cache of ["MISS", "HIT"]) {
        const { data: stream, response, request_id } = await openai.chat.completions.create(body).withResponse();
        for await (const _ of stream); // drain
        assert.equal(response.headers.get("x-svc-cache"), cache);
        assert.equal(request_id, svcId(response.headers), cache);
      }
    });

    it("on errors, as the APIError's requestID: a bad key, a bad body, a wrong method", async () => {
      const bad = new OpenAI({ apiKey: "svc_sk_nonsense", baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
      for (const [client, body] of [[bad, chat()], [openai, { ...chat(), temperature: 9 }]] as const) {
        const err = await client.chat.completions.create(body).then(() => assert.fail("expected an error"), (e: unknown) => e);
        assert.ok(err instanceof OpenAI.APIError, String(err));
        assert.match(String(err.status), /^4/);
        assert.equal(err.requestID, svcId(err.headers!));
      }
      const res = await rawRequest(`${gw.gatewayUrl}/v1/chat/completions`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
      assert.equal(res.status, 405);
      assert.equal(res.headers["x-request-id"], res.headers["x-svc-request-id"]);
      assert.match(String(res.headers["x-request-id"]), /^req_/);
    });
  });

  describe("messages: request-id", () => {
    const model = "assistant-3-5-haiku-20241022";
    const msg = () => ({ model, max_tokens: 50, messages: [{ role: "user" as const, content: `request id ${++n}` }] });

    it("on an answer and on its cache hit, as message._request_id", async () => {
      const body = msg();
      for (const cache of ["MISS", "HIT"]) {
        const sent = anthropic.messages.create(body);
        const message = await sent;
        const { response } = await sent.withResponse();
        assert.equal(response.headers.get("x-svc-cache"), cache);
        assert.equal(message._request_id, svcId(response.headers), cache);
        assert.equal(response.headers.get("x-request-id"), null, "only the surface's own name");
      }
    });

    it("on a stream and on a cache hit served as one, as request_id", async () => {
      const body = msg();
      for (const cache of ["MISS", "HIT"]) {
        const { data: stream, response, request_id } = await anthropic.messages.create({ ...body, stream: true }).withResponse();
        for await (const _ of stream); // drain
        assert.equal(response.headers.get("x-svc-cache"), cache);
        assert.equal(request_id, svcId(response.headers), cache);
      }
      const helper = anthropic.messages.stream(body);
      await helper.finalMessage();
      assert.match(helper.request_id ?? "", /^req_/);
    });

    it("on errors, as the APIError's requestID: a bad key, a bad body, a wrong method", async () => {
      const bad = new Anthropic({ apiKey: "svc_sk_nonsense", baseURL: gw.gatewayUrl, maxRetries: 0 });
      for (const [client, body] of [[bad, msg()], [anthropic, { ...msg(), max_tokens: -1 }]] as const) {
        const err = await client.messages.create(body).then(() => assert.fail("expected an error"), (e: unknown) => e);
        assert.ok(err instanceof Anthropic.APIError, String(err));
        assert.match(String(err.status), /^4/);
        assert.equal(err.requestID, svcId(err.headers!));
      }
      const raw = await postJson(`${gw.gatewayUrl}/v1/messages`, key, { ...msg(), stream: "yes" });
      assert.equal(raw.status, 400);
      assert.equal(raw.headers["request-id"], raw.headers["x-svc-request-id"]);
      const res = await rawRequest(`${gw.gatewayUrl}/v1/messages`, { method: "GET", headers: { "x-api-key": key } });
      assert.equal(res.status, 405);
      assert.equal(res.headers["request-id"], res.headers["x-svc-request-id"]);
      assert.match(String(res.headers["request-id"]), /^req_/);
    });
  });
});
