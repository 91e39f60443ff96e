import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { appendFileSync, chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServer, type AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { ConfigError, loadConfig } from "../src/config.js";
import { startServer } from "../src/server.js";
import { eventually } from "./support/http.js";
import { captureLog } from "./support/log-capture.js";
import { startRedis, type TestRedis } from "./support/redis.js";
import { createAdminClient } from "../src/cli/admin-client.js";
import { Plan } from "../src/gen/svc/auth/v1/auth_service_pb.js";

const bin = fileURLToPath(new URL("../bin/svc.js", import.meta.url));

/** Runs `svc serve` with exactly `env` (and PATH) until it exits; one that starts anyway is stopped after 30 s. */
function serveUntilExit(env: Record<string, string>, args: string[] = []): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, "serve", ...args], { env: { PATH: process.env.PATH, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    // A server that started anyway is stopped rather than left running.
    const timer = setTimeout(() => child.kill("SIGTERM"), 30_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** The embedded data dir's lock (`svc.pid`): one process per dir, and no lock outlives its holder. */
/** The admin token guards every admin call on the core port: a weak one stops the server at start. */
describe("the admin token", function () {
  this.timeout(60_000);
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-token-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const start = (env: Record<string, string> = {}) =>
    startServer(loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: dir, SVC_LOG_LEVEL: "error", ...env }));

  it("refuses a short token written into the data dir's admin-token file, as it refuses SVC_ADMIN_TOKEN", async () => {
    writeFileSync(join(dir, "admin-token"), "short\n");
    await assert.rejects(start(), (e: Error) => e instanceof ConfigError && /admin-token is 5 characters long; an admin token must be at least 16/.test(e.message));
    // The file's own token is taken when long enough, and one is generated when there is none.
    // Written by hand readable by others, it is made owner-only, as a generated one is.
    writeFileSync(join(dir, "admin-token"), "a-long-enough-admin-token\n", { mode: 0o644 });
    chmodSync(join(dir, "admin-token"), 0o644);
    const running = await start();
    try {
      assert.equal(running.adminToken, "a-long-enough-admin-token");
      assert.equal(statSync(join(dir, "admin-token")).mode & 0o777, 0o600);
    } finally {
      await running.close();
    }
  });

  it("removes a token a process killed before moving it into place left aside, and nothing else", async () => {
    const left = ["admin-token.4194301.tmp", "admin-token.12.tmp"];
    const kept = ["admin-token.x.tmp", "admin-token.bak.12.tmp", "notes.12.tmp"];
    for (const f of [...left, ...kept]) writeFileSync(join(dir, f), "svc_admin_left-behind-token\n", { mode: 0o600 });
    const running = await start();
    try {
      for (const f of left) assert.ok(!existsSync(join(dir, f)), `${f} is removed`);
      for (const f of kept) assert.ok(existsSync(join(dir, f)), `${f} is kept`);
      assert.equal(readFileSync(join(dir, "admin-token"), "utf8").trim(), running.adminToken);
    } finally {
      await running.close();
    }
  });

  it("warns at each start while SVC_ADMIN_TOKEN is set and an admin-token file is left, which would be the token again without the setting", async () => {
    const warnings = async () => {
      const lines = await captureLog(async () => {
        const running = await start({ SVC_ADMIN_TOKEN: "the-rotated-admin-token", SVC_LOG_LEVEL: "warn" });
        await running.close();
      });
      return lines.filter((l) => l.includes("admin token file is not used"));
    };
    assert.deepEqual(await warnings(), [], "no file, no warning");
    writeFileSync(join(dir, "admin-token"), "the-retired-admin-token\n", { mode: 0o600 });
    const [line] = await warnings();
    assert.equal((JSON.parse(line!) as { path: string }).path, join(dir, "admin-token"));
    assert.doesNotMatch(line!, /the-retired-admin-token|the-rotated-admin-token/, "neither token is printed");
  });

  it("generates the token into an empty admin-token file's place owner-only, whatever mode the empty file had", async () => {
    writeFileSync(join(dir, "admin-token"), "");
    chmodSync(join(dir, "admin-token"), 0o666);
    const running = await start();
    try {
      assert.match(running.adminToken, /^svc_admin_/);
      assert.equal(readFileSync(join(dir, "admin-token"), "utf8"), `${running.adminToken}\n`);
      assert.equal(statSync(join(dir, "admin-token")).mode & 0o777, 0o600);
    } finally {
      await running.close();
    }
  });

  it("names an admin-token file it cannot read (a directory, another user's) in a configuration error", async () => {
    mkdirSync(join(dir, "admin-token"));
    await assert.rejects(start(), (e: Error) => e instanceof ConfigError && e.message.startsWith(`the admin token file ${join(dir, "admin-token")} cannot be read (EISDIR`));
  });

  it("stops `svc serve` with a configuration error (exit code 2) when SVC_ADMIN_TOKEN is short", async () => {
    const res = await serveUntilExit({ SVC_DATA_DIR: dir, SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_ADMIN_TOKEN: "a" });
    assert.equal(res.code, 2, res.stdout + res.stderr);
    assert.match(res.stderr, /configuration error: SVC_ADMIN_TOKEN is 1 character long; an admin token must be at least 16/);
    assert.doesNotMatch(res.stdout, /svc gateway is running/);
  });
});

describe("the data dir lock", function () {
  this.timeout(60_000);
  let dir: string;
  const start = () =>
    startServer(loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: dir, SVC_ADMIN_TOKEN: "lock-test-admin-token", SVC_LOG_LEVEL: "error" }), { demo: true });
  const startTime = (pid: number) => {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]!;
  };
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-lock-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("refuses a second server on the same dir, and frees the dir when the first stops", async () => {
    const first = await start();
    try {
      await assert.rejects(start(), /in use by this process/);
    } finally {
      await first.close();
    }
    await (await start()).close();
  });

  it("takes over a lock left by a crash, whatever process its pid now names", async () => {
    // This very process (in a container, a restarted gateway is often pid 1 again, as the one that crashed was).
    writeFileSync(join(dir, "svc.pid"), `${process.pid} 1`);
    await (await start()).close();
    // A live process that is not the one that wrote the file: its pid was reused (its start time differs).
    const other = spawn("sleep", ["30"]);
    try {
      writeFileSync(join(dir, "svc.pid"), `${other.pid} 1`);
      await (await start()).close();
      // The same process, start time and all, still holds it.
      writeFileSync(join(dir, "svc.pid"), `${other.pid} ${startTime(other.pid!)}`);
      await assert.rejects(start(), new RegExp(`in use by process ${other.pid}`));
    } finally {
      other.kill();
    }
  });

  it("takes over a lock whose holder has died (a kill -9) but is not reaped yet: a zombie, whose pid and start time still read as running", async () => {
    // The background `sleep` exits at once; its parent, exec'd into `sleep 30`, never waits for it.
    const parent = spawn("sh", ["-c", "sleep 0 & echo $!; exec sleep 30"], { stdio: ["ignore", "pipe", "ignore"] });
    try {
      const pid = Number(await new Promise<string>((resolve) => parent.stdout.once("data", (d: Buffer) => resolve(d.toString().trim()))));
      const state = () => readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")[0];
      await eventually(() => state() === "Z", 5_000, `process ${pid} a zombie`);
      writeFileSync(join(dir, "svc.pid"), `${pid} ${startTime(pid)}`);
      await (await start()).close();
    } finally {
      parent.kill();
    }
  });

  it("stops `svc serve` with a configuration error naming SVC_DATA_DIR (exit code 2) when a live process holds the dir, in cluster mode too", async () => {
    const other = spawn("sleep", ["30"]);
    try {
      writeFileSync(join(dir, "svc.pid"), `${other.pid} ${startTime(other.pid!)}`);
      // Cluster mode (the dir is locked before Redis is reached): two replicas on one dir numbered their spooled logs alike.
      for (const cluster of [{}, { SVC_REDIS_URL: "redis://127.0.0.1:1" }] as Array<Record<string, string>>) {
        const res = await serveUntilExit({ SVC_DATA_DIR: dir, SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_ADMIN_TOKEN: "lock-test-admin-token", ...cluster }, ["--demo"]);
        assert.equal(res.code, 2, res.stdout + res.stderr);
        assert.match(res.stderr, new RegExp(`^configuration error: SVC_DATA_DIR ${dir.replace(/[/.]/g, "\\$&")} is in use by process ${other.pid}; stop it or set SVC_DATA_DIR to another directory`, "m"));
        assert.doesNotMatch(res.stdout, /svc gateway is running/);
        assert.equal(readFileSync(join(dir, "svc.pid"), "utf8"), `${other.pid} ${startTime(other.pid!)}`, "the holder's lock is left as it was");
      }
    } finally {
      other.kill();
    }
  });

  it("lets exactly one of several processes starting at the same moment take the dir", async () => {
    const script = `import { startServer } from ${JSON.stringify(new URL("../src/server.ts", import.meta.url).href)};
      import { loadConfig } from ${JSON.stringify(new URL("../src/config.ts", import.meta.url).href)};
      const env = { SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: process.argv[1], SVC_ADMIN_TOKEN: "test-admin-token", SVC_LOG_LEVEL: "error", SVC_CLICKHOUSE_URL: "http://127.0.0.1:1" };
      startServer(loadConfig(env)).then(async (s) => { console.log("LOCKED"); await new Promise((r) => setTimeout(r, 1500)); await s.close(); process.exit(0); }, (e) => { console.log(String(e.message).includes("in use") ? "REFUSED" : "FAILED " + e.message); process.exit(0); });`;
    for (let round = 0; round < 2; round++) {
      const d = mkdtempSync(join(tmpdir(), "svc-race-"));
      try {
        const outs = await Promise.all(Array.from({ length: 3 }, () => new Promise<string>((resolve) => {
          const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script, d], { stdio: ["ignore", "pipe", "inherit"] });
          let out = "";
          child.stdout.on("data", (b: Buffer) => (out += b.toString()));
          child.on("exit", () => resolve(out.trim()));
        })));
        assert.deepEqual(outs.sort(), ["LOCKED", "REFUSED", "REFUSED"], `round ${round}: ${outs.join(", ")}`);
      } finally {
        rmSync(d, { recursive: true, force: true });
      }
    }
  });
});

