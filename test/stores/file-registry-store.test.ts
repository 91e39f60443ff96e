import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAuthService } from "../../src/core/auth/auth-service.js";
import { createDirectClient } from "../../src/core/direct-client.js";
import { toErrorInfo } from "../../src/core/errors.js";
import { AuthService, Plan } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../src/gen/svc/common/v1/key_mode_pb.js";
import { createFileRegistryStore } from "../../src/stores/file-registry-store.js";
import { RegistryUnavailableError, type ProjectRecord } from "../../src/stores/registry-store.js";

/**
 * The embedded registry when its file cannot be written (a full disk, a read-only file): a change
 * refused is applied nowhere, neither in the running server nor later on disk.
 */
describe("file registry store: a change its file cannot take", () => {
  let root = "";
  let dir = "";
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), "svc-reg-file-"));
    dir = join(root, "data");
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  const record = (id: string): ProjectRecord => ({ id, name: id, plan: "free", createdAt: Date.now() });
  /** Makes the data dir unwritable for anyone, root included: a file stands where it was. */
  const breakDir = () => {
    rmSync(dir, { recursive: true, force: true });
    writeFileSync(dir, "not a directory");
  };
  const mendDir = (saved: string) => {
    rmSync(dir, { force: true });
    mkdirSync(dir);
    writeFileSync(join(dir, "registry.json"), saved);
  };

  it("refuses it as unavailable (refused writes) and keeps it out of memory and off disk", async () => {
    const store = await createFileRegistryStore(dir);
    await store.createProject(record("proj_a"));
    const saved = readFileSync(join(dir, "registry.json"), "utf8");
    breakDir();
    await assert.rejects(store.createProject(record("proj_b")), (e: Error) => e instanceof RegistryUnavailableError && e.writesRefused);
    await assert.rejects(store.updateProject("proj_a", (p) => ({ ...p, plan: "pro" })), RegistryUnavailableError);
    await assert.rejects(store.createKey({ id: "key_x", projectId: "proj_a", mode: "live", hash: "h", displayPrefix: "p", description: "", createdAt: 1 }, 10), RegistryUnavailableError);
    assert.deepEqual((await store.listProjects()).map((p) => p.id), ["proj_a"], "the refused project is not listed");
    assert.equal((await store.getProject("proj_a"))?.plan, "free", "the refused update is not applied");
    assert.deepEqual(await store.listKeys("proj_a"), []);
    assert.equal(await store.findKeyByHash("h"), undefined, "the refused key does not verify");
    mendDir(saved);
    await store.createProject(record("proj_c"));
    const onDisk = JSON.parse(readFileSync(join(dir, "registry.json"), "utf8")) as { projects: ProjectRecord[] };
    assert.deepEqual(onDisk.projects.map((p) => p.id), ["proj_a", "proj_c"], "the next change does not carry the refused one to disk");
    assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith(".tmp")), [], "no temporary file left");
    await store.close();
  });

  it("refuses every change of a batch its file cannot take, and applies none of them", async () => {
    const store = await createFileRegistryStore(dir);
    await store.createProject(record("proj_a"));
    breakDir();
    const key = (id: string) => ({ id, projectId: "proj_a", mode: "live" as const, hash: `h_${id}`, displayPrefix: "p", description: "", createdAt: 1 });
    const results = await Promise.allSettled([store.createProject(record("proj_b")), store.createKey(key("key_1"), 10), store.createKey(key("key_2"), 10), store.updateProject("proj_a", (p) => ({ ...p, plan: "pro" }))]);
    for (const r of results) assert.ok(r.status === "rejected" && r.reason instanceof RegistryUnavailableError, JSON.stringify(r));
    assert.deepEqual((await store.listProjects()).map((p) => [p.id, p.plan]), [["proj_a", "free"]]);
    assert.deepEqual(await store.listKeys("proj_a"), []);
    await store.close();
  });

  it("answers the admin call 503 auth_unavailable saying nothing was changed", async () => {
    const store = await createFileRegistryStore(dir);
    const auth = createDirectClient(AuthService, createAuthService({ store }));
    const { project } = await auth.createProject({ name: "kept", plan: Plan.FREE });
    breakDir();
    await assert.rejects(auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE }), (e: unknown) => {
      const info = toErrorInfo(e);
      return info.status === 503 && info.code === "auth_unavailable" && /nothing was changed/.test(info.message);
    });
    assert.equal(existsSync(dir), true);
    await store.close();
  });
});

describe("file registry store: changes made together", () => {
  let dir = "";
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), "svc-reg-batch-"))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("are each worked out on what the ones before them left, and all kept across a reopen", async () => {
    const store = await createFileRegistryStore(dir);
    const project: ProjectRecord = { id: "proj_n", name: "n", plan: "free", createdAt: 1 };
    const key = (i: number) => ({ id: `key_${i}`, projectId: "proj_n", mode: "live" as const, hash: `h_${i}`, displayPrefix: "p", description: "", createdAt: 10 + i });
    // The project and 30 keys for it at once: the keys see the project, and its limit of 10 holds.
    const [, ...made] = await Promise.all([store.createProject(project), ...Array.from({ length: 30 }, (_, i) => store.createKey(key(i), (p) => (p.id === "proj_n" ? 10 : 0)))]);
    assert.equal(made.filter(Boolean).length, 10);
    assert.deepEqual((await store.listKeys("proj_n")).map((k) => k.id), Array.from({ length: 10 }, (_, i) => `key_${i}`));
    // Deletes and a plan change at once; a key deleted twice is found once.
    const [d0, d0again, d1, updated] = await Promise.all([store.deleteKey("key_0"), store.deleteKey("key_0"), store.deleteKey("key_1"), store.updateProject("proj_n", (p, keys) => ({ ...p, plan: "pro", name: `n with ${keys} keys` }))]);
    assert.equal(d0?.id, "key_0");
    assert.equal(d0again, undefined);
    assert.equal(d1?.id, "key_1");
    assert.equal(updated?.name, "n with 8 keys");
    assert.equal(await store.findKeyByHash("h_0"), undefined);
    assert.equal((await store.findKeyByHash("h_2"))?.project?.plan, "pro");
    await store.close();
    const again = await createFileRegistryStore(dir);
    assert.deepEqual((await again.listKeys("proj_n")).map((k) => k.id), Array.from({ length: 8 }, (_, i) => `key_${i + 2}`));
    assert.equal((await again.getProject("proj_n"))?.name, "n with 8 keys");
    await again.close();
  });
});
