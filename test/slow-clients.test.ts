import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http2 from "node:http2";
import net, { type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type ConnectRouter } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { DEFAULT_CLIENT_TIMEOUTS, type ClientTimeouts } from "../src/client-timeouts.js";
import { loadConfig } from "../src/config.js";
import { createCoreServer, type CoreServer } from "../src/core/grpc-server.js";
import { AuthService } from "../src/gen/svc/auth/v1/auth_service_pb.js";
import { ProxyService } from "../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { startServer, type RunningServer } from "../src/server.js";

/**
 * Slow clients (slowloris): a request that comes in slowly, or a connection that sends nothing, is
 * timed out on every port, with timeouts shortened here to run in seconds; a slow answer is not.
 */

/** What a raw connection saw: when it closed (ms after it opened) and the bytes it got. */
interface Trickled {
  closedAfterMs: number;
  text: string;
}

/**
 * Opens a TCP connection, writes `head`, then `drip` every `everyMs` (a slowloris) until the
 * server closes it, or fails after `limitMs`.
 */
function trickle(port: number, head: string, drip: string | ((i: number) => string) | null, everyMs = 100, limitMs = 10_000, onText?: (text: string) => void): Promise<Trickled> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const s = net.connect(port, "127.0.0.1", () => {
      if (head.length) s.write(head);
    });
    let text = "";
    s.on("data", (d) => {
      text += d.toString("latin1");
      onText?.(text);
    });
    let i = 0;
    const iv = drip === null ? undefined : setInterval(() => {
      const bytes = typeof drip === "string" ? drip : drip(i++);
      if (bytes && s.writable) s.write(bytes);
    }, everyMs);
    const limit = setTimeout(() => {
      clearInterval(iv);
      s.destroy();
      reject(new Error(`still open after ${limitMs} ms; got ${JSON.stringify(text.slice(0, 200))}`));
    }, limitMs);
    s.on("error", () => {});
    s.on("close", () => {
      clearInterval(iv);
      clearTimeout(limit);
      resolve({ closedAfterMs: Date.now() - t0, text });
    });
  });
}

const statusLine = (text: string) => text.split("\r\n")[0];
const bodyOf = (text: string) => JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4));

