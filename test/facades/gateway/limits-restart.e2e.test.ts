import assert from "node:assert/strict";
import { eventually, postJson } from "../../support/http.js";
import { startSvcServe, type SvcServe } from "../../support/svc-cli.js";

const token = "restart-admin-token";
let n = 0;
const chat = () => ({ model: "chat-4o-mini", max_tokens: 50, messages: [{ role: "user", content: `restart ${Date.now()} ${++n}` }] });
const noCache = { "X-Svc-Cache-Control": "no-cache" };

/**
 * Embedded mode (no Redis): the month's spend and the day's request count are kept in the data
 * dir, so a clean restart (SIGTERM, `svc serve` again on the same dir) does not reset a monthly
 * spend cap or a requests-per-day limit.
 */
describe("limits across a restart of `svc serve` (embedded, real process)", function () {
  this.timeout(120_000);
  let server: SvcServe | undefined;
  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });

  const svcJson = async (...args: string[]) => {
    const r = await server!.svc(...args, "--json", "--admin-token", token);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    return JSON.parse(r.stdout);
  };
  const usage = async (projectId: string) => (await svcJson("projects", "show", projectId)).usage as { spent_usd: string; requests_last_day: number };
  const ask = (key: string) => postJson(`${server!.gatewayUrl}/v1/chat/completions`, key, chat(), noCache);

  it("still refuses a project whose monthly spend cap was used up, and still counts its requests of the day", async () => {
    server = await startSvcServe({ SVC_ADMIN_TOKEN: token, SVC_LOG_LEVEL: "error", SVC_RUN_TS: "1" });
    const capped = (await svcJson("projects", "create", "--name", "capped", "--plan", "pro", "--spend-cap-usd", "1")).id as string;
    const cappedKey = (await svcJson("keys", "create", "--project", capped, "--mode", "live")).key as string;
    const daily = (await svcJson("projects", "create", "--name", "daily", "--plan", "pro", "--rpd", "2")).id as string;
    const dailyKey = (await svcJson("keys", "create", "--project", daily, "--mode", "live")).key as string;

    // Spend something, then set the cap to exactly that: the next request no longer fits.
    assert.equal((await ask(cappedKey)).status, 200);
    let spent = "0";
    await eventually(async () => (spent = (await usage(capped)).spent_usd) !== "0", 5_000, "the request charged");
    await svcJson("projects", "update", capped, "--spend-cap-usd", spent);
    const before = await ask(cappedKey);
    assert.equal(before.status, 429, before.text);
    assert.equal(before.json().error.code, "spend_cap_exceeded");

    for (let i = 0; i < 2; i++) assert.equal((await ask(dailyKey)).status, 200);
    assert.equal((await ask(dailyKey)).status, 429);
    await eventually(async () => (await usage(daily)).requests_last_day === 2, 5_000, "the day's count");

    server = await server.restart();

    assert.equal((await usage(capped)).spent_usd, spent, "the month's spend survives the restart");
    const after = await ask(cappedKey);
    assert.equal(after.status, 429, after.text);
    assert.equal(after.json().error.code, "spend_cap_exceeded");
    assert.equal((await usage(daily)).requests_last_day, 2, "the day's count survives the restart");
    const dayRefused = await ask(dailyKey);
    assert.equal(dayRefused.status, 429, dayRefused.text);
    assert.equal(dayRefused.json().error.code, "rate_limit_exceeded");
    assert.match(dayRefused.json().error.message, /per day/);
  });
});
