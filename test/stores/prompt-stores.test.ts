import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createFilePromptStore } from "../../src/stores/file-prompt-store.js";
import type { PromptStore } from "../../src/stores/prompt-store.js";
import { createRedisPromptStore } from "../../src/stores/redis-prompt-store.js";
import { startRedis, type TestRedis } from "../support/redis.js";

const put = (s: PromptStore, projectId: string, name: string, content: string) => s.put({ projectId, name, content, description: "", createdAt: Date.now() });

for (const kind of ["file", "redis"] as const) {
  describe(`prompt store (${kind})`, () => {
    let dir: string;
    let redis: TestRedis | undefined;
    let open: () => Promise<PromptStore>;
    let store: PromptStore;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), "svc-prompts-"));
      if (kind === "redis") redis = await startRedis();
      open = async () => (kind === "file" ? createFilePromptStore(dir) : createRedisPromptStore(redis!.url));
      store = await open();
    });
    after(async () => {
      await store.close();
      await redis?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    it("numbers versions from 1 per project and name, and keeps the old ones", async () => {
      assert.equal((await put(store, "p1", "a", "one")).version, 1);
      assert.equal((await put(store, "p1", "a", "two")).version, 2);
      assert.equal((await put(store, "p2", "a", "other")).version, 1);
      assert.equal((await store.get("p1", "a"))?.content, "two");
      assert.equal((await store.get("p1", "a"))?.version, 2);
      assert.equal((await store.get("p1", "a", 1))?.content, "one");
      assert.equal(await store.get("p1", "a", 3), undefined);
      assert.equal(await store.get("p1", "b"), undefined);
    });

    it("lists a project's names at their latest version, by name", async () => {
      await put(store, "p3", "zeta", "z");
      await put(store, "p3", "alpha", "a1");
      await put(store, "p3", "alpha", "a2");
      assert.deepEqual((await store.list("p3")).map((p) => [p.name, p.version, p.content]), [["alpha", 2, "a2"], ["zeta", 1, "z"]]);
      assert.deepEqual(await store.list("p_none"), []);
    });

    it("gives concurrent puts distinct versions, and keeps them after a restart", async () => {
      // Redis: two replicas; the file: one process owns its data dir.
      const other = kind === "redis" ? await open() : store;
      const versions = await Promise.all(Array.from({ length: 10 }, (_, i) => put(i % 2 ? store : other, "p4", "race", `v${i}`).then((p) => p.version)));
      assert.deepEqual([...versions].sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      if (other !== store) await other.close();
      await store.close();
      store = await open();
      assert.equal((await store.get("p4", "race"))?.version, 10);
      assert.equal((await store.list("p4")).length, 1);
    });
  });
}
