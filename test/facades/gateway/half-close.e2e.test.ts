import assert from "node:assert/strict";
import { connect } from "node:net";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually } from "../../support/http.js";

/**
 * A client that ends its side of the connection (FIN) right after a whole request: on a request
 * that asked for the connection to close it means "nothing more to send" and is answered; on a
 * keep-alive request it is the client leaving, which cancels the request as before.
 */
describe("a client that ends its side after its request (half-close)", function () {
  this.timeout(30_000);
  let gw: TestGateway;
  let n = 0;

  before(async () => {
    gw = await startTestGateway();
  });
  after(() => gw.close());

  /** Sends `head` and `body` raw, then ends its side at once; resolves with all it read until the close. */
  const sendAndHalfClose = (head: string, body: string) =>
    new Promise<string>((resolve, reject) => {
      const s = connect(Number(new URL(gw.gatewayUrl).port), "127.0.0.1");
      let got = "";
      s.setEncoding("utf8");
      s.on("data", (d: string) => (got += d));
      s.on("error", reject);
      s.on("close", () => resolve(got));
      s.end(`${head}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });

  const request = (key: string, first: string, more: string, content: string, extra: object = {}) =>
    sendAndHalfClose(
      `${first}\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\n${more}`,
      JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content }], ...extra }),
    );

  it("answers a Connection: close or HTTP/1.0 request whole, streamed or not, then closes", async () => {
    const { live } = await gw.project();
    for (const [first, more, extra] of [
      ["POST /v1/chat/completions HTTP/1.1", "Connection: close\r\n", {}],
      ["POST /v1/chat/completions HTTP/1.1", "Connection: close\r\n", { stream: true }],
      ["POST /v1/chat/completions HTTP/1.0", "", {}],
      ["POST /v1/chat/completions HTTP/1.0", "", { stream: true }],
    ] as const) {
      // A delay, so that the FIN is read long before the answer is ready.
      const got = await request(live, first, more, `half ${process.pid} ${++n} [[fake:delay=200]]`, extra);
      // An HTTP/1.1 answer not yet begun at the FIN is preceded by interim 100s (the probes of a
      // client that may have left: server.ts, probeGone), which a client parses and skips.
      assert.match(got, /^(?:HTTP\/1\.1 100 Continue\r\n\r\n)*HTTP\/1\.[01] 200 /, `${first} ${JSON.stringify(extra)}: ${got.slice(0, 200)}`);
      if (first.endsWith("1.0")) assert.doesNotMatch(got, /100 Continue/, "no 1xx to an HTTP/1.0 client");
      if ("stream" in extra) assert.match(got, /data: \[DONE\]/);
      else assert.match(got, /"object":"chat\.completion"/);
    }
  });

  /** Sends a request, then, once `leaveWhen` says so of what it read, closes its socket (not a half-close: it reads no more). */
  const sendAndLeave = (head: string, body: string, leaveWhen: (got: string) => boolean) =>
    new Promise<void>((resolve, reject) => {
      const s = connect(Number(new URL(gw.gatewayUrl).port), "127.0.0.1");
      let got = "";
      s.setEncoding("utf8");
      s.on("data", (d: string) => {
        got += d;
        if (leaveWhen(got)) s.destroy();
      });
      s.on("error", reject);
      s.on("close", () => resolve());
      s.write(`${head}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      if (leaveWhen(got)) setTimeout(() => s.destroy(), 100);
    });

  it("tells a Connection: close client that left (closed, not half-closed) from one still reading: its upstream call is cut, logged 499 at once", async function () {
    const own = await gw.project();
    const cases = [
      // Not streamed, the upstream slow: closed while waiting for the answer's head.
      { first: "POST /v1/chat/completions HTTP/1.1", extra: {}, marker: "[[fake:delay=20000]]", leaveWhen: () => true },
      // Streamed, the upstream gone quiet after its first event: closed once it came.
      { first: "POST /v1/chat/completions HTTP/1.1", extra: { stream: true }, marker: "[[fake:stall]]", leaveWhen: (got: string) => got.includes("data: ") },
      { first: "POST /v1/chat/completions HTTP/1.0", extra: { stream: true }, marker: "[[fake:stall]]", leaveWhen: (got: string) => got.includes("data: ") },
    ];
    for (const c of cases) {
      const content = `gone ${process.pid} ${++n} ${c.marker}`;
      const body = JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content }], ...c.extra });
      const started = Date.now();
      await sendAndLeave(`${c.first}\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${own.live}\r\nConnection: close\r\n`, body, c.leaveWhen);
      await eventually(async () => {
        const { logs } = await gw.telemetry.listLogs({ projectId: own.projectId, keyMode: KeyMode.LIVE, pageSize: 10 });
        return logs.length === cases.indexOf(c) + 1;
      }, 10_000, `${c.first} ${JSON.stringify(c.extra)} logged`);
      const { logs } = await gw.telemetry.listLogs({ projectId: own.projectId, keyMode: KeyMode.LIVE, pageSize: 1 });
      assert.equal(logs[0]!.status, 499, `${c.first} ${JSON.stringify(c.extra)}`);
      assert.ok(Date.now() - started < 5_000, `${c.first} ${JSON.stringify(c.extra)}: noticed after ${Date.now() - started} ms`);
      assert.ok(logs[0]!.latencyMs < 3_000, `latency ${logs[0]!.latencyMs} ms`);
    }
  });

  it("takes it on a keep-alive request as the client leaving: no answer, logged 499", async () => {
    const own = await gw.project();
    const got = await request(own.live, "POST /v1/chat/completions HTTP/1.1", "", `left ${process.pid} ${++n} [[fake:delay=300]]`);
    assert.equal(got, "");
    await eventually(async () => {
      const { logs } = await gw.telemetry.listLogs({ projectId: own.projectId, keyMode: KeyMode.LIVE, pageSize: 5 });
      return logs.length === 1 && logs[0]!.status === 499;
    }, 5_000, "the request logged as 499");
  });
});
