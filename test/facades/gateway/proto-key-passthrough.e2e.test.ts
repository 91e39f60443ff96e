import assert from "node:assert/strict";
import { gatewayWithProject } from "../../support/gateway.js";
import { rawRequest } from "../../support/http.js";

/**
 * A body field named `__proto__` is a field like any other (JSON.parse keeps it as an own key): it
 * reaches a same-style upstream as sent. Copying it with plain assignment set the copy's prototype
 * instead, and the field was dropped without a word.
 */
describe("a body field named __proto__ passes through to a same-style upstream", () => {
  const setup = gatewayWithProject();

  const cases = [
    { path: "/v1/chat/completions", headers: {} as Record<string, string>, body: '{"model":"chat-4o-mini","messages":[{"role":"user","content":"proto chat"}],"__proto__":{"x":1},"constructor":"c"}', marker: "proto chat" },
    { path: "/v1/messages", headers: { "provider-version": "2023-06-01" }, body: '{"model":"assistant-3-haiku-20240307","max_tokens":20,"messages":[{"role":"user","content":"proto messages"}],"__proto__":{"x":1},"constructor":"c"}', marker: "proto messages" },
  ];
  for (const c of cases) {
    it(c.path, async () => {
      const res = await rawRequest(`${setup.gw.gatewayUrl}${c.path}`, { headers: { "content-type": "application/json", "x-svc-api-key": setup.keys.live, ...c.headers }, body: c.body });
      assert.equal(res.status, 200, res.text);
      const sent = setup.gw.demo!.requests.find((r) => JSON.stringify(r.body).includes(c.marker))!.body;
      assert.ok(Object.hasOwn(sent, "__proto__"), `the upstream got ${JSON.stringify(sent)}`);
      assert.deepEqual(JSON.parse(JSON.stringify(sent)).__proto__, { x: 1 });
      assert.equal(sent.constructor, "c");
    });
  }
});
