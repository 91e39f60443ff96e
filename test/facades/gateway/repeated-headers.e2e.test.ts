import assert from "node:assert/strict";
import http from "node:http";
import { gatewayWithProject } from "../../support/gateway.js";

/**
 * Headers that name one thing, sent twice. Node's `headers` keeps the first Authorization and joins
 * two X-Svc-User-Id into one ("alice, bob"), so neither shows as two there: the gateway reads the raw
 * headers and refuses both, as it refuses two X-Svc-Api-Key.
 */
describe("repeated key and user headers", () => {
  const fixture = gatewayWithProject();

  /** POSTs a chat request with `headers` as raw name/value pairs, repeats kept (given so, Host is not added: it is sent here); resolves to [status, error code]. */
  const post = (headers: string[]) =>
    new Promise<[number, string | undefined]>((resolve, reject) => {
      const body = JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content: "repeated headers" }] });
      const req = http.request(`${fixture.gw.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: ["host", new URL(fixture.gw.gatewayUrl).host, "content-type", "application/json", ...headers] }, (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c));
        res.on("end", () => resolve([res.statusCode!, (JSON.parse(text) as { error?: { code?: string } }).error?.code]));
      });
      req.on("error", reject);
      req.end(body);
    });

  it("refuses two Authorization headers 401, whichever holds the good key", async () => {
    assert.deepEqual(await post(["authorization", `Bearer ${fixture.keys.live}`]), [200, undefined]);
    assert.deepEqual(await post(["authorization", `Bearer ${fixture.keys.live}`, "authorization", "Bearer svc_sk_live_other"]), [401, "invalid_api_key"]);
    assert.deepEqual(await post(["authorization", "Bearer svc_sk_live_other", "Authorization", `Bearer ${fixture.keys.live}`]), [401, "invalid_api_key"]);
  });

  it("refuses two X-Svc-User-Id headers 400 invalid_user_id; one holding a comma is one id", async () => {
    assert.deepEqual(await post(["x-svc-api-key", fixture.keys.live, "x-svc-user-id", "alice", "X-Svc-User-Id", "bob"]), [400, "invalid_user_id"]);
    assert.deepEqual(await post(["x-svc-api-key", fixture.keys.live, "x-svc-user-id", "Doe, John"]), [200, undefined]);
  });
});
