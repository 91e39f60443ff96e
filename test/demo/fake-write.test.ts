import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { splitPieces, writeEvents } from "../../src/demo/fake-script.js";
import { isWellFormed } from "../../src/core/text.js";

/**
 * The demo provider writes a long stream as its reader takes it: in `--demo` it runs in the
 * gateway's process, and a stream written whole would sit in that process's memory while a slow
 * client held the gateway (and so the fake) back.
 */
describe("demo provider: writing a stream", () => {
  it("holds back a long stream its reader does not take, then delivers all of it in order", async () => {
    const events = Array.from({ length: 4000 }, (_, i) => `data: {"n":${i},"pad":"${"x".repeat(1000)}"}\n\n`);
    let buffered = -1;
    let listeners = Infinity;
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      void writeEvents(res, events).then(() => (listeners = res.listenerCount("close")));
      // While the client reads nothing: what this side holds in its buffers.
      setTimeout(() => (buffered = res.writableLength), 300);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const text = await new Promise<string>((resolve, reject) => {
        http.get(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, (res) => {
          res.pause();
          setTimeout(() => {
            let got = "";
            res.setEncoding("utf8");
            res.on("data", (d: string) => (got += d));
            res.on("end", () => resolve(got));
            res.resume();
          }, 500);
        }).on("error", reject);
      });
      assert.ok(buffered >= 0 && buffered < 256 * 1024, `${buffered} bytes held for a reader that took nothing (the stream is ${events.join("").length})`);
      assert.ok(listeners <= 2, `${listeners} close listeners left on the response`);
      assert.equal(text, events.join(""));
    } finally {
      server.close();
    }
  });

  it("writes a short stream in one write", async () => {
    let writes = 0;
    const res = { end: (s: string) => (writes++, s), write: () => (writes++, true), destroyed: false } as unknown as http.ServerResponse;
    await writeEvents(res, ["data: a\n\n", "data: b\n\n"]);
    assert.equal(writes, 1);
  });
});

describe("demo provider: stream pieces", () => {
  it("splits a reply into N pieces between characters, never inside a surrogate pair", () => {
    const text = "é😀 ".repeat(50);
    for (const n of [3, 7, 10, 49, 150]) {
      const pieces = splitPieces(text, n);
      assert.equal(pieces.join(""), text);
      for (const p of pieces) assert.ok(isWellFormed(p), `${n}: ${JSON.stringify(p)}`);
    }
  });
});
