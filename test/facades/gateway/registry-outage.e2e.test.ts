import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { Code, ConnectError } from "@connectrpc/connect";
import { Redis } from "ioredis";
import OpenAI from "openai";
import { toErrorInfo } from "../../../src/core/errors.js";
import { createTelemetryAdminClient } from "../../../src/cli/admin-client.js";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson, rawRequest, type RawResponse } from "../../support/http.js";
import { captureLog } from "../../support/log-capture.js";
import { startRedis, type TestRedis } from "../../support/redis.js";

let n = 0;
const chat = () => ({ model: "chat-4o-mini", messages: [{ role: "user" as const, content: `registry outage ${Date.now()} ${++n}` }] });
const messages = () => ({ model: "assistant-3-5-haiku-20241022", max_tokens: 16, messages: [{ role: "user" as const, content: `registry outage ${Date.now()} ${++n}` }] });

/** The registry's records, to put back into a restarted Redis (the test Redis keeps nothing on disk). */
async function dumpRegistry(url: string): Promise<Array<[string, Buffer]>> {
  const raw = new Redis(url);
  try {
    const keys = await raw.keys("{svc:reg}:*");
    return await Promise.all(keys.map(async (k) => [k, (await raw.dumpBuffer(k))!] as [string, Buffer]));
  } finally {
    raw.disconnect();
  }
}

async function restoreRegistry(url: string, dump: Array<[string, Buffer]>): Promise<void> {
  const raw = new Redis(url);
  try {
    for (const [k, v] of dump) await raw.restore(k, 0, v, "REPLACE");
  } finally {
    raw.disconnect();
  }
}

/** The spec's error object, exactly, with the registry's 503. */
function assertAuthUnavailable(res: RawResponse, what: string): void {
  assert.equal(res.status, 503, `${what}: ${res.text}`);
  assert.deepEqual(Object.keys(res.json().error).sort(), ["code", "message", "type"], what);
  assert.equal(res.json().error.type, "api_error", what);
  assert.equal(res.json().error.code, "auth_unavailable", what);
  assert.equal(res.headers["retry-after"], "1", `${what}: Retry-After`);
  assert.doesNotMatch(res.text, /redis|\bat \w|\.ts\b|Error:/i, `${what}: no internals in the body`);
}

/** Asserts a core call failed with Connect code `unavailable` and the spec's 503 auth_unavailable. */
const unavailable = (what: string) => (e: unknown) => {
  assert.ok(e instanceof ConnectError, `${what}: ${String(e)}`);
  assert.equal(e.code, Code.Unavailable, `${what}: Connect code ${Code[e.code]} (${e.rawMessage})`);
  const info = toErrorInfo(e);
  assert.equal(info.status, 503, what);
  assert.equal(info.type, "api_error", what);
  assert.equal(info.code, "auth_unavailable", what);
  return true;
};

