import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { invalidApiKey, invalidRequest } from "../../../src/core/errors.js";
import { ApiStyle } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { chatCompletionsCodec } from "../../../src/facades/gateway/chat-completions-codec.js";
import { type GatewayDeps, newGatewayState, serveChat, type Surface } from "../../../src/facades/gateway/serve-chat.js";
import { rawRequest } from "../../support/http.js";

/**
 * The body of a request whose key has not been verified lately is not parsed before the key's
 * verdict: a made-up key sending megabytes of JSON costs the gateway no parse, validation or cache
 * key (it did, after its 401 had gone out). A key verified lately has its body worked on while it
 * is verified again. The gateway's own serveChat, over real HTTP, with a key store that knows one key.
 */
describe("gateway: a request's body and its key's verdict", () => {
  let parsed = 0;
  const surface: Surface = {
    path: "/v1/chat/completions",
    style: ApiStyle.CHAT_COMPLETIONS,
    codec: { ...chatCompletionsCodec, parseRequest: (b) => (parsed++, chatCompletionsCodec.parseRequest(b)) },
  };
  const deps = {
    auth: {
      verifyKey: async ({ secret }: { secret: string }) => {
        if (secret !== "svc_sk_live_good") throw invalidApiKey();
        return { key: { id: "key_1", mode: KeyMode.LIVE }, project: { id: "proj_1", logBodies: false } };
      },
    },
    // Past the parse, the request is refused (this test is about what happens before).
    pricing: { providerOf: () => "", checkServed: () => { throw invalidRequest("model_not_found", "not served here"); } },
    cache: { getEntry: async () => ({ hit: false }) },
    cacheEnabled: true,
    maxRequestBytes: 8 * 1024 * 1024,
  } as unknown as GatewayDeps;
  const state = newGatewayState();
  let server: http.Server;
  let url: string;
  before(async () => {
    server = http.createServer((req, res) => void serveChat(req, res, surface, deps, state, "req_test"));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${surface.path}`;
  });
  after(() => server.close());

  const send = (key: string) =>
    rawRequest(url, {
      method: "POST",
      headers: { "content-type": "application/json", "x-svc-api-key": key },
      body: JSON.stringify({ model: "chat-4o", messages: [{ role: "user", content: "x".repeat(2 * 1024 * 1024) }] }),
    });

  it("does not parse the body of a key never verified, good or not, before its verdict; a refused one not at all", async () => {
    for (const key of ["x", "svc_sk_live_madeupmadeupmadeupmadeupmadeup12"]) {
      const res = await send(key);
      assert.equal(res.status, 401, res.text);
      assert.equal(parsed, 0, key);
    }
    // A good key's body is parsed once its verdict is in (the spy sees every parse).
    assert.equal((await send("svc_sk_live_good")).status, 400);
    assert.equal(parsed, 1);
    // Verified lately: worked on while verified again, as before.
    assert.equal((await send("svc_sk_live_good")).status, 400);
    assert.equal(parsed, 2);
  });
});
