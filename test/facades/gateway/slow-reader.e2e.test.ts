import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually } from "../../support/http.js";

/**
 * A stream client that reads slowly, or not at all, holds back the upstream instead of having the
 * gateway read (buffer, and bill) the whole answer: the upstream here streams without end, at the
 * pace its socket takes, as a provider's server does.
 */
describe("a stream client that does not read: the gateway stops reading the upstream", function () {
  this.timeout(60_000);
  let upstream: http.Server;
  let written = 0;
  let gw: TestGateway;
  let key: string;
  let projectId: string;

  before(async () => {
    const piece = `data: ${JSON.stringify({ id: "chatcmpl-endless", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "word ".repeat(3000) }, finish_reason: null }] })}\n\n`;
    upstream = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "text/event-stream" });
      const first = `data: ${JSON.stringify({ id: "chatcmpl-endless", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`;
      res.write(first);
      const pump = () => {
        while (!res.destroyed) {
          written += piece.length;
          if (!res.write(piece)) return void res.once("drain", pump);
        }
      };
      pump();
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    gw = await startTestGateway({ SVC_OPENAI_BASE_URL: `${url}/v1`, SVC_OPENAI_API_KEY: "test" }, false);
    const keys = await gw.project();
    key = keys.live;
    projectId = keys.projectId;
  });
  after(async () => {
    await gw?.close();
    upstream.closeAllConnections();
    await new Promise((r) => upstream.close(r));
  });

  it("pulls a bounded amount while the client reads nothing, and bills only what it pulled once the client leaves", async () => {
    const req = http.request(`${gw.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-svc-api-key": key } });
    req.on("error", () => {});
    const answered = new Promise<http.IncomingMessage>((r) => req.once("response", r));
    req.end(JSON.stringify({ model: "chat-4o-mini", stream: true, messages: [{ role: "user", content: "never read" }] }));
    const res = await answered;
    res.pause(); // reads nothing more: the socket's buffers fill, then the gateway's
    await new Promise((r) => setTimeout(r, 1500));
    const after1500 = written;
    await new Promise((r) => setTimeout(r, 1500));
    const after3000 = written;
    req.destroy();
    // Only what fills the sockets' buffers and the gateway's bounded queues (a few MB), not the
    // hundreds of MB an unbounded read takes in three seconds.
    assert.ok(after3000 < 32 * 1024 * 1024, `the upstream wrote ${after3000} bytes`);
    assert.ok(after3000 - after1500 < 4 * 1024 * 1024, `held back: ${after1500} bytes after 1.5 s, ${after3000} after 3 s`);
    let logged: { status: number; outputTokens: number } | undefined;
    await eventually(async () => {
      const { logs } = await gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageSize: 5 });
      const l = logs[0];
      if (l) logged = { status: l.status, outputTokens: l.completionTokens };
      return l !== undefined;
    }, 10_000, "the stream's log");
    assert.equal(logged!.status, 499);
    assert.ok(logged!.outputTokens <= after3000 / 4, `billed ${logged!.outputTokens} tokens for ${after3000} bytes written`);
  });
});
