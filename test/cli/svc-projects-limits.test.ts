import assert from "node:assert/strict";
import { startSvcServe, type SvcServe } from "../support/svc-cli.js";

describe("svc projects update / show (limits) against a running `svc serve --demo`", function () {
  this.timeout(60_000);
  let srv: SvcServe;
  let id: string;

  before(async () => {
    srv = await startSvcServe();
    const created = await srv.svc("projects", "create", "--name", "limits", "--plan", "free", "--json");
    id = JSON.parse(created.stdout).id;
  });
  after(() => srv.stop());

  it("sets overrides and prints the plan, overrides and effective limits as JSON", async () => {
    const res = await srv.svc("projects", "update", id, "--rpm", "100", "--user-rpm", "5", "--spend-cap-usd", "12.50", "--json");
    assert.equal(res.code, 0, res.stderr);
    const p = JSON.parse(res.stdout);
    assert.equal(p.plan, "free");
    assert.deepEqual(p.limit_overrides, { requests_per_minute: 100, requests_per_day: null, user_requests_per_minute: 5, monthly_spend_cap_usd: "12.5" });
    assert.deepEqual(p.effective_limits, { requests_per_minute: 100, requests_per_day: 1000, user_requests_per_minute: 5, monthly_spend_cap_usd: "12.5" });
  });

  it("returns a limit to the plan's default with the value \"default\", and changes the plan", async () => {
    const res = await srv.svc("projects", "update", id, "--rpm", "default", "--plan", "pro", "--json");
    assert.equal(res.code, 0, res.stderr);
    const p = JSON.parse(res.stdout);
    assert.equal(p.plan, "pro");
    assert.equal(p.limit_overrides.requests_per_minute, null);
    assert.equal(p.effective_limits.requests_per_minute, 600);
  });

  it("shows keys, limits and this month's usage", async () => {
    const json = JSON.parse((await srv.svc("projects", "show", id, "--json")).stdout);
    assert.equal(json.keys, 0);
    assert.equal(json.effective_limits.requests_per_day, 100_000);
    assert.match(json.usage.month, /^\d{4}-\d{2}$/);
    assert.equal(json.usage.spent_usd, "0");
    const human = await srv.svc("projects", "show", id);
    assert.match(human.stdout, /requests per minute\s+600\s+\(plan default\)/);
    assert.match(human.stdout, /monthly spend cap \(USD\)\s+12\.5\s+12\.5/);
    assert.match(human.stdout, /spent 0 USD/);
  });

  it("refuses bad values with a message naming the flag and exit code 2", async () => {
    const cases: Array<[string[], RegExp]> = [
      [["--rpm=-5"], /--rpm must be a whole number/],
      [["--rpm", "1.5"], /--rpm must be a whole number/],
      [["--rpd", "999999999999"], /--rpd must be a whole number from 1 to 1000000000/],
      [["--user-rpm", "0"], /--user-rpm must be a whole number/],
      [["--spend-cap-usd", "abc"], /--spend-cap-usd must be a USD amount/],
      [["--spend-cap-usd=-1"], /--spend-cap-usd must be a USD amount/],
      [["--spend-cap-usd", " 5"], /--spend-cap-usd must be a USD amount/],
      [["--rpm", " 5"], /--rpm must be a whole number/],
      [["--plan", "gold"], /--plan must be free, pro or enterprise/],
      [[], /nothing to update/],
    ];
    for (const [flags, message] of cases) {
      const res = await srv.svc("projects", "update", id, ...flags);
      assert.equal(res.code, 2, `${flags.join(" ")}: ${res.stderr}`);
      assert.match(res.stderr, message);
    }
  });

  it("says when the project does not exist, with exit code 1", async () => {
    const res = await srv.svc("projects", "update", "proj_missing", "--rpm", "5");
    assert.equal(res.code, 1);
    assert.match(res.stderr, /No project with id 'proj_missing'/);
  });
});
