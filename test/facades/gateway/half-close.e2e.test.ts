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
      assert.match(got, /^HTTP\/1\.[01] 200 /, `${first} ${JSON.stringify(extra)}: ${got.slice(0, 200)}`);
      if ("stream" in extra) assert.match(got, /data: \[DONE\]/);
      else assert.match(got, /"object":"chat\.completion"/);
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
