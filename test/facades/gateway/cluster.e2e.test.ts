import assert from "node:assert/strict";
import { replicasOnOneRedis } from "../../support/gateway.js";
import { postJson } from "../../support/http.js";

const body = { model: "chat-4o-mini", messages: [{ role: "user", content: "hi" }] };

describe("cluster mode: two gateway replicas sharing one Redis registry", () => {
  const replicas = replicasOnOneRedis();

  it("accepts on one replica a key created through the other", async () => {
    const { a, b } = replicas;
    const keys = await a.project();
    const res = await postJson(`${b.gatewayUrl}/v1/chat/completions`, keys.live, body);
    assert.equal(res.status, 200, res.text);
  });

  it("rejects on every replica a key deleted through one, on the very next request", async () => {
    const { a, b } = replicas;
    const keys = await a.project();
    assert.equal((await postJson(`${b.gatewayUrl}/v1/chat/completions`, keys.live, body)).status, 200);
    await b.admin.deleteKey({ keyId: keys.liveKeyId });
    assert.equal((await postJson(`${a.gatewayUrl}/v1/chat/completions`, keys.live, body)).status, 401);
    assert.equal((await postJson(`${b.gatewayUrl}/v1/chat/completions`, keys.live, body)).status, 401);
  });
});
