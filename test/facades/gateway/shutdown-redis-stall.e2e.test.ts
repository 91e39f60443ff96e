import assert from "node:assert/strict";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson } from "../../support/http.js";
import { startRedis, type TestRedis } from "../../support/redis.js";

/**
 * README, "Shutdown": a shutdown takes at most about 7 s, and a stalled Redis counts as one that is
 * down. Every Redis connection of the gateway (cache, limits, registry, prompts) is open and ready
 * when Redis stops answering, so a QUIT sent to it would wait for an answer that never comes.
 */
describe("shutdown while the cluster's Redis is stalled", function () {
  this.timeout(60_000);
  let redis: TestRedis;
  let gw: TestGateway | undefined;

  before(async () => {
    redis = await startRedis();
    gw = await startTestGateway({ SVC_REDIS_URL: redis.url });
  });
  after(async () => {
    process.kill(redis.pid, "SIGCONT");
    await gw?.close().catch(() => {});
    await redis.stop();
  });

  it("finishes within the README's bound, with every Redis connection open on a Redis that answers nothing", async () => {
    const { live } = await gw!.project();
    for (let i = 0; i < 3; i++) {
      const res = await postJson(`${gw!.gatewayUrl}/v1/chat/completions`, live, { model: "chat-4o-mini", messages: [{ role: "user", content: `before the stall ${i}` }] });
      assert.equal(res.status, 200, res.text);
    }
    process.kill(redis.pid, "SIGSTOP");
    const started = Date.now();
    const closing = gw!.close().then(() => "closed" as const);
    const bound = new Promise<"still closing">((r) => setTimeout(() => r("still closing"), 8_000).unref());
    const outcome = await Promise.race([closing, bound]);
    assert.equal(outcome, "closed", `close() still waiting after ${Date.now() - started} ms`);
    gw = undefined;
  });
});