describe("start-up failures name the setting to change", function () {
  this.timeout(60_000);
  it("says which port setting clashes, and stops everything it had started", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-listen-"));
    // Another process's port (two of the gateway's own set alike are refused as configuration).
    const other = createServer();
    await new Promise<void>((r) => other.listen(0, "127.0.0.1", r));
    const port = String((other.address() as AddressInfo).port);
    try {
      const config = loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: port, SVC_GRPC_PORT: "0", SVC_DATA_DIR: dir, SVC_ADMIN_TOKEN: "test-admin-token", SVC_LOG_LEVEL: "error" });
      await assert.rejects(startServer(config, { demo: true }), /cannot listen on 127\.0\.0\.1:\d+ \(SVC_MANAGEMENT_PORT, SVC_HOST\): the port is in use/);
      // Nothing is left holding the data dir or the ports it had taken.
      await (await startServer({ ...config, managementPort: 0 }, { demo: true })).close();
      // The demo provider's port too.
      await assert.rejects(startServer({ ...config, managementPort: 0, demoPort: Number(port) }, { demo: true }), /cannot listen on 127\.0\.0\.1:\d+ \(SVC_DEMO_PORT\): the port is in use/);
      await (await startServer({ ...config, managementPort: 0 }, { demo: true })).close();
    } finally {
      other.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("settings only the machine can judge stop `svc serve` as configuration errors (exit code 2), before anything starts", function () {
  this.timeout(60_000);
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-badenv-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const ports = { SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0" };

  it("names SVC_DATA_DIR when the data dir is a file, or under one", async () => {
    const file = join(dir, "a-file");
    writeFileSync(file, "");
    for (const [dataDir, why] of [
      [file, /it exists and is not a directory/],
      [join(file, "data"), /a part of its path is a file, not a directory/],
      ["/dev/null/x", /a part of its path is a file, not a directory/],
    ] as const) {
      const res = await serveUntilExit({ ...ports, SVC_DATA_DIR: dataDir }, ["--demo"]);
      assert.equal(res.code, 2, `${dataDir}: ${res.stdout}${res.stderr}`);
      assert.match(res.stderr, new RegExp(`^configuration error: SVC_DATA_DIR ${dataDir.replace(/[/.]/g, "\\$&")} cannot be used as the data directory: `, "m"), dataDir);
      assert.match(res.stderr, why, dataDir);
      assert.doesNotMatch(res.stderr, /EEXIST|ENOTDIR/, dataDir);
    }
  });

  it("stops at once, naming the setting, where a directory's parent exists but takes none (Node's recursive mkdir spins there)", async () => {
    const file = join(dir, "a-file");
    writeFileSync(file, "");
    for (const [env, setting, why] of [
      [{ SVC_DATA_DIR: "/proc/svc-no-such-dir/data" }, "SVC_DATA_DIR", /cannot be created there/],
      [{ SVC_DATA_DIR: join(dir, "data"), SVC_TELEMETRY_SPOOL_DIR: "/proc/svc-no-such-dir" }, "SVC_TELEMETRY_SPOOL_DIR", /cannot be created there/],
      [{ SVC_DATA_DIR: join(dir, "data"), SVC_TELEMETRY_SPOOL_DIR: file }, "SVC_TELEMETRY_SPOOL_DIR", /it exists and is not a directory/],
      [{ SVC_DATA_DIR: join(dir, "data"), SVC_TELEMETRY_SPOOL_DIR: "/proc" }, "SVC_TELEMETRY_SPOOL_DIR", /cannot be used as the log spool/],
      [{ SVC_DATA_DIR: join(dir, "data"), SVC_TELEMETRY_SPOOL_DIR: join(file, "spool") }, "SVC_TELEMETRY_SPOOL_DIR", /a part of its path is a file/],
    ] as const) {
      const started = Date.now();
      const res = await serveUntilExit({ ...ports, ...env }, ["--demo"]);
      assert.equal(res.code, 2, `${setting}: ${res.stdout}${res.stderr}`);
      assert.match(res.stderr, new RegExp(`^configuration error: ${setting} `, "m"));
      assert.match(res.stderr, why);
      assert.ok(Date.now() - started < 20_000, "not after the 30 s stop of a server that started anyway");
    }
  });

  it("names SVC_HOST when it is not an address of this machine, before the data dir is touched", async () => {
    const dataDir = join(dir, "data");
    for (const [host, why] of [
      ["999.1.1.1", /SVC_HOST must be an IP address .* got "999\.1\.1\.1"/],
      ["http://127.0.0.1", /SVC_HOST must be an IP address/],
      ["10.255.255.1", /SVC_HOST "10\.255\.255\.1" cannot be listened on: not an address of this machine/],
      ["no-such-host.invalid", /SVC_HOST "no-such-host\.invalid" cannot be listened on: no such host name/],
    ] as const) {
      const res = await serveUntilExit({ ...ports, SVC_DATA_DIR: dataDir, SVC_HOST: host }, ["--demo"]);
      assert.equal(res.code, 2, `${host}: ${res.stdout}${res.stderr}`);
      assert.match(res.stderr, /^configuration error: /, host);
      assert.match(res.stderr, why, host);
      assert.equal(existsSync(dataDir), false, `${host}: nothing was started (the data dir was not even made)`);
    }
  });
});

/** Cluster mode keeps projects, keys, prompts and spend in Redis: embedded-mode files in its data dir are never read. */
describe("cluster mode on a data dir that holds embedded-mode data", function () {
  this.timeout(60_000);
  let dir: string;
  let redis: TestRedis;
  before(async () => {
    redis = await startRedis();
  });
  after(() => redis.stop());
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-embedded-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const start = (env: Record<string, string> = {}) =>
    startServer(loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: dir, SVC_ADMIN_TOKEN: "embedded-test-admin-token", SVC_LOG_LEVEL: "warn", ...env }), { demo: true });
  /** The warnings of one start in cluster mode that speak of the data dir's unread files. */
  const unreadWarnings = async () => {
    const lines = await captureLog(async () => {
      await (await start({ SVC_REDIS_URL: redis.url })).close();
    });
    return lines.filter((l) => l.includes("does not read"));
  };

  it("warns once at start, naming the files it does not read; says nothing where there are none", async () => {
    assert.deepEqual(await unreadWarnings(), [], "a fresh data dir: nothing to warn of");
    await (await start()).close();
    assert.deepEqual(await unreadWarnings(), [], "an embedded run that changed nothing left nothing to warn of");
    // An embedded run stores a project (registry.json); a prompts log is there too.
    const embedded = await start();
    try {
      await createAdminClient({ server: embedded.grpcUrl, token: embedded.adminToken }).createProject({ name: "embedded", plan: Plan.PRO });
    } finally {
      await embedded.close();
    }
    writeFileSync(join(dir, "prompts.jsonl"), `${JSON.stringify({ projectId: "proj_x", name: "p", version: 1, description: "", createdAt: 1, content: "hi" })}\n`);
    const warnings = await unreadWarnings();
    assert.equal(warnings.length, 1, warnings.join(""));
    const { level, msg } = JSON.parse(warnings[0]!) as { level: string; msg: string };
    assert.equal(level, "warn");
    assert.match(msg, new RegExp(`SVC_DATA_DIR ${dir.replace(/[/.]/g, "\\$&")} holds embedded-mode data that cluster mode does not read: registry\\.json, prompts\\.jsonl\\.`));
    assert.doesNotMatch(msg, /limits\.json/, "only the files that are there");
    // The journal a clean stop left holds its header only; one with changes (a crash left them) holds data.
    assert.doesNotMatch(msg, /registry\.jsonl/);
    appendFileSync(join(dir, "registry.jsonl"), `${JSON.stringify({ deleteKey: "key_x" })}\n`);
    const again = await unreadWarnings();
    assert.match(again[0] ?? "", /does not read: registry\.json, registry\.jsonl, prompts\.jsonl\./);
  });
});
