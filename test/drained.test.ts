import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import { drainedOrClosed } from "../src/drained.js";

/**
 * The send stall: a client is cut once it has taken none of what waits for it for the limit, not
 * once a wait has lasted that long. A response whose socket's queue shrinks now and then (a slow
 * reader, whose kernel takes a few bytes at a time) is waited on for as long as that goes on.
 */
function fakeResponse(queued: number) {
  const res = new EventEmitter() as EventEmitter & { socket: { writableLength: number; _handle: { writeQueueSize: number } }; destroyed: boolean; destroy(): void };
  res.socket = { writableLength: 64 * 1024, _handle: { writeQueueSize: queued } };
  res.destroyed = false;
  res.destroy = () => {
    res.destroyed = true;
    res.emit("close");
  };
  return res;
}

describe("drainedOrClosed with a stall limit", () => {
  it("keeps waiting while the client takes some bytes within each limit, and cuts it once it takes none for the limit", async () => {
    const res = fakeResponse(50_000);
    const t0 = performance.now();
    const waited = drainedOrClosed(res as unknown as ServerResponse, 200);
    // Ten sips, 100 ms apart: 1 s of waiting, five times the limit, with progress in each limit.
    for (let i = 0; i < 10; i++) {
      await new Promise((r) => setTimeout(r, 100));
      res.socket._handle.writeQueueSize -= 1000;
      assert.equal(res.destroyed, false, `cut after ${Math.round(performance.now() - t0)} ms of a client taking bytes`);
    }
    // Then nothing more is taken.
    await waited;
    const stalled = performance.now() - t0;
    assert.equal(res.destroyed, true);
    assert.ok(stalled >= 1000 + 200 - 20 && stalled < 1000 + 200 + 300, `cut ${Math.round(stalled - 1000)} ms after the last bytes taken`);
  });

  it("resolves at drain, without a cut", async () => {
    const res = fakeResponse(10);
    const waited = drainedOrClosed(res as unknown as ServerResponse, 50);
    res.emit("drain");
    await waited;
    await new Promise((r) => setTimeout(r, 120));
    assert.equal(res.destroyed, false);
  });
});
