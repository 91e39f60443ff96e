import assert from "node:assert/strict";
import { startRedis, type TestRedis } from "../support/redis.js";
import { eventually } from "../support/http.js";
import { startSvcServe, type SvcServe } from "../support/svc-cli.js";

describe("the svc CLI while the registry's Redis is down", function () {
  this.timeout(60_000);
  let redis: TestRedis;
  let srv: SvcServe;

  before(async () => {
    redis = await startRedis();
    srv = await startSvcServe({ SVC_REDIS_URL: redis.url });
  });
  after(async () => {
    await srv?.stop();
    await redis?.stop();
  });

  it("says the registry cannot be reached (not that no server runs), with exit code 1", async () => {
    const created = await srv.svc("projects", "create", "--name", "outage", "--plan", "pro", "--json");
    assert.equal(created.code, 0, created.stderr);
    const id = JSON.parse(created.stdout).id as string;
    await redis.stop();
    for (const args of [["projects", "list"], ["projects", "create", "--name", "during", "--plan", "pro"], ["keys", "create", "--project", id, "--mode", "live"], ["keys", "list", "--project", id]]) {
      const res = await srv.svc(...args);
      assert.equal(res.code, 1, `${args.join(" ")}: ${res.stdout}`);
      assert.match(res.stderr, /^error: The registry of projects and keys cannot be reached right now\. Retry shortly\.\n$/, args.join(" "));
    }
  });

  it("shows a project the server read before, as the README says, without the key count it cannot list", async () => {
    redis = await startRedis(redis.port);
    await eventually(async () => (await srv.svc("projects", "list")).code === 0, 10_000, "the registry back");
    const created = await srv.svc("projects", "create", "--name", "shown", "--plan", "pro", "--json");
    assert.equal(created.code, 0, created.stderr);
    const id = JSON.parse(created.stdout).id as string;
    const before = await srv.svc("projects", "show", id, "--json");
    assert.equal(JSON.parse(before.stdout).keys, 0, before.stderr);
    await redis.stop();
    const json = await srv.svc("projects", "show", id, "--json");
    assert.equal(json.code, 0, json.stderr);
    const shown = JSON.parse(json.stdout);
    assert.deepEqual([shown.id, shown.name, shown.plan, "keys" in shown], [id, "shown", "pro", false]);
    assert.match(json.stderr, /^note: the key count is not shown: The registry of projects and keys cannot be reached right now/);
    // Nor is the month's spend: said, not left out silently (read as nothing spent, it would mislead).
    assert.equal("usage" in shown, false);
    assert.match(json.stderr, /\nnote: this month's spend and request counts are not shown: /);
    assert.doesNotMatch(before.stderr, /note:/, "with Redis up, nothing to note");
    const text = await srv.svc("projects", "show", id);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, new RegExp(`^${id}  shown\n`));
  });
});
