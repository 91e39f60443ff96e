import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../../src/config.js";
import { startServer, type RunningServer } from "../../../src/server.js";
import { createAdminClient } from "../../../src/cli/admin-client.js";
import { Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { eventually, rawRequest, sseEvents } from "../../support/http.js";
import { TEST_ENGINE } from "../../support/test-engine.js";

/**
 * A clean shutdown (RunningServer.close(), what SIGTERM runs) with requests in flight: every port
 * stops taking work at once, the requests taken get their grace period, those still running when
 * it ends are cut with an answer their client can read, and every one of them is logged and
 * charged, as the next start on the same data dir shows.
 */

/**
 * A scripted upstream of both styles. The last user text says what to do: `hold` (a stream: its
 * start and one piece of text, then silence; not streamed: no answer at all), `slow` (a stream of 5
 * pieces 300 ms apart; not streamed: the answer after 1.5 s), `slower` (the answer after 3 s),
 * anything else answers at once.
 */
function startUpstream(): Promise<{ url: string; received: () => number; close: () => Promise<void> }> {
  let received = 0;
  const server = http.createServer(async (req, res) => {
    let text = "";
    for await (const c of req) text += c;
    received++;
    const body = JSON.parse(text);
    const last = body.messages.at(-1).content as string;
    const mode = /\b(hold|slower|slow|flood)\b/.exec(last)?.[1] ?? "now";
    const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const messages = req.url === "/v1/messages";
    if (!body.stream) {
      if (mode === "hold") return; // the gateway's cut (or the client) ends it
      await wait(mode === "slower" ? 3000 : mode === "slow" ? 1500 : 0);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(messages
        ? { id: "msg_1", type: "message", role: "assistant", model: body.model, content: [{ type: "text", text: "whole answer" }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 40, output_tokens: 3 } }
        : { id: "c1", object: "chat.completion", created: 1, model: body.model, choices: [{ index: 0, message: { role: "assistant", content: "whole answer" }, finish_reason: "stop" }], usage: { prompt_tokens: 40, completion_tokens: 3, total_tokens: 43 } }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    const pieces = mode === "hold" ? 1 : 5;
    if (messages) {
      const ev = (type: string, data: object) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
      ev("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 40, output_tokens: 1 } } });
      ev("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
      for (let i = 0; i < pieces; i++) {
        if (i) await wait(300);
        ev("content_block_delta", { index: 0, delta: { type: "text_delta", text: `piece ${i} of a longer answer ` } });
      }
      if (mode === "hold") return;
      ev("content_block_stop", { index: 0 });
      ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 20 } });
      ev("message_stop", {});
      res.end();
      return;
    }
    const head = { id: "c1", object: "chat.completion.chunk", created: 1, model: body.model };
    const chunk = (delta: object, finish: string | null = null) => res.write(`data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`);
    chunk({ role: "assistant", content: "" });
    if (mode === "flood") {
      // More than any socket buffer holds, as fast as the gateway takes it; never finished.
      for (let i = 0; i < 4000 && !res.destroyed; i++) {
        if (!chunk({ content: "x".repeat(4096) })) {
          await new Promise<void>((r) => {
            const go = () => {
              res.off("drain", go).off("close", go);
              r();
            };
            res.on("drain", go).on("close", go);
          });
        }
      }
      return;
    }
    for (let i = 0; i < pieces; i++) {
      if (i) await wait(300);
      chunk({ content: `piece ${i} of a longer answer ` });
    }
    if (mode === "hold") return;
    chunk({}, "stop");
    res.end(`data: ${JSON.stringify({ ...head, choices: [], usage: { prompt_tokens: 40, completion_tokens: 20, total_tokens: 60 } })}\n\ndata: [DONE]\n\n`);
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
        received: () => received,
        close: () => {
          server.closeAllConnections();
          return new Promise<void>((r) => server.close(() => r()));
        },
      }),
    ),
  );
}

