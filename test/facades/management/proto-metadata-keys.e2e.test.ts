import assert from "node:assert/strict";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, rawRequest, type RawResponse } from "../../support/http.js";

/**
 * Metadata keys that are also names of Object.prototype (`__proto__`, `constructor`) are keys like
 * any other, end to end: X-Svc-Metadata keeps them, the log shows them, and `metadata.KEY` filters
 * on them (a filter that was dropped would list every row).
 */
describe("metadata keys named __proto__ and constructor: logged and filterable", function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let key: string;
  let id: string;
  const get = (path: string): Promise<RawResponse> => rawRequest(`${gw.managementUrl}${path}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
  // JSON.parse, unlike an object literal, keeps `__proto__` as an own key: the value to compare with.
  const sent = '{"__proto__":"p","constructor":"c","team":"pm"}';

  before(async () => {
    gw = await startTestGateway();
    key = (await gw.project()).live;
    const r = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { model: "chat-4o-mini", messages: [{ role: "user", content: "proto keys" }] }, { "x-svc-metadata": sent });
    assert.equal(r.status, 200, r.text);
    id = String(r.headers["x-svc-request-id"]);
    // A second request without those keys, which a dropped filter would list too.
    await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { model: "chat-4o-mini", messages: [{ role: "user", content: "other" }] }, { "x-svc-metadata": '{"team":"other"}' });
    const end = Date.now() + 10_000;
    while (Date.now() < end && (await get("/v1/logs")).json().data?.length < 2) await new Promise((r) => setTimeout(r, 100));
  });
  after(() => gw?.close());

  it("logs every key as sent", async () => {
    const one = await get(`/v1/logs/${id}`);
    assert.equal(one.status, 200, one.text);
    assert.deepEqual(Object.keys(one.json().metadata).sort(), ["__proto__", "constructor", "team"]);
    assert.deepEqual(one.json().metadata, JSON.parse(sent));
  });

  it("filters on them: the matching row only, none for another value", async () => {
    const ids = async (query: string) => {
      const r = await get(`/v1/logs?${query}`);
      assert.equal(r.status, 200, r.text);
      return r.json().data.map((l: { id: string }) => l.id);
    };
    assert.equal((await ids("")).length, 2);
    assert.deepEqual(await ids("metadata.__proto__=p"), [id]);
    assert.deepEqual(await ids("metadata.__proto__=no-such-value"), []);
    assert.deepEqual(await ids("metadata.constructor=c"), [id]);
    assert.deepEqual(await ids("metadata.constructor=x"), []);
    assert.deepEqual(await ids("metadata.__proto__=p&metadata.team=pm"), [id]);
  });
});
