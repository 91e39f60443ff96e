import assert from "node:assert/strict";
import type http from "node:http";
import net from "node:net";
import { eventually, rawRequest } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * A client that does not read what it asked for holds one answer, for a while, not every answer it
 * can ask for, forever: requests pipelined on one connection are served one after another (as nginx
 * does), and a client that takes none of an answer's bytes for the send stall limit has its
 * connection closed (as nginx's send_timeout). A slow reader that keeps taking bytes is not cut.
 */
const MiB = 1024 * 1024;
let calls = 0;
/** Whether the gateway left a stream of the upstream's before its end. */
let upstreamCut = false;

function answer(body: { stream?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse): void {
  calls++;
  const size = Number(/size=(\d+)/.exec(body.messages[0]!.content)?.[1] ?? 1000);
  if (body.stream) {
    // A stream of 1 MiB pieces, as fast as the gateway takes them.
    const head = { id: "chatcmpl-big", object: "chat.completion.chunk", created: 1750431500, model: "gpt-4o" };
    const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    res.writeHead(200, { "content-type": "text/event-stream" });
    let left = size;
    const more = () => {
      while (left > 0) {
        const n = Math.min(MiB, left);
        left -= n;
        if (!res.write(chunk({ content: "x".repeat(n) }, null))) return void res.once("drain", more);
      }
      res.end(chunk({}, "stop") + "data: [DONE]\n\n");
    };
    res.on("close", () => {
      if (left > 0) upstreamCut = true;
      left = -1;
    });
    return more();
  }
  res.writeHead(200, { "content-type": "application/json" });
  const message = { role: "assistant", content: "x".repeat(size) };
  res.end(JSON.stringify({ id: "chatcmpl-big", object: "chat.completion", created: 1750431500, model: "gpt-4o", choices: [{ index: 0, message, finish_reason: "stop" }], usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 } }));
}

/** A chat completions request as raw HTTP/1.1. */
function requestText(content: string, key: string, stream = false): string {
  const body = JSON.stringify({ model: "chat-4o", ...(stream ? { stream } : {}), messages: [{ role: "user", content }] });
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${key}\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
}

describe("a client that does not read its answers", function () {
  this.timeout(60_000);
  const STALL_MS = 1500;
  const on = gatewayOnScriptedUpstream(answer, { SVC_CACHE_DISABLED: "1", SVC_TELEMETRY_FLUSH_INTERVAL_MS: "100" }, { sendStallMs: STALL_MS });
  const request = (content: string, key = on.key, stream = false) => requestText(content, key, stream);
  /** Sends `text` on a connection of its own and reads nothing of what comes back. */
  const sendUnread = (text: string): net.Socket => {
    const socket = net.connect(Number(new URL(on.gw.gatewayUrl).port), "127.0.0.1");
    socket.on("error", () => {});
    socket.pause();
    socket.write(text);
    return socket;
  };
  const logs = async (key: string) => {
    const r = await rawRequest(`${on.gw.managementUrl}/v1/logs?limit=100`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
    return (r.status === 200 ? r.json().data : []) as Array<{ status: number }>;
  };

  it("has one pipelined answer made at a time: twelve requests sent, none read, the upstream asked for the first few only", async () => {
    calls = 0;
    const socket = sendUnread(Array.from({ length: 12 }, (_, i) => request(`pipelined ${i} size=${16 * MiB}`)).join(""));
    await eventually(() => calls >= 1, 10_000, "the first request at the upstream");
    await new Promise((r) => setTimeout(r, 1000));
    // Each answer is more than the connection's buffers hold: the next is begun only once the one
    // before has been taken, which this client never does. Served at once, all twelve were made.
    assert.ok(calls <= 2, `${calls} upstream calls`);
    socket.destroy();
  });

  it("has its connection closed once it has taken nothing for the stall limit, its request logged 499", async () => {
    const { live } = await on.gw.project();
    const socket = sendUnread(request(`stalled size=${16 * MiB}`, live));
    const t0 = Date.now();
    let rows: Array<{ status: number }> = [];
    await eventually(async () => (rows = await logs(live)).length > 0, 15_000, "the stalled request's log");
    // Filed when the answer was given up, not when it was made.
    assert.ok(Date.now() - t0 >= STALL_MS - 200, `logged after ${Date.now() - t0} ms`);
    assert.equal(rows[0]!.status, 499);
    socket.destroy();
  });

  it("serves nothing more on a connection cut for a stall: the requests pipelined behind are dropped unserved", async () => {
    const { live } = await on.gw.project();
    // Small answers: many are taken by the connection's buffers before one is left waiting.
    const socket = sendUnread(Array.from({ length: 400 }, (_, i) => request(`small ${i} size=16000`, live)).join(""));
    let rows: Array<{ status: number }> = [];
    await eventually(async () => (rows = await logs(live)).some((r) => r.status === 499), 20_000, "the cut request's log");
    const callsAtCut = calls;
    await new Promise((r) => setTimeout(r, STALL_MS + 1000));
    rows = await logs(live);
    assert.equal(rows.filter((r) => r.status === 499).length, 1, JSON.stringify(rows.slice(0, 5)));
    assert.equal(calls, callsAtCut, "no upstream call after the cut");
    socket.destroy();
  });

  it("cuts a stream whose client takes nothing for the stall limit, its upstream call with it", async () => {
    const { live } = await on.gw.project();
    const socket = sendUnread(request(`stalled stream size=${256 * MiB}`, live, true));
    let rows: Array<{ status: number }> = [];
    await eventually(async () => (rows = await logs(live)).length > 0, 15_000, "the stalled stream's log");
    assert.equal(rows[0]!.status, 499);
    await eventually(() => upstreamCut, 5000, "the upstream's stream cut");
    socket.destroy();
  });
});

/**
 * Asks `gatewayUrl` for an answer of `size` characters (a stream when `stream`) and reads it in
 * bursts of `burstBytes`, one every `everyMs`; resolves with whether it all came, and how long it took.
 */
async function readInBursts(gatewayUrl: string, key: string, size: number, stream: boolean, burstBytes: number, everyMs: number): Promise<{ whole: boolean; ms: number; got: number }> {
  const socket = net.connect(Number(new URL(gatewayUrl).port), "127.0.0.1");
  socket.write(requestText(`bursts of ${burstBytes} size=${size}`, key, stream));
  const t0 = Date.now();
  let got = 0;
  let burst = 0;
  socket.on("data", (d: Buffer) => {
    got += d.length;
    burst += d.length;
    if (got > size && (!stream || d.includes("[DONE]"))) socket.end();
    else if (burst >= burstBytes) socket.pause();
  });
  socket.pause();
  const reading = setInterval(() => {
    burst = 0;
    socket.resume();
  }, everyMs);
  const whole = await new Promise<boolean>((resolve) => {
    socket.on("close", () => resolve(got > size));
    setTimeout(() => resolve(false), 40_000);
  });
  clearInterval(reading);
  socket.destroy();
  return { whole, ms: Date.now() - t0, got };
}

describe("a client that reads its answer in small sips", function () {
  this.timeout(60_000);
  const STALL_MS = 1500;
  const on = gatewayOnScriptedUpstream(answer, { SVC_CACHE_DISABLED: "1" }, { sendStallMs: STALL_MS });

  it("is not cut while it takes some bytes within each stall limit, taking far less than a part in it", async () => {
    // 128 KiB (two loopback segments' worth), then nothing for a third of the stall limit.
    const read = await readInBursts(on.gw.gatewayUrl, on.key, 2 * MiB, true, 128 * 1024, STALL_MS / 3);
    assert.ok(read.whole, `read ${read.got} bytes in ${read.ms} ms`);
    assert.ok(read.ms > STALL_MS, `read in ${read.ms} ms: not slow enough to tell`);
  });
});

describe("a client that reads its answer slowly", function () {
  this.timeout(60_000);
  // Longer than the reader's pauses, and than Linux takes to reopen a full receive window (once
  // half the buffer, up to tcp_rmem's 32 MiB, has been read).
  const STALL_MS = 4000;
  const on = gatewayOnScriptedUpstream(answer, { SVC_CACHE_DISABLED: "1" }, { sendStallMs: STALL_MS });

  it("is not cut while it keeps taking bytes, however long the answer takes", async () => {
    // More than the connection's buffers hold, so the gateway waits on the reader: 8 MiB, then
    // nothing for a second, again and again.
    const read = await readInBursts(on.gw.gatewayUrl, on.key, 48 * MiB, false, 8 * MiB, 1000);
    assert.ok(read.whole, `read ${read.got} bytes in ${read.ms} ms`);
    assert.ok(read.ms > STALL_MS, `read in ${read.ms} ms: not slow enough to tell`);
  });
});
