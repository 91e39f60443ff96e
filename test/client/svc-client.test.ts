import assert from "node:assert/strict";
import { createServer } from "node:http";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { createCoreClients, SvcApiError, SvcClient } from "../../src/index.js";
import { Plan } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { REQUEST_ID } from "../../src/core/ids.js";
import { freePort, startRedis, type TestRedis } from "../support/redis.js";

describe("client library: SvcClient and createCoreClients against a running gateway", function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  let svc: SvcClient;

  before(async () => {
    gw = await startTestGateway();
    keys = await gw.project(Plan.PRO);
    svc = new SvcClient({}, { SVC_API_KEY: keys.live, SVC_MANAGEMENT_URL: gw.managementUrl, SVC_GATEWAY_URL: gw.gatewayUrl });
  });
  after(() => gw.close());

  it("reads the key from SVC_API_KEY and refuses to start without one", () => {
    assert.equal(svc.apiKey, keys.live);
    assert.throws(() => new SvcClient({}, {}), /SVC_API_KEY/);
    assert.equal(new SvcClient({ apiKey: "svc_sk_live_x" }, {}).apiKey, "svc_sk_live_x");
  });

  it("takes the addresses `svc serve` prints (with /v1) and its ports, and names the address it cannot reach", async () => {
    const printed = new SvcClient({}, { SVC_API_KEY: keys.live, SVC_MANAGEMENT_URL: `${gw.managementUrl}/v1`, SVC_GATEWAY_URL: `${gw.gatewayUrl}/v1/` });
    assert.equal(printed.gatewayUrl, gw.gatewayUrl);
    assert.equal(printed.openaiOptions().baseURL, `${gw.gatewayUrl}/v1`);
    assert.equal((await printed.logs.list({ limit: 1 })).object, "list");
    const ports = new SvcClient({}, { SVC_API_KEY: keys.live, SVC_MANAGEMENT_PORT: new URL(gw.managementUrl).port, SVC_GATEWAY_PORT: "18999" });
    assert.equal(ports.gatewayUrl, "http://127.0.0.1:18999");
    assert.equal((await ports.logs.list({ limit: 1 })).object, "list");
    const closed = await freePort();
    const nowhere = new SvcClient({}, { SVC_API_KEY: keys.live, SVC_MANAGEMENT_URL: `http://127.0.0.1:${closed}` });
    await assert.rejects(nowhere.logs.list(), new RegExp(`Cannot reach the management API at http://127\\.0\\.0\\.1:${closed} \\(ECONNREFUSED\\).*SVC_MANAGEMENT_URL`));
  });

  it("refuses at once an address it could only fail on later, naming where it came from", () => {
    const key = { apiKey: "svc_sk_live_x" };
    assert.throws(() => new SvcClient(key, { SVC_MANAGEMENT_PORT: "abc" }), /SVC_MANAGEMENT_PORT must be a port from 1 to 65535, got "abc"/);
    assert.throws(() => new SvcClient(key, { SVC_GATEWAY_PORT: "70000" }), /SVC_GATEWAY_PORT must be a port/);
    assert.throws(() => new SvcClient({ ...key, managementUrl: "localhost:8081" }, {}), /\{ managementUrl \} must be an http:\/\/ or https:\/\/ URL/);
    assert.throws(() => new SvcClient(key, { SVC_GATEWAY_URL: "127.0.0.1" }), /SVC_GATEWAY_URL is not a URL/);
    assert.throws(() => new SvcClient({ ...key, gatewayUrl: "http://127.0.0.1:8080/v1?x=1" }, {}), /must not have a query or fragment/);
    // An empty query or fragment parses to none (URL.search and URL.hash are ""), yet every call would go to `/`.
    for (const url of ["http://127.0.0.1:8081/?", "http://127.0.0.1:8081#", "http://127.0.0.1:8081/v1?"]) {
      assert.throws(() => new SvcClient({ ...key, managementUrl: url }, {}), /\{ managementUrl \} must not have a query or fragment/, url);
      assert.throws(() => new SvcClient(key, { SVC_GATEWAY_URL: url }), /SVC_GATEWAY_URL must not have a query or fragment/, url);
      assert.throws(() => createCoreClients({ url, adminToken: "t" }), /\{ url \} must not have a query or fragment/, url);
    }
    assert.throws(() => createCoreClients({ url: "localhost:8090", adminToken: "t" }), /\{ url \} must be an http:\/\/ or https:\/\/ URL/);
    assert.equal(new SvcClient(key, {}).managementUrl, "http://127.0.0.1:8081");
    assert.equal(new SvcClient(key, { SVC_GATEWAY_URL: "https://gw.example.com/v1" }).gatewayUrl, "https://gw.example.com");
    // Padded (a .env file's value), or with a user and password: URL() takes both, every fetch failed.
    assert.throws(() => new SvcClient({ ...key, managementUrl: " http://127.0.0.1:8081 " }, {}), /\{ managementUrl \} must not hold white space/);
    assert.throws(() => new SvcClient(key, { SVC_MANAGEMENT_URL: "http://u:secret@127.0.0.1:8081" }), (e: Error) => /SVC_MANAGEMENT_URL must not hold a user or password/.test(e.message) && !e.message.includes("secret"));
    // The server reads /V1 as /v1: so does the client.
    assert.equal(new SvcClient({ ...key, managementUrl: "http://127.0.0.1:8081/V1/" }, {}).managementUrl, "http://127.0.0.1:8081");
  });

  it("configures the official SDKs for the gateway, and reads their requests back from the logs", async () => {
    const openai = new OpenAI({ ...svc.openaiOptions(), maxRetries: 0 });
    const anthropic = new Anthropic({ ...svc.anthropicOptions(), maxRetries: 0 });
    const { response: r1 } = await openai.chat.completions.create({ model: "chat-4o", messages: [{ role: "user", content: "client lib" }] }).withResponse();
    const { response: r2 } = await anthropic.messages.create({ model: "assistant-3-haiku-20240307", max_tokens: 20, messages: [{ role: "user", content: "client lib" }] }).withResponse();
    const ids = [r2.headers.get("x-svc-request-id"), r1.headers.get("x-svc-request-id")];
    let page = await svc.logs.list();
    for (let i = 0; i < 50 && page.data.length < 2; i++) {
      await new Promise((r) => setTimeout(r, 100));
      page = await svc.logs.list();
    }
    assert.deepEqual(page.data.map((l) => l.id), ids);
    const full = await svc.logs.get(ids[0]!);
    assert.equal(full.endpoint, "/v1/messages");
    assert.ok(full.request_body?.includes("client lib"));
    const all = [];
    for await (const l of svc.logs.all({ limit: 1 })) all.push(l.id);
    assert.deepEqual(all, ids);
    const a = await svc.analytics({ granularity: "minute", groupBy: "model" });
    assert.equal(a.totals.requests, 2);
  });

  it("throws SvcApiError with the spec's status, type and code, and the answer's request id", async () => {
    const ids: string[] = [];
    const withId = (status: number, field: "type" | "code", value: string) => (e: unknown) => {
      assert.ok(e instanceof SvcApiError, String(e));
      assert.deepEqual([e.status, e[field]], [status, value]);
      assert.match(e.requestId ?? "undefined", REQUEST_ID, "the X-Svc-Request-Id of the error answer");
      assert.equal(e.retryAfterSeconds, undefined, "no Retry-After on this answer");
      ids.push(e.requestId!);
      return true;
    };
    await assert.rejects(svc.logs.get("req_nope"), withId(404, "type", "not_found_error"));
    await assert.rejects(svc.prompts.get("nope"), withId(404, "code", "prompt_not_found"));
    const bad = new SvcClient({ apiKey: "svc_sk_live_wrong", managementUrl: gw.managementUrl });
    await assert.rejects(bad.logs.list(), withId(401, "code", "invalid_api_key"));
    assert.equal(new Set(ids).size, 3, "each answer's own id");
    // Refused without a request: no id, no Retry-After.
    await assert.rejects(svc.prompts.get(""), (e: unknown) => e instanceof SvcApiError && e.status === 400 && e.requestId === undefined && e.retryAfterSeconds === undefined);
  });

  it("sends an empty or zero value as given, so the API's refusal reaches the caller instead of a listing of every row", async () => {
    const core = createCoreClients({ url: gw.grpcUrl, adminToken: gw.adminToken });
    await core.telemetry.putPrompt({ projectId: keys.projectId, name: "empty-values", content: "v1" });
    const refused = (param: string) => (e: unknown) =>
      e instanceof SvcApiError && e.status === 400 && e.code === "invalid_parameter" && e.message.includes(`'${param}'`);
    const cases: Array<[string, () => Promise<unknown>]> = [
      ["model", () => svc.logs.list({ model: "" })],
      ["limit", () => svc.logs.list({ limit: 0 })],
      ["cursor", () => svc.logs.list({ cursor: "" })],
      ["status", () => svc.logs.list({ status: "" })],
      ["user_id", () => svc.logs.list({ userId: "" })],
      ["start", () => svc.logs.list({ start: "" })],
      ["end", () => svc.logs.list({ end: new Date(NaN) })],
      ["endpoint", () => svc.logs.list({ endpoint: "" as "messages" })],
      ["cache", () => svc.logs.list({ cache: "" as "hit" })],
      ["cursor", () => svc.logs.all({ cursor: "" })[Symbol.asyncIterator]().next()],
      ["granularity", () => svc.analytics({ granularity: "" as "hour" })],
      ["group_by", () => svc.analytics({ groupBy: "" })],
      ["start", () => svc.analytics({ start: "" })],
      ["limit", () => svc.prompts.list({ limit: 0 })],
      ["cursor", () => svc.prompts.list({ cursor: "" })],
      ["version", () => svc.prompts.get("empty-values", 0)],
      ["id", () => svc.logs.get("")],
      ["name", () => svc.prompts.get("")],
      // A dot segment would be dropped by URL parsing: the listing, taken for the record.
      ["id", () => svc.logs.get(".")],
      ["id", () => svc.logs.get("..")],
      ["name", () => svc.prompts.get(".")],
      ["name", () => svc.prompts.get("..")],
      // Not a time: sent as written, refused by the API, never made into another time.
      ["start", () => svc.logs.list({ start: 1.5 })],
      ["start", () => svc.logs.list({ start: -1 })],
      ["start", () => svc.logs.list({ start: null as unknown as number })],
      ["end", () => svc.analytics({ end: -1 })],
    ];
    for (const [param, call] of cases) await assert.rejects(call(), refused(param), `${param}: ${call}`);
    // 0 is a time like any other (the epoch), not "no start".
    const epoch = await svc.analytics({ start: 0, end: 86_400_000 * 2, granularity: "day" });
    assert.equal(epoch.start, "1970-01-01T00:00:00.000Z");
  });

  it("reaches the core services over gRPC with the admin token (prompts, then read through the management API)", async () => {
    const core = createCoreClients({ url: gw.grpcUrl, adminToken: gw.adminToken });
    await core.telemetry.putPrompt({ projectId: keys.projectId, name: "welcome", content: "Hello!" });
    const p = await svc.prompts.get("welcome");
    assert.equal(p.content, "Hello!");
    assert.equal(p.version, 1);
    const { project } = await core.auth.getProject({ projectId: keys.projectId });
    assert.equal(project!.id, keys.projectId);
  });
});

