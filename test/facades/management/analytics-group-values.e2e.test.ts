import assert from "node:assert/strict";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson, rawRequest, type RawResponse } from "../../support/http.js";

/**
 * A group's value is whatever a gateway caller sent (X-Svc-User-Id, X-Svc-Metadata): the analytics
 * grouped by it must answer, with that value as the group's key, whatever characters it holds. The
 * top groups' values go back to the engine as an Array(String) query parameter, through the
 * embedded engine's HTTP framing (src/stores/chdb-server.ts): the real chDB child here.
 */
describe("management API /v1/analytics: groups whose values hold quotes, backslashes, control characters, any text", function () {
  this.timeout(120_000);
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  const get = (path: string): Promise<RawResponse> => rawRequest(`${gw.managementUrl}${path}`, { method: "GET", headers: { authorization: `Bearer ${keys.live}` } });

  // Through a header (no control characters but tab; node:http sends é as UTF-8, as curl does).
  const users = ["o'brien", "a\\'b", "back\\slash", "p\\", "\\", "\\\\", "''", "x' OR '1'='1", "tab\there", "é ü", "\\0nul", "\\n", "{x:String}", "['a']", "a,b", "plain"];
  // Through the JSON of X-Svc-Metadata: anything a JSON string holds (20: the groups an answer holds).
  const values = ["o'brien", "a\\'b", "back\\slash", "p\\", "\\\\", "''", "x' OR '1'='1", "tab\there", "é😀", "\\0nul", "{x:String}", "['a']",
    "nl\nx", "cr\rx", "nul\0x", "\b\f\v", "quote\"", "中文 ünï", "", "a,b"];
  const metaKey = "who's\\key";

  before(async () => {
    gw = await startTestGateway({ SVC_TELEMETRY_FLUSH_INTERVAL_MS: "20" });
    keys = await gw.project(Plan.ENTERPRISE);
    const chat = (headers: Record<string, string>) => postJson(`${gw.gatewayUrl}/v1/chat/completions`, keys.live, { model: "chat-4o", messages: [{ role: "user", content: "group me" }] }, headers);
    for (const u of users) {
      const r = await chat({ "X-Svc-User-Id": u });
      assert.equal(r.status, 200, r.text);
    }
    for (const v of values) {
      const r = await chat({ "X-Svc-Metadata": JSON.stringify({ [metaKey]: v }).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`) });
      assert.equal(r.status, 200, r.text);
    }
    await eventually(async () => (await get("/v1/analytics?granularity=minute")).json().totals.requests === users.length + values.length, 20_000, "every request in the analytics");
  });
  after(() => gw.close());

  const groupsOf = async (query: string): Promise<Map<string, number>> => {
    const res = await get(`/v1/analytics?${query}`);
    assert.equal(res.status, 200, `${query}: ${res.text}`);
    const a = res.json();
    assert.equal(a.groups_truncated, false, query);
    return new Map(a.groups.map((g: { key: string; requests: number }) => [g.key, g.requests]));
  };

  for (const granularity of ["minute", "hour", "day"]) {
    it(`groups by user at ${granularity} granularity: every value its own group, as it was sent`, async () => {
      const groups = await groupsOf(`granularity=${granularity}&group_by=user`);
      // The metadata-only requests have no user: the empty group.
      assert.deepEqual([...groups.keys()].sort(), [...users, ""].sort());
      for (const u of users) assert.equal(groups.get(u), 1, JSON.stringify(u));
    });

    it(`groups by a metadata key (itself odd) at ${granularity} granularity: every value its own group, as it was sent`, async () => {
      const groups = await groupsOf(`granularity=${granularity}&group_by=${encodeURIComponent(`metadata.${metaKey}`)}`);
      assert.deepEqual([...groups.keys()].sort(), [...values].sort());
      for (const v of values) assert.equal(groups.get(v), 1, JSON.stringify(v));
    });
  }
});
