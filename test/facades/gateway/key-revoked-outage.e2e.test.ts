import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { replicasOnOneRedis } from "../../support/gateway.js";
import { eventually, postJson } from "../../support/http.js";

/**
 * A key deleted on one replica is forgotten at once by every replica, so none serves it from the
 * copies it keeps for a Redis outage: a stall that starts after the delete's answer finds no copy
 * of it anywhere (503 auth_unavailable there, never 200).
 */
describe("a key deleted on one replica, then a Redis stall", function () {
  this.timeout(60_000);
  const r = replicasOnOneRedis();
  let n = 0;
  const chat = () => ({ model: "chat-4o-mini", messages: [{ role: "user", content: `revoked ${Date.now()} ${++n}` }] });

  it("is not served by another replica from its outage copies", async () => {
    const keys = await r.a.project();
    // A verifies the key (it keeps a copy for outages); B deletes it.
    assert.equal((await postJson(`${r.a.gatewayUrl}/v1/chat/completions`, keys.live, chat())).status, 200);
    await r.b.admin.deleteKey({ keyId: keys.liveKeyId });
    // A hears of it (a message on Redis); wait a moment for it to arrive, as any request would.
    await new Promise((res) => setTimeout(res, 200));
    const raw = new Redis(r.redis.url);
    try {
      await raw.call("CLIENT", "PAUSE", "3000", "ALL");
      const during = await postJson(`${r.a.gatewayUrl}/v1/chat/completions`, keys.live, chat());
      assert.notEqual(during.status, 200, during.text);
      assert.equal(during.json().error.code, "auth_unavailable", during.text);
    } finally {
      await raw.call("CLIENT", "UNPAUSE").catch(() => {});
      raw.disconnect();
    }
    // Once Redis answers, the key is refused as deleted.
    await eventually(async () => (await postJson(`${r.a.gatewayUrl}/v1/chat/completions`, keys.live, chat())).status === 401, 10_000, "401 once Redis is back");
  });

  it("still serves a key that was not deleted from its copy during the stall", async () => {
    const keys = await r.a.project();
    assert.equal((await postJson(`${r.a.gatewayUrl}/v1/chat/completions`, keys.live, chat())).status, 200);
    const raw = new Redis(r.redis.url);
    try {
      await raw.call("CLIENT", "PAUSE", "3000", "ALL");
      const during = await postJson(`${r.a.gatewayUrl}/v1/chat/completions`, keys.live, chat());
      assert.equal(during.status, 200, during.text);
    } finally {
      await raw.call("CLIENT", "UNPAUSE").catch(() => {});
      raw.disconnect();
    }
  });
});
