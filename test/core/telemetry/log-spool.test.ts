import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openLogSpool } from "../../../src/core/telemetry/log-spool.js";
import { logRow } from "../../support/telemetry.js";

describe("log spool", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-spool-test-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("gives back each batch's rows, oldest first, across a reopen", async () => {
    const spool = await openLogSpool(dir, { maxBytes: 1 << 20 });
    // A body with a newline, a quote and characters outside ASCII.
    const first = [logRow(1, { request_body: 'line one\nline "two" é 😀' }), logRow(2)];
    const second = [logRow(3)];
    assert.equal(await spool.append({ mode: "live", token: "t1", rows: first }), true);
    assert.equal(await spool.append({ mode: "test", token: "t2", rows: second }), true);

    const again = await openLogSpool(dir, { maxBytes: 1 << 20 });
    assert.equal(again.batches, 2);
    const a = await again.oldest();
    assert.deepEqual([a?.mode, a?.token, a?.rows], ["live", "t1", first]);
    await again.remove(a!);
    const b = await again.oldest();
    assert.deepEqual([b?.mode, b?.token, b?.rows], ["test", "t2", second]);
  });

  it("sets aside a file that is not a batch, and replays the next one", async () => {
    const spool = await openLogSpool(dir, { maxBytes: 1 << 20 });
    await spool.append({ mode: "live", token: "t1", rows: [logRow(1)] });
    await spool.append({ mode: "live", token: "t2", rows: [logRow(2)] });
    const [damaged] = readdirSync(dir).filter((f) => f.endsWith(".jsonl")).sort();
    writeFileSync(join(dir, damaged!), '{"v":1,"mode":"live","token":"t1","count":1}\n{"truncated\n');

    const next = await spool.oldest();
    assert.equal(next?.token, "t2");
    assert.deepEqual(readdirSync(join(dir, "rejected")), [damaged]);
    assert.equal(spool.batches, 1);
  });

  it("refuses a batch that would pass the byte budget, writing nothing", async () => {
    const spool = await openLogSpool(dir, { maxBytes: 100 });
    assert.equal(await spool.append({ mode: "live", token: "t1", rows: [logRow(1)] }), false);
    assert.equal(spool.batches, 0);
    assert.deepEqual(readdirSync(dir), []);
  });
});
