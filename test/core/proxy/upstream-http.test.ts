import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import http from "node:http";
import { type AddressInfo, connect, type Socket } from "node:net";
import { fileURLToPath } from "node:url";
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
      } else if (req.url === "/small-chunks") {
        // An answer of 200 chunks of 3 bytes, in one write with its head: they arrive together,
        // more than the client takes before it pauses the connection. Written raw: node:http's
        // corked writes ended by end() sent only the first chunk on Node 22 here.
        const chunks = Array.from({ length: 200 }, (_, i) => `3\r\n${String(i).padStart(3, "0")}\r\n`).join("");
        req.socket.end(`HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunks}0\r\n\r\n`);
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

  for (const read of ["text", "body"] as const) {
    it(`reads by ${read === "text" ? "text()" : "its body"} an answer whose many small chunks arrive at once (the connection paused and resumed)`, async () => {
      const client = createUpstreamHttp({ ...timeouts, totalMs: 5000 });
      const res = await client.send({ url: `${url}/small-chunks`, headers: {}, body: "{}" }, new Cancellation());
      assert.equal(res.status, 503);
      await new Promise((r) => setTimeout(r, 50)); // every chunk is in before it is read
      let text = "";
      if (read === "text") text = await res.text();
      else for await (const chunk of res.body) text += chunk;
      assert.equal(text, Array.from({ length: 200 }, (_, i) => String(i).padStart(3, "0")).join(""));
      await client.close();
    });
  }

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

/**
 * Each timeout fires within a few tens of ms of its setting. undici's own connect, headers and body
 * timeouts run on its coarse "fast timers" (~500 ms resolution above 1 s) and fired up to half a
 * second late; the bounds below (1 s setting: before 1.3 s) leave room for a busy machine and still
 * tell the two apart.
 */
describe("upstream HTTP client: timeouts fire on time", () => {
  const SETTING = 1000;
  const LATEST = 1300;
  let server: http.Server;
  let url: string;

  before(async () => {
    server = http.createServer((req, res) => {
      if (req.url === "/no-head") return; // never answers
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (req.url === "/trickle-then-stall") {
        // Three chunks 300 ms apart (each under the idle timeout), then silence.
        let n = 0;
        const tick = () => {
          res.write(`data: ${n}\n\n`);
          if (++n < 3) setTimeout(tick, 300);
        };
        tick();
      } else if (req.url === "/burst") {
        // Far more chunks than the client holds unread: it pauses the upstream socket.
        for (let i = 0; i < 400; i++) res.write(`data: ${i} ${"x".repeat(2000)}\n\n`);
        res.end();
      }
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  const is504 = (message: RegExp) => (e: unknown) => {
    const info = toErrorInfo(e);
    assert.deepEqual([info.status, info.type, info.code], [504, "api_error", "upstream_timeout"]);
    assert.match(info.message, message);
    return true;
  };
  const assertOnTime = (ms: number, what: string) => {
    assert.ok(ms >= SETTING - 20, `${what} fired early: ${ms} ms`);
    assert.ok(ms < LATEST, `${what} (${SETTING} ms) fired late: ${ms} ms`);
  };

  it("the connect timeout", async function () {
    // A listener whose process never accepts (its event loop is blocked), its backlog filled: a
    // further connect hangs in SYN retransmits.
    const child = spawn(process.execPath, ["-e", `const s = require("net").createServer().listen({ port: 0, host: "127.0.0.1", backlog: 1 }, () => { process.stdout.write(s.address().port + "\\n"); setTimeout(() => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0), 50); });`], { stdio: ["ignore", "pipe", "inherit"] });
    const fill: Socket[] = [];
    try {
      const port = await new Promise<number>((r) => child.stdout!.once("data", (d) => r(Number(String(d)))));
      await new Promise((r) => setTimeout(r, 200));
      for (let i = 0; i < 4; i++) fill.push(connect(port, "127.0.0.1").on("error", () => {}));
      await new Promise((r) => setTimeout(r, 200));
      const client = createUpstreamHttp({ connectMs: SETTING, firstByteMs: 5000, idleMs: 5000, totalMs: 10_000 });
      const t0 = performance.now();
      await assert.rejects(client.send({ url: `http://127.0.0.1:${port}/x`, headers: {}, body: "{}" }, new Cancellation()), is504(/connecting/));
      assertOnTime(performance.now() - t0, "connect timeout");
      await client.close();
    } finally {
      for (const s of fill) s.destroy();
      child.kill("SIGKILL");
    }
  });

  it("the first-byte timeout", async () => {
    const client = createUpstreamHttp({ connectMs: 5000, firstByteMs: SETTING, idleMs: 5000, totalMs: 10_000 });
    const t0 = performance.now();
    await assert.rejects(client.send({ url: `${url}/no-head`, headers: {}, body: "{}" }, new Cancellation()), is504(/did not start answering/));
    assertOnTime(performance.now() - t0, "first-byte timeout");
    await client.close();
  });

  it("the idle timeout, counted from the last chunk (each chunk re-arms it)", async () => {
    const client = createUpstreamHttp({ connectMs: 5000, firstByteMs: 5000, idleMs: SETTING, totalMs: 10_000 });
    const res = await client.send({ url: `${url}/trickle-then-stall`, headers: {}, body: "{}" }, new Cancellation());
    let text = "";
    let last = 0;
    await assert.rejects(
      (async () => {
        for await (const chunk of res.body) {
          text += chunk;
          last = performance.now();
        }
      })(),
      is504(/idle timeout/),
    );
    assert.equal(text, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
    assertOnTime(performance.now() - last, "idle timeout");
    await client.close();
  });

  it("does not count as idle the time the upstream waits on a reader that is behind", async () => {
    const client = createUpstreamHttp({ connectMs: 5000, firstByteMs: 5000, idleMs: 300, totalMs: 10_000 });
    const res = await client.send({ url: `${url}/burst`, headers: {}, body: "{}" }, new Cancellation());
    await new Promise((r) => setTimeout(r, 800)); // the upstream is paused meanwhile
    let events = 0;
    for await (const chunk of res.body) events += chunk.split("\n\n").length - 1;
    assert.equal(events, 400);
    await client.close();
  });
});

describe("upstream HTTP client: out of file descriptors", function () {
  this.timeout(30_000);
  it("is the gateway's own 503 gateway_overloaded, not a 502 that blames the upstream", async () => {
    const script = fileURLToPath(new URL("../../support/emfile-upstream.ts", import.meta.url));
    // The port is never reached: the connection cannot even be opened.
    const out = execFileSync("bash", ["-c", `ulimit -n 128 && exec "${process.execPath}" --import tsx "${script}" http://127.0.0.1:9/v1/x`], { encoding: "utf8" });
    assert.deepEqual(JSON.parse(out.trim().split("\n").at(-1)!), { status: 503, code: "gateway_overloaded" });
  });
});

describe("upstream HTTP client: pooled connections", () => {
  /** A server that counts connections and requests; `onRequest` decides each answer. */
  const serve = async (onRequest: (req: http.IncomingMessage, res: http.ServerResponse, nth: number, socketRequests: number) => void) => {
    const seen = { connections: 0, requests: 0 };
    const perSocket = new WeakMap<object, number>();
    const server = http.createServer((req, res) => {
      seen.requests++;
      const n = (perSocket.get(req.socket) ?? 0) + 1;
      perSocket.set(req.socket, n);
      onRequest(req, res, seen.requests, n);
    });
    server.on("connection", () => seen.connections++);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const close = () => {
      server.closeAllConnections();
      server.close();
    };
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, close };
  };
  const readAll = async (res: { body: AsyncIterable<string> }) => {
    let text = "";
    for await (const c of res.body) text += c;
    return text;
  };

  for (const [how, drop] of [
    ["closes", (s: Socket) => s.end()],
    ["resets", (s: Socket) => s.resetAndDestroy()],
  ] as const) {
    it(`sends a request again on a new connection when the upstream ${how} the kept-alive one it was sent on, without an answer`, async () => {
      const up = await serve((req, res, _nth, onSocket) => {
        // The first answer on each connection; a second request on one finds it dropped, as an
        // upstream that closes idle connections does just as the gateway reuses one.
        if (onSocket > 1) drop(req.socket);
        else res.end("ok");
      });
      const client = createUpstreamHttp({ ...timeouts, totalMs: 5000 });
      try {
        assert.equal(await readAll(await client.send({ url: up.url, headers: {}, body: "{}" }, new Cancellation())), "ok");
        await new Promise((r) => setTimeout(r, 50)); // the connection back in the pool, idle
        assert.equal(await readAll(await client.send({ url: up.url, headers: {}, body: "{}" }, new Cancellation())), "ok");
        assert.deepEqual(up.seen, { connections: 2, requests: 3 });
      } finally {
        await client.close();
        up.close();
      }
    });
  }

  it("does not send again a request whose fresh connection the upstream closed without an answer", async () => {
    const up = await serve((req) => req.socket.end());
    const client = createUpstreamHttp({ ...timeouts, totalMs: 5000 });
    try {
      const err = await client.send({ url: up.url, headers: {}, body: "{}" }, new Cancellation()).then(() => undefined, (e: unknown) => e);
      assert.equal(toErrorInfo(err).code, "upstream_unreachable");
      assert.equal(up.seen.requests, 1);
    } finally {
      await client.close();
      up.close();
    }
  });

  it("opens a connection for every request in flight: 300 held at once all reach the upstream", async () => {
    const held: http.ServerResponse[] = [];
    const up = await serve((_req, res) => {
      held.push(res);
      if (held.length === 300) for (const r of held) r.end("ok");
    });
    const client = createUpstreamHttp({ ...timeouts, firstByteMs: 10_000, totalMs: 10_000 });
    try {
      const answers = await Promise.all(Array.from({ length: 300 }, () => client.send({ url: up.url, headers: {}, body: "{}" }, new Cancellation()).then(readAll)));
      assert.equal(answers.filter((a) => a === "ok").length, 300);
      assert.equal(up.seen.connections, 300);
    } finally {
      await client.close();
      up.close();
    }
  });
});
