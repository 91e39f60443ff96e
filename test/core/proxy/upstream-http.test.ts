import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Code, ConnectError } from "@connectrpc/connect";
import { Cancellation, signalCancel } from "../../../src/core/cancel.js";
import { createUpstreamHttp, sentUpstream } from "../../../src/core/proxy/upstream-http.js";
import { toErrorInfo } from "../../../src/core/errors.js";

const timeouts = { connectMs: 1000, firstByteMs: 1000, idleMs: 1000, totalMs: 300 };

describe("upstream HTTP client", () => {
  let server: http.Server;
  let url: string;

  before(async () => {
    server = http.createServer((req, res) => {
      if (req.url === "/split") {
        // "é" is two bytes in UTF-8: send them in two writes, apart in time.
        const bytes = Buffer.from('data: {"t":"café"}\n\n');
        const cut = bytes.indexOf(0xa9); // second byte of é
        res.write(bytes.subarray(0, cut));
        setTimeout(() => res.end(bytes.subarray(cut)), 30);
      } else if (req.url === "/drop") {
        // A 200 and the first event on the wire, then the connection cut: a truncated chunked body.
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write("data: 1\n\n", () => setTimeout(() => res.destroy(), 20));
      } else if (req.url === "/hangup") {
        req.socket.destroy(); // no response at all
      } else {
        res.write("data: 1\n\n"); // then nothing: only the total timeout can end it
      }
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it("keeps a multi-byte character whole when it is split across two body chunks", async () => {
    const client = createUpstreamHttp(timeouts);
    const res = await client.send({ url: `${url}/split`, headers: {}, body: "{}" }, new Cancellation());
    let text = "";
    for await (const chunk of res.body) text += chunk;
    assert.equal(text, 'data: {"t":"café"}\n\n');
    await client.close();
  });

  it("a connection cut after the response started is 502 upstream_stream_incomplete, before it 502 upstream_unreachable", async () => {
    const client = createUpstreamHttp({ ...timeouts, totalMs: 5000 });
    const res = await client.send({ url: `${url}/drop`, headers: {}, body: "{}" }, new Cancellation());
    assert.equal(res.status, 200);
    let text = "";
    await assert.rejects(
      (async () => {
        for await (const chunk of res.body) text += chunk;
      })(),
      (e: unknown) => {
        const info = toErrorInfo(e);
        assert.deepEqual([info.status, info.type, info.code], [502, "api_error", "upstream_stream_incomplete"]);
        assert.match(info.message, /before the answer was complete/);
        return true;
      },
    );
    assert.equal(text, "data: 1\n\n", "what came before the cut was passed on");
    // Non-stream reads of a cut body fail the same way.
    const whole = await client.send({ url: `${url}/drop`, headers: {}, body: "{}" }, new Cancellation());
    await assert.rejects(whole.text(), (e: unknown) => toErrorInfo(e).code === "upstream_stream_incomplete");
    await assert.rejects(client.send({ url: `${url}/hangup`, headers: {}, body: "{}" }, new Cancellation()), (e: unknown) => {
      const info = toErrorInfo(e);
      assert.deepEqual([info.status, info.type, info.code], [502, "api_error", "upstream_unreachable"]);
      return true;
    });
    await client.close();
  });

  it("ends an exchange that outlives the total timeout with 504 upstream_timeout", async () => {
    const client = createUpstreamHttp(timeouts);
    const res = await client.send({ url: `${url}/slow`, headers: {}, body: "{}" }, new Cancellation());
    await assert.rejects(
      (async () => {
        for await (const _ of res.body);
      })(),
      (e: unknown) => toErrorInfo(e).status === 504 && toErrorInfo(e).code === "upstream_timeout",
    );
    await client.close();
  });

  for (const [name, make] of [
    ["a Cancellation (in-process calls)", () => { const c = new Cancellation(); return { cancel: c, abort: () => c.abort() }; }],
    ["an AbortSignal (calls over the network)", () => { const a = new AbortController(); return { cancel: signalCancel(a.signal), abort: () => a.abort() }; }],
  ] as const) {
    it(`stops a stalled exchange when ${name} is cancelled, as Canceled (the client went away)`, async () => {
      const client = createUpstreamHttp(timeouts);
      const { cancel, abort } = make();
      const res = await client.send({ url: `${url}/slow`, headers: {}, body: "{}" }, cancel);
      const read = (async () => {
        for await (const _ of res.body);
      })();
      setTimeout(abort, 20);
      await assert.rejects(read, (e: unknown) => e instanceof ConnectError && e.code === Code.Canceled && sentUpstream(e));
      await client.close();
    });
  }

  it("says whether a cancelled call had sent its request (the upstream bills a prompt it received)", async () => {
    const client = createUpstreamHttp(timeouts);
    const c = new Cancellation();
    c.abort();
    await assert.rejects(client.send({ url: `${url}/slow`, headers: {}, body: "{}" }, c), (e: unknown) => e instanceof ConnectError && e.code === Code.Canceled && !sentUpstream(e));
    await client.close();
  });
});
