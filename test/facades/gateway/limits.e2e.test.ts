import assert from "node:assert/strict";
import { request } from "node:http";
import { Redis } from "ioredis";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { createAdminClient } from "../../../src/cli/admin-client.js";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson, sendAndLeave } from "../../support/http.js";
import { startRedis, type TestRedis } from "../../support/redis.js";
import { processesOnOneRedis } from "../../support/svc-cli.js";

let n = 0;
const chat = (more: object = {}) => ({ model: "chat-4o-mini", messages: [{ role: "user", content: `limits ${Date.now()} ${++n}` }], ...more });
const noCache = { "X-Svc-Cache-Control": "no-cache" };

const setups: Array<{ name: string; env: Record<string, string>; redis?: true }> = [
  { name: "embedded, admitted in turn", env: {} },
  { name: "embedded, admitted ahead of the key's verdict", env: { SVC_LIMITS_ADMIT_AHEAD: "1" } },
  { name: "on Redis, admitted ahead of the key's verdict (its default)", env: {}, redis: true },
];

for (const setup of setups) describe(`rate limits and spend caps (${setup.name}, real HTTP)`, function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let url: string;
  let redis: TestRedis | undefined;

  before(async () => {
    if (setup.redis) redis = await startRedis();
    gw = await startTestGateway({ ...setup.env, ...(redis ? { SVC_REDIS_URL: redis.url } : {}) });
    url = `${gw.gatewayUrl}/v1/chat/completions`;
  });
  after(async () => {
    await gw.close();
    await redis?.stop();
  });
  /** Waits for a project's minute window to hold `want` (a count taken back off the request's path). */
  const minuteCountBecomes = (projectId: string, want: number) =>
    eventually(async () => (await gw.limits.getUsage({ projectId })).requestsLastMinute === want, 3_000, `${want} requests counted in the minute`);

  it("lets a free project make 60 requests in a minute, then answers 429 with Retry-After and x-ratelimit headers", async () => {
    const keys = await gw.project(Plan.FREE);
    const codes: number[] = [];
    for (let i = 0; i < 60; i++) codes.push((await postJson(url, keys.live, chat(), noCache)).status);
    assert.deepEqual(codes, Array(60).fill(200));
    const res = await postJson(url, keys.live, chat(), noCache);
    assert.equal(res.status, 429);
    assert.deepEqual(Object.keys(res.json().error).sort(), ["code", "message", "type"]);
    assert.equal(res.json().error.type, "rate_limit_error");
    assert.equal(res.json().error.code, "rate_limit_exceeded");
    assert.match(String(res.headers["retry-after"]), /^[1-9]\d*$/);
    assert.equal(res.headers["x-should-retry"], undefined, "a minute's limit is left to the SDKs' retry");
    assert.equal(res.headers["x-ratelimit-limit-requests"], "60");
    assert.equal(res.headers["x-ratelimit-remaining-requests"], "0");
    assert.match(String(res.headers["x-ratelimit-reset-requests"]), /^\d+(m\d+)?s$/);
    assert.match(String(res.headers["x-svc-request-id"]), /^req_/);
    assert.equal(res.headers["x-svc-cost"], "0");
  });

  it("reports the limit on admitted requests too, and the anthropic headers on /v1/messages", async () => {
    const keys = await gw.project(Plan.PRO);
    const ok = await postJson(url, keys.live, chat(), noCache);
    assert.equal(ok.headers["x-ratelimit-limit-requests"], "600");
    assert.equal(ok.headers["x-ratelimit-remaining-requests"], "599");
    const client = new Anthropic({ apiKey: keys.live, baseURL: gw.gatewayUrl, maxRetries: 0 });
    const { response } = await client.messages.create({ model: "assistant-3-haiku-20240307", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }).withResponse();
    assert.equal(response.headers.get("anthropic-ratelimit-requests-limit"), "600");
    assert.equal(response.headers.get("anthropic-ratelimit-requests-remaining"), "598");
    assert.ok(!Number.isNaN(Date.parse(response.headers.get("anthropic-ratelimit-requests-reset")!)));
  });

  it("never limits test keys", async () => {
    const keys = await gw.project(Plan.FREE);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { requestsPerMinute: 2 } });
    for (let i = 0; i < 5; i++) assert.equal((await postJson(url, keys.test, chat(), noCache)).status, 200);
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 200);
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 200);
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 429);
  });

  it("counts cache hits against the rate limit, repeated ones included", async () => {
    const keys = await gw.project(Plan.FREE);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { requestsPerMinute: 4 } });
    const body = chat();
    const sent = [];
    for (let i = 0; i < 5; i++) sent.push(await postJson(url, keys.live, body));
    assert.deepEqual(sent.map((r) => r.headers["x-svc-cache"]), ["MISS", "HIT", "HIT", "HIT", "MISS"]);
    assert.deepEqual(sent.map((r) => r.status), [200, 200, 200, 200, 429]);
    assert.equal(sent[3]!.headers["x-ratelimit-remaining-requests"], "0");
  });

  it("limits each X-Svc-User-Id on its own with user_rate_limit_exceeded (openai SDK sees a RateLimitError)", async () => {
    const keys = await gw.project(Plan.PRO);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { userRequestsPerMinute: 2 } });
    const as = (user: string) => postJson(url, keys.live, chat(), { ...noCache, "X-Svc-User-Id": user });
    assert.equal((await as("alice")).status, 200);
    assert.equal((await as("alice")).status, 200);
    const third = await as("alice");
    assert.equal(third.status, 429);
    assert.equal(third.json().error.code, "user_rate_limit_exceeded");
    assert.equal((await as("bob")).status, 200, "another user has their own allowance");
    const client = new OpenAI({ apiKey: keys.live, baseURL: `${gw.gatewayUrl}/v1`, maxRetries: 0, defaultHeaders: { "X-Svc-User-Id": "alice" } });
    await assert.rejects(client.chat.completions.create(chat() as OpenAI.ChatCompletionCreateParamsNonStreaming), (e: unknown) => e instanceof OpenAI.RateLimitError);
  });

  it("refuses a request whose worst case would pass the monthly spend cap with spend_cap_exceeded, and settles to the real cost", async () => {
    const keys = await gw.project(Plan.PRO);
    // chat-4o output is $10 per 1M tokens: its ceiling of 16,384 tokens (a larger max_tokens is
    // reserved at the ceiling, which the upstream enforces) may cost $0.16.
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "0.01" } });
    const big = await postJson(url, keys.live, chat({ model: "chat-4o", max_tokens: 100_000 }), noCache);
    assert.equal(big.status, 429);
    assert.equal(big.json().error.code, "spend_cap_exceeded");
    // Its worst case is more than the whole cap: it says so, rather than to wait for next month.
    assert.match(big.json().error.message, /more than the project's whole monthly spend cap of \$0\.01: it cannot fit in any month/);
    // Retry-After runs to the month's end; the SDKs are told not to sleep on it.
    assert.ok(Number(big.headers["retry-after"]) > 61, String(big.headers["retry-after"]));
    assert.equal(big.headers["x-should-retry"], "false");
    // It still tells where the request limit stands (Pro: 600 a minute; the refusal is not counted).
    assert.equal(big.headers["x-ratelimit-limit-requests"], "600");
    assert.equal(big.headers["x-ratelimit-remaining-requests"], "600");
    assert.equal(big.headers["x-ratelimit-reset-requests"], "0s", "nothing counted: the window is full now");
    const askedAt = Date.now();
    const bigMessage = await postJson(`${gw.gatewayUrl}/v1/messages`, keys.live, { model: "assistant-3-5-haiku-20241022", max_tokens: 100_000, messages: [{ role: "user", content: "capped" }] }, noCache);
    assert.equal(bigMessage.status, 429, bigMessage.text);
    assert.equal(bigMessage.json().error.code, "spend_cap_exceeded");
    assert.equal(bigMessage.headers["anthropic-ratelimit-requests-limit"], "600");
    assert.equal(bigMessage.headers["anthropic-ratelimit-requests-remaining"], "600");
    // Nothing counted: the reset is now (the second at or after it), not a minute on.
    const reset = Date.parse(String(bigMessage.headers["anthropic-ratelimit-requests-reset"]));
    assert.ok(reset >= Math.floor(askedAt / 1000) * 1000 && reset <= Date.now() + 1000, String(bigMessage.headers["anthropic-ratelimit-requests-reset"]));
    const started = Date.now();
    const openai = new OpenAI({ apiKey: keys.live, baseURL: `${gw.gatewayUrl}/v1`, timeout: 10_000 });
    await assert.rejects(openai.chat.completions.create(chat({ model: "chat-4o", max_tokens: 100_000 }) as OpenAI.ChatCompletionCreateParamsNonStreaming), (e: unknown) => e instanceof OpenAI.RateLimitError);
    const anthropic = new Anthropic({ apiKey: keys.live, baseURL: gw.gatewayUrl, timeout: 10_000 });
    await assert.rejects(
      anthropic.messages.create({ model: "assistant-3-5-haiku-20241022", max_tokens: 100_000, messages: [{ role: "user", content: `capped ${++n}` }] }),
      (e: unknown) => e instanceof Anthropic.RateLimitError,
    );
    assert.ok(Date.now() - started < 5_000, "both SDKs, retrying by default, raised at once");
    const small = await postJson(url, keys.live, chat({ max_tokens: 50 }), noCache);
    assert.equal(small.status, 200, small.text);
    const usage = await gw.limits.getUsage({ projectId: keys.projectId });
    assert.equal(usage.spentUsd, small.headers["x-svc-cost"], "the reservation was settled to the real cost");
    assert.equal(usage.reservedUsd, "0");
  });

  it("releases the reservation of a request that failed upstream", async () => {
    const keys = await gw.project(Plan.PRO);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "1" } });
    const res = await postJson(url, keys.live, { ...chat(), messages: [{ role: "user", content: "[[fake:status=500]]" }] }, noCache);
    assert.equal(res.status, 502);
    const usage = await gw.limits.getUsage({ projectId: keys.projectId });
    assert.equal(usage.spentUsd, "0");
    assert.equal(usage.reservedUsd, "0");
  });

  it("leaves no count behind for a deleted key's request, nor for one refused for a bad header", async () => {
    const keys = await gw.project(Plan.PRO);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { requestsPerMinute: 5, monthlySpendCapUsd: "1" } });
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 200);
    const bad = await postJson(url, keys.live, chat(), { "X-Svc-Cache-Control": "sometimes" });
    assert.equal(bad.status, 400, bad.text);
    // A model the endpoint does not serve: its own 400 (not a spend-cap 429), no count, no limit headers.
    for (const [model, code] of [["chat-5", "model_not_found"], ["assistant-3-haiku-20240307", "model_not_supported"]]) {
      const res = await postJson(url, keys.live, chat({ model, max_tokens: 100_000_000 }), noCache);
      assert.equal(res.status, 400, res.text);
      assert.equal(res.json().error.code, code);
      assert.equal(res.headers["x-ratelimit-limit-requests"], undefined);
    }
    await gw.admin.deleteKey({ keyId: keys.liveKeyId });
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 401);
    await minuteCountBecomes(keys.projectId, 1);
    assert.equal((await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd, "0");
  });

  it("applies limits changed since the key's last request, and counts the request once", async () => {
    const keys = await gw.project(Plan.FREE);
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 200);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { requestsPerMinute: 2 } });
    const second = await postJson(url, keys.live, chat(), noCache);
    assert.equal(second.status, 200, second.text);
    assert.equal(second.headers["x-ratelimit-limit-requests"], "2");
    assert.equal(second.headers["x-ratelimit-remaining-requests"], "0");
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 429);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { requestsPerMinute: 3 } });
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 200, "the old limit's refusal is decided again");
    await minuteCountBecomes(keys.projectId, 3);
  });

  it("charges an answer cut short what it cost so far: the upstream broke off a stream, or the client left", async () => {
    const keys = await gw.project(Plan.PRO);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "100" } });
    const spent = async () => Number((await gw.limits.getUsage({ projectId: keys.projectId })).spentUsd);
    const words = "word ".repeat(200);

    const cut = await postJson(url, keys.live, chat({ stream: true, max_tokens: 2000, messages: [{ role: "user", content: `${words} [[fake:drop]] ${++n}` }] }));
    assert.equal(cut.status, 200);
    const billed = Number(cut.trailers["x-svc-cost"]);
    assert.ok(billed > 0, `an answer the upstream broke off was priced ${cut.trailers["x-svc-cost"]}`);
    await eventually(async () => (await spent()) === billed, 3_000, "the cut answer's cost charged to the month");

    // A client that leaves after the first pieces of an answer that never ends.
    const before = await spent();
    await new Promise<void>((resolve, reject) => {
      const req = request(url, { method: "POST", headers: { "content-type": "application/json", "x-svc-api-key": keys.live } }, (res) => {
        res.once("data", () => {
          req.destroy();
          resolve();
        });
      });
      req.on("error", () => {});
      req.once("close", resolve);
      req.end(JSON.stringify(chat({ stream: true, max_tokens: 2000, messages: [{ role: "user", content: `${words} [[fake:chunks=4]] [[fake:stall]] ${++n}` }] })));
      setTimeout(() => reject(new Error("no first piece")), 5_000).unref();
    });
    await eventually(async () => (await spent()) > before, 3_000, "the abandoned answer's cost charged to the month");
    await eventually(async () => (await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd === "0", 3_000, "no reservation left");
    // Priced as the prompt (about 200 tokens at chat-4o-mini's $0.15 per million) plus what streamed:
    // far below the 2000-token worst case that was reserved.
    const charged = (await spent()) - before;
    assert.ok(charged > 0.00002 && charged < 0.0005, `charged ${charged}`);

    // A client that leaves before any answer (non-stream): the upstream had the prompt.
    const beforeLeft = await spent();
    await new Promise<void>((resolve) => {
      const req = request(url, { method: "POST", headers: { "content-type": "application/json", "x-svc-api-key": keys.live } });
      req.on("error", () => {});
      req.once("close", resolve);
      req.end(JSON.stringify(chat({ max_tokens: 2000, messages: [{ role: "user", content: `${words} [[fake:delay=3000]] ${++n}` }] })));
      setTimeout(() => req.destroy(), 300);
    });
    await eventually(async () => (await spent()) > beforeLeft, 3_000, "the prompt of an answer the client left charged to the month");
    const prompt = (await spent()) - beforeLeft;
    assert.ok(prompt > 0.00002 && prompt < 0.0001, `charged ${prompt} for the prompt alone`);
    await eventually(async () => (await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd === "0", 3_000, "no reservation left");
  });

  it("a spend-cap refusal caused only by requests in flight says retry in seconds; one caused by what is spent, when the month ends", async () => {
    const keys = await gw.project(Plan.PRO);
    // Room for one worst case (100 output tokens at $0.60 per million, and the prompt), not two.
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "0.0001" } });
    const slow = postJson(url, keys.live, chat({ max_tokens: 100, messages: [{ role: "user", content: `holds a reservation [[fake:delay=800]] ${++n}` }] }));
    await new Promise((r) => setTimeout(r, 250));
    const second = chat({ max_tokens: 100 });
    const held = await postJson(url, keys.live, second);
    assert.equal(held.status, 429, held.text);
    assert.equal(held.json().error.code, "spend_cap_exceeded");
    assert.equal(held.headers["retry-after"], "5");
    assert.equal(held.headers["x-should-retry"], undefined, "the SDKs retry it");
    assert.match(held.json().error.message, /in flight/);
    assert.equal((await slow).status, 200);
    await eventually(async () => (await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd === "0", 3_000, "the slow request settled");
    const after = await postJson(url, keys.live, second);
    assert.equal(after.status, 200, after.text);
    // Now a cap that what is spent already fills: nothing in flight will free it.
    const { spentUsd } = await gw.limits.getUsage({ projectId: keys.projectId });
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: spentUsd } });
    const spent = await postJson(url, keys.live, chat({ max_tokens: 100 }));
    assert.equal(spent.status, 429, spent.text);
    assert.equal(spent.json().error.code, "spend_cap_exceeded");
    assert.ok(Number(spent.headers["retry-after"]) > 61, `Retry-After ${spent.headers["retry-after"]}`);
    assert.equal(spent.headers["x-should-retry"], "false");
  });

  it("serves requests identical to one in flight as hits: the spend cap does not refuse them for a miss's worst case", async () => {
    const keys = await gw.project(Plan.PRO);
    // Room for one worst case (100 output tokens at $0.60 per million, and the prompt), not two.
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "0.0001" } });
    const body = chat({ max_tokens: 100, messages: [{ role: "user", content: `shared answer [[fake:delay=600]] ${++n}` }] });
    const first = postJson(url, keys.live, body);
    await new Promise((r) => setTimeout(r, 200));
    const waiters = await Promise.all(Array.from({ length: 5 }, () => postJson(url, keys.live, body)));
    const leader = await first;
    assert.equal(leader.status, 200, leader.text);
    assert.equal(leader.headers["x-svc-cache"], "MISS");
    assert.deepEqual(waiters.map((w) => [w.status, w.headers["x-svc-cache"], w.headers["x-svc-cost"]]), waiters.map(() => [200, "HIT", "0"]));
    assert.ok(waiters.every((w) => w.text === leader.text), "each waiter got the leader's answer");
    await minuteCountBecomes(keys.projectId, 6);
    await eventually(async () => (await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd === "0", 3_000, "no reservation left");
  });


  it("when the answer waited on does not come (its client left), each waiter that calls the upstream reserves its own worst case: the cap is never passed", async () => {
    const keys = await gw.project(Plan.PRO);
    const cap = 0.0001;
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: String(cap) } });
    const body = chat({ max_tokens: 100, messages: [{ role: "user", content: `abandoned answer [[fake:delay=600]] ${++n}` }] });
    const left = sendAndLeave(url, keys.live, body, 300);
    await new Promise((r) => setTimeout(r, 150));
    const waiters = await Promise.all(Array.from({ length: 4 }, () => postJson(url, keys.live, body)));
    await left;
    for (const w of waiters) {
      if (w.status !== 200) {
        assert.equal(w.status, 429, w.text);
        assert.equal(w.json().error.code, "spend_cap_exceeded");
      }
    }
    assert.ok(waiters.some((w) => w.status === 200), "one waiter at least was answered");
    await eventually(async () => (await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd === "0", 3_000, "no reservation left");
    const spent = Number((await gw.limits.getUsage({ projectId: keys.projectId })).spentUsd);
    assert.ok(spent > 0 && spent <= cap, `spent ${spent} of a ${cap} cap`);
  });

  it("when the answer waited on does not come (its client left), one waiter takes its place and the others wait on it, even under a cap with room for one worst case", async () => {
    const keys = await gw.project(Plan.PRO);
    // chat-4o-mini: its worst case (16,384 output tokens at $0.60 per million, and the prompt) fits once, not twice.
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "0.012" } });
    const body = chat({ messages: [{ role: "user", content: `taken over [[fake:delay=600]] ${++n}` }] });
    // The waiters come once the first is in flight (its admission done), before its client leaves.
    const left = sendAndLeave(url, keys.live, body, 300);
    await new Promise((r) => setTimeout(r, 150));
    const waiters = await Promise.all(Array.from({ length: 12 }, () => postJson(url, keys.live, body)));
    await left;
    const seen = waiters.map((w) => (w.status === 200 ? String(w.headers["x-svc-cache"]) : `${w.status} ${w.json().error.code}`));
    assert.deepEqual(seen.filter((x) => x === "MISS"), ["MISS"], seen.join(", "));
    assert.deepEqual(seen.filter((x) => x !== "MISS" && x !== "HIT"), [], seen.join(", "));
    await eventually(async () => (await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd === "0", 3_000, "no reservation left");
  });

  it("serves a burst of identical requests under a cap with room for one worst case: one miss, the rest hits, none refused", async function () {
    // On Redis, admitted ahead of the key's verdict, the burst's first requests are admitted before
    // any of them has taken flight, and one can still be refused (README, Cache).
    if (setup.redis) this.skip();
    const keys = await gw.project(Plan.PRO);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "0.012" } });
    const body = chat({ messages: [{ role: "user", content: `burst under a cap [[fake:delay=30]] ${++n}` }] });
    const all = await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        await new Promise((r) => setTimeout(r, i));
        return postJson(url, keys.live, body);
      }),
    );
    const seen = all.map((w) => (w.status === 200 ? String(w.headers["x-svc-cache"]) : `${w.status} ${w.json().error.code}`));
    assert.deepEqual(seen.filter((x) => x === "MISS"), ["MISS"], seen.join(", "));
    assert.deepEqual(seen.filter((x) => x !== "MISS" && x !== "HIT"), [], seen.join(", "));
  });

  it("serves a cache hit when the spend cap has no room left for a miss's worst case", async () => {
    const keys = await gw.project(Plan.PRO);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "1" } });
    const body = chat({ max_tokens: 50 });
    const miss = await postJson(url, keys.live, body);
    assert.equal(miss.headers["x-svc-cache"], "MISS");
    // The cap now leaves one nano-dollar: less than any miss's worst case, enough for a hit's nothing.
    const spent = (await gw.limits.getUsage({ projectId: keys.projectId })).spentUsd;
    const nano = BigInt(Math.round(Number(spent) * 1e9)) + 1n;
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: (Number(nano) / 1e9).toFixed(9) } });
    for (let i = 0; i < 2; i++) {
      const hit = await postJson(url, keys.live, body);
      assert.equal(hit.status, 200, hit.text);
      assert.equal(hit.headers["x-svc-cache"], "HIT");
    }
    const other = await postJson(url, keys.live, chat({ max_tokens: 50 }));
    assert.equal(other.status, 429);
    assert.equal(other.json().error.code, "spend_cap_exceeded");
    await minuteCountBecomes(keys.projectId, 3); // the miss and the two hits, each once; the refused one uses no quota
    await eventually(async () => (await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd === "0", 3_000, "no reservation left");
  });

  it("serves cache hits, which cost nothing, with the spend cap used up exactly and with a cap of 0", async () => {
    const keys = await gw.project(Plan.PRO);
    await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: "1" } });
    const body = chat({ max_tokens: 50 });
    assert.equal((await postJson(url, keys.live, body)).headers["x-svc-cache"], "MISS");
    let spent = "0";
    await eventually(async () => (spent = (await gw.limits.getUsage({ projectId: keys.projectId })).spentUsd) !== "0", 3_000, "the miss charged");
    for (const cap of [spent, "0"]) {
      await gw.admin.updateProject({ projectId: keys.projectId, limitOverrides: { monthlySpendCapUsd: cap } });
      for (let i = 0; i < 2; i++) {
        const hit = await postJson(url, keys.live, body);
        assert.equal(hit.status, 200, `cap ${cap}: ${hit.text}`);
        assert.equal(hit.headers["x-svc-cache"], "HIT");
        assert.equal(hit.headers["x-svc-cost"], "0");
      }
      const other = await postJson(url, keys.live, chat({ max_tokens: 50 }));
      assert.equal(other.status, 429, `cap ${cap}`);
      assert.equal(other.json().error.code, "spend_cap_exceeded");
    }
    await minuteCountBecomes(keys.projectId, 5); // the miss and the four hits; the refused ones use no quota
    await eventually(async () => (await gw.limits.getUsage({ projectId: keys.projectId })).reservedUsd === "0", 3_000, "no reservation left");
    assert.equal((await gw.limits.getUsage({ projectId: keys.projectId })).spentUsd, spent, "the hits cost nothing");
  });
});