describe("a Redis registry outage: keys the gateway has not verified yet, and admin calls", function () {
  this.timeout(60_000);
  let redis: TestRedis;
  let gw: TestGateway;
  /** The registry as it was when Redis was stopped; undefined while Redis runs. */
  let stopped: Array<[string, Buffer]> | undefined;

  /** Stops Redis (SIGKILL), keeping its registry to put back. */
  const stopRedis = async () => {
    stopped = await dumpRegistry(redis.url);
    await redis.stop();
  };
  /** Starts Redis again on its port with the registry it had, as a persistent Redis would. */
  const restartRedis = async () => {
    redis = await startRedis(redis.port);
    await restoreRegistry(redis.url, stopped!);
    stopped = undefined;
  };

  before(async () => {
    redis = await startRedis();
    gw = await startTestGateway({ SVC_REDIS_URL: redis.url });
  });
  afterEach(async () => {
    if (stopped) await restartRedis();
  });
  after(async () => {
    await gw?.close();
    await redis?.stop();
  });

  it("answers an unseen key 503 auth_unavailable with Retry-After on both endpoints, logs the outage once, and serves the key once Redis is back", async () => {
    const seen = await gw.project(Plan.PRO);
    const unseen = await gw.project(Plan.PRO); // created while Redis is up, never sent to the gateway
    assert.equal((await postJson(`${gw.gatewayUrl}/v1/chat/completions`, seen.live, chat())).status, 200);

    const lines = await captureLog(async () => {
      await stopRedis();
      // The first request may meet a connection not yet known to be lost; it is a 503 all the same.
      for (const key of [unseen.live, unseen.test, unseen.live]) {
        assertAuthUnavailable(await postJson(`${gw.gatewayUrl}/v1/chat/completions`, key, chat()), "chat completions");
      }
      assertAuthUnavailable(await postJson(`${gw.gatewayUrl}/v1/messages`, unseen.live, messages()), "messages");
      // The management API verifies its key with the same registry.
      assertAuthUnavailable(await rawRequest(`${gw.managementUrl}/v1/logs`, { method: "GET", headers: { authorization: `Bearer ${unseen.live}` } }), "management API");

      const started = Date.now();
      const openai = new OpenAI({ apiKey: unseen.live, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
      await assert.rejects(openai.chat.completions.create(chat() as OpenAI.ChatCompletionCreateParamsNonStreaming), (e: unknown) => {
        assert.ok(e instanceof OpenAI.InternalServerError, String(e));
        assert.equal(e.status, 503);
        assert.equal(e.code, "auth_unavailable");
        assert.equal(e.type, "api_error");
        assert.equal(e.headers.get("retry-after"), "1");
        return true;
      });
      const anthropic = new Anthropic({ apiKey: unseen.live, baseURL: gw.gatewayUrl, maxRetries: 0 });
      await assert.rejects(anthropic.messages.create(messages()), (e: unknown) => e instanceof Anthropic.InternalServerError && e.status === 503);
      assert.ok(Date.now() - started < 1_000, `known to be down, a request fails at once (took ${Date.now() - started} ms)`);

      // A key verified before the outage is still served from memory.
      assert.equal((await postJson(`${gw.gatewayUrl}/v1/chat/completions`, seen.live, chat())).status, 200);
    });
    assert.deepEqual(lines.filter((l) => /"level":"error"/.test(l)), [], "no request is logged as an internal error");
    assert.equal(lines.filter((l) => l.includes("redis unreachable (registry)")).length, 1, "the outage is logged once");

    // Redis back (with its data, as a persistent Redis would be): the same key works, no restart.
    await restartRedis();
    await eventually(async () => (await postJson(`${gw.gatewayUrl}/v1/chat/completions`, unseen.live, chat())).status === 200, 20_000, "the unseen key to be served");
    assert.equal((await postJson(`${gw.gatewayUrl}/v1/messages`, unseen.live, messages())).status, 200);
    const openai = new OpenAI({ apiKey: unseen.live, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
    const done = await openai.chat.completions.create(chat() as OpenAI.ChatCompletionCreateParamsNonStreaming);
    assert.equal(done.object, "chat.completion");
  });

  it("answers prompt calls 503 prompts_unavailable at once while Redis is down (they waited out retries, then were 500s), and serves them once it is back", async () => {
    await eventually(async () => (await gw.admin.listProjects({}).then(() => true, () => false)), 20_000, "admin calls to work");
    const keys = await gw.project(Plan.PRO);
    await gw.telemetry.putPrompt({ projectId: keys.projectId, name: "greeting", content: "Hello {{name}}" });
    const prompts = () => rawRequest(`${gw.managementUrl}/v1/prompts/greeting`, { method: "GET", headers: { authorization: `Bearer ${keys.live}` } });
    assert.equal((await prompts()).status, 200); // the key is now known to this replica
    await stopRedis();
    const lines = await captureLog(async () => {
      const started = Date.now();
      for (const [call, put] of [
        [() => gw.telemetry.getPrompt({ projectId: keys.projectId, name: "greeting" }), false],
        [() => gw.telemetry.listPrompts({ projectId: keys.projectId }), false],
        [() => gw.telemetry.putPrompt({ projectId: keys.projectId, name: "greeting", content: "Hi" }), true],
      ] as const) {
        await assert.rejects(call(), (e: unknown) => {
          assert.ok(e instanceof ConnectError, String(e));
          assert.equal(e.code, Code.Unavailable, e.rawMessage);
          assert.equal(toErrorInfo(e).code, "prompts_unavailable");
          // Only a put is told that it may have been stored all the same.
          assert.equal(/put may have been stored/.test(e.rawMessage), put, e.rawMessage);
          return true;
        });
      }
      const res = await prompts();
      assert.equal(res.status, 503, res.text);
      assert.equal(res.json().error.code, "prompts_unavailable");
      assert.equal(res.headers["retry-after"], "1");
      // On the core port too (`svc prompts`' way): Retry-After under its own name, not the name it rides under inside the gateway.
      const net = createTelemetryAdminClient({ server: gw.grpcUrl, token: gw.adminToken });
      await assert.rejects(net.listPrompts({ projectId: keys.projectId }), (e: unknown) => {
        assert.ok(e instanceof ConnectError, String(e));
        assert.equal(toErrorInfo(e).code, "prompts_unavailable");
        assert.equal(e.metadata.get("retry-after"), "1");
        assert.deepEqual([...e.metadata.keys()].filter((k) => k.startsWith("svc-upstream-")), []);
        return true;
      });
      assert.ok(Date.now() - started < 5_000, `refused at once (took ${Date.now() - started} ms)`);
    });
    assert.deepEqual(lines.filter((l) => /"level":"error"/.test(l)), [], "not an internal error");
    await restartRedis(); // with the registry only: the prompt itself is gone from this test Redis
    await eventually(async () => (await prompts()).status === 404, 20_000, "prompt calls to be answered again");
    await gw.telemetry.putPrompt({ projectId: keys.projectId, name: "greeting", content: "Hello again" });
    assert.equal((await prompts()).json().content, "Hello again");
  });

  it("fails admin calls and VerifyKey over gRPC with Connect code unavailable (503 auth_unavailable), at once and applying nothing", async () => {
    // After the previous test Redis may still be reconnecting: wait until admin calls work.
    await eventually(async () => (await gw.admin.listProjects({}).then(() => true, () => false)), 20_000, "admin calls to work");
    const keys = await gw.project(Plan.FREE); // its project is now known to this replica (key creation read it)
    const { project: unread } = await gw.admin.createProject({ name: "unread", plan: Plan.PRO });
    await stopRedis();
    const started = Date.now();
    await assert.rejects(gw.admin.verifyKey({ secret: keys.live }), unavailable("VerifyKey"));
    await assert.rejects(gw.admin.createProject({ name: "during", plan: Plan.PRO }), unavailable("CreateProject"));
    await assert.rejects(gw.admin.getProject({ projectId: unread!.id }), unavailable("GetProject"));
    // Like a verified key, a project read before is answered from memory.
    assert.equal((await gw.admin.getProject({ projectId: keys.projectId })).project?.plan, Plan.FREE);
    await assert.rejects(gw.admin.listProjects({}), unavailable("ListProjects"));
    await assert.rejects(gw.admin.updateProject({ projectId: keys.projectId, plan: Plan.ENTERPRISE }), unavailable("UpdateProject"));
    await assert.rejects(gw.admin.createKey({ projectId: keys.projectId, mode: KeyMode.LIVE }), unavailable("CreateKey"));
    await assert.rejects(gw.admin.listKeys({ projectId: keys.projectId }), unavailable("ListKeys"));
    await assert.rejects(gw.admin.deleteKey({ keyId: keys.liveKeyId }), unavailable("DeleteKey"));
    assert.ok(Date.now() - started < 5_000, `admin calls took ${Date.now() - started} ms`);

    await restartRedis();
    await eventually(async () => (await gw.admin.listProjects({}).then(() => true, () => false)), 20_000, "admin calls to work again");
    // Nothing refused during the outage was applied once Redis came back.
    const projects = await gw.admin.listProjects({});
    assert.ok(!projects.projects.some((p) => p.name === "during"));
    assert.equal((await gw.admin.getProject({ projectId: keys.projectId })).project?.plan, Plan.FREE);
    assert.equal((await gw.admin.listKeys({ projectId: keys.projectId })).keys.length, 2);
    assert.equal((await gw.admin.verifyKey({ secret: keys.live })).project?.id, keys.projectId);
  });
});
