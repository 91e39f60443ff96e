import assert from "node:assert/strict";
import { request } from "node:http";
import { connect } from "node:net";
import { timestampFromMicros } from "../../../src/core/telemetry/micros.js";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, rawRequest, type RawResponse, sseEvents } from "../../support/http.js";
import { captureLog } from "../../support/log-capture.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/** Polls `fn` until `ok` holds (logs are written off the request path), or fails after `ms`. */
async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A chat completions request as raw HTTP/1.1, for writing several on one connection (pipelined). */
function rawChat(key: string, content: string): string {
  const body = JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content }] });
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

describe("management API: request logs, analytics and prompts (real gateway, embedded ClickHouse)", function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  let other: Awaited<ReturnType<TestGateway["project"]>>;
  const ids: string[] = [];
  const get = (path: string, key = keys.live): Promise<RawResponse> => rawRequest(`${gw.managementUrl}${path}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
  const chatUrl = () => `${gw.gatewayUrl}/v1/chat/completions`;

  before(async () => {
    gw = await startTestGateway();
    keys = await gw.project(Plan.PRO);
    other = await gw.project(Plan.PRO);
    const send = async (body: object, headers: Record<string, string> = {}, key = keys.live) => {
      const r = await postJson(chatUrl(), key, body, headers);
      ids.push(String(r.headers["x-svc-request-id"]));
      return r;
    };
    await send({ model: "chat-4o-mini", messages: [{ role: "user", content: "log me one" }] }, { "X-Svc-Metadata": '{"team":"search"}', "X-Svc-User-Id": "alice" });
    await send({ model: "chat-4o-mini", messages: [{ role: "user", content: "log me one" }] }, { "X-Svc-Metadata": '{"team":"search"}', "X-Svc-User-Id": "alice" });
    await send({ model: "chat-4o", messages: [{ role: "user", content: "log me two" }], stream: true }, { "X-Svc-User-Id": "bob" });
    await send({ model: "chat-4o", messages: [{ role: "user", content: "bad" }], temperature: 9 });
    await send({ model: "chat-4o", messages: [{ role: "user", content: "test mode" }] }, {}, keys.test);
    await postJson(chatUrl(), other.live, { model: "chat-4o", messages: [{ role: "user", content: "other project" }] });
  });
  after(() => gw.close());

  const liveIds = () => [ids[0], ids[1], ids[2], ids[3]];

  it("lists a project's live requests newest first, within a few seconds, with the record's fields", async () => {
    const res = await until(() => get("/v1/logs"), (r) => r.status === 200 && r.json().data.length >= 4);
    assert.equal(res.status, 200, res.text);
    const body = res.json();
    assert.equal(body.object, "list");
    assert.deepEqual(body.data.map((l: { id: string }) => l.id), liveIds().reverse());
    const first = body.data.find((l: { id: string }) => l.id === ids[0]);
    assert.equal(first.project_id, keys.projectId);
    assert.equal(first.key_mode, "live");
    assert.equal(first.endpoint, "/v1/chat/completions");
    assert.equal(first.model, "chat-4o-mini");
    assert.equal(first.provider, "openai");
    assert.equal(first.status, 200);
    assert.equal(first.cache, "MISS");
    assert.equal(first.user_id, "alice");
    assert.deepEqual(first.metadata, { team: "search" });
    assert.ok(first.usage.prompt_tokens > 0 && first.usage.completion_tokens > 0);
    assert.match(first.cost_usd, /^0\.\d+$/);
    assert.ok(first.latency_ms > 0 && first.ttfb_ms > 0 && first.upstream_latency_ms > 0);
    assert.equal(first.request_body, undefined, "bodies only in the full record");
    const second = body.data.find((l: { id: string }) => l.id === ids[1]);
    assert.equal(second.cache, "HIT");
    assert.equal(second.cost_usd, "0");
    assert.equal(second.cost_saved_usd, first.cost_usd);
    const bad = body.data.find((l: { id: string }) => l.id === ids[3]);
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.error, { type: "invalid_request_error", code: "invalid_value" });
  });

  it("returns the full record, bodies included, by id; 404 for unknown ids and other projects' ids", async () => {
    const res = await get(`/v1/logs/${ids[2]}`);
    assert.equal(res.status, 200, res.text);
    const log = res.json();
    assert.equal(log.stream, true);
    assert.equal(JSON.parse(log.request_body).messages[0].content, "log me two");
    assert.match(JSON.parse(log.response_body).choices[0].message.content, /log me two/);
    assert.equal((await get("/v1/logs/req_doesnotexist")).status, 404);
    const foreign = await get(`/v1/logs/${ids[0]}`, other.live);
    assert.equal(foreign.status, 404);
    assert.equal(foreign.json().error.type, "not_found_error");
  });

  it("keeps no bodies for a project that turned body logging off", async () => {
    const quiet = await gw.project(Plan.PRO);
    await gw.admin.updateProject({ projectId: quiet.projectId, logBodies: false });
    const r = await postJson(chatUrl(), quiet.live, { model: "chat-4o", messages: [{ role: "user", content: "secret text" }] });
    const id = String(r.headers["x-svc-request-id"]);
    const log = await until(() => get(`/v1/logs/${id}`, quiet.live), (x) => x.status === 200);
    assert.equal(log.status, 200, log.text);
    assert.equal(log.json().request_body, "");
    assert.equal(log.json().response_body, "");
    assert.equal(log.json().status, 200);
  });

  it("logs each good header of a request refused for the other one: the user id beside bad metadata, the metadata beside a bad user id", async () => {
    const own = await gw.project(Plan.PRO);
    const body = { model: "chat-4o", messages: [{ role: "user", content: "headers" }] };
    const badMeta = await postJson(chatUrl(), own.live, body, { "X-Svc-Metadata": "[1]", "X-Svc-User-Id": "alice" });
    assert.equal(badMeta.json().error.code, "invalid_metadata");
    const badUser = await postJson(chatUrl(), own.live, body, { "X-Svc-Metadata": '{"team":"x"}', "X-Svc-User-Id": "u".repeat(10_000) });
    assert.equal(badUser.json().error.code, "invalid_user_id");
    const both = await postJson(chatUrl(), own.live, body, { "X-Svc-Metadata": "[1]", "X-Svc-User-Id": "u".repeat(10_000) });
    assert.equal(both.json().error.code, "invalid_metadata", "the metadata's refusal, as before, when both are bad");
    const logOf = async (r: RawResponse) => (await until(() => get(`/v1/logs/${r.headers["x-svc-request-id"]}`, own.live), (x) => x.status === 200)).json();
    assert.equal((await logOf(badMeta)).user_id, "alice");
    assert.deepEqual((await logOf(badUser)).metadata, { team: "x" });
  });

  it("logs the upstream's time of a request the upstream failed", async () => {
    const own = await gw.project(Plan.PRO); // the shared project's requests are counted by the tests below
    const r = await postJson(chatUrl(), own.live, { model: "chat-4o", messages: [{ role: "user", content: "[[fake:status=500]]" }] });
    assert.equal(r.status, 502);
    const id = String(r.headers["x-svc-request-id"]);
    const log = await until(() => get(`/v1/logs/${id}`, own.live), (x) => x.status === 200);
    assert.equal(log.json().status, 502);
    assert.ok(log.json().upstream_latency_ms > 0, `upstream_latency_ms ${log.json().upstream_latency_ms}`);
  });

  it("keeps test and live logs apart", async () => {
    const test = await until(() => get("/v1/logs", keys.test), (r) => r.json().data?.length >= 1);
    assert.deepEqual(test.json().data.map((l: { id: string }) => l.id), [ids[4]]);
    assert.equal(test.json().data[0].key_mode, "test");
    assert.equal((await get(`/v1/logs/${ids[4]}`)).status, 404, "a live key does not see test logs");
  });

  it("filters by model, status class, cache, user and metadata", async () => {
    const ids_ = async (q: string) => (await get(`/v1/logs?${q}`)).json().data.map((l: { id: string }) => l.id);
    assert.deepEqual(await ids_("model=chat-4o-mini"), [ids[1], ids[0]]);
    assert.deepEqual(await ids_("status=4xx"), [ids[3]]);
    assert.deepEqual(await ids_("status=400"), [ids[3]]);
    assert.deepEqual(await ids_("cache=hit"), [ids[1]]);
    assert.deepEqual(await ids_("user_id=bob"), [ids[2]]);
    assert.deepEqual(await ids_("metadata.team=search"), [ids[1], ids[0]]);
  });

  it("pages with a cursor that stays stable while new requests arrive", async () => {
    const page1 = (await get("/v1/logs?limit=2")).json();
    assert.equal(page1.data.length, 2);
    assert.equal(page1.has_more, true);
    await postJson(chatUrl(), keys.live, { model: "chat-4o", messages: [{ role: "user", content: "arrives between pages" }] });
    const page2 = (await get(`/v1/logs?limit=2&cursor=${encodeURIComponent(page1.next_cursor)}`)).json();
    assert.deepEqual([...page1.data, ...page2.data].map((l: { id: string }) => l.id), liveIds().reverse());
  });

  it("sums analytics over the live requests made, and groups them by model", async () => {
    const res = await until(() => get("/v1/analytics?granularity=minute&group_by=model"), (r) => r.status === 200 && r.json().totals.requests >= 5);
    assert.equal(res.status, 200, res.text);
    const a = res.json();
    assert.equal(a.object, "analytics");
    assert.equal(a.totals.requests, 5); // four before, one between the pages above
    assert.equal(a.totals.errors, 1);
    assert.equal(a.totals.cache_hits, 1);
    const byModel = Object.fromEntries(a.groups.map((g: { key: string; requests: number }) => [g.key, g.requests]));
    assert.deepEqual(byModel, { "chat-4o": 3, "chat-4o-mini": 2 });
    assert.ok(a.series.length >= 1);
    assert.equal(a.series.reduce((n: number, b: { requests: number }) => n + b.requests, 0), 5);
  });

  it("answers bad parameters with 400 naming them, and a bad key with 401", async () => {
    for (const [q, code, name] of [
      ["limit=0", "invalid_parameter", "limit"],
      ["status=abc", "invalid_parameter", "status"],
      ["start=yesterday", "invalid_parameter", "start"],
      ["cache=maybe", "invalid_parameter", "cache"],
      ["start=2026-02-30T00:00:00Z", "invalid_parameter", "start"],
      ["end=2026-11-31T00:00:00Z", "invalid_parameter", "end"],
      ["colour=blue", "unknown_parameter", "colour"],
    ] as const) {
      const res = await get(`/v1/logs?${q}`);
      assert.equal(res.status, 400, q);
      assert.equal(res.json().error.code, code, q);
      assert.ok(res.json().error.message.includes(name), res.json().error.message);
    }
    // Bad values the core finds are told in this API's terms: its parameter names, its codes.
    for (const [path, code, name] of [
      ["/v1/logs?start=2030-01-01T00:00:00Z&end=2020-01-01T00:00:00Z", "invalid_parameter", "'start'"],
      ["/v1/logs/%27", "invalid_parameter", "'id'"],
      ["/v1/logs?cursor=garbage", "invalid_page_token", "'cursor'"],
      ["/v1/analytics?group_by=metadata." + "k".repeat(70), "invalid_parameter", "'group_by'"],
      ["/v1/analytics?start=2015-01-01T00:00:00Z&granularity=hour", "invalid_parameter", "hour"],
    ] as const) {
      const res = await get(path);
      assert.equal(res.status, 400, path);
      assert.equal(res.json().error.code, code, path);
      assert.ok(res.json().error.message.includes(name) && !/`\w+_\w+`/.test(res.json().error.message), res.json().error.message);
    }
    const g = await get("/v1/analytics?granularity=week");
    assert.equal(g.status, 400);
    assert.ok(g.json().error.message.includes("granularity"));
    const r = await get("/v1/analytics?group_by=colour");
    assert.equal(r.status, 400);
    const post = await rawRequest(`${gw.managementUrl}/v1/logs`, { method: "POST", headers: { authorization: `Bearer ${keys.live}` }, body: "{}" });
    assert.equal(post.status, 405);
    assert.equal(post.json().error.code, "method_not_allowed");
    assert.equal(post.headers.allow, "GET, HEAD");
    // Methods the router has never heard of: 405 on the API's paths, 404 elsewhere, never a 500.
    for (const method of ["TRACE", "PROPFIND", "PURGE"]) {
      for (const [path, status] of [["/v1/logs", 405], ["/v1/prompts/system", 405], ["/v1/nope", 404]] as const) {
        const res = await rawRequest(`${gw.managementUrl}${path}`, { method, headers: { authorization: `Bearer ${keys.live}` } });
        assert.equal(res.status, status, `${method} ${path}`);
        assert.equal(res.json().error.code, status === 405 ? "method_not_allowed" : "unknown_endpoint");
      }
    }
    const unauth = await get("/v1/logs", "svc_sk_live_nope");
    assert.equal(unauth.status, 401);
    assert.equal(unauth.json().error.code, "invalid_api_key");
  });

  it("needs a key for every path under /v1, a method or path it does not serve included; carries a request id on every answer", async () => {
    // Without a key nothing says which paths exist: not a 405, nor OPTIONS's Allow, nor a 404.
    for (const [method, path] of [["POST", "/v1/logs"], ["OPTIONS", "/v1/logs"], ["GET", "/v1/nope"], ["TRACE", "/V1/prompts/x"], ["GET", "/v1"]]) {
      const res = await rawRequest(`${gw.managementUrl}${path}`, { method });
      assert.equal(res.status, 401, `${method} ${path}`);
      assert.equal(res.json().error.code, "invalid_api_key");
    }
    const ids = new Set<string>();
    for (const res of [await get("/v1/logs"), await get("/v1/logs/req_nope"), await get("/v1/nope"), await rawRequest(`${gw.managementUrl}/v1/logs`), await rawRequest(`${gw.managementUrl}/healthz`, { method: "GET" })]) {
      assert.match(String(res.headers["x-svc-request-id"]), /^req_[0-9A-Za-z]{24}$/);
      ids.add(String(res.headers["x-svc-request-id"]));
    }
    assert.equal(ids.size, 5, "each its own");
  });

  it("records no log, and warns of nothing, for a request whose key is refused", async () => {
    let res: RawResponse | undefined;
    const lines = await captureLog(async () => {
      res = await postJson(chatUrl(), "svc_sk_live_notakey", { model: "chat-4o", messages: [{ role: "user", content: "who am I" }] });
      await new Promise((r) => setTimeout(r, 200));
    });
    assert.equal(res!.status, 401);
    assert.deepEqual(lines.filter((l) => l.includes("request log")), []);
    assert.equal((await get(`/v1/logs/${String(res!.headers["x-svc-request-id"])}`)).status, 404);
  });

  it("serves the project's prompts: the latest version, or ?version=N, and 404 for unknown names", async () => {
    await gw.telemetry.putPrompt({ projectId: keys.projectId, name: "greeting", content: "Hello {{name}}", description: "v1" });
    await gw.telemetry.putPrompt({ projectId: keys.projectId, name: "greeting", content: "Hi {{name}}!", description: "v2" });
    const list = (await get("/v1/prompts")).json();
    assert.deepEqual(list.data.map((p: { name: string; version: number }) => [p.name, p.version]), [["greeting", 2]]);
    const latest = (await get("/v1/prompts/greeting")).json();
    assert.equal(latest.content, "Hi {{name}}!");
    assert.equal(latest.version, 2);
    assert.equal((await get("/v1/prompts/greeting?version=1")).json().content, "Hello {{name}}");
    assert.equal((await get("/v1/prompts/nope")).status, 404);
    assert.equal((await get("/v1/prompts/greeting", other.live)).status, 404, "prompts are per project");
  });

  describe("what a log keeps of requests that went wrong", () => {
    const logOf = async (id: string, key: string) => {
      const res = await until(() => get(`/v1/logs/${id}`, key), (x) => x.status === 200);
      assert.equal(res.status, 200, res.text);
      return res.json();
    };
    /** The text of the content chunks a chat-completions SSE answer carried. */
    const streamedText = (sse: string) =>
      sseEvents(sse).map((e) => (e.data.startsWith("{") ? JSON.parse(e.data) : {})).map((c) => c.choices?.[0]?.delta?.content ?? "").join("");

    it("logs a stream the upstream broke off after its 200 as the client got it: 200, the in-stream error, the answer so far", async () => {
      const own = await gw.project(Plan.PRO);
      const r = await postJson(chatUrl(), own.live, { model: "chat-4o", messages: [{ role: "user", content: "broken answer [[fake:drop]]" }], stream: true });
      assert.equal(r.status, 200);
      const sent = JSON.parse(sseEvents(r.text).at(-1)!.data).error;
      // The upstream answered 200, then cut the connection: the answer is incomplete, the upstream was not unreachable.
      assert.deepEqual([sent.type, sent.code], ["api_error", "upstream_stream_incomplete"], JSON.stringify(sent));
      const log = await logOf(String(r.headers["x-svc-request-id"]), own.live);
      assert.equal(log.status, 200, "the status the client got");
      assert.deepEqual(log.error, { type: sent.type, code: sent.code }, "the error event the client got");
      assert.ok(streamedText(r.text).length > 0, "the upstream's first piece reached the client");
      const body = JSON.parse(log.response_body);
      assert.equal(body.choices[0].message.content, streamedText(r.text), "the answer as far as it was streamed");
      assert.equal(body.choices[0].finish_reason, null, "an answer cut short did not finish");
      // The messages style too.
      const m = await postJson(`${gw.gatewayUrl}/v1/messages`, own.live, { model: "assistant-3-5-haiku-20241022", max_tokens: 100, messages: [{ role: "user", content: "broken answer [[fake:drop]]" }], stream: true });
      assert.equal(m.status, 200);
      const mlog = await logOf(String(m.headers["x-svc-request-id"]), own.live);
      assert.equal(mlog.status, 200);
      assert.deepEqual(mlog.error, { type: "api_error", code: "upstream_stream_incomplete" });
      assert.equal(JSON.parse(sseEvents(m.text).at(-1)!.data).error.code, "upstream_stream_incomplete");
      const mbody = JSON.parse(mlog.response_body);
      assert.equal(mbody.stop_reason, null);
      assert.ok(mbody.content[0].text.length > 0, mlog.response_body);
      // Listed, and found by status, as the 200 it was.
      const listed = (await get("/v1/logs?status=200", own.live)).json().data.map((l: { id: string }) => l.id);
      assert.ok(listed.includes(log.id) && listed.includes(mlog.id), JSON.stringify(listed));
    });

    it("logs a client that left mid-stream as 499 client_closed_request, with the answer streamed so far", async () => {
      const own = await gw.project(Plan.PRO);
      let id = "";
      let got = "";
      await new Promise<void>((resolve, reject) => {
        const req = request(chatUrl(), { method: "POST", headers: { "content-type": "application/json", "x-svc-api-key": own.live } }, (res) => {
          id = String(res.headers["x-svc-request-id"]);
          res.setEncoding("utf8");
          res.on("data", (c: string) => {
            got += c;
            if (streamedText(got).length > 0) req.destroy();
          });
        });
        req.on("error", () => {});
        req.once("close", resolve);
        req.end(JSON.stringify({ model: "chat-4o", messages: [{ role: "user", content: "left early [[fake:chunks=4]] [[fake:stall]]" }], stream: true }));
        setTimeout(() => reject(new Error("no first piece")), 5_000).unref();
      });
      const log = await logOf(id, own.live);
      assert.equal(log.status, 499);
      assert.deepEqual(log.error, { type: "client_closed", code: "client_closed_request" });
      const body = JSON.parse(log.response_body);
      assert.equal(body.choices[0].message.content, streamedText(got));
      assert.equal(body.choices[0].finish_reason, null);
    });

    it("logs a pipelined request as 499 when its client left while it was served, and not the one behind it, never served", async () => {
      const own = await gw.project(Plan.PRO);
      const { hostname, port } = new URL(gw.gatewayUrl);
      const post = (content: string) => rawChat(own.live, content);
      // Three on one connection, served one after another: the second slow; the client takes the
      // first answer and leaves while the second is served, before the third's turn.
      const got = await new Promise<string>((resolve) => {
        const socket = connect({ port: Number(port), host: hostname }, () => socket.write(post("pipelined one") + post("pipelined two [[fake:delay=1500]]") + post("pipelined three")));
        let text = "";
        socket.setEncoding("utf8").on("data", (d: string) => {
          text += d;
          if (text.includes("chat.completion")) setTimeout(() => socket.destroy(), 300);
        });
        socket.on("error", () => {});
        socket.on("close", () => resolve(text));
      });
      assert.equal(got.match(/^HTTP\/1\.1 /gm)?.length, 1, got);
      // Newest first: two, one. The third was never served: nothing was done for it, nothing is logged.
      const rows = (await until(() => get("/v1/logs", own.live), (r) => r.status === 200 && r.json().data.length >= 2)).json().data as Array<{ status: number }>;
      await new Promise((r) => setTimeout(r, 1500));
      assert.deepEqual((await get("/v1/logs", own.live)).json().data.map((l: { status: number }) => l.status), [499, 200]);
      assert.equal(rows.length, 2);
    });

    it("logs the pipelined request being served as 499 when its client left before its answer was ready, and not the one behind it", async () => {
      const own = await gw.project(Plan.PRO);
      const { hostname, port } = new URL(gw.gatewayUrl);
      const post = (content: string) => rawChat(own.live, content);
      // The client leaves before the first answer is ready; the second's turn never comes.
      await new Promise<void>((resolve) => {
        const socket = connect({ port: Number(port), host: hostname }, () => {
          socket.write(post("queued one [[fake:delay=1000]]") + post("queued two [[fake:delay=1500]]"));
          setTimeout(() => socket.destroy(), 300);
        });
        socket.on("error", () => {});
        socket.on("close", () => resolve());
      });
      await until(() => get("/v1/logs", own.live), (r) => r.status === 200 && r.json().data.length >= 1);
      await new Promise((r) => setTimeout(r, 2000));
      assert.deepEqual((await get("/v1/logs", own.live)).json().data.map((l: { status: number }) => l.status), [499]);
    });

    it("counts a pipelined request's latency from its arrival, its wait for its turn included", async () => {
      const own = await gw.project(Plan.PRO);
      const { hostname, port } = new URL(gw.gatewayUrl);
      const post = (content: string) => rawChat(own.live, content);
      await new Promise<void>((resolve) => {
        const socket = connect({ port: Number(port), host: hostname }, () => socket.write(post("turn one [[fake:delay=600]]") + post("turn two")));
        let text = "";
        socket.setEncoding("utf8").on("data", (d: string) => {
          text += d;
          if ((text.match(/chat\.completion"/g) ?? []).length === 2) socket.destroy();
        });
        socket.on("error", () => {});
        socket.on("close", () => resolve());
      });
      const rows = (await until(() => get("/v1/logs", own.live), (r) => r.status === 200 && r.json().data.length >= 2)).json().data as Array<{ status: number; latency_ms: number }>;
      // Newest first: the second waited for the first's 600 ms.
      assert.deepEqual(rows.map((l) => l.status), [200, 200]);
      assert.ok(rows[0]!.latency_ms >= 500, `the second's latency ${rows[0]!.latency_ms} ms`);
    });

    it("answers many requests pipelined on one connection without a listener warning", async () => {
      const own = await gw.project(Plan.PRO);
      const { hostname, port } = new URL(gw.gatewayUrl);
      const post = (content: string) => rawChat(own.live, content);
      const warnings: string[] = [];
      const onWarning = (w: Error) => warnings.push(w.name);
      process.on("warning", onWarning);
      try {
        const text = await new Promise<string>((resolve) => {
          const socket = connect({ port: Number(port), host: hostname }, () =>
            socket.write(post("first [[fake:delay=500]]") + Array.from({ length: 14 }, (_, i) => post(`then ${i}`)).join("")),
          );
          let got = "";
          socket.setEncoding("utf8").on("data", (d: string) => {
            got += d;
            if ((got.match(/"object":"chat\.completion"/g)?.length ?? 0) === 15) socket.end();
          });
          socket.on("close", () => resolve(got));
        });
        assert.equal(text.match(/HTTP\/1\.1 200 OK\r\n/g)?.length, 15, text.slice(0, 3000));
        const rows = (await until(() => get("/v1/logs?limit=100", own.live), (r) => r.status === 200 && r.json().data.length >= 15)).json().data as Array<{ status: number }>;
        assert.deepEqual(new Set(rows.map((l) => l.status)), new Set([200]));
        await new Promise((r) => setImmediate(r));
        assert.deepEqual(warnings.filter((w) => w === "MaxListenersExceededWarning"), []);
      } finally {
        process.off("warning", onWarning);
      }
    });

    it("logs a body that broke off as what its client was told, under the id it was told, or as 499 when it reset", async () => {
      const own = await gw.project(Plan.PRO);
      const { hostname, port } = new URL(gw.gatewayUrl);
      /** Headers announcing 100 bytes, 10 of them, then a half close (`end`) or a reset. */
      const brokenOff = (how: "end" | "reset") =>
        new Promise<string>((resolve) => {
          const socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true }, () => {
            socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${own.live}\r\nContent-Length: 100\r\n\r\n{"model":"`);
            // Once the gateway has read the head and started on the body.
            setTimeout(() => (how === "end" ? socket.end() : socket.resetAndDestroy()), 200);
          });
          let got = "";
          socket.setEncoding("utf8").on("data", (d: string) => (got += d));
          socket.on("error", () => {});
          socket.on("close", () => resolve(got));
        });
      const told = await brokenOff("end");
      assert.match(told, /^HTTP\/1.1 400 /);
      const id = /\r\nX-Svc-Request-Id: (req_\w+)\r\n/.exec(told)?.[1];
      assert.ok(id, told);
      const log = await logOf(id, own.live);
      assert.equal(log.status, 400);
      assert.deepEqual(log.error, { type: "invalid_request_error", code: "malformed_request" });
      assert.equal(await brokenOff("reset"), "");
      const both = await until(() => get("/v1/logs", own.live), (r) => r.status === 200 && r.json().data.length >= 2);
      const rows = both.json().data as { id: string; status: number; error: unknown }[];
      assert.deepEqual(rows.map((l) => l.status).sort(), [400, 499], JSON.stringify(rows));
      assert.deepEqual(rows.find((l) => l.status === 499)!.error, { type: "client_closed", code: "client_closed_request" });
    });

    it("logs the body as sent when it is not JSON, or not sent as JSON", async () => {
      const own = await gw.project(Plan.PRO);
      const send = async (contentType: string, body: string) => {
        const r = await rawRequest(chatUrl(), { headers: { "content-type": contentType, "x-svc-api-key": own.live }, body });
        assert.equal(r.status, 400, r.text);
        return { code: r.json().error.code, log: await logOf(String(r.headers["x-svc-request-id"]), own.live) };
      };
      const notJson = await send("application/json", '{"model": "chat-4o", "messages": [ oops');
      assert.equal(notJson.code, "invalid_json");
      assert.equal(notJson.log.request_body, '{"model": "chat-4o", "messages": [ oops');
      const plain = await send("text/plain", "model=chat-4o&text=héllo");
      assert.equal(plain.code, "invalid_content_type");
      assert.equal(plain.log.request_body, "model=chat-4o&text=héllo");
      const big = "x".repeat(300 * 1024);
      const cut = await send("text/plain", big);
      assert.ok(cut.log.request_body.startsWith("x".repeat(256 * 1024)) && cut.log.request_body.length < big.length, "cut like any logged body");
    });
  });

  it("selects logs by start and end to the microsecond", async () => {
    const own = await gw.project(Plan.PRO);
    const us = Date.UTC(2026, 10, 20, 12, 0, 0) * 1000 + 123_456; // 12:00:00.123456
    const requestId = `req_micros${Date.now()}`;
    await gw.telemetry.recordRequest({
      log: { requestId, time: timestampFromMicros(us), projectId: own.projectId, keyId: own.liveKeyId, keyMode: KeyMode.LIVE, endpoint: "/v1/chat/completions", model: "chat-4o", status: 200, cache: "MISS" },
    });
    await until(() => get(`/v1/logs/${requestId}`, own.live), (x) => x.status === 200);
    const ids_ = async (q: string) => {
      const res = await get(`/v1/logs?${q}`, own.live);
      assert.equal(res.status, 200, res.text);
      return res.json().data.map((l: { id: string }) => l.id);
    };
    const at = (fraction: string) => encodeURIComponent(`2026-11-20T12:00:00.${fraction}Z`);
    assert.deepEqual(await ids_(`start=${at("123456")}`), [requestId], "start is inclusive");
    assert.deepEqual(await ids_(`start=${at("123457")}`), [], "a row at .123456 is before .123457");
    assert.deepEqual(await ids_(`start=${at("123456001")}`), [], "nanoseconds after the row's microsecond");
    assert.deepEqual(await ids_(`end=${at("123456")}`), [], "end is exclusive");
    assert.deepEqual(await ids_(`end=${at("123457")}`), [requestId]);
    assert.deepEqual(await ids_(`end=${at("1234561")}`), [requestId]);
    assert.deepEqual(await ids_(`start=${encodeURIComponent("2026-11-20T13:00:00.123456+01:00")}`), [requestId], "an offset keeps its microseconds");
    assert.deepEqual(await ids_(`start=${Math.floor(us / 1000)}&end=${Math.floor(us / 1000) + 1}`), [requestId], "milliseconds since the epoch still work");
    // The last microseconds of the year 9999 are times like any other (past the year 2255 a double's microseconds are not exact).
    assert.deepEqual(await ids_(`end=${encodeURIComponent("9999-12-31T23:59:59.999999Z")}`), [requestId]);
    assert.deepEqual(await ids_(`start=${encodeURIComponent("9999-12-31T23:59:59.999990Z")}`), []);
  });

  it("refuses an empty filter value with 400 naming the parameter, rather than ignoring the filter", async () => {
    for (const [path, name] of [
      ["/v1/logs?model=", "model"],
      ["/v1/logs?user_id=", "user_id"],
      ["/v1/logs?model", "model"],
      ["/v1/logs?cursor=", "cursor"],
      ["/v1/logs?endpoint=", "endpoint"],
      ["/v1/prompts?cursor=", "cursor"],
      ["/v1/analytics?group_by=", "group_by"],
    ] as const) {
      const res = await get(path);
      assert.equal(res.status, 400, path);
      assert.deepEqual([res.json().error.type, res.json().error.code], ["invalid_request_error", "invalid_parameter"], path);
      assert.ok(res.json().error.message.includes(`'${name}'`), res.json().error.message);
    }
    // A metadata value may be empty (X-Svc-Metadata {"team":""}): it selects that pair, not everything.
    const own = await gw.project(Plan.PRO);
    const r = await postJson(chatUrl(), own.live, { model: "chat-4o", messages: [{ role: "user", content: "empty team" }] }, { "X-Svc-Metadata": '{"team":""}' });
    await postJson(chatUrl(), own.live, { model: "chat-4o", messages: [{ role: "user", content: "search team" }] }, { "X-Svc-Metadata": '{"team":"search"}' });
    const all = await until(() => get("/v1/logs", own.live), (x) => x.json().data?.length === 2);
    assert.equal(all.json().data.length, 2);
    assert.deepEqual((await get("/v1/logs?metadata.team=", own.live)).json().data.map((l: { id: string }) => l.id), [r.headers["x-svc-request-id"]]);
  });

  it("refuses analytics ranges longer than documented, by one bucket, and takes the documented maximum", async () => {
    const iso = (ms: number) => new Date(ms).toISOString();
    const t = Date.UTC(2026, 9, 1); // aligned to every granularity
    const MIN = 60_000;
    const HOUR = 60 * MIN;
    const DAY = 24 * HOUR;
    for (const [granularity, groupBy, max, step] of [
      ["minute", "", 7 * DAY, MIN],
      ["minute", "&group_by=model", DAY, MIN],
      ["hour", "", 400 * DAY, HOUR],
      ["day", "", 3660 * DAY, DAY],
    ] as const) {
      const q = (span: number, from = t) => `/v1/analytics?granularity=${granularity}${groupBy}&start=${iso(from)}&end=${iso(from + span)}`;
      const ok = await get(q(max));
      assert.equal(ok.status, 200, `${granularity}${groupBy}: the maximum ${ok.text}`);
      const unaligned = await get(q(max, t + step / 2));
      assert.equal(unaligned.status, 200, `${granularity}${groupBy}: the maximum, not aligned ${unaligned.text}`);
      for (const span of [max + step, max + 1000]) {
        const res = await get(q(span));
        assert.equal(res.status, 400, `${granularity}${groupBy}: ${span - max} ms over the maximum`);
        assert.equal(res.json().error.code, "invalid_parameter");
        // Day is the coarsest granularity: the refusal does not send the caller looking for another.
        if (granularity === "day") assert.doesNotMatch(res.json().error.message, /coarser/);
      }
    }
  });

  it("refuses a prompts cursor it did not return, and one of another project", async () => {
    const own = await gw.project(Plan.PRO);
    for (const name of ["alpha", "beta", "gamma"]) await gw.telemetry.putPrompt({ projectId: own.projectId, name, content: `I am ${name}` });
    const page1 = (await get("/v1/prompts?limit=1", own.live)).json();
    assert.deepEqual([page1.data.map((p: { name: string }) => p.name), page1.has_more], [["alpha"], true]);
    const page2 = (await get(`/v1/prompts?limit=1&cursor=${encodeURIComponent(page1.next_cursor)}`, own.live)).json();
    assert.deepEqual(page2.data.map((p: { name: string }) => p.name), ["beta"]);
    const made = [Buffer.from("beta").toString("base64url"), "enp6eg==", "enp6eg", "garbage", Buffer.from("[2,1,\"x\",\"y\"]").toString("base64url"), `${page1.next_cursor}!`];
    for (const cursor of made) {
      const res = await get(`/v1/prompts?cursor=${encodeURIComponent(cursor)}`, own.live);
      assert.equal(res.status, 400, `${cursor}: ${res.text}`);
      assert.deepEqual([res.json().error.type, res.json().error.code], ["invalid_request_error", "invalid_page_token"]);
      assert.ok(res.json().error.message.includes("'cursor'"), res.json().error.message);
    }
    const foreign = await get(`/v1/prompts?cursor=${encodeURIComponent(page1.next_cursor)}`, other.live);
    assert.equal(foreign.status, 400);
    assert.equal(foreign.json().error.code, "invalid_page_token");
    const logCursor = (await get("/v1/logs?limit=1")).json().next_cursor;
    assert.equal((await get(`/v1/prompts?cursor=${encodeURIComponent(logCursor)}`)).status, 400, "a logs cursor is not a prompts cursor");
  });
});