describe("rate limits across two gateway processes on one Redis", function () {
  this.timeout(90_000);
  const processes = processesOnOneRedis("limits-admin-token");

  it("admits exactly 60 of 200 concurrent requests to a 60/minute project", async () => {
    const { a, b } = processes;
    const admin = createAdminClient({ server: a.grpcUrl, token: "limits-admin-token" });
    const { project } = await admin.createProject({ name: "exact", plan: Plan.FREE });
    const { secret } = await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    const all = await Promise.all(
      Array.from({ length: 200 }, (_, i) => postJson(`${(i % 2 ? a : b).gatewayUrl}/v1/chat/completions`, secret, chat(), noCache)),
    );
    const statuses = all.map((r) => r.status);
    assert.equal(statuses.filter((s) => s === 200).length, 60);
    assert.equal(statuses.filter((s) => s === 429).length, 140);
  });

  it("keeps answering while Redis is stalled (connected, answering nothing), each request within the command timeout", async () => {
    const { a, b } = processes;
    const admin = createAdminClient({ server: a.grpcUrl, token: "limits-admin-token" });
    const { project } = await admin.createProject({ name: "stall", plan: Plan.FREE });
    const { secret } = await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    const send = () => postJson(`${b.gatewayUrl}/v1/chat/completions`, secret, chat());
    assert.equal((await send()).status, 200); // the key is now known to this replica
    const raw = new Redis(processes.redis.url);
    try {
      await raw.call("CLIENT", "PAUSE", "4000", "ALL");
      const took: number[] = [];
      for (let i = 0; i < 4; i++) {
        const started = Date.now();
        assert.equal((await send()).status, 200, "served while Redis is stalled");
        took.push(Date.now() - started);
      }
      // The first request meets the timeouts (1 s, registry, cache and limits together); the rest
      // find Redis known to be stalled and do not wait at all.
      assert.ok(took[0]! < 2_000, `first request during the stall took ${took[0]} ms`);
      assert.ok(Math.max(...took.slice(1)) < 500, `later requests took ${took.slice(1).join(", ")} ms`);
    } finally {
      await raw.ping(); // answered when the pause ends: the next test starts on a Redis that answers
      raw.disconnect();
    }
  });

  it("keeps answering while Redis is down (limits fail open) and limits again once it is back", async () => {
    const { a } = processes;
    const admin = createAdminClient({ server: a.grpcUrl, token: "limits-admin-token" });
    const { project } = await admin.createProject({ name: "outage", plan: Plan.FREE });
    await admin.updateProject({ projectId: project!.id, limitOverrides: { requestsPerMinute: 3 } });
    const { secret } = await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    const send = () => postJson(`${a.gatewayUrl}/v1/chat/completions`, secret, chat(), noCache);
    assert.equal((await send()).status, 200); // the key is now known to this replica
    await processes.redis.stop();
    for (let i = 0; i < 5; i++) assert.equal((await send()).status, 200, "fail open while Redis is down");
    processes.redis = await startRedis(processes.redis.port);
    // Redis came back empty: the registry is gone too, so make projects again. Reconnecting takes
    // a moment (longer on a loaded machine): retry until the admin call and a 1/minute limit work.
    const deadline = Date.now() + 20_000;
    const limitedProject = async (rpm: number) => {
      for (;;) {
        try {
          const { project: p } = await admin.createProject({ name: "outage-2", plan: Plan.FREE });
          await admin.updateProject({ projectId: p!.id, limitOverrides: { requestsPerMinute: rpm } });
          return (await admin.createKey({ projectId: p!.id, mode: KeyMode.LIVE })).secret;
        } catch (e) {
          if (Date.now() > deadline) throw e;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
    };
    for (;;) {
      const probe = await limitedProject(1);
      const statuses = [(await postJson(`${a.gatewayUrl}/v1/chat/completions`, probe, chat(), noCache)).status, (await postJson(`${a.gatewayUrl}/v1/chat/completions`, probe, chat(), noCache)).status];
      if (statuses[1] === 429 || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const key2 = await limitedProject(3);
    const codes: number[] = [];
    for (let i = 0; i < 4; i++) codes.push((await postJson(`${a.gatewayUrl}/v1/chat/completions`, key2, chat(), noCache)).status);
    assert.deepEqual(codes, [200, 200, 200, 429]);
  });
});

describe("rate limits set to fail closed (SVC_LIMITS_FAIL_CLOSED=1) during a Redis outage", function () {
  this.timeout(30_000);
  let redis: TestRedis;
  let gw: TestGateway;

  before(async () => {
    redis = await startRedis();
    gw = await startTestGateway({ SVC_REDIS_URL: redis.url, SVC_LIMITS_FAIL_CLOSED: "1", SVC_LOG_LEVEL: "error" });
  });
  after(async () => {
    await gw.close();
    await redis.stop();
  });

  it("refuses live requests of a limited project with 503 limits_unavailable and Retry-After, and still serves test keys", async () => {
    const keys = await gw.project(Plan.FREE);
    const url = `${gw.gatewayUrl}/v1/chat/completions`;
    assert.equal((await postJson(url, keys.live, chat(), noCache)).status, 200);
    assert.equal((await postJson(url, keys.test, chat(), noCache)).status, 200);
    await redis.stop();
    const res = await postJson(url, keys.live, chat(), noCache);
    assert.equal(res.status, 503, res.text);
    assert.equal(res.json().error.type, "api_error");
    assert.equal(res.json().error.code, "limits_unavailable");
    assert.equal(res.headers["retry-after"], "1");
    assert.equal((await postJson(url, keys.test, chat(), noCache)).status, 200, "test keys are never limited");
  });
});
