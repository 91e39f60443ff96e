import assert from "node:assert/strict";
import { mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../src/config.js";
import { startServer } from "../src/server.js";
import { createFilePromptStore } from "../src/stores/file-prompt-store.js";
import { PromptsUnavailableError } from "../src/stores/prompt-store.js";
import { smallDisk } from "./support/small-disk.js";

/**
 * A data dir on a full disk (a small tmpfs filled up, where this machine lets the test mount one):
 * the server refuses to start with a configuration error naming SVC_DATA_DIR, and leaves nothing
 * behind, rather than failing with a bare ENOSPC.
 */
describe("a data dir on a full disk", function () {
  this.timeout(60_000);
  const disk = smallDisk("256k", "svc-full-");
  it("is a configuration error naming SVC_DATA_DIR, with no lock or token file left half-written", async () => {
    const dir = join(disk.path, "data");
    mkdirSync(dir);
    disk.fill();
    const config = loadConfig({ SVC_DATA_DIR: dir, SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0" });
    await assert.rejects(startServer(config), (e: Error) => e instanceof ConfigError && /^SVC_DATA_DIR .* cannot be written \(ENOSPC/.test(e.message));
    assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith("svc.pid") || f === "admin-token"), []);
  });

  it("refuses a prompt put as unavailable (refused writes), with nothing of it stored, once the disk is full", async () => {
    disk.unfill(); // the test before filled the disk
    const dir = join(disk.path, "prompts");
    mkdirSync(dir);
    const store = await createFilePromptStore(dir);
    try {
      const put = (content: string) => store.put({ projectId: "proj_a", name: "p", description: "", createdAt: 1, content });
      assert.equal((await put("kept")).version, 1);
      disk.fill();
      await assert.rejects(put("x".repeat(64 * 1024)), (e: Error) => e instanceof PromptsUnavailableError && e.writesRefused && /ENOSPC/.test(e.message));
      disk.unfill();
      assert.equal((await put("after")).version, 2, "the refused put took no version");
      assert.equal((await store.get("proj_a", "p", 2))?.content, "after");
    } finally {
      await store.close();
    }
    const again = await createFilePromptStore(dir);
    assert.deepEqual([(await again.get("proj_a", "p", 1))?.content, (await again.get("proj_a", "p", 2))?.content, await again.get("proj_a", "p", 3)], ["kept", "after", undefined]);
    await again.close();
  });
});
