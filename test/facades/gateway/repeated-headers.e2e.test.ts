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
  const post = (headers: string[], withMessage = false, base = fixture.gw.gatewayUrl, method = "POST", path = "/v1/chat/completions") =>
    new Promise<Array<number | string | undefined>>((resolve, reject) => {
      const body = method === "POST" ? JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content: "repeated headers" }] }) : undefined;
      const req = http.request(`${base}${path}`, { method, headers: ["host", new URL(base).host, "content-type", "application/json", ...headers] }, (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c));
        res.on("end", () => {
          const error = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
          resolve(withMessage ? [res.statusCode!, error?.code, error?.message] : [res.statusCode!, error?.code]);
        });
      });
      req.on("error", reject);
      req.end(body);
    });

  it("refuses two Authorization headers 401, whichever holds the good key", async () => {
    assert.deepEqual(await post(["authorization", `Bearer ${fixture.keys.live}`]), [200, undefined]);
    assert.deepEqual(await post(["authorization", `Bearer ${fixture.keys.live}`, "authorization", "Bearer svc_sk_live_other"]), [401, "invalid_api_key"]);
    assert.deepEqual(await post(["authorization", "Bearer svc_sk_live_other", "Authorization", `Bearer ${fixture.keys.live}`]), [401, "invalid_api_key"]);
    // The first not a service key at all: the repeat is the refusal, not "not a service key".
    const [status, code, message] = await post(["authorization", "Basic Zm9vOmJhcg==", "authorization", `Bearer ${fixture.keys.live}`], true);
    assert.deepEqual([status, code], [401, "invalid_api_key"]);
    assert.match(String(message), /sent more than once/);
  });

  it("refuses two Authorization headers on the management API too", async () => {
    const logs = await post(["authorization", `Bearer ${fixture.keys.live}`], false, fixture.gw.managementUrl, "GET", "/v1/logs?limit=1");
    assert.equal(logs[0], 200);
    const twice = await post(["authorization", `Bearer ${fixture.keys.live}`, "authorization", "Bearer svc_sk_live_other"], false, fixture.gw.managementUrl, "GET", "/v1/logs?limit=1");
    assert.deepEqual(twice.slice(0, 2), [401, "invalid_api_key"]);
  });

  it("refuses two X-Svc-User-Id headers 400 invalid_user_id; one holding a comma is one id", async () => {
    assert.deepEqual(await post(["x-svc-api-key", fixture.keys.live, "x-svc-user-id", "alice", "X-Svc-User-Id", "bob"]), [400, "invalid_user_id"]);
    assert.deepEqual(await post(["x-svc-api-key", fixture.keys.live, "x-svc-user-id", "Doe, John"]), [200, undefined]);
  });
});
