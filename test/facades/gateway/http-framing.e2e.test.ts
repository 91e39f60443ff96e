import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { gatewayWithProject } from "../../support/gateway.js";
import { rawRequest } from "../../support/http.js";

/**
 * The HTTP/1.1 layer as clients and proxies use it, where node:http alone answered without the
 * spec's error shape, sent `100 Continue` to a request it was about to refuse, or dropped headers.
 */
describe("the gateway port's HTTP framing", function () {
  this.timeout(30_000);
  const env = gatewayWithProject();
  let n = 0;
  const port = () => Number(new URL(env.gw.gatewayUrl).port);
  const body = () => JSON.stringify({ model: "chat-4o-mini", messages: [{ role: "user", content: `framing ${process.pid} ${++n}` }] });

  /** A raw connection: what it read so far, and a wait for some text in it. */
  function open(): Promise<{ s: Socket; read: () => string; until: (re: RegExp) => Promise<string> }> {
    return new Promise((resolve, reject) => {
      const s = connect(port(), "127.0.0.1");
      let got = "";
      const waiters: Array<() => void> = [];
      s.setEncoding("utf8");
      s.on("data", (d: string) => {
        got += d;
        for (const w of waiters.splice(0)) w();
      });
      s.on("close", () => {
        for (const w of waiters.splice(0)) w();
      });
      s.on("error", reject);
      const until = (re: RegExp) =>
        new Promise<string>((res, rej) => {
          const timer = setTimeout(() => rej(new Error(`no ${re} in ${JSON.stringify(got)}`)), 5000);
          const check = () => {
            if (re.test(got) || s.destroyed) {
              clearTimeout(timer);
              res(got);
            } else waiters.push(check);
          };
          check();
        });
      s.on("connect", () => resolve({ s, read: () => got, until }));
    });
  }
  const errorOf = (text: string) => JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4)).error as { type: string; code: string; message: string };

  it("sends 100 Continue only to a request whose key is good, so a refused one uploads nothing", async () => {
    const text = body();
    const bad = await open();
    bad.s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: svc_sk_live_nope\r\nExpect: 100-continue\r\nContent-Length: ${text.length}\r\n\r\n`);
    const refused = await bad.until(/\r\n\r\n\{.*\}$/s);
    assert.match(refused, /^HTTP\/1\.1 401 /, "no 100 Continue first");
    assert.match(refused, /\r\nWWW-Authenticate: Bearer realm="svc"\r\n/i);
    bad.s.destroy();

    const good = await open();
    good.s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${env.keys.live}\r\nExpect: 100-continue\r\nContent-Length: ${text.length}\r\n\r\n`);
    assert.match(await good.until(/100 Continue\r\n\r\n/), /^HTTP\/1\.1 100 Continue\r\n\r\n$/);
    good.s.write(text);
    assert.match(await good.until(/"object":"chat\.completion"/), /HTTP\/1\.1 200 OK/);
    good.s.destroy();
  });

  it("answers in the spec's shape what node:http answered bare or took: no Host, two Hosts, another expectation, CONNECT", async () => {
    for (const [head, status, code] of [
      [`POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`, 400, "malformed_request"],
      [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nhost: y\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`, 400, "malformed_request"],
      [`GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n`, 400, "malformed_request"],
      [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 5000-magic\r\nContent-Length: 2\r\n\r\n{}`, 417, "expectation_failed"],
      [`CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n`, 405, "method_not_allowed"],
    ] as const) {
      const c = await open();
      c.s.write(head);
      const got = await c.until(/\r\n\r\n\{.*\}$/s);
      assert.match(got, new RegExp(`^HTTP/1\\.1 ${status} `), head);
      assert.match(got, /\r\nX-Svc-Request-Id: req_/i, head);
      assert.equal(errorOf(got).code, code, head);
      c.s.destroy();
    }
  });

  it("keeps every header within the size limit: a key after a thousand others is read", async () => {
    const filler: Record<string, string> = {};
    for (let i = 0; i < 1100; i++) filler[`x-f${i}`] = "1";
    const res = await rawRequest(`${env.gw.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { ...filler, "content-type": "application/json", "x-svc-api-key": env.keys.live }, body: body() });
    assert.equal(res.status, 200, res.text);
  });

  it("refuses a transfer coding other than chunked, and closes an HTTP/1.0 connection whose body was chunked", async () => {
    const c = await open();
    const text = body();
    c.s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${env.keys.live}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n${text.length.toString(16)}\r\n${text}\r\n0\r\n\r\n`);
    const got = await c.until(/\r\n\r\n\{.*\}$/s);
    assert.match(got, /^HTTP\/1\.1 400 /);
    assert.equal(errorOf(got).code, "unsupported_transfer_encoding");
    assert.match(got, /\r\nConnection: close\r\n/i);
    c.s.destroy();

    const old = await open();
    old.s.write(`POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${env.keys.live}\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n${text.length.toString(16)}\r\n${text}\r\n0\r\n\r\n`);
    const answered = await old.until(/"object":"chat\.completion"/);
    assert.doesNotMatch(answered, /\r\nConnection: keep-alive\r\n/i, "the framing is in doubt: not kept");
    old.s.destroy();
  });

  it("tells a client that sent a provider's key where the SDK puts it that the key is wrong, not missing", async () => {
    for (const headers of [{ authorization: "Bearer sk-proj-abc" }, { "x-api-key": "sk-ant-api03-xyz" }] as Array<Record<string, string>>) {
      const res = await rawRequest(`${env.gw.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { ...headers, "content-type": "application/json" }, body: body() });
      assert.equal(res.status, 401);
      assert.match(res.json().error.message, /^Invalid API key: the (Authorization|x-api-key) header holds a key that is not a service key/);
      assert.equal(res.headers["www-authenticate"], 'Bearer realm="svc"');
    }
    const none = await rawRequest(`${env.gw.gatewayUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body() });
    assert.match(none.json().error.message, /^Missing API key/);
  });
});