describe("client library: SvcApiError while the prompts' Redis is down (cluster mode)", function () {
  this.timeout(60_000);
  let redis: TestRedis;
  let gw: TestGateway;
  before(async () => {
    redis = await startRedis();
    gw = await startTestGateway({ SVC_REDIS_URL: redis.url });
  });
  after(async () => {
    await gw?.close();
    await redis?.stop();
  });

  it("gives the 503's Retry-After as retryAfterSeconds, with its request id", async () => {
    const keys = await gw.project(Plan.PRO);
    const svc = new SvcClient({ apiKey: keys.live, managementUrl: gw.managementUrl });
    await assert.rejects(svc.prompts.get("nope"), (e: unknown) => e instanceof SvcApiError && e.status === 404); // the key is now known to this replica
    await redis.stop();
    for (const call of [() => svc.prompts.list(), () => svc.prompts.get("nope")]) {
      await assert.rejects(call(), (e: unknown) => {
        assert.ok(e instanceof SvcApiError, String(e));
        assert.deepEqual([e.status, e.type, e.code], [503, "api_error", "prompts_unavailable"], e.message);
        assert.equal(e.retryAfterSeconds, 1, "Retry-After: 1");
        assert.match(e.requestId ?? "undefined", REQUEST_ID);
        return true;
      });
    }
  });
});

