import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../../src/config.js";
import { BodyBudget } from "../../../src/facades/gateway/body-budget.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, postJson } from "../../support/http.js";

/**
 * Request bodies coming in are held, all together, within SVC_MAX_BODY_BYTES_IN_FLIGHT: a client
 * that withholds the last bytes of large bodies cannot make the gateway hold them without bound;
 * the largest body coming in is dropped (503 gateway_overloaded), the others go on.
 */
describe("the budget of request bodies coming in", function () {
  this.timeout(30_000);

  describe("BodyBudget", () => {
    it("drops the largest body coming in when one's bytes pass the budget, and counts each body until it leaves", () => {
      const budget = new BodyBudget(700);
      const dropped: string[] = [];
      const a = budget.open(() => dropped.push("a"));
      const b = budget.open(() => dropped.push("b"));
      const c = budget.open(() => dropped.push("c"));
      a.take(100);
      b.take(300);
      c.take(200);
      assert.equal(budget.used, 600);
      a.take(150); // 750: b, the largest, goes, though a took the bytes
      assert.deepEqual(dropped, ["b"]);
      assert.equal(b.dropped, true);
      assert.equal(budget.used, 450);
      b.take(1000); // a dropped body counts no more
      assert.equal(budget.used, 450);
      c.take(500); // 950: c (700) is now the largest, and goes itself
      assert.deepEqual(dropped, ["b", "c"]);
      assert.equal(budget.used, 250);
      a.close();
      a.close();
      assert.equal(budget.used, 0);
      a.take(10);
      assert.equal(budget.used, 0, "a body that left counts no more");
    });

    it("is set by SVC_MAX_BODY_BYTES_IN_FLIGHT, at least one whole body; by default 256 MiB or four of the largest body", () => {
      assert.equal(loadConfig({}).maxBodyBytesInFlight, 256 * 1024 * 1024);
      assert.equal(loadConfig({ SVC_MAX_REQUEST_BYTES: String(100 * 1024 * 1024) }).maxBodyBytesInFlight, 400 * 1024 * 1024);
      assert.equal(loadConfig({ SVC_MAX_BODY_BYTES_IN_FLIGHT: "8388608" }).maxBodyBytesInFlight, 8388608);
      assert.throws(
        () => loadConfig({ SVC_MAX_BODY_BYTES_IN_FLIGHT: "1000000" }),
        (e: Error) => e instanceof ConfigError && e.message === "SVC_MAX_BODY_BYTES_IN_FLIGHT must be at least the largest request body (SVC_MAX_REQUEST_BYTES's default, 4194304), got 1000000",
      );
      assert.throws(
        () => loadConfig({ SVC_MAX_REQUEST_BYTES: "2000000", SVC_MAX_BODY_BYTES_IN_FLIGHT: "1000000" }),
        (e: Error) => e instanceof ConfigError && e.message.includes("(SVC_MAX_REQUEST_BYTES, 2000000)"),
      );
      const dir = mkdtempSync(join(tmpdir(), "svc-budget-config-"));
      try {
        writeFileSync(join(dir, "svc.config.json"), JSON.stringify({ maxRequestBytes: 8388608 }));
        assert.throws(
          () => loadConfig({ SVC_CONFIG: join(dir, "svc.config.json"), SVC_MAX_BODY_BYTES_IN_FLIGHT: "5000000" }),
          (e: Error) => e instanceof ConfigError && e.message.includes("(the config file's maxRequestBytes, 8388608)"),
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
      assert.throws(() => loadConfig({ SVC_MAX_BODY_BYTES_IN_FLIGHT: "lots" }), (e: Error) => e instanceof ConfigError && e.message.startsWith("SVC_MAX_BODY_BYTES_IN_FLIGHT must be a positive integer"));
    });
  });

  describe("on the gateway", () => {
    let gw: TestGateway;
    let keys: Awaited<ReturnType<TestGateway["project"]>>;
    before(async () => {
      gw = await startTestGateway({ SVC_MAX_REQUEST_BYTES: "1000000", SVC_MAX_BODY_BYTES_IN_FLIGHT: "1000000", SVC_TELEMETRY_FLUSH_INTERVAL_MS: "100", SVC_LOG_LEVEL: "error" });
      keys = await gw.project();
    });
    after(() => gw.close());

    const content = (n: number) => "x".repeat(n);
    const chat = (n: number) => ({ model: "chat-4o-mini", messages: [{ role: "user", content: content(n) }] });
    /** A raw connection for a chat request whose body is then sent by hand: its head, and what came back so far. */
    const rawChat = (key: string, bodyLength: number) => {
      const socket = net.connect(Number(new URL(gw.gatewayUrl).port), "127.0.0.1");
      socket.on("error", () => {});
      let got = "";
      socket.on("data", (d) => (got += d.toString("latin1")));
      const head = Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\nContent-Length: ${bodyLength}\r\n\r\n`);
      return { socket, head, got: () => got };
    };

    it("drops a body held back part-way with 503 gateway_overloaded when another's bytes pass the budget; the other is served", async () => {
      // A body of 950,000 bytes, all but its last 50,000 sent, and then held back.
      const whole = JSON.stringify(chat(950_000 - 80));
      const held = Buffer.from(whole);
      const { socket, head, got } = rawChat(keys.live, held.length);
      await new Promise<void>((r) => socket.write(Buffer.concat([head, held.subarray(0, held.length - 50_000)]), () => r()));
      await eventually(() => socket.writableLength === 0, 5000, "the held body's bytes sent");
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(got(), "", "a body within the budget is waited on");

      // A whole body of 200,000 bytes takes the bodies coming in past 1,000,000: the held one, the largest, goes.
      const other = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, keys.live, chat(200_000));
      assert.equal(other.status, 200, other.text.slice(0, 300));
      await eventually(() => got().includes("\r\n\r\n{"), 5000, "the held body's answer");
      assert.match(got(), /^HTTP\/1\.1 503 /);
      assert.match(got(), /\r\nretry-after: 1\r\n/i);
      const error = JSON.parse(got().slice(got().indexOf("\r\n\r\n") + 4)).error;
      assert.equal(error.type, "api_error");
      assert.equal(error.code, "gateway_overloaded");
      assert.match(error.message, /request bodies/);
      socket.destroy();

      // The dropped body left the account: one of nearly the budget is read whole.
      const large = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, keys.live, chat(990_000));
      assert.equal(large.status, 200, large.text.slice(0, 300));

      // A body whose client leaves part-way leaves the account too.
      const { socket: leaving } = rawChat(keys.live, held.length);
      await new Promise<void>((r) => leaving.write(Buffer.concat([head, held.subarray(0, 600_000)]), () => r()));
      await eventually(() => leaving.writableLength === 0, 5000, "the leaving body's bytes sent");
      await new Promise((r) => setTimeout(r, 300));
      leaving.destroy();
      await new Promise((r) => setTimeout(r, 300));
      const after = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, keys.live, chat(990_000));
      assert.equal(after.status, 200, after.text.slice(0, 300));

      // The dropped request is logged with its error.
      await eventually(async () => {
        const { logs } = await gw.telemetry.listLogs({ projectId: keys.projectId, keyMode: KeyMode.LIVE, pageSize: 10 });
        return logs.some((l) => l.status === 503 && l.errorCode === "gateway_overloaded") && logs.filter((l) => l.status === 200).length === 3;
      }, 15_000, "the logs");
    });

    it("lets go of a body whose answer went before it was whole (a key used lately, then deleted) once its client leaves", async () => {
      const own = await gw.project();
      const used = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, own.live, chat(10));
      assert.equal(used.status, 200, "the key is verified lately: its next body is read while it is verified again");
      await gw.admin.deleteKey({ keyId: own.liveKeyId });
      const body = Buffer.from(JSON.stringify(chat(900_000)));
      const { socket, head, got } = rawChat(own.live, body.length);
      socket.write(Buffer.concat([head, body.subarray(0, 1000)]));
      await eventually(() => got().includes("\r\n\r\n{"), 5000, "the 401");
      assert.match(got(), /^HTTP\/1\.1 401 /);
      // More of the body comes after the answer (more than one part: it has an account), then the client leaves.
      await new Promise<void>((r) => socket.write(body.subarray(1000, 500_000), () => r()));
      await eventually(() => socket.writableLength === 0, 5000, "the body's bytes sent");
      await new Promise((r) => setTimeout(r, 300));
      socket.destroy();
      await new Promise((r) => setTimeout(r, 300));
      // 600,000 bytes and the 500,000 of the body gone would pass the budget: only if that one left it is this served.
      const after = await postJson(`${gw.gatewayUrl}/v1/chat/completions`, keys.live, chat(600_000));
      assert.equal(after.status, 200, after.text.slice(0, 300));
    });
  });
});
