import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { postJson } from "../support/http.js";
import { banner, type Run } from "../support/svc-cli.js";

const bin = fileURLToPath(new URL("../../bin/svc.js", import.meta.url));

describe("the svc CLI against a running `svc serve --demo`", function () {
  this.timeout(60_000);
  let dataDir: string;
  let server: ChildProcess;
  let grpcUrl: string;
  let gatewayUrl: string;
  let env: NodeJS.ProcessEnv;

  const svc = (...args: string[]): Promise<Run> =>
    new Promise((resolve) => {
      execFile(process.execPath, [bin, ...args], { env, cwd: dataDir }, (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr });
      });
    });

  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "svc-cli-"));
    env = { PATH: process.env.PATH, SVC_DATA_DIR: join(dataDir, "data"), SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0" };
    server = spawn(process.execPath, [bin, "serve", "--demo"], { env, cwd: dataDir, stdio: ["ignore", "pipe", "pipe"] });
    ({ grpcUrl, gatewayUrl } = await banner(server));
  });

  after(() => {
    if (server.exitCode === null) server.kill("SIGKILL");
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("generates the admin token into the data dir, readable by its owner only", () => {
    const mode = statSync(join(dataDir, "data", "admin-token")).mode & 0o777;
    assert.equal(mode, 0o600);
  });

  it("creates a project, keys, lists and deletes them, with --json output", async () => {
    const project = await svc("projects", "create", "--name", "shop", "--plan", "free", "--json", "--server", grpcUrl);
    assert.equal(project.code, 0, project.stderr);
    const p = JSON.parse(project.stdout);
    assert.match(p.id, /^proj_/);
    assert.equal(p.plan, "free");

    const created = await svc("keys", "create", "--project", p.id, "--mode", "live", "--description", "backend", "--json", "--server", grpcUrl);
    assert.equal(created.code, 0, created.stderr);
    const k = JSON.parse(created.stdout);
    assert.match(k.key, /^svc_sk_live_[0-9A-Za-z]{32,}$/);
    assert.equal(k.description, "backend");

    const listed = await svc("keys", "list", "--project", p.id, "--json", "--server", grpcUrl);
    const keys = JSON.parse(listed.stdout);
    assert.equal(keys.length, 1);
    assert.equal(keys[0].id, k.id);
    assert.ok(!listed.stdout.includes(k.key), "the key value is shown only at creation");

    const ok = await postJson(`${gatewayUrl}/v1/chat/completions`, k.key, { model: "chat-4o", messages: [{ role: "user", content: "hi" }] });
    assert.equal(ok.status, 200);

    const deleted = await svc("keys", "delete", k.id, "--json", "--server", grpcUrl);
    assert.equal(deleted.code, 0, deleted.stderr);
    const after = await postJson(`${gatewayUrl}/v1/chat/completions`, k.key, { model: "chat-4o", messages: [{ role: "user", content: "hi" }] });
    assert.equal(after.status, 401);

    const show = await svc("projects", "show", p.id, "--json", "--server", grpcUrl);
    assert.equal(JSON.parse(show.stdout).keys, 0);
  });

  it("refuses a key beyond the plan's limit with a clear message and exit code 1", async () => {
    const p = JSON.parse((await svc("projects", "create", "--name", "small", "--plan", "free", "--json", "--server", grpcUrl)).stdout);
    await svc("keys", "create", "--project", p.id, "--mode", "live", "--server", grpcUrl);
    await svc("keys", "create", "--project", p.id, "--mode", "test", "--server", grpcUrl);
    const third = await svc("keys", "create", "--project", p.id, "--mode", "live", "--server", grpcUrl);
    assert.equal(third.code, 1);
    assert.match(third.stderr, /free plan allows 2 keys/);
  });

  it("prints a human-readable key once, with a warning", async () => {
    const p = JSON.parse((await svc("projects", "create", "--name", "human", "--plan", "pro", "--json", "--server", grpcUrl)).stdout);
    const res = await svc("keys", "create", "--project", p.id, "--mode", "test", "--server", grpcUrl);
    assert.match(res.stdout, /svc_sk_test_[0-9A-Za-z]{32,}/);
    assert.match(res.stdout, /only time the key is shown/);
  });

  it("rejects bad arguments with usage and exit code 2", async () => {
    const badPlan = await svc("projects", "create", "--name", "x", "--plan", "gold", "--server", grpcUrl);
    assert.equal(badPlan.code, 2);
    assert.match(badPlan.stderr, /--plan must be free, pro or enterprise/);
    const missing = await svc("keys", "create", "--mode", "live", "--server", grpcUrl);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--project is required/);
    // An operand too many is refused, not ignored (`keys delete K1 K2` deleted K1 only).
    const extra = await svc("keys", "delete", "key_a", "key_b", "--server", grpcUrl);
    assert.equal(extra.code, 2);
    assert.match(extra.stderr, /unexpected argument 'key_b'/);
    const noSub = await svc("projects", "--server", grpcUrl);
    assert.equal(noSub.code, 2);
    assert.match(noSub.stderr, /'projects' needs a subcommand/);
  });

  it("refuses a wrong admin token, naming where the CLI took it from", async () => {
    const res = await svc("projects", "list", "--server", grpcUrl, "--admin-token", "wrong");
    assert.equal(res.code, 1);
    assert.match(res.stderr, /admin token.*the token from --admin-token was refused/);
    // A token file the server no longer uses (it was restarted with SVC_ADMIN_TOKEN, say).
    const file = join(dataDir, "stale-data");
    mkdirSync(file);
    writeFileSync(join(file, "admin-token"), "svc_admin_stale_token_0123456789");
    const stale = await new Promise<Run>((resolve) => {
      execFile(process.execPath, [bin, "projects", "list", "--server", grpcUrl], { env: { ...env, SVC_DATA_DIR: file }, cwd: dataDir }, (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr });
      });
    });
    assert.equal(stale.code, 1);
    assert.ok(stale.stderr.includes(`the token from the file ${join(file, "admin-token")} was refused`), stale.stderr);
  });

  it("says when no server answers", async () => {
    const res = await svc("projects", "list", "--server", "http://127.0.0.1:1");
    assert.equal(res.code, 1);
    assert.match(res.stderr, /svc serve/);
  });

  it("says what --server should be when it is not a URL, or not the core's port", async () => {
    const notUrl = await svc("projects", "list", "--server", "notaurl");
    assert.equal(notUrl.code, 2);
    assert.match(notUrl.stderr, /http\(s\) URL/);
    const gateway = await svc("projects", "list", "--server", gatewayUrl);
    assert.equal(gateway.code, 1);
    assert.match(gateway.stderr, /gRPC port/);
  });

  it("stops quietly when its reader closes the pipe early (svc projects list | head -1)", async () => {
    for (const args of [["projects", "list"], ["projects", "list", "--json"]]) {
      const child = spawn(process.execPath, [bin, ...args, "--server", grpcUrl], { env, cwd: dataDir, stdio: ["ignore", "pipe", "pipe"] });
      child.stdout!.destroy(); // the reader is gone before the listing is written
      let stderr = "";
      child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
      const code = await new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
      assert.equal(stderr, "", args.join(" "));
      assert.equal(code, 0, args.join(" "));
    }
  });

  it("says so, exit code 1, when its output cannot be written (a full disk)", async function () {
    if (!existsSync("/dev/full")) this.skip();
    const full = openSync("/dev/full", "w");
    try {
      const child = spawn(process.execPath, [bin, "projects", "list", "--server", grpcUrl], { env, cwd: dataDir, stdio: ["ignore", full, "pipe"] });
      let stderr = "";
      child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
      const code = await new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
      assert.equal(code, 1);
      assert.match(stderr, /^error: the output could not be written \(ENOSPC: no space left on device.*\); the command itself may have taken effect\n$/);
    } finally {
      closeSync(full);
    }
  });

  it("stops cleanly on SIGTERM, its output pipe closed too", async () => {
    // `svc serve | head -1`: the reader leaves; the server goes on serving, and stops cleanly.
    server.stdout!.destroy();
    const live = await svc("projects", "create", "--name", "after-pipe", "--plan", "free", "--json", "--server", grpcUrl);
    assert.equal(live.code, 0, live.stderr);
    const code = await new Promise<number | null>((resolve) => {
      server.once("exit", (c) => resolve(c));
      server.kill("SIGTERM");
    });
    assert.equal(code, 0);
  });
});

