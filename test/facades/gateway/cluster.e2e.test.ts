import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { Redis } from "ioredis";
import { toErrorInfo } from "../../../src/core/errors.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { replicasOnOneRedis } from "../../support/gateway.js";
import { eventually, postJson, rawRequest } from "../../support/http.js";
import { captureLog } from "../../support/log-capture.js";

const body = { model: "chat-4o-mini", messages: [{ role: "user", content: "hi" }] };

describe("cluster mode: two gateway replicas sharing one Redis registry", () => {
  const replicas = replicasOnOneRedis();

  it("accepts on one replica a key created through the other", async () => {
    const { a, b } = replicas;
    const keys = await a.project();
    const res = await postJson(`${b.gatewayUrl}/v1/chat/completions`, keys.live, body);
    assert.equal(res.status, 200, res.text);
  });

  it("rejects on every replica a key deleted through one, on the very next request", async () => {
    const { a, b } = replicas;
    const keys = await a.project();
    assert.equal((await postJson(`${b.gatewayUrl}/v1/chat/completions`, keys.live, body)).status, 200);
    await b.admin.deleteKey({ keyId: keys.liveKeyId });
    assert.equal((await postJson(`${a.gatewayUrl}/v1/chat/completions`, keys.live, body)).status, 401);
    assert.equal((await postJson(`${b.gatewayUrl}/v1/chat/completions`, keys.live, body)).status, 401);
  });

  it("keeps serving while Redis is full: hits, misses not stored, keys never verified; each replica logs it once per subsystem, and its end once", async function () {
    this.timeout(30_000);
    const { a, b, redis } = replicas;
    const keys = await a.project();
    const cold = await a.admin.createKey({ projectId: keys.projectId, mode: KeyMode.LIVE }); // used first while full
    const url = (i: number) => `${(i % 2 ? a : b).gatewayUrl}/v1/chat/completions`;
    const cached = { ...body, messages: [{ role: "user", content: `full redis ${Date.now()}` }] };
    assert.equal((await postJson(url(0), keys.live, cached)).headers["x-svc-cache"], "MISS");
    assert.equal((await postJson(url(1), keys.live, cached)).headers["x-svc-cache"], "HIT");
    const raw = new Redis(redis.url);
    try {
      const lines = await captureLog(async (sofar) => {
        await raw.config("SET", "maxmemory", "1"); // full: every write refused, reads and PING answered
        try {
          const end = Date.now() + 3_000; // long enough for PINGs a second apart
          for (let i = 0; Date.now() < end; i++) {
            const unique = { ...body, messages: [{ role: "user", content: `full redis ${Date.now()} ${i}` }] };
            const [hit, miss, coldRes] = await Promise.all([
              postJson(url(i), keys.live, cached),
              postJson(url(i), keys.live, unique),
              postJson(url(i + 1), cold.secret, { ...unique, temperature: 0.5 }),
            ]);
            assert.equal(hit.status, 200, hit.text);
            assert.equal(hit.headers["x-svc-cache"], "HIT", "a full Redis still serves hits");
            assert.equal(miss.status, 200, miss.text);
            assert.equal(miss.headers["x-svc-cache"], "MISS");
            assert.equal(coldRes.status, 200, `a key never verified: ${coldRes.text}`);
            await new Promise((r) => setTimeout(r, 100));
          }
          const unique = { ...body, messages: [{ role: "user", content: `full redis not stored ${Date.now()}` }] };
          assert.equal((await postJson(url(0), keys.live, unique)).status, 200);
          assert.equal((await postJson(url(1), keys.live, unique)).headers["x-svc-cache"], "MISS", "nothing is stored while full");
        } finally {
          await raw.config("SET", "maxmemory", "0");
        }
        const ended = (name: string) => sofar.filter((l) => l.includes(`redis accepts writes again (${name})`)).length === 2;
        await eventually(() => ended("cache") && ended("limits"), 5_000, "both replicas' cache and limits to log the end");
      });
      const count = (text: string) => lines.filter((l) => l.includes(text)).length;
      for (const name of ["cache", "limits"]) {
        assert.equal(count(`redis refuses writes (${name})`), 2, `one line per replica\n${lines.join("")}`);
        assert.equal(count(`redis accepts writes again (${name})`), 2, lines.join(""));
      }
      assert.equal(count("redis refuses writes (registry)"), 0, "serving requests writes nothing to the registry");
      assert.equal(count("redis unreachable"), 0, lines.join(""));
      assert.equal(count("redis is back"), 0, lines.join(""));
      const unique = { ...body, messages: [{ role: "user", content: `full redis after ${Date.now()}` }] };
      assert.equal((await postJson(url(0), keys.live, unique)).headers["x-svc-cache"], "MISS");
      assert.equal((await postJson(url(1), keys.live, unique)).headers["x-svc-cache"], "HIT", "stored again once Redis has room");
    } finally {
      await raw.config("SET", "maxmemory", "0");
      raw.disconnect();
    }
  });

  it("serves prompts while Redis is full (listing and the latest version were 500s), and refuses a put 503 prompts_unavailable, storing nothing", async function () {
    this.timeout(30_000);
    const { a, b, redis } = replicas;
    const keys = await a.project();
    await a.telemetry.putPrompt({ projectId: keys.projectId, name: "greeting", content: "Hello", description: "v1" });
    await b.telemetry.putPrompt({ projectId: keys.projectId, name: "greeting", content: "Hello {{name}}", description: "v2" });
    const get = (path: string) => rawRequest(`${b.managementUrl}${path}`, { method: "GET", headers: { authorization: `Bearer ${keys.live}` } });
    const raw = new Redis(redis.url);
    try {
      await raw.config("SET", "maxmemory", "1"); // full: every write refused, reads answered
      const list = await get("/v1/prompts");
      assert.equal(list.status, 200, list.text);
      assert.deepEqual(list.json().data.map((p: { name: string; version: number }) => [p.name, p.version]), [["greeting", 2]]);
      const latest = await get("/v1/prompts/greeting");
      assert.equal(latest.status, 200, latest.text);
      assert.deepEqual([latest.json().version, latest.json().content], [2, "Hello {{name}}"]);
      assert.equal((await get("/v1/prompts/greeting?version=1")).json().content, "Hello");
      assert.equal((await a.telemetry.listPrompts({ projectId: keys.projectId })).prompts.length, 1);
      for (const name of ["greeting", "new"]) {
        await assert.rejects(a.telemetry.putPrompt({ projectId: keys.projectId, name, content: "refused" }), (e: unknown) => {
          assert.ok(e instanceof ConnectError, String(e));
          assert.equal(e.code, Code.Unavailable, e.rawMessage);
          const info = toErrorInfo(e);
          assert.deepEqual([info.status, info.type, info.code], [503, "api_error", "prompts_unavailable"]);
          assert.match(info.message, /refuses writes.*nothing was stored/);
          return true;
        });
      }
    } finally {
      await raw.config("SET", "maxmemory", "0");
      raw.disconnect();
    }
    const list = (await get("/v1/prompts")).json();
    assert.deepEqual(list.data.map((p: { name: string; version: number }) => [p.name, p.version]), [["greeting", 2]], "nothing stored while full");
    assert.equal((await a.telemetry.putPrompt({ projectId: keys.projectId, name: "greeting", content: "Hi" })).prompt?.version, 3);
  });
});
