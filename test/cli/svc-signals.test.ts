import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const bin = fileURLToPath(new URL("../../bin/svc.js", import.meta.url));

/** A closing terminal (SIGHUP) stops `svc serve` as cleanly as SIGTERM: Node's default was to die at once. */
describe("svc serve and SIGHUP", function () {
  this.timeout(60_000);
  let dir = "";
  before(() => void (dir = mkdtempSync(join(tmpdir(), "svc-signals-"))));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("shuts down cleanly: exit code 0, its data dir released", async () => {
    const data = join(dir, "data");
    const env = { PATH: process.env.PATH, SVC_DATA_DIR: data, SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0" };
    const server = spawn(process.execPath, [bin, "serve", "--demo"], { env, cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    server.stdout.on("data", (d: Buffer) => (out += d));
    server.stderr.on("data", (d: Buffer) => (out += d));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`did not start: ${out}`)), 30_000);
      server.stdout.on("data", () => {
        if (!out.includes("svc gateway is running")) return;
        clearTimeout(timer);
        resolve();
      });
    });
    assert.equal(existsSync(join(data, "svc.pid")), true);
    const code = await new Promise<number | null>((resolve) => {
      server.once("exit", (c) => resolve(c));
      server.kill("SIGHUP");
    });
    assert.equal(code, 0, out);
    assert.match(out, /received SIGHUP, shutting down/);
    assert.equal(existsSync(join(data, "svc.pid")), false, "the data dir's lock is released, as on SIGTERM");
  });
});