function assert408(r: Trickled, atLeastMs: number, what: string) {
  assert.equal(statusLine(r.text), "HTTP/1.1 408 Request Timeout", `${what}: ${r.text.slice(0, 200)}`);
  assert.match(r.text, /\r\nConnection: close\r\n/i);
  assert.deepEqual(bodyOf(r.text).error, { type: "invalid_request_error", code: "request_timeout", message: "The request was not received in time." });
  assert.ok(r.closedAfterMs >= atLeastMs, `${what}: closed after ${r.closedAfterMs} ms, before its timeout`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("slow clients", function () {
  this.timeout(30_000);

  it("are given the documented timeouts by default (README, Configuration)", () => {
    assert.deepEqual(DEFAULT_CLIENT_TIMEOUTS, { headersMs: 60_000, requestMs: 300_000, idleMs: 65_000, checkIntervalMs: 5_000, sendStallMs: 60_000 });
  });

  describe("on the core port", () => {
    const t: ClientTimeouts = { headersMs: 400, requestMs: 900, idleMs: 700, checkIntervalMs: 50, sendStallMs: 60_000 };
    let core: CoreServer;
    let port: number;
    /** StreamChat's events: one every 150 ms for 2.1 s, longer than every timeout above. */
    const EVENTS = 14;
    before(async () => {
      const routes = (router: ConnectRouter) => {
        router.service(AuthService, {
          async listProjects() {
            return {};
          },
        });
        router.service(ProxyService, {
          async *streamChat() {
            for (let i = 0; i < EVENTS; i++) {
              await sleep(150);
              yield { event: { case: "blockStop", value: { index: i } } };
            }
          },
        });
      };
      core = createCoreServer(routes, [], t);
      await new Promise<void>((r) => core.server.listen(0, "127.0.0.1", r));
      port = (core.server.address() as AddressInfo).port;
    });
    after(() => core.close());

    it("answers an HTTP/1.1 request whose headers trickle in 408 request_timeout and closes it", async () => {
      const r = await trickle(port, "POST /svc.auth.v1.AuthService/ListProjects HTTP/1.1\r\nHost: x\r\nX-Pad: ", "a");
      assert408(r, t.headersMs, "headers");
    });

    it("answers an HTTP/1.1 request whose body trickles in 408 request_timeout and closes it (no token needed to get that far)", async () => {
      const head = "POST /svc.auth.v1.AuthService/ListProjects HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{";
      const r = await trickle(port, head, " ");
      assert408(r, t.requestMs, "body");
    });

    it("closes a connection that sends nothing", async () => {
      const r = await trickle(port, "", null);
      assert.equal(r.text, "");
      assert.ok(r.closedAfterMs >= t.headersMs - 20, `closed after ${r.closedAfterMs} ms`);
    });

    it("closes an HTTP/2 connection whose preface trickles in", async () => {
      // The rest of the preface, a byte every 100 ms: it would be whole after 800 ms.
      const rest = "\r\nSM\r\n\r\n";
      const r = await trickle(port, "PRI * HTTP/2.0\r\n", (i) => rest[i] ?? "");
      assert.ok(r.closedAfterMs >= t.headersMs - 20, `closed after ${r.closedAfterMs} ms`);
    });

    it("closes an HTTP/2 connection that opens no stream, and one idle after its last", async () => {
      const quiet = http2.connect(`http://127.0.0.1:${port}`);
      quiet.on("error", () => {});
      const t0 = Date.now();
      await new Promise((r) => quiet.once("close", r));
      assert.ok(Date.now() - t0 >= t.headersMs - 20, `quiet one closed after ${Date.now() - t0} ms`);

      const used = http2.connect(`http://127.0.0.1:${port}`);
      used.on("error", () => {});
      const closed = new Promise((r) => used.once("close", r));
      // Two requests, the second after longer than `headersMs`: the first one's stream restarted the clock.
      for (let i = 0; i < 2; i++) {
        const req = used.request({ ":method": "POST", ":path": "/svc.auth.v1.AuthService/ListProjects", "content-type": "application/json" });
        req.end("{}");
        const status = await new Promise<number>((r) => req.once("response", (h) => r(h[":status"] as number)));
        req.resume();
        await new Promise((r) => req.once("close", r));
        assert.equal(status, 200);
        if (i === 0) await sleep(t.headersMs + 200);
      }
      const idleFrom = Date.now();
      await closed;
      assert.ok(Date.now() - idleFrom >= t.idleMs - 50, `used one closed ${Date.now() - idleFrom} ms after its last stream`);
    });

    it("resets an HTTP/2 stream whose request does not end in time", async () => {
      const client = http2.connect(`http://127.0.0.1:${port}`);
      client.on("error", () => {});
      try {
        const req = client.request({ ":method": "POST", ":path": "/svc.auth.v1.AuthService/ListProjects", "content-type": "application/json" }, { endStream: false });
        req.on("error", () => {});
        req.write("{");
        const iv = setInterval(() => !req.destroyed && req.write(" "), 100);
        const t0 = Date.now();
        await new Promise((r) => req.once("close", r));
        clearInterval(iv);
        assert.equal(req.rstCode, http2.constants.NGHTTP2_CANCEL);
        assert.ok(Date.now() - t0 >= t.requestMs - 50, `reset after ${Date.now() - t0} ms`);
      } finally {
        client.destroy();
      }
    });

    for (const [name, transport] of [
      ["gRPC over HTTP/2", () => createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` })],
      ["Connect over HTTP/1.1", () => createConnectTransport({ baseUrl: `http://127.0.0.1:${port}`, httpVersion: "1.1" })],
    ] as const) {
      it(`lets a StreamChat stream ${name} for longer than every timeout`, async () => {
        const proxy = createClient(ProxyService, transport());
        const seen: number[] = [];
        for await (const ev of proxy.streamChat({})) if (ev.event.case === "blockStop") seen.push(ev.event.value.index);
        assert.deepEqual(seen, [...Array(EVENTS).keys()]);
      });
    }
  });

  describe("through startServer, on every port", () => {
    let dir: string;
    let server: RunningServer;
    const t = { headersMs: 400, requestMs: 60_000, checkIntervalMs: 50 };
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), "svc-slow-"));
      const config = loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0", SVC_DATA_DIR: dir, SVC_ADMIN_TOKEN: "test-admin-token", SVC_LOG_LEVEL: "error" });
      server = await startServer(config, { clientTimeouts: t });
    });
    after(async () => {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    });
    const portOf = (url: string) => Number(new URL(url).port);

    for (const [name, url, path] of [
      ["gateway", () => server.gatewayUrl, "/v1/chat/completions"],
      ["management", () => server.managementUrl, "/v1/logs"],
      ["core", () => server.grpcUrl, "/svc.auth.v1.AuthService/ListProjects"],
    ] as const) {
      it(`${name}: a request whose headers trickle in gets 408 after the headers timeout`, async () => {
        const r = await trickle(portOf(url()), `POST ${path} HTTP/1.1\r\nHost: x\r\nX-Pad: `, "a");
        assert408(r, t.headersMs, name);
      });

      it(`${name}: a connection that sends nothing is closed after the headers timeout, with no answer`, async () => {
        const r = await trickle(portOf(url()), "", null);
        assert.equal(r.text, "", name);
        assert.ok(r.closedAfterMs >= t.headersMs - 20, `closed after ${r.closedAfterMs} ms`);
      });
    }

    // Refused before its body is read: the answer at once, then, the rest of the body trickling in
    // slower than a client sending it would (lingerOnBody), the connection closed, rather than the
    // rest of the body waited for (until the request timeout, 60 s here).
    for (const [name, url, head, status] of [
      ["management, no key", () => server.managementUrl, "GET /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", 401],
      ["management, unknown path", () => server.managementUrl, "POST /nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer svc_sk_live_nope\r\nContent-Length: 100000\r\n\r\n", 404],
      // Under /v1 a key comes first (spec 5.1): without one, the 401 is the early refusal.
      ["gateway (Koa), unknown path, no key", () => server.gatewayUrl, "POST /v1/nowhere HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", 401],
      ["gateway (Koa), wrong method, unknown key", () => server.gatewayUrl, "PUT /v1/messages HTTP/1.1\r\nHost: x\r\nX-Svc-Api-Key: svc_sk_live_nope\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", 401],
      ["gateway (Koa), unknown path outside /v1", () => server.gatewayUrl, "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", 404],
      ["gateway (node:http), no key", () => server.gatewayUrl, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", 401],
    ] as const) {
      it(`${name}: an early refusal closes the connection while its body trickles in`, async () => {
        let answeredAfterMs = Infinity;
        let got = "";
        const t0 = Date.now();
        const r = await trickle(portOf(url()), head, () => {
          if (answeredAfterMs === Infinity && got.length) answeredAfterMs = Date.now() - t0;
          return " ";
        }, 100, 5_000, (text) => (got = text));
        assert.match(statusLine(r.text), new RegExp(`^HTTP/1.1 ${status} `));
        assert.ok(answeredAfterMs < 500, `answered after ${answeredAfterMs} ms: at once, not after the body`);
        assert.ok(r.closedAfterMs < 3_000, `closed after ${r.closedAfterMs} ms`);
      });
    }
  });
});