describe("svc serve with a log it cannot write (stderr on a full disk)", function () {
  this.timeout(60_000);

  it("goes on serving, its log lines dropped, and stops cleanly on SIGTERM with its requests logged", async function () {
    if (!existsSync("/dev/full")) this.skip();
    const dataDir = mkdtempSync(join(tmpdir(), "svc-cli-full-"));
    const full = openSync("/dev/full", "w");
    const env = { PATH: process.env.PATH, SVC_DATA_DIR: join(dataDir, "data"), SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_LOG_LEVEL: "debug" };
    const server = spawn(process.execPath, [bin, "serve", "--demo"], { env, cwd: dataDir, stdio: ["ignore", "pipe", full] });
    try {
      const exited = new Promise<number | null>((resolve) => server.once("exit", (c) => resolve(c)));
      const { grpcUrl, gatewayUrl } = await banner(server);
      const run = (...args: string[]) =>
        new Promise<Run>((resolve) => execFile(process.execPath, [bin, ...args, "--server", grpcUrl], { env, cwd: dataDir }, (err, stdout, stderr) => resolve({ code: err ? 1 : 0, stdout, stderr })));
      const project = JSON.parse((await run("projects", "create", "--name", "full", "--plan", "free", "--json")).stdout);
      const key = JSON.parse((await run("keys", "create", "--project", project.id, "--mode", "live", "--json")).stdout).key;
      // Each request is a debug log line, and the unknown model a warning: none can be written.
      for (const model of ["chat-4o-mini", "no-such-model", "chat-4o-mini"]) {
        const r = await postJson(`${gatewayUrl}/v1/chat/completions`, key, { model, messages: [{ role: "user", content: "hi" }] });
        assert.equal(r.status, model === "no-such-model" ? 400 : 200, r.text);
      }
      assert.equal(server.exitCode, null, "still serving");
      server.kill("SIGTERM");
      assert.equal(await exited, 0);
      // Restarted, it has the requests' logs and the month's spend: the shutdown wrote them.
      const again = spawn(process.execPath, [bin, "serve", "--demo"], { env, cwd: dataDir, stdio: ["ignore", "pipe", "ignore"] });
      try {
        const { grpcUrl: grpc2, managementUrl: management } = await banner(again);
        const shown = await new Promise<Run>((resolve) => execFile(process.execPath, [bin, "projects", "show", project.id, "--json", "--server", grpc2], { env, cwd: dataDir }, (err, stdout, stderr) => resolve({ code: err ? 1 : 0, stdout, stderr })));
        assert.equal(shown.code, 0, shown.stderr);
        // The unknown model is refused before the limits count it.
        const usage = JSON.parse(shown.stdout).usage;
        assert.equal(usage.requests_last_day, 2, shown.stdout);
        assert.ok(Number(usage.spent_usd) > 0, shown.stdout);
        const logs = await fetch(`${management}/v1/logs`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.json() as Promise<{ data: Array<{ status: number }> }>);
        assert.deepEqual(logs.data.map((l) => l.status).sort(), [200, 200, 400]);
      } finally {
        again.kill("SIGTERM");
        await new Promise((r) => again.once("exit", r));
      }
    } finally {
      if (server.exitCode === null) server.kill("SIGKILL");
      closeSync(full);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("svc run from a working directory that no longer exists", () => {
  it("says so plainly: exit code 2 for svc serve (as a bad setting), 1 for an admin command", async () => {
    const root = mkdtempSync(join(tmpdir(), "svc-cli-gone-"));
    try {
      for (const [args, code] of [[["serve", "--demo"], 2], [["projects", "list"], 1]] as const) {
        const gone = join(root, "gone");
        mkdirSync(gone);
        // The directory is removed by the shell that then becomes svc, standing in it.
        const r = await new Promise<Run>((resolve) =>
          execFile("sh", ["-c", `rmdir "${gone}" && exec "$0" "$@"`, process.execPath, bin, ...args], { cwd: gone, env: { ...process.env, SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0" } }, (err, stdout, stderr) =>
            resolve({ code: err ? Number((err as { code?: number }).code) : 0, stdout, stderr }),
          ),
        );
        assert.equal(r.code, code, r.stderr);
        assert.equal(r.stderr, "error: the current directory no longer exists (it was deleted or moved away); run svc from a directory that exists\n");
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
