import assert from "node:assert/strict";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { createServer as createHttpServer, type Server as HttpServer } from "node:http";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { startTestClickHouse, type TestClickHouse } from "../../support/clickhouse.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { postJson, rawRequest } from "../../support/http.js";
import { startSvcServe } from "../../support/svc-cli.js";

/** Every log id of a key's project, following the cursor to the end. */
async function allLogIds(managementUrl: string, key: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor = "";
  for (;;) {
    const res = await rawRequest(`${managementUrl}/v1/logs?limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
    assert.equal(res.status, 200, res.text);
    const page = res.json();
    ids.push(...page.data.map((l: { id: string }) => l.id));
    if (!page.next_cursor) return ids;
    cursor = page.next_cursor;
  }
}

/** Polls until `want.length` ids are listed; reads may answer 503 while the store reconnects. */
async function eventuallyEqual(get: () => Promise<string[]>, want: string[], ms: number): Promise<string[]> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const got = await get();
      if (got.length === want.length || Date.now() > end) return got;
    } catch (e) {
      if (Date.now() > end) throw e;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe("request logs survive a ClickHouse outage mid-load: every request logged exactly once", function () {
  this.timeout(120_000);
  let ch: TestClickHouse;
  let gw: TestGateway;

  before(async function () {
    if (process.env.SVC_TEST_CLICKHOUSE_URL) this.skip(); // a real server cannot be killed from here
    ch = await startTestClickHouse();
    gw = await startTestGateway({ SVC_CLICKHOUSE_URL: ch.url, SVC_TELEMETRY_BATCH_SIZE: "10", SVC_TELEMETRY_FLUSH_INTERVAL_MS: "50", SVC_LOG_LEVEL: "error" });
  });
  after(async () => {
    await gw?.close();
    await ch?.stop();
  });

  it("counts 150 requests made while the store is killed and restarted", async () => {
    const keys = await gw.project(Plan.ENTERPRISE);
    const url = `${gw.gatewayUrl}/v1/chat/completions`;
    const made: string[] = [];
    const send = async (i: number) => {
      const r = await postJson(url, keys.live, { model: "chat-4o-mini", messages: [{ role: "user", content: `durable ${i}` }] });
      assert.equal(r.status, 200, r.text);
      made.push(String(r.headers["x-svc-request-id"]));
    };
    for (let i = 0; i < 50; i++) await send(i);
    await ch.kill(); // mid-load: batches in flight fail and go to the spool
    for (let i = 50; i < 100; i++) await send(i);
    await ch.start();
    for (let i = 100; i < 150; i++) await send(i);
    const logged = await eventuallyEqual(() => allLogIds(gw.managementUrl, keys.live), made, 60_000);
    assert.equal(new Set(logged).size, logged.length, "no request logged twice");
    assert.deepEqual([...logged].sort(), [...made].sort(), "every request logged");
    const analytics = await rawRequest(`${gw.managementUrl}/v1/analytics?granularity=minute`, { method: "GET", headers: { authorization: `Bearer ${keys.live}` } });
    assert.equal(analytics.json().totals.requests, 150, "analytics count each request once");
  });
});

describe("SIGTERM flushes the logs of the last requests before `svc serve` exits", function () {
  this.timeout(120_000);

  // As built (what `npm ci` leaves) and as TypeScript through tsx (SVC_RUN_TS=1), each started from
  // a working directory of its own, as a user would: the telemetry engine's process must start in both.
  for (const [how, env] of [["built JavaScript", {}], ["TypeScript", { SVC_RUN_TS: "1" }]] as const) {
    it(`finds every request's log after a restart on the same data dir (${how})`, async () => {
      const first = await startSvcServe({ ...env, SVC_ADMIN_TOKEN: "durable-admin-token", SVC_TELEMETRY_FLUSH_INTERVAL_MS: "60000", SVC_TELEMETRY_BATCH_SIZE: "100000", SVC_LOG_LEVEL: "error" });
      let second: Awaited<ReturnType<typeof startSvcServe>> | undefined;
      try {
        const project = JSON.parse((await first.svc("projects", "create", "--name", "d", "--plan", "enterprise", "--json", "--admin-token", "durable-admin-token")).stdout).id;
        const key = JSON.parse((await first.svc("keys", "create", "--project", project, "--mode", "live", "--json", "--admin-token", "durable-admin-token")).stdout).key;
        const made: string[] = [];
        for (let i = 0; i < 20; i++) {
          const r = await postJson(`${first.gatewayUrl}/v1/chat/completions`, key, { model: "chat-4o", messages: [{ role: "user", content: `last words ${i}` }] });
          made.push(String(r.headers["x-svc-request-id"]));
        }
        // Nothing has been written yet (a minute's flush interval, a huge batch): only SIGTERM can.
        second = await first.restart();
        const logged = await eventuallyEqual(() => allLogIds(second!.managementUrl, key), made, 20_000);
        assert.deepEqual([...logged].sort(), [...made].sort());
      } finally {
        await (second ?? first).stop();
      }
    });
  }
});

