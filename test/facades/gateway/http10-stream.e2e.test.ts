import assert from "node:assert/strict";
import net from "node:net";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { gatewayWithProject } from "../../support/gateway.js";
import { eventually, sseEvents } from "../../support/http.js";

/** One HTTP/1.0 request over a raw socket (as nginx sends to a backend by default), read until the server closes. */
function http10(url: string, path: string, headers: Record<string, string>, body: string): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    socket.on("data", (c) => chunks.push(c));
    socket.on("error", reject);
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const end = text.indexOf("\r\n\r\n");
      const [statusLine, ...lines] = text.slice(0, end).split("\r\n");
      const head: Record<string, string> = {};
      for (const l of lines) head[l.slice(0, l.indexOf(":")).toLowerCase()] = l.slice(l.indexOf(":") + 1).trim();
      resolve({ status: Number(statusLine!.split(" ")[1]), headers: head, body: text.slice(end + 4) });
    });
    const h = Object.entries({ ...headers, "content-length": String(Buffer.byteLength(body)) }).map(([k, v]) => `${k}: ${v}\r\n`).join("");
    socket.write(`POST ${path} HTTP/1.0\r\n${h}\r\n${body}`);
  });
}

describe("streams over HTTP/1.0 (no chunked framing, so no trailer)", () => {
  const setup = gatewayWithProject();

  const cases = [
    {
      path: "/v1/chat/completions",
      headers: {} as Record<string, string>,
      body: { model: "chat-4o-mini", stream: true, messages: [{ role: "user", content: "over http 1.0" }] },
      last: (events: Array<{ event?: string; data: string }>) => events.at(-1)?.data === "[DONE]",
    },
    {
      path: "/v1/messages",
      headers: { "provider-version": "2023-06-01" } as Record<string, string>,
      body: { model: "assistant-3-haiku-20240307", max_tokens: 50, stream: true, messages: [{ role: "user", content: "over http 1.0" }] },
      last: (events: Array<{ event?: string; data: string }>) => events.at(-1)?.event === "message_stop",
    },
  ];

  for (const c of cases) {
    it(`${c.path}: a live stream and its cached repeat are whole SSE answers ended by the close; the live one is logged with its cost`, async () => {
      const send = () => http10(setup.gw.gatewayUrl, c.path, { "content-type": "application/json", "x-svc-api-key": setup.keys.live, ...c.headers }, JSON.stringify(c.body));
      const live = await send();
      assert.equal(live.status, 200, live.body);
      assert.match(live.headers["content-type"] ?? "", /^text\/event-stream/);
      assert.equal(live.headers.trailer, undefined);
      assert.equal(live.headers["transfer-encoding"], undefined);
      assert.equal(live.headers["x-svc-cache"], "MISS");
      assert.ok(c.last(sseEvents(live.body)), live.body);
      const hit = await send();
      assert.equal(hit.status, 200, hit.body);
      assert.equal(hit.headers["x-svc-cache"], "HIT");
      assert.equal(hit.headers["x-svc-cost"], "0");
      assert.ok(c.last(sseEvents(hit.body)), hit.body);
      const id = live.headers["x-svc-request-id"]!;
      let logged: { status: number; costUsd: string } | undefined;
      await eventually(async () => {
        const { logs } = await setup.gw.telemetry.listLogs({ projectId: setup.keys.projectId, keyMode: KeyMode.LIVE, pageSize: 100 });
        logged = logs.find((l) => l.requestId === id);
        return logged !== undefined;
      }, 10_000, "the live stream's log");
      assert.equal(logged!.status, 200);
      assert.ok(Number(logged!.costUsd) > 0, `logged cost ${logged!.costUsd}`);
    });
  }
});