describe("management API: the log of a long answer whose client stopped reading part-way and left", function () {
  this.timeout(120_000);
  // An answer of 60 M characters: more than the connection's buffers hold while the client reads
  // none (a kernel of today lets a loopback receive buffer grow to 32 MiB, tcp_rmem), within the
  // 64 Mi characters a non-stream answer is read up to.
  const on = gatewayOnScriptedUpstream((_body, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "chatcmpl-long", object: "chat.completion", created: 1, model: "gpt-4o", choices: [{ index: 0, message: { role: "assistant", content: "word ".repeat(12_000_000) }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 12_000_000, total_tokens: 12_000_003 } }));
  }, { SVC_TELEMETRY_FLUSH_INTERVAL_MS: "50" });

  it("logs it as 499", async () => {
    const { hostname, port } = new URL(on.gw.gatewayUrl);
    const read = await new Promise<number>((resolve) => {
      const socket = connect({ port: Number(port), host: hostname }, () => socket.write(rawChat(on.key, "a long one")));
      let n = 0;
      socket.on("data", (d: Buffer) => {
        n += d.length;
        if (n >= 64 * 1024) socket.destroy();
      });
      socket.on("error", () => {});
      socket.on("close", () => resolve(n));
    });
    assert.ok(read >= 64 * 1024 && read < 60_000_000, `read ${read} bytes`);
    const get = () => rawRequest(`${on.gw.managementUrl}/v1/logs`, { method: "GET", headers: { authorization: `Bearer ${on.key}` } });
    const rows = (await until(get, (r) => r.status === 200 && r.json().data.length >= 1, 20_000)).json().data as Array<{ status: number; error: { code: string } | null }>;
    assert.deepEqual(rows.map((l) => [l.status, l.error?.code]), [[499, "client_closed_request"]]);
  });
});