/** The embedded engine's processes under a gateway: its children running chdb-server, with their arguments. */
function engineProcesses(gatewayPid: number): { pid: number; args: string[] }[] {
  return readdirSync("/proc").flatMap((name) => {
    if (!/^\d+$/.test(name)) return [];
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) !== gatewayPid) return [];
      const argv = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0");
      const script = argv.findIndex((a) => /chdb-server\.[jt]s$/.test(a));
      return script < 0 ? [] : [{ pid: Number(name), args: argv.slice(script + 1) }];
    } catch {
      return []; // gone meanwhile
    }
  });
}

/** The TCP ports a process listens on: its socket fds matched against /proc/net/tcp's LISTEN rows. */
function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // closed meanwhile
    }
  }
  return readFileSync("/proc/net/tcp", "utf8").split("\n").slice(1).flatMap((line) => {
    const f = line.trim().split(/\s+/);
    return f.length > 9 && f[3] === "0A" && inodes.has(f[9]!) ? [parseInt(f[1]!.split(":")[1]!, 16)] : [];
  });
}

describe("the embedded engine is restarted even when its restart fails", function () {
  this.timeout(120_000);

  it("serves logs again, without a gateway restart, after the restarted engine is killed as it starts; nothing goes to the dead engine's port, which another process took", async function () {
    if (!readdirSync("/proc").includes("self")) this.skip(); // the engine's process is found through Linux's /proc
    const serve = await startSvcServe({ SVC_ADMIN_TOKEN: "engine-admin-token", SVC_TELEMETRY_FLUSH_INTERVAL_MS: "50", SVC_LOG_LEVEL: "error" });
    let squatter: HttpServer | undefined;
    try {
      const admin = ["--json", "--admin-token", "engine-admin-token"];
      const project = JSON.parse((await serve.svc("projects", "create", "--name", "e", "--plan", "enterprise", ...admin)).stdout).id;
      const key = JSON.parse((await serve.svc("keys", "create", "--project", project, "--mode", "live", ...admin)).stdout).key;
      const made: string[] = [];
      const send = async (i: number) => {
        const r = await postJson(`${serve.gatewayUrl}/v1/chat/completions`, key, { model: "chat-4o", messages: [{ role: "user", content: `engine ${i}` }] });
        assert.equal(r.status, 200, r.text);
        made.push(String(r.headers["x-svc-request-id"]));
      };
      await send(0);
      assert.equal((await eventuallyEqual(() => allLogIds(serve.managementUrl, key), made, 30_000)).length, 1, "logged while the engine runs");
      const [first] = engineProcesses(serve.pid);
      assert.ok(first, "the engine runs in a child process");
      const [port] = listeningPorts(first.pid);
      assert.ok(port, "the engine listens on a port");
      process.kill(first.pid, "SIGKILL");
      // Another local process takes the dead engine's port as soon as it is free, and keeps what is
      // sent to it: the gateway's client of the engine sends the engine's password with each call.
      const seen: string[] = [];
      squatter = createHttpServer((req, res) => {
        seen.push(`${req.method} ${req.url} authorization=${req.headers.authorization !== undefined}`);
        res.writeHead(500).end();
      });
      for (const end = Date.now() + 10_000; ; await new Promise((r) => setTimeout(r, 5))) {
        try {
          await new Promise<void>((resolve, reject) => squatter!.once("error", reject).listen(port, "127.0.0.1", resolve));
          break;
        } catch (e) {
          if (Date.now() > end) throw e;
        }
      }
      // Its replacement is killed the moment it appears, before it is ready: a restart that fails.
      let second: { pid: number; args: string[] } | undefined;
      for (const end = Date.now() + 10_000; !second && Date.now() < end; await new Promise((r) => setTimeout(r, 5))) {
        second = engineProcesses(serve.pid).find((p) => p.pid !== first.pid);
      }
      assert.ok(second, "the gateway starts a new engine");
      process.kill(second.pid, "SIGKILL");
      assert.equal(second.args[0], "0", `restarted on a free port, not the dead engine's (${second.args.join(" ")})`);
      for (let i = 1; i < 5; i++) await send(i);
      const logged = await eventuallyEqual(() => allLogIds(serve.managementUrl, key), made, 45_000);
      assert.deepEqual([...logged].sort(), [...made].sort(), "every request logged once the engine is back");
      assert.equal(engineProcesses(serve.pid).length, 1, "one engine runs");
      assert.deepEqual(seen, [], "nothing sent to the dead engine's port");
    } finally {
      squatter?.close();
      await serve.stop();
    }
  });
});