describe("client library: SvcApiError's Retry-After as an HTTP date, and an answer without headers", () => {
  it("reads an HTTP-date Retry-After as the seconds until then, and leaves what an answer did not say undefined", async () => {
    // A server in front of the API (a proxy) may say Retry-After as a date, or send neither header.
    const answers = [
      { "retry-after": new Date(Date.now() + 30_000).toUTCString(), "x-svc-request-id": "req_fromaproxy000000000000" },
      { "retry-after": new Date(Date.now() - 60_000).toUTCString() },
      { "retry-after": "soon" },
      {},
    ];
    let n = 0;
    const srv = createServer((_req, res) => {
      res.writeHead(503, { "content-type": "application/json", ...answers[n++] });
      res.end(JSON.stringify({ error: { message: "busy", type: "api_error", code: "overloaded" } }));
    });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    try {
      const svc = new SvcClient({ apiKey: "svc_sk_live_x", managementUrl: `http://127.0.0.1:${(srv.address() as { port: number }).port}` }, {});
      const seen: Array<[number | undefined, string | undefined]> = [];
      for (let i = 0; i < answers.length; i++) {
        await assert.rejects(svc.prompts.list(), (e: unknown) => {
          assert.ok(e instanceof SvcApiError && e.status === 503, String(e));
          seen.push([e.retryAfterSeconds, e.requestId]);
          return true;
        });
      }
      const [date, ...rest] = seen;
      assert.ok(date![0]! >= 28 && date![0]! <= 30, `about 30 s, got ${date![0]}`);
      assert.equal(date![1], "req_fromaproxy000000000000");
      assert.deepEqual(rest, [[0, undefined], [undefined, undefined], [undefined, undefined]]);
    } finally {
      await new Promise((r) => srv.close(r));
    }
  });
});