interface Sent {
  /** Resolves with the connection the response came on, as soon as its head arrives. */
  socket: Promise<net.Socket>;
  /** Resolves once the response ended (or its connection was cut: `error`). */
  done: Promise<{ status: number; headers: http.IncomingHttpHeaders; trailers: NodeJS.Dict<string>; text: string; error?: string; reusedSocket: boolean }>;
  /** Resolves with the first piece of the body. */
  firstData: Promise<void>;
}

/** One request, its response's head and body followed as they come. */
function send(url: string, key: string, body: object, agent?: http.Agent): Sent {
  let onHead!: (s: net.Socket) => void;
  let onData!: () => void;
  const socket = new Promise<net.Socket>((r) => (onHead = r));
  const firstData = new Promise<void>((r) => (onData = r));
  const done = new Promise<Awaited<Sent["done"]>>((resolve) => {
    const req = http.request(url, { method: "POST", agent, headers: { "content-type": "application/json", "x-svc-api-key": key, "x-svc-cache-control": "no-store" } }, (res) => {
      onHead(res.socket as net.Socket);
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        text += c;
        onData();
      });
      const finish = (error?: string) => resolve({ status: res.statusCode!, headers: res.headers, trailers: res.trailers, text, error, reusedSocket: req.reusedSocket });
      res.on("end", () => finish());
      res.on("error", (e) => finish(e.message));
    });
    req.on("error", (e) => resolve({ status: 0, headers: {}, trailers: {}, text: "", error: e.message, reusedSocket: req.reusedSocket }));
    req.end(JSON.stringify(body));
  });
  return { socket, done, firstData };
}

/** Whether a new TCP connection to `url`'s port is accepted. */
function accepts(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(port), hostname, () => {
      s.destroy();
      resolve(true);
    });
    s.on("error", () => resolve(false));
  });
}

const chat = (content: string, stream = false) => ({ model: "chat-4o", stream, messages: [{ role: "user", content }] });
const msg = (content: string, stream: boolean) => ({ model: "assistant-3-5-sonnet-20241022", max_tokens: 200, stream, messages: [{ role: "user", content }] });

