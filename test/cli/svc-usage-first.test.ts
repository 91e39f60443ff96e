import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const bin = fileURLToPath(new URL("../../bin/svc.js", import.meta.url));

/** A mistyped command is told as such, before what it lacks to reach a server (no admin token here). */
describe("the svc CLI: usage errors before the admin token", function () {
  this.timeout(30_000);
  const dir = mkdtempSync(join(tmpdir(), "svc-usage-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const svc = (...args: string[]) =>
    new Promise<{ code: number; stderr: string }>((resolve) => {
      // No SVC_ADMIN_TOKEN, and a data dir without an admin-token file.
      execFile(process.execPath, [bin, ...args], { env: { PATH: process.env.PATH, SVC_DATA_DIR: join(dir, "data") }, cwd: dir }, (err, _stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stderr });
      });
    });

  it("says which argument is wrong, exit code 2, whatever the token", async () => {
    for (const [args, says] of [
      [["keys", "create"], /^error: --mode is required/],
      [["keys", "create", "--project", "p", "--mode", "bogus"], /^error: --mode must be live or test, got 'bogus'/],
      [["keys", "list", "--mode", "x", "--project", "p"], /^error: --mode must be live or test/],
      [["projects", "create", "--plan", "free"], /^error: --name is required/],
      [["projects", "show"], /^error: PROJECT_ID is required/],
      [["prompts", "put", "n", "--project", "p"], /^error: --file is required/],
    ] as const) {
      const res = await svc(...args);
      assert.equal(res.code, 2, `${args.join(" ")}: ${res.stderr}`);
      assert.match(res.stderr, says, args.join(" "));
    }
  });

  it("then says the token is missing, for a command that is right", async () => {
    const res = await svc("keys", "list", "--project", "p");
    assert.equal(res.code, 2);
    assert.match(res.stderr, /^error: no admin token/);
  });
});
