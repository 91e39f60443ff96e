import assert from "node:assert/strict";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson, rawRequest, type RawResponse } from "../../support/http.js";

/**
 * A cursor is one the listing returned, or it is refused with 400 invalid_page_token: one whose
 * parts were edited (a time or id moved, the listing's hash kept) pages nowhere, while a cursor
 * the listing did return keeps paging, reused, after new rows, with another key of the project.
 */
describe("management API cursors: an edited cursor is refused, a returned one keeps working", function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  let other: Awaited<ReturnType<TestGateway["project"]>>;
  const ids: string[] = [];
  const get = (path: string, key = keys.live): Promise<RawResponse> => rawRequest(`${gw.managementUrl}${path}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
  const chat = (key: string, content: string) => postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, { model: "chat-4o", messages: [{ role: "user", content }] });
  const page = (query: string, cursor: string, key = keys.live) => get(`/v1/logs?${query}&cursor=${encodeURIComponent(cursor)}`, key);
  const listed = (res: RawResponse) => res.json().data.map((l: { id: string }) => l.id);
  /** The token's JSON parts, and a token of other parts in the same encoding (base64url, no padding). */
  const parts = (cursor: string): unknown[] => JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
  const token = (p: unknown[]) => Buffer.from(JSON.stringify(p)).toString("base64url");
  const refused = (res: RawResponse, what: string) => {
    assert.equal(res.status, 400, `${what}: ${res.text}`);
    assert.deepEqual([res.json().error.type, res.json().error.code], ["invalid_request_error", "invalid_page_token"], what);
    assert.ok(res.json().error.message.includes("'cursor'"), res.json().error.message);
  };

  before(async () => {
    gw = await startTestGateway({ SVC_TELEMETRY_FLUSH_INTERVAL_MS: "20" });
    keys = await gw.project(Plan.PRO);
    other = await gw.project(Plan.PRO);
    for (let i = 0; i < 4; i++) ids.push(String((await chat(keys.live, `row ${i}`)).headers["x-svc-request-id"]));
    await chat(keys.test, "a test row");
    await eventually(async () => (await get("/v1/logs")).json().data.length === 4, 10_000, "the four rows listed");
  });
  after(() => gw.close());

  it("refuses a logs cursor with its time, id or any other part edited", async () => {
    const cursor = (await get("/v1/logs?limit=1")).json().next_cursor as string;
    const p = parts(cursor);
    const t = p[1] as number;
    const edits: Record<string, unknown[]> = {
      "time one microsecond earlier": [p[0], t - 1, ...p.slice(2)],
      "time one microsecond later": [p[0], t + 1, ...p.slice(2)],
      "time far in the future": [p[0], t + 10 ** 12, ...p.slice(2)],
      "id of another row": [p[0], t, ids[0], ...p.slice(3)],
      "made-up id": [p[0], t, "req_x", ...p.slice(3)],
      "listing hash": [...p.slice(0, 3), "AAAAAAAAAAAA", ...p.slice(4)],
      "seal dropped": p.slice(0, -1),
      "a part added": [...p, 1],
      "the format's version": [2, ...p.slice(1)],
    };
    for (const [what, edited] of Object.entries(edits)) refused(await page("limit=1", token(edited)), what);
    // The earlier format, unsealed: [2, time, id, hash].
    refused(await page("limit=1", token([2, t, p[2], p[3]])), "a token of the unsealed format");
    // The cursor as returned still pages: the row after the newest.
    assert.deepEqual(listed(await page("limit=1", cursor)), [ids[2]]);
  });

  it("keeps paging with a returned cursor: reused, after new rows, with another key of the project and mode", async () => {
    const first = (await get("/v1/logs?limit=2")).json();
    assert.deepEqual(first.data.map((l: { id: string }) => l.id), [ids[3], ids[2]]);
    const again = await page("limit=2", first.next_cursor);
    assert.deepEqual(listed(again), [ids[1], ids[0]]);
    assert.deepEqual(listed(await page("limit=2", first.next_cursor)), [ids[1], ids[0]], "reused");
    const newer = String((await chat(keys.live, "a newer row")).headers["x-svc-request-id"]);
    await eventually(async () => listed(await get("/v1/logs?limit=1"))[0] === newer, 10_000, "the newer row listed");
    assert.deepEqual(listed(await page("limit=2", first.next_cursor)), [ids[1], ids[0]], "after a newer row");
    const second = await gw.admin.createKey({ projectId: keys.projectId, mode: KeyMode.LIVE });
    assert.deepEqual(listed(await page("limit=2", first.next_cursor, second.secret)), [ids[1], ids[0]], "another live key");
  });

  it("still refuses a returned cursor with other filters, another range, project or mode, and the prompts listing's", async () => {
    const cursor = (await get("/v1/logs?limit=1&model=chat-4o")).json().next_cursor as string;
    assert.equal((await page("limit=1&model=chat-4o", cursor)).status, 200);
    refused(await page("limit=1", cursor), "other filters");
    refused(await page("limit=1&model=chat-4o&start=2020-01-01T00:00:00Z", cursor), "another range");
    const foreign = await page("limit=1&model=chat-4o", cursor, other.live);
    refused(foreign, "another project");
    assert.match(foreign.json().error.message, /another project's or key mode's/, "names every way a listing can differ, not only filters");
    refused(await page("limit=1&model=chat-4o", cursor, keys.test), "the test logs");
    refused(await get(`/v1/prompts?cursor=${encodeURIComponent(cursor)}`), "a logs cursor on the prompts");
  });

  it("refuses a prompts cursor with its name or any other part edited, and keeps the returned one", async () => {
    for (const name of ["alpha", "beta", "gamma", "delta"]) await gw.telemetry.putPrompt({ projectId: keys.projectId, name, content: `I am ${name}` });
    const first = (await get("/v1/prompts?limit=1")).json();
    assert.deepEqual(first.data.map((p: { name: string }) => p.name), ["alpha"]);
    const p = parts(first.next_cursor);
    for (const [what, edited] of Object.entries({
      "name moved on": [p[0], "beta", ...p.slice(2)],
      "name moved back": [p[0], "a", ...p.slice(2)],
      "listing hash": [p[0], p[1], "AAAAAAAAAAAA", ...p.slice(3)],
      "seal dropped": p.slice(0, -1),
      "the unsealed format": ["p1", p[1], p[2]],
    })) refused(await get(`/v1/prompts?limit=1&cursor=${encodeURIComponent(token(edited))}`), what);
    refused(await page("limit=1", first.next_cursor), "a prompts cursor on the logs");
    const foreign = await get(`/v1/prompts?cursor=${encodeURIComponent(first.next_cursor)}`, other.live);
    refused(foreign, "another project's");
    assert.match(foreign.json().error.message, /another project's listing/);
    const next = await get(`/v1/prompts?limit=1&cursor=${encodeURIComponent(first.next_cursor)}`);
    assert.deepEqual(next.json().data.map((x: { name: string }) => x.name), ["beta"]);
  });
});
