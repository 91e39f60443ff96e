import assert from "node:assert/strict";
import type http from "node:http";
import net from "node:net";
import { postJson } from "../../support/http.js";
import { gatewayOnScriptedUpstream } from "../../support/upstream.js";

/**
 * Single flight: identical requests wait on the first one's answer. That answer is read from the
 * upstream as fast as it comes while they wait, not as fast as the first one's own client reads
 * it: a client that reads slowly, or not at all, does not hold the others up (before, they waited
 * until it had read the answer, or was cut for not reading it a minute later).
 */
/** Events of each answer, by prompt: about 150 bytes of chunk each to the client. */
const EVENTS: Record<string, number> = {
  // About 9 MB: more than the client's socket buffers take, less than READ_AHEAD_MAX_CHARS more.
  "a long answer": 60_000,
  // About 30 MB: more than that.
  "a very long answer": 200_000,
};
let calls = 0;

function answer(body: { stream?: boolean; messages: Array<{ content: string }> }, res: http.ServerResponse): void {
  calls++;
  const events = EVENTS[body.messages[0]!.content]!;
  if (!body.stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "chatcmpl-slow", object: "chat.completion", created: 1, model: "gpt-4o", choices: [{ index: 0, message: { role: "assistant", content: "word ".repeat(events) }, finish_reason: "stop" }] }));
    return;
  }
  const chunk = (delta: object, finish: string | null) =>
    `data: ${JSON.stringify({ id: "chatcmpl-slow", object: "chat.completion.chunk", created: 1, model: "gpt-4o", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  res.writeHead(200, { "content-type": "text/event-stream" });
  let out = chunk({ role: "assistant", content: "" }, null);
  for (let i = 0; i < events; i++) out += chunk({ content: "word " }, null);
  res.end(out + chunk({}, "stop") + "data: [DONE]\n\n");
}

describe("single flight behind a client that does not read its answer", function () {
  this.timeout(30_000);
  const on = gatewayOnScriptedUpstream(answer);

  /** Sends `content` from a client that never reads a byte of the answer, then (1.5 s later) the same request twice, as JSON and as a stream. */
  const behindStalledClient = async (content: string) => {
    calls = 0;
    const body = (stream: boolean) => JSON.stringify({ model: "chat-4o", stream, messages: [{ role: "user", content }] });
    const leader = net.connect(Number(new URL(on.gw.gatewayUrl).port), "127.0.0.1");
    leader.on("error", () => {});
    leader.pause();
    const b = body(true);
    leader.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Svc-Api-Key: ${on.key}\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`);
    try {
      // Long enough for the first one to be held by its client: the others come to a stream waiting on it.
      await new Promise((r) => setTimeout(r, 1_500));
      const [json, stream] = await Promise.all([
        postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, JSON.parse(body(false))),
        postJson(`${on.gw.gatewayUrl}/v1/chat/completions`, on.key, JSON.parse(body(true))),
      ]);
      assert.deepEqual([json.status, stream.status], [200, 200], json.text.slice(0, 300));
      assert.equal((json.json() as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content, "word ".repeat(EVENTS[content]!));
      const streamed = stream.text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => (JSON.parse(e.slice(6)) as { choices: Array<{ delta: { content?: string } }> }).choices[0]?.delta.content ?? "").join("");
      assert.equal(streamed, "word ".repeat(EVENTS[content]!));
      return { cache: [json.headers["x-svc-cache"], stream.headers["x-svc-cache"]], calls };
    } finally {
      leader.destroy();
    }
  };

  it("answers the identical requests waiting on it once the upstream has sent the answer, as hits, with one upstream call", async () => {
    assert.deepEqual(await behindStalledClient("a long answer"), { cache: ["HIT", "HIT"], calls: 1 });
  });

  it("lets them go, each to the upstream, once more than READ_AHEAD_MAX_CHARS waits on its client", async () => {
    const { calls } = await behindStalledClient("a very long answer");
    assert.ok(calls >= 2, `the waiters called the upstream (${calls} calls), rather than wait for the client to be cut a minute later`);
  });
});
