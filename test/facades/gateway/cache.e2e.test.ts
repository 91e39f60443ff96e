import assert from "node:assert/strict";
import { request } from "node:http";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { cacheKeyOf } from "../../../src/core/cache/cache-key.js";
import { chatCompletionsCodec } from "../../../src/facades/gateway/chat-completions-codec.js";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson, sendAndLeave, sseEvents } from "../../support/http.js";
import { startRedis, type TestRedis } from "../../support/redis.js";
import { processesOnOneRedis } from "../../support/svc-cli.js";
import { createAdminClient } from "../../../src/cli/admin-client.js";
import { toBinary } from "@bufbuild/protobuf";
import { completion, contentBlock } from "../../../src/core/proxy/canonical.js";
import { BlockType, CompletionSchema, FinishReason } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";

let n = 0;
/** A prompt no other test sends, so its first request is a miss. */
const fresh = (extra = "") => `cache test ${process.pid}-${Date.now()}-${++n} ${extra}`.trim();
const chat = (content: string, more: object = {}) => ({ model: "chat-4o-mini", messages: [{ role: "user", content }], ...more });

for (const mode of ["memory", "redis"] as const) {
  describe(`response cache (${mode} store, real HTTP, official SDKs)`, function () {
    this.timeout(30_000);
    let redis: TestRedis | undefined;
    let gw: TestGateway;
    let keys: Awaited<ReturnType<TestGateway["project"]>>;
    let url: string;
    /** Upstream calls whose body holds `marker`. */
    const upstreamCalls = (marker: string) => gw.demo!.requests.filter((r) => JSON.stringify(r.body).includes(marker)).length;

    before(async () => {
      if (mode === "redis") redis = await startRedis();
      gw = await startTestGateway(redis ? { SVC_REDIS_URL: redis.url } : {});
      keys = await gw.project(Plan.ENTERPRISE);
      url = `${gw.gatewayUrl}/v1/chat/completions`;
    });
    after(async () => {
      await gw.close();
      await redis?.stop();
    });

    it("answers an identical request from the cache: HIT, cost 0, same answer, no upstream call", async () => {
      const p = fresh();
      const a = await postJson(url, keys.live, chat(p));
      const b = await postJson(url, keys.live, chat(p));
      assert.equal(a.status, 200, a.text);
      assert.equal(a.headers["x-svc-cache"], "MISS");
      assert.notEqual(a.headers["x-svc-cost"], "0");
      assert.equal(b.headers["x-svc-cache"], "HIT");
      assert.equal(b.headers["x-svc-cost"], "0");
      assert.deepEqual(b.json().choices, a.json().choices);
      assert.deepEqual(b.json().usage, a.json().usage);
      assert.equal(upstreamCalls(p), 1);
    });

    it("answers an answer holding a lone surrogate alike every time: it is not stored (the cache's UTF-8 would bring back U+FFFD)", async () => {
      const p = fresh();
      // JSON.stringify writes the lone surrogate as the escape "\ud800"; the demo upstream echoes it.
      const a = await postJson(url, keys.live, chat(`${p} \ud800 end`));
      const b = await postJson(url, keys.live, chat(`${p} \ud800 end`));
      assert.equal(a.status, 200, a.text);
      assert.equal(b.status, 200, b.text);
      assert.match(a.text, /\\ud800 end/, "the miss passes the upstream's lone surrogate on");
      assert.equal(a.json().choices[0].message.content, `Echo: ${p} \ud800 end`);
      assert.equal(b.json().choices[0].message.content, a.json().choices[0].message.content);
      assert.deepEqual([a.headers["x-svc-cache"], b.headers["x-svc-cache"]], ["MISS", "MISS"]);
      assert.equal(upstreamCalls(p), 2);
    });

    it("answers an entry it cannot decode (another build's, or damaged) as a miss from the upstream, and stores a good one over it", async () => {
      const p = fresh();
      const body = chat(p);
      const cacheKey = cacheKeyOf(chatCompletionsCodec.parseRequest(body));
      // The in-process client stores what it is given (the core port refuses such a payload).
      await gw.cache.putEntry({ projectId: keys.projectId, keyMode: KeyMode.LIVE, cacheKey, payload: new Uint8Array([0, 1, 2, 254, 255]), costUsd: "0", ttlSeconds: 0 });
      const a = await postJson(url, keys.live, body);
      assert.equal(a.status, 200, a.text);
      assert.equal(a.headers["x-svc-cache"], "MISS");
      assert.equal(a.json().choices[0].message.content, `Echo: ${p}`);
      const b = await postJson(url, keys.live, body);
      assert.equal(b.headers["x-svc-cache"], "HIT");
      assert.deepEqual(b.json().choices, a.json().choices);
      assert.equal(upstreamCalls(p), 1);
    });

    it("answers an entry naming another model (put on the core port) as a miss, never in that model's name", async () => {
      const p = fresh();
      const body = chat(p);
      const cacheKey = cacheKeyOf(chatCompletionsCodec.parseRequest(body));
      const other = completion({ id: "chatcmpl-other", model: "chat-4", finishReason: FinishReason.END_TURN, blocks: [contentBlock({ type: BlockType.TEXT, text: "another model's" })] });
      await gw.cache.putEntry({ projectId: keys.projectId, keyMode: KeyMode.LIVE, cacheKey, payload: toBinary(CompletionSchema, other), costUsd: "0", ttlSeconds: 0 });
      const a = await postJson(url, keys.live, body);
      assert.equal(a.headers["x-svc-cache"], "MISS");
      assert.equal(a.json().model, body.model);
      assert.equal(a.json().choices[0].message.content, `Echo: ${p}`);
    });

    it("refuses a deleted key on its very next request, though its answer is cached and its key was just used", async () => {
      const own = await gw.project(Plan.ENTERPRISE);
      const p = fresh();
      assert.equal((await postJson(url, own.live, chat(p))).headers["x-svc-cache"], "MISS");
      assert.equal((await postJson(url, own.live, chat(p))).headers["x-svc-cache"], "HIT");
      await gw.admin.deleteKey({ keyId: own.liveKeyId });
      const after = await postJson(url, own.live, chat(p));
      assert.equal(after.status, 401, after.text);
      assert.equal(after.json().error.code, "invalid_api_key");
      assert.equal(after.headers["x-svc-cache"], "MISS");
      // Whatever the body: the key is judged first.
      const bad = await postJson(url, own.live, { model: "chat-4o-mini" });
      assert.equal(bad.status, 401, bad.text);
    });

    it("keys on the canonical request: key order and default-valued parameters do not matter", async () => {
      const p = fresh();
      await postJson(url, keys.live, { messages: [{ content: p, role: "user" }], model: "chat-4o-mini" });
      const b = await postJson(url, keys.live, chat(p, { temperature: 1, top_p: 1, n: 1 }));
      assert.equal(b.headers["x-svc-cache"], "HIT");
      const c = await postJson(url, keys.live, chat(p, { temperature: 0.2 }));
      assert.equal(c.headers["x-svc-cache"], "MISS", "a different temperature is a different request");
    });

    it("serves a non-stream answer to a stream request as SSE the openai SDK parses", async () => {
      const p = fresh();
      const first = await postJson(url, keys.live, chat(p));
      const client = new OpenAI({ apiKey: keys.live, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
      const { data: stream, response } = await client.chat.completions.create({ ...chat(p), stream: true } as OpenAI.ChatCompletionCreateParamsStreaming).withResponse();
      let text = "";
      let finish: string | null = null;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? "";
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      assert.equal(response.headers.get("x-svc-cache"), "HIT");
      assert.equal(text, first.json().choices[0].message.content);
      assert.equal(finish, "stop");
      assert.equal(upstreamCalls(p), 1);
    });

    it("caches a streamed answer and serves it as JSON, with the cost trailer 0 on a streamed hit", async () => {
      const p = fresh();
      const streamed = await postJson(url, keys.live, chat(p, { stream: true }));
      assert.equal(streamed.headers["x-svc-cache"], "MISS");
      const text = sseEvents(streamed.text)
        .filter((e) => e.data !== "[DONE]")
        .map((e) => JSON.parse(e.data).choices[0]?.delta?.content ?? "")
        .join("");
      const json = await postJson(url, keys.live, chat(p));
      assert.equal(json.headers["x-svc-cache"], "HIT");
      assert.equal(json.json().choices[0].message.content, text);
      const again = await postJson(url, keys.live, chat(p, { stream: true }));
      assert.equal(again.headers["x-svc-cache"], "HIT");
      assert.equal(again.trailers["x-svc-cost"], "0");
      assert.equal(again.headers["x-svc-cost"], "0", "a hit's cost is known up front: a header too, for clients that cannot read trailers");
      assert.equal(streamed.headers["x-svc-cost"], undefined, "a live stream's cost comes only in the trailer");
      assert.ok(again.text.trimEnd().endsWith("data: [DONE]"));
      assert.equal(upstreamCalls(p), 1);
    });

    it("serves a streamed hit the openai SDK's stream helper assembles as it did the live stream", async () => {
      const p = fresh();
      const client = new OpenAI({ apiKey: keys.live, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0 });
      const assembled = async () => {
        const stream = client.chat.completions.stream(chat(p) as OpenAI.ChatCompletionCreateParamsStreaming);
        return (await stream.finalChatCompletion()).choices[0];
      };
      const live = await assembled();
      const hit = await assembled();
      assert.equal(upstreamCalls(p), 1, "the second is a hit");
      assert.deepEqual(hit, live);
    });

    it("skips the lookup with X-Svc-Cache-Control: no-cache but stores the fresh answer", async () => {
      const p = fresh();
      await postJson(url, keys.live, chat(p));
      const b = await postJson(url, keys.live, chat(p), { "X-Svc-Cache-Control": "no-cache" });
      assert.equal(b.headers["x-svc-cache"], "MISS");
      assert.equal(upstreamCalls(p), 2);
      const c = await postJson(url, keys.live, chat(p));
      assert.equal(c.headers["x-svc-cache"], "HIT");
    });

    it("does not store an answer with no-store", async () => {
      const p = fresh();
      await postJson(url, keys.live, chat(p), { "X-Svc-Cache-Control": "no-store" });
      const b = await postJson(url, keys.live, chat(p));
      assert.equal(b.headers["x-svc-cache"], "MISS");
      assert.equal(upstreamCalls(p), 2);
    });

    it("answers repeated hits alike, and a refreshed entry's repeats with the new answer", async () => {
      // After the first hit, the body's parse and the answer's rendering are reused (hit-memo.ts):
      // the answers must not change, and must follow the entry when it is replaced.
      const p = fresh();
      const first = await postJson(url, keys.live, chat(p));
      const hits = [];
      for (let i = 0; i < 3; i++) hits.push(await postJson(url, keys.live, chat(p)));
      for (const h of hits) {
        assert.equal(h.headers["x-svc-cache"], "HIT");
        assert.equal(h.headers["x-svc-cost"], "0");
        assert.notEqual(h.headers["x-svc-request-id"], first.headers["x-svc-request-id"]);
        assert.equal(h.text, hits[0]!.text);
      }
      assert.deepEqual(hits[0]!.json(), first.json());
      const streamed = await postJson(url, keys.live, chat(p, { stream: true }));
      assert.equal(streamed.headers["x-svc-cache"], "HIT");
      assert.equal(sseEvents(streamed.text).at(-1)!.data, "[DONE]");
      const fresher = await postJson(url, keys.live, chat(p), { "X-Svc-Cache-Control": "no-cache" });
      assert.notEqual(fresher.json().id, first.json().id, "the fake gives each answer its own id");
      const after = await postJson(url, keys.live, chat(p));
      assert.equal(after.headers["x-svc-cache"], "HIT");
      assert.deepEqual(after.json(), fresher.json());
      // The same body from another project, or from a test key, finds nothing: the scope still counts.
      const other = await gw.project(Plan.ENTERPRISE);
      assert.equal((await postJson(url, other.live, chat(p))).headers["x-svc-cache"], "MISS");
      assert.equal((await postJson(url, keys.test, chat(p))).headers["x-svc-cache"], "MISS");
      assert.equal(upstreamCalls(p), 4);
    });

    it("stores nothing with X-Svc-Cache-Control: max-age=0 (kept 0 seconds), and still looks up", async () => {
      const p = fresh();
      assert.equal((await postJson(url, keys.live, chat(p), { "X-Svc-Cache-Control": "max-age=0" })).status, 200);
      assert.equal((await postJson(url, keys.live, chat(p))).headers["x-svc-cache"], "MISS", "nothing was stored");
      assert.equal((await postJson(url, keys.live, chat(p), { "X-Svc-Cache-Control": "max-age=0" })).headers["x-svc-cache"], "HIT");
      assert.equal(upstreamCalls(p), 2);
    });

    it("refuses an unknown cache directive with 400 invalid_cache_control", async () => {
      const res = await postJson(url, keys.live, chat(fresh()), { "X-Svc-Cache-Control": "max-age=abc" });
      assert.equal(res.status, 400);
      assert.equal(res.json().error.code, "invalid_cache_control");
    });

    it("never shares entries between projects, nor between live and test keys", async () => {
      const p = fresh();
      const other = await gw.project(Plan.ENTERPRISE);
      await postJson(url, keys.live, chat(p));
      assert.equal((await postJson(url, other.live, chat(p))).headers["x-svc-cache"], "MISS");
      assert.equal((await postJson(url, keys.test, chat(p))).headers["x-svc-cache"], "MISS");
      assert.equal((await postJson(url, keys.test, chat(p))).headers["x-svc-cache"], "HIT");
      assert.equal(upstreamCalls(p), 3);
    });

    it("does not cache errors", async () => {
      const p = fresh("[[fake:status=500]]");
      assert.equal((await postJson(url, keys.live, chat(p))).status, 502);
      assert.equal((await postJson(url, keys.live, chat(p))).status, 502);
      assert.equal(upstreamCalls(p), 2);
    });

    it("makes one upstream call for concurrent identical misses (single flight)", async () => {
      const p = fresh("[[fake:delay=300]]");
      const all = await Promise.all(Array.from({ length: 8 }, (_, i) => postJson(url, keys.live, chat(p, i % 2 ? { stream: true } : {}))));
      assert.deepEqual(all.map((r) => r.status), Array(8).fill(200));
      assert.equal(upstreamCalls(p), 1);
      assert.equal(all.filter((r) => r.headers["x-svc-cache"] === "MISS").length, 1);
    });

    it("stores the answer for a request that waited on an identical one sent with no-store or a short max-age (those apply to that request only)", async () => {
      for (const control of ["no-store", "max-age=1"]) {
        // The first one with the upstream for 800 ms: the second comes while it is (on a busy machine too).
        const p = fresh("[[fake:delay=800]]");
        const first = postJson(url, keys.live, chat(p), { "X-Svc-Cache-Control": control });
        await new Promise((r) => setTimeout(r, 200));
        const waiter = await postJson(url, keys.live, chat(p));
        assert.equal((await first).headers["x-svc-cache"], "MISS");
        assert.equal(waiter.headers["x-svc-cache"], "HIT", "served the answer in flight");
        // Past the first request's max-age: kept for the waiter's own (the default TTL).
        await new Promise((r) => setTimeout(r, 1_300));
        const later = await postJson(url, keys.live, chat(p));
        assert.equal(later.headers["x-svc-cache"], "HIT", `${control}: ${later.headers["x-svc-cache"]}`);
        assert.equal(upstreamCalls(p), 1, control);
      }
    });

    it("makes one upstream call for identical requests that keep arriving while the first one ends and is stored", async function () {
      this.timeout(30_000);
      // Started a millisecond apart against an upstream that answers at once: later ones looked in
      // the cache before the first answer was stored, and come to call when its flight has ended.
      const calls: number[] = [];
      const misses: number[] = [];
      for (let trial = 0; trial < 8; trial++) {
        const p = fresh();
        const all = await Promise.all(
          Array.from({ length: 30 }, async (_, i) => {
            await new Promise((r) => setTimeout(r, i));
            return postJson(url, keys.live, chat(p, i % 3 ? {} : { stream: true }));
          }),
        );
        assert.deepEqual(all.map((r) => r.status), Array(30).fill(200));
        calls.push(upstreamCalls(p));
        misses.push(all.filter((r) => r.headers["x-svc-cache"] === "MISS").length);
      }
      assert.deepEqual(calls, Array(8).fill(1));
      assert.deepEqual(misses, Array(8).fill(1));
    });


    it("when the client of the request in flight leaves, a waiter still there takes its place and the others wait on that one; waiters that left do not", async () => {
      const own = await gw.project(Plan.ENTERPRISE);
      const p = fresh("[[fake:delay=500]]");
      const leader = sendAndLeave(url, own.live, chat(p), 300);
      await new Promise((r) => setTimeout(r, 100));
      // Two waiters whose clients leave before the leader's does (one streamed), then four that stay.
      const departed = [sendAndLeave(url, own.live, chat(p), 100), sendAndLeave(url, own.live, chat(p, { stream: true }), 100)];
      const waiters = await Promise.all(Array.from({ length: 4 }, (_, i) => postJson(url, own.live, chat(p, i % 2 ? { stream: true } : {}))));
      await Promise.all([leader, ...departed]);
      assert.deepEqual(waiters.map((w) => w.status), [200, 200, 200, 200]);
      assert.equal(waiters.filter((w) => w.headers["x-svc-cache"] === "MISS").length, 1, "one waiter called the upstream, the others were served its answer");
      assert.equal(upstreamCalls(p), 2, "the abandoned call and the one that took its place, none for the waiters that left");
      let logs: Array<{ status: number; cache: string; costUsd: string; latencyMs: number; ttfbMs: number }> = [];
      await eventually(async () => {
        logs = (await gw.telemetry.listLogs({ projectId: own.projectId, keyMode: KeyMode.LIVE, pageSize: 20 })).logs;
        return logs.length === 7;
      }, 15_000, "all seven requests logged");
      const left = logs.filter((l) => l.status === 499);
      assert.equal(left.length, 3, "the leader and the two waiters that left");
      assert.deepEqual(left.map((l) => l.ttfbMs), [0, 0, 0], "no first byte reached a client that left before its answer");
      assert.ok(logs.filter((l) => l.status === 200).every((l) => l.ttfbMs > 0));
      // The waiters that left are logged when they left (by 300 ms), not when the answer they
      // waited on came (the replacement call's, 500 ms after the leader left at the earliest).
      assert.equal(left.filter((l) => l.latencyMs < 650).length, 3, JSON.stringify(left.map((l) => l.latencyMs)));
      assert.deepEqual(logs.filter((l) => l.status === 200).map((l) => l.cache).sort(), ["HIT", "HIT", "HIT", "MISS"]);
    });

    it("logs a request that waited on an identical one and lost its client meanwhile as 499, not as a hit", async () => {
      const own = await gw.project(Plan.ENTERPRISE);
      const p = fresh("[[fake:delay=800]]");
      const leader = postJson(url, own.live, chat(p));
      await new Promise((r) => setTimeout(r, 150));
      await new Promise<void>((resolve) => {
        const req = request(url, { method: "POST", headers: { "content-type": "application/json", "x-svc-api-key": own.live } });
        req.on("error", () => {});
        req.once("close", resolve);
        req.end(JSON.stringify(chat(p)));
        setTimeout(() => req.destroy(), 200);
      });
      assert.equal((await leader).status, 200);
      assert.equal(upstreamCalls(p), 1);
      let statuses: number[] = [];
      await eventually(async () => {
        const { logs } = await gw.telemetry.listLogs({ projectId: own.projectId, keyMode: KeyMode.LIVE, pageSize: 10 });
        statuses = logs.map((l) => l.status).sort();
        return statuses.length === 2;
      }, 5_000, "both requests logged");
      assert.deepEqual(statuses, [200, 499]);
    });

    it("caches /v1/messages too and honours X-Svc-Cache-Control there (official anthropic SDK)", async () => {
      const p = fresh();
      const client = new Anthropic({ apiKey: keys.live, baseURL: gw.gatewayUrl, maxRetries: 0 });
      const req = { model: "assistant-3-5-haiku-20241022", max_tokens: 100, messages: [{ role: "user" as const, content: p }] };
      const a = await client.messages.create(req).withResponse();
      const b = await client.messages.create(req).withResponse();
      assert.equal(a.response.headers.get("x-svc-cache"), "MISS");
      assert.equal(b.response.headers.get("x-svc-cache"), "HIT");
      assert.deepEqual(b.data.content, a.data.content);
      const stream = client.messages.stream(req);
      const final = await stream.finalMessage();
      assert.deepEqual(final.content, a.data.content);
      const c = await client.messages.create(req, { headers: { "X-Svc-Cache-Control": "no-cache" } }).withResponse();
      assert.equal(c.response.headers.get("x-svc-cache"), "MISS");
      assert.equal(upstreamCalls(p), 2);
    });

    if (mode === "redis") {
      it("keeps serving while Redis is down (misses) and hits again once it is back", async () => {
        const p = fresh();
        await postJson(url, keys.live, chat(p));
        await redis!.stop();
        const during = await postJson(url, keys.live, chat(p));
        assert.equal(during.status, 200, during.text);
        assert.equal(during.headers["x-svc-cache"], "MISS");
        redis = await startRedis(redis!.port);
        // The registry is in the same (now empty) Redis: recreate the project and key, once the
        // registry has reconnected (until then it answers 503 auth_unavailable, "retry shortly").
        const deadline = Date.now() + 10_000;
        let again: Awaited<ReturnType<typeof gw.project>> | undefined;
        while (!again) {
          again = await gw.project(Plan.ENTERPRISE).catch((e: Error) => {
            if (Date.now() > deadline || !/unavailable/.test(e.message)) throw e;
            return new Promise<undefined>((r) => setTimeout(() => r(undefined), 200));
          });
        }
        let hit = false;
        while (!hit && Date.now() < deadline) {
          await postJson(url, again.live, chat(p));
          hit = (await postJson(url, again.live, chat(p))).headers["x-svc-cache"] === "HIT";
          if (!hit) await new Promise((r) => setTimeout(r, 200));
        }
        assert.ok(hit, "the cache works again after Redis is back, without a restart");
      });
    }
  });
}

describe("response cache switched off (SVC_CACHE_DISABLED=1)", () => {
  let gw: TestGateway;
  before(async () => {
    gw = await startTestGateway({ SVC_CACHE_DISABLED: "1" });
  });
  after(() => gw.close());

  it("answers every request from the upstream with X-Svc-Cache: MISS", async () => {
    const keys = await gw.project(Plan.ENTERPRISE);
    const p = fresh();
    const url = `${gw.gatewayUrl}/v1/chat/completions`;
    const a = await postJson(url, keys.live, chat(p));
    const b = await postJson(url, keys.live, chat(p));
    assert.equal(a.headers["x-svc-cache"], "MISS");
    assert.equal(b.headers["x-svc-cache"], "MISS");
    assert.equal(gw.demo!.requests.filter((r) => JSON.stringify(r.body).includes(p)).length, 2);
  });
});

describe("response cache across two gateway processes on one Redis", function () {
  this.timeout(90_000);
  const processes = processesOnOneRedis("cache-admin-token");

  it("stores an answer before its last bytes go out: the same request sent on at once to the other process hits there", async () => {
    const { a, b } = processes;
    const admin = createAdminClient({ server: a.grpcUrl, token: "cache-admin-token" });
    const { project } = await admin.createProject({ name: "sent-on", plan: Plan.ENTERPRISE });
    const { secret } = await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    const msgs = (content: string, stream: boolean) => ({ model: "assistant-3-haiku-20240307", max_tokens: 64, stream, messages: [{ role: "user", content }] });
    const chats = (content: string, stream: boolean) => chat(content, { stream });
    const missed: string[] = [];
    for (const [path, make] of [["/v1/chat/completions", chats], ["/v1/messages", msgs]] as const) {
      for (const stream of [false, true]) {
        for (let i = 0; i < 20; i++) {
          const req = make(fresh(`${path} ${stream}`), stream);
          const first = await postJson(`${a.gatewayUrl}${path}`, secret, req);
          assert.equal(first.headers["x-svc-cache"], "MISS", first.text);
          const again = await postJson(`${b.gatewayUrl}${path}`, secret, req);
          assert.equal(again.status, 200, again.text);
          if (again.headers["x-svc-cache"] !== "HIT") missed.push(`${path} stream=${stream} #${i}`);
        }
      }
    }
    assert.deepEqual(missed, []);
  });
});