describe("shutdown with requests in flight", function () {
  this.timeout(90_000);
  let dir: string;
  let upstream: Awaited<ReturnType<typeof startUpstream>>;
  let env: Record<string, string>;
  const servers: RunningServer[] = [];
  const start = async () => {
    const s = await startServer(loadConfig(env));
    servers.push(s);
    return s;
  };
  /** Closes it as SIGTERM does; afterEach closes those a test left running. */
  const stop = (s: RunningServer) => {
    servers.splice(servers.indexOf(s), 1);
    return s.close();
  };
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), "svc-shutdown-"));
    upstream = await startUpstream();
    env = {
      SVC_GATEWAY_PORT: "0",
      SVC_MANAGEMENT_PORT: "0",
      SVC_GRPC_PORT: "0",
      SVC_DATA_DIR: dir,
      SVC_ADMIN_TOKEN: "shutdown-admin-token",
      SVC_LOG_LEVEL: "error",
      SVC_OPENAI_BASE_URL: `${upstream.url}/v1`,
      SVC_OPENAI_API_KEY: "k",
      SVC_ANTHROPIC_BASE_URL: upstream.url,
      SVC_ANTHROPIC_API_KEY: "k",
      SVC_TELEMETRY_FLUSH_INTERVAL_MS: "100",
      ...TEST_ENGINE,
    };
  });
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close().catch(() => {});
    await upstream.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const project = async (s: RunningServer) => {
    const admin = createAdminClient({ server: s.grpcUrl, token: s.adminToken });
    const { project } = await admin.createProject({ name: "shutdown", plan: Plan.PRO, limitOverrides: { monthlySpendCapUsd: "100" } });
    const { secret } = await admin.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    return { projectId: project!.id, key: secret };
  };

  it("answers, logs and charges the requests its grace period cut: a stream mid-answer and a request waiting on the upstream", async () => {
    const first = await start();
    const { projectId, key } = await project(first);
    const chatUrl = `${first.gatewayUrl}/v1/chat/completions`;
    const msgUrl = `${first.gatewayUrl}/v1/messages`;
    // (Told apart, or the second would wait on the first as an identical request in flight.)
    const streamCut = send(chatUrl, key, chat("hold: a stream", true));
    const waitingCut = send(chatUrl, key, chat("hold: an answer", false));
    const msgStreamCut = send(msgUrl, key, msg("hold", true));
    const finishes = send(chatUrl, key, chat("slow", false));
    await Promise.all([streamCut.firstData, msgStreamCut.firstData]);
    await eventually(() => upstream.received() === 4, 5000, "every request at the upstream");

    const t0 = Date.now();
    await stop(first);
    const took = Date.now() - t0;
    assert.ok(took >= 4_900 && took < 9_000, `shutdown took ${took} ms: the 5 s grace, then the cut`);

    // What each client got: the streams their style's error event, then their end (with the cost
    // trailer); the request still waiting a 503 it can retry elsewhere; the one that finished, its answer.
    const a = await streamCut.done;
    assert.equal(a.status, 200);
    assert.equal(a.error, undefined, "the stream ended, not cut off");
    const aEvents = sseEvents(a.text);
    assert.ok(aEvents.some((e) => e.data.includes("piece 0")), a.text);
    const aError = JSON.parse(aEvents.at(-1)!.data);
    assert.equal(aError.error.code, "shutting_down", a.text);
    assert.ok(Number(a.trailers["x-svc-cost"]) > 0, `a stream cut short is billed for what it carried: ${a.trailers["x-svc-cost"]}`);

    const c = await msgStreamCut.done;
    assert.equal(c.status, 200);
    const cError = sseEvents(c.text).find((e) => e.event === "error");
    assert.ok(cError, c.text);
    assert.deepEqual(JSON.parse(cError.data).error, { type: "api_error", message: "The gateway is shutting down; retry the request.", code: "shutting_down" });
    assert.ok(Number(c.trailers["x-svc-cost"]) > 0);

    const b = await waitingCut.done;
    assert.equal(b.status, 503, b.text);
    assert.equal(JSON.parse(b.text).error.code, "shutting_down");
    assert.equal(JSON.parse(b.text).error.type, "api_error");
    assert.equal(b.headers["retry-after"], "1");
    assert.equal(b.headers.connection, "close");

    const d = await finishes.done;
    assert.equal(d.status, 200, d.text);
    assert.equal(d.headers.connection, "close", "an answer sent during shutdown closes its connection");

    // The next start on the same data dir has every request's log and charge.
    const second = await start();
    const logOf = async (id: string) => {
      let got: any;
      await eventually(async () => {
        const r = await rawRequest(`${second.managementUrl}/v1/logs/${id}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
        got = r.status === 200 ? r.json() : undefined;
        return got !== undefined;
      }, 10_000, `the log of ${id}`);
      return got;
    };
    const logs = await Promise.all([a, b, c, d].map((r) => logOf(String(r.headers["x-svc-request-id"]))));
    const [la, lb, lc, ld] = logs;
    assert.deepEqual([la.status, la.error], [200, { type: "api_error", code: "shutting_down" }]);
    assert.equal(la.cost_usd, a.trailers["x-svc-cost"]);
    assert.deepEqual([lc.status, lc.error], [200, { type: "api_error", code: "shutting_down" }]);
    assert.equal(lc.cost_usd, c.trailers["x-svc-cost"]);
    assert.deepEqual([lb.status, lb.error], [503, { type: "api_error", code: "shutting_down" }]);
    assert.ok(Number(lb.cost_usd) > 0, `the prompt of a request the upstream had is billed: ${lb.cost_usd}`);
    assert.deepEqual([ld.status, ld.error], [200, null]);
    const spent = Number((await second.limits.getUsage({ projectId })).spentUsd);
    const logged = logs.reduce((sum, l) => sum + Number(l.cost_usd), 0);
    assert.ok(Math.abs(spent - logged) < 1e-9, `the month is charged what the logs say: ${spent} vs ${logged}`);
  });

  it("logs a stream cut at the end of the grace as 200 shutting_down also when its client had stopped reading (not as a client that left)", async () => {
    const first = await start();
    const { key } = await project(first);
    let requestId = "";
    const stalled = new Promise<void>((resolve) => {
      const req = http.request(`${first.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-svc-api-key": key } }, (res) => {
        requestId = String(res.headers["x-svc-request-id"]);
        res.pause(); // reads nothing more: the gateway's writes back up
        resolve();
      });
      req.on("error", () => {});
      req.end(JSON.stringify(chat("flood", true)));
    });
    await stalled;
    await stop(first);
    const second = await start();
    let got: any;
    await eventually(async () => {
      const r = await rawRequest(`${second.managementUrl}/v1/logs/${requestId}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
      got = r.status === 200 ? r.json() : undefined;
      return got !== undefined;
    }, 10_000, "the stalled stream's log");
    assert.deepEqual([got.status, got.error], [200, { type: "api_error", code: "shutting_down" }]);
    assert.ok(Number(got.cost_usd) > 0, "billed for what it carried");
  });

  it("answers a request whose body was still arriving when the grace ended 503 shutting_down, and logs it so (not as a client that left)", async () => {
    const first = await start();
    const { key } = await project(first);
    const body = JSON.stringify(chat("partial"));
    const socket = net.connect(Number(new URL(first.gatewayUrl).port), "127.0.0.1");
    await new Promise<void>((r) => socket.once("connect", () => r()));
    socket.on("error", () => {});
    let got = "";
    socket.on("data", (d: Buffer) => (got += d.toString()));
    // The headers and part of the body; the rest never comes, and the client never closes.
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`);
    await new Promise((r) => setTimeout(r, 300));
    await stop(first);
    socket.destroy();
    assert.match(got, /^HTTP\/1\.1 503 /, got);
    assert.match(got, /"code":"shutting_down"/, got);
    const id = /\r\nX-Svc-Request-Id: (req_\w+)\r\n/i.exec(got)?.[1];
    const second = await start();
    let log: any;
    await eventually(async () => {
      const r = await rawRequest(`${second.managementUrl}/v1/logs?limit=5`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
      log = r.status === 200 ? r.json().data[0] : undefined;
      return log !== undefined;
    }, 10_000, "the cut request's log");
    assert.deepEqual([log.id, log.status, log.error], [id, 503, { type: "api_error", code: "shutting_down" }]);
    assert.ok(log.ttfb_ms > 0, "its answer was sent");
  });

  it("answers the requests pipelined on a connection before the shutdown, then closes it, and logs each 200", async () => {
    const first = await start();
    const { key } = await project(first);
    const post = (text: string) => {
      const body = JSON.stringify(chat(text));
      return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    };
    const socket = net.connect(Number(new URL(first.gatewayUrl).port), "127.0.0.1");
    socket.on("error", () => {});
    let got = "";
    socket.on("data", (d: Buffer) => (got += d.toString()));
    const closed = new Promise<void>((r) => socket.once("close", () => r()));
    socket.write(post("slow: first") + post("second") + post("third"));
    await eventually(() => upstream.received() === 3, 5000, "every request at the upstream");
    await stop(first);
    await closed;
    // (The two answered at once were written, keep-alive, before the shutdown began: the
    // connection is closed once they are out.)
    assert.deepEqual(got.match(/HTTP\/1\.1 \d{3} /g), ["HTTP/1.1 200 ", "HTTP/1.1 200 ", "HTTP/1.1 200 "], got);
    const second = await start();
    let logs: Array<{ status: number }> = [];
    await eventually(async () => {
      const r = await rawRequest(`${second.managementUrl}/v1/logs?limit=10`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
      logs = r.status === 200 ? r.json().data : [];
      return logs.length >= 3;
    }, 10_000, "the pipelined requests' logs");
    assert.deepEqual(logs.map((l) => l.status), [200, 200, 200]);
  });

  it("shuts down cleanly with a request queued behind a pipelined stream its client stopped reading, logging the stream it cut", async () => {
    const first = await start();
    const { key } = await project(first);
    const whole = JSON.stringify(chat("flood", true));
    const partial = JSON.stringify(chat("never whole"));
    const socket = net.connect(Number(new URL(first.gatewayUrl).port), "127.0.0.1");
    socket.on("error", () => {});
    // The stream's client reads nothing: its answer is still being written after the cut; the
    // request queued behind it has only part of its body.
    socket.pause();
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\nContent-Length: ${whole.length}\r\n\r\n${whole}` +
        `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\nContent-Length: ${partial.length}\r\n\r\n${partial.slice(0, 5)}`,
    );
    await eventually(() => upstream.received() === 1, 5000, "the stream at the upstream");
    await stop(first);
    socket.destroy();
    const second = await start();
    let logs: Array<{ status: number; error: unknown }> = [];
    await eventually(async () => {
      const r = await rawRequest(`${second.managementUrl}/v1/logs?limit=10`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
      logs = r.status === 200 ? r.json().data : [];
      return logs.length >= 1;
    }, 10_000, "the stream's log");
    // The one pipelined behind the stream never had its turn (it went with its connection,
    // unserved): nothing is logged for it.
    assert.deepEqual(logs.map((l) => [l.status, l.error]), [[200, { type: "api_error", code: "shutting_down" }]]);
  });

  it("stops taking work on every port at once: new connections refused, idle ones closed, a request on a kept-alive connection refused with 503", async () => {
    const s = await start();
    const { key } = await project(s);
    const chatUrl = `${s.gatewayUrl}/v1/chat/completions`;
    // An idle keep-alive connection, on each HTTP port.
    const idleAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const warm = send(chatUrl, key, chat("now", false), idleAgent);
    const idleSocket = await warm.socket;
    assert.equal((await warm.done).status, 200);
    // A stream whose head (keep-alive) went out before the shutdown, and a request whose answer has not.
    const streamAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const stream = send(chatUrl, key, chat("slow", true), streamAgent);
    const pending = send(chatUrl, key, chat("slower", false));
    await stream.firstData;
    await eventually(() => upstream.received() === 3, 5000, "both requests at the upstream");
    const idleClosed = new Promise<void>((r) => (idleSocket.destroyed ? r() : idleSocket.once("close", () => r())));

    const closing = stop(s);
    const t0 = Date.now();
    // Every port stops accepting at once, the gateway's included while it waits for its requests.
    for (const url of [s.gatewayUrl, s.managementUrl, s.grpcUrl]) assert.equal(await accepts(url), false, `${url} still accepts connections during shutdown`);
    await idleClosed;
    assert.ok(Date.now() - t0 < 1000, "the idle keep-alive connection is closed at once");

    // The stream ends whole; its connection said keep-alive, so a request sent on it next is refused unread.
    const streamed = await stream.done;
    assert.equal(streamed.status, 200);
    assert.match(streamed.text, /\[DONE\]/);
    const next = send(chatUrl, key, chat("now", false), streamAgent);
    const refused = await next.done;
    assert.equal(refused.reusedSocket, true, "sent on the stream's connection");
    assert.equal(refused.status, 503, refused.text);
    assert.deepEqual(JSON.parse(refused.text).error, { message: "The gateway is shutting down; retry the request.", type: "api_error", code: "shutting_down" });
    assert.equal(refused.headers.connection, "close");
    assert.equal(refused.headers["retry-after"], "1");
    assert.ok(refused.headers["x-svc-request-id"], "it carries a request id, as every gateway response");
    assert.equal(upstream.received(), 3, "the refused request never reached the upstream");

    const answered = await pending.done;
    assert.equal(answered.status, 200, answered.text);
    assert.equal(answered.headers.connection, "close", "an answer not yet begun at shutdown closes its connection");
    await closing;
    const took = Date.now() - t0;
    assert.ok(took < 4_900, `nothing was left to cut: shutdown ended when the last request did (took ${took} ms)`);
    idleAgent.destroy();
    streamAgent.destroy();
  });
});
