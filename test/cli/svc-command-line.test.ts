import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { startSvcServe, type SvcServe } from "../support/svc-cli.js";

const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { name: string; version: string };

describe("the svc command line: each command's own options, --version, --server", function () {
  this.timeout(60_000);
  let srv: SvcServe;

  before(async () => {
    srv = await startSvcServe();
  });
  after(() => srv.stop());

  const projectCount = async () => JSON.parse((await srv.svc("projects", "list", "--json")).stdout).length as number;

  it("refuses an option the command does not take, naming it and the command, with exit code 2 and no effect", async () => {
    const p = JSON.parse((await srv.svc("projects", "create", "--name", "opts", "--plan", "free", "--json")).stdout).id;
    const before = await projectCount();
    const cases = [
      [["projects", "list", "--plan", "pro"], "--plan", "svc projects list"],
      [["projects", "show", p, "--version", "3"], "--version", "svc projects show"],
      [["projects", "create", "--name", "x", "--plan", "free", "--mode", "live"], "--mode", "svc projects create"],
      [["projects", "update", p, "--rpm", "5", "--name", "renamed"], "--name", "svc projects update"],
      [["keys", "create", "--project", p, "--mode", "live", "--plan", "pro"], "--plan", "svc keys create"],
      [["keys", "delete", "key_x", "--project", p], "--project", "svc keys delete"],
      [["prompts", "list", "--project", p, "--file", "f"], "--file", "svc prompts list"],
      [["projects", "list", "--colour", "blue"], "--colour", "svc projects list"],
    ] as const;
    // Refused before any call to the server, so they may run side by side.
    const runs = await Promise.all(cases.map(([args]) => srv.svc(...args)));
    cases.forEach(([args, flag, command], i) => {
      const res = runs[i]!;
      assert.equal(res.code, 2, `${args.join(" ")}: ${res.stderr}`);
      const first = res.stderr.split("\n")[0]!;
      assert.ok(first.includes(flag) && first.includes(command), first);
    });
    assert.equal(await projectCount(), before, "nothing was created");
    const same = await srv.svc("projects", "update", p, "--rpm", "5", "--rpm", "6");
    assert.equal(same.code, 2);
    assert.match(same.stderr, /--rpm is given more than once/);
  });

  it("reads a value that starts with a dash as its option's value: the CLI's own check answers a negative, and a description may start with one", async () => {
    const p = JSON.parse((await srv.svc("projects", "create", "--name", "dashes", "--plan", "enterprise", "--json")).stdout).id;
    const negative = await srv.svc("projects", "update", p, "--rpm", "-1");
    assert.equal(negative.code, 2);
    assert.match(negative.stderr.split("\n")[0]!, /--rpm/);
    assert.doesNotMatch(negative.stderr, /ambiguous/);
    const key = await srv.svc("keys", "create", "--project", p, "--mode", "test", "--description", "-laptop-", "--json");
    assert.equal(key.code, 0, key.stderr);
    assert.equal(JSON.parse(key.stdout).description, "-laptop-");
    // An option where the value should be is still a missing value, and so is a mistyped one.
    for (const word of ["--json", "--jsn"]) {
      const missing = await srv.svc("keys", "create", "--project", p, "--mode", "test", "--description", word);
      assert.equal(missing.code, 2, word);
    }
    // An unknown command of a group gets the group's help.
    const unknown = await srv.svc("keys", "frob");
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /^error: unknown command 'keys frob'\n\nsvc keys: /);
  });

  it("creates a project with its limits and body logging set, in one step", async () => {
    const res = await srv.svc("projects", "create", "--name", "lim", "--plan", "free", "--rpm", "5", "--rpd", "50", "--user-rpm", "2", "--spend-cap-usd", "1", "--log-bodies", "off", "--json");
    assert.equal(res.code, 0, res.stderr);
    const created = JSON.parse(res.stdout);
    assert.equal(created.plan, "free");
    assert.deepEqual(created.limit_overrides, { requests_per_minute: 5, requests_per_day: 50, user_requests_per_minute: 2, monthly_spend_cap_usd: "1" });
    assert.equal(created.log_bodies, false);
    const shown = JSON.parse((await srv.svc("projects", "show", created.id, "--json")).stdout);
    assert.deepEqual(shown.effective_limits, { requests_per_minute: 5, requests_per_day: 50, user_requests_per_minute: 2, monthly_spend_cap_usd: "1" });
    const human = await srv.svc("projects", "create", "--name", "lim2", "--plan", "pro", "--rpm", "7");
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /requests per minute\s+7\s+7/);
    // A bad value is refused before anything is created.
    const before = await projectCount();
    const bad = await srv.svc("projects", "create", "--name", "bad", "--plan", "free", "--rpm", "0");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--rpm must be a whole number/);
    assert.equal(await projectCount(), before);
  });

  it("lists only live or only test keys with keys list --mode", async () => {
    const p = JSON.parse((await srv.svc("projects", "create", "--name", "modes", "--plan", "pro", "--json")).stdout).id;
    const live = JSON.parse((await srv.svc("keys", "create", "--project", p, "--mode", "live", "--json")).stdout).id;
    const test = JSON.parse((await srv.svc("keys", "create", "--project", p, "--mode", "test", "--json")).stdout).id;
    const ids = async (...mode: string[]) => JSON.parse((await srv.svc("keys", "list", "--project", p, ...mode, "--json")).stdout).map((k: { id: string }) => k.id);
    assert.deepEqual(await ids("--mode", "test"), [test]);
    assert.deepEqual(await ids("--mode", "live"), [live]);
    assert.deepEqual(await ids(), [live, test]);
    const bad = await srv.svc("keys", "list", "--project", p, "--mode", "both");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--mode must be live or test/);
  });

  it("refuses to move a project to a plan with fewer keys than it has, saying how many to delete", async () => {
    const p = JSON.parse((await srv.svc("projects", "create", "--name", "down", "--plan", "pro", "--json")).stdout).id;
    const keys: string[] = [];
    for (const mode of ["live", "live", "test"]) keys.push(JSON.parse((await srv.svc("keys", "create", "--project", p, "--mode", mode, "--json")).stdout).id);
    const res = await srv.svc("projects", "update", p, "--plan", "free");
    assert.equal(res.code, 1);
    assert.match(res.stderr, /free plan allows 2 keys per project .* has 3; delete 1 key/);
    assert.equal(JSON.parse((await srv.svc("projects", "show", p, "--json")).stdout).plan, "pro");
    await srv.svc("keys", "delete", keys[2]!);
    const ok = await srv.svc("projects", "update", p, "--plan", "free", "--json");
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).plan, "free");
  });

  it("prints the package's version with --version or version, and still reads prompts show --version N", async () => {
    for (const args of [["--version"], ["version"]]) {
      const res = await srv.svc(...args);
      assert.equal(res.code, 0, res.stderr);
      assert.equal(res.stdout.trim(), `${pkg.name} ${pkg.version}`);
    }
    assert.deepEqual(JSON.parse((await srv.svc("version", "--json")).stdout), { name: pkg.name, version: pkg.version });
    const p = JSON.parse((await srv.svc("projects", "create", "--name", "v", "--plan", "pro", "--json")).stdout).id;
    // A version of a prompt that does not exist: the server's NotFound (1), not a command-line error (2).
    const show = await srv.svc("prompts", "show", "missing", "--project", p, "--version", "3");
    assert.equal(show.code, 1, show.stderr);
    const missing = await srv.svc("prompts", "show", "missing", "--project", p, "--version");
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--version/);
  });

  it("says a --server that is not the core's address does not look like it, with the default, not a bare HTTP 404 or an OpenSSL error", async () => {
    const core = new URL(srv.grpcUrl);
    for (const server of [`${srv.grpcUrl}/api`, `https://${core.host}`, srv.managementUrl]) {
      const res = await srv.svc("projects", "list", "--server", server);
      assert.equal(res.code, 1, server);
      assert.match(res.stderr, /does not look like the svc core's gRPC address/, server);
      assert.match(res.stderr, /default is http:\/\/127\.0\.0\.1:\d+/, server);
      assert.doesNotMatch(res.stderr, /SSL routines|^error: HTTP 404$/m, server);
    }
    const path = await srv.svc("projects", "list", "--server", `${srv.grpcUrl}/api`);
    assert.match(path.stderr, /drop '\/api'/);
    const tls = await srv.svc("projects", "list", "--server", `https://${core.host}`);
    assert.match(tls.stderr, /does not speak TLS/);
  });
});
