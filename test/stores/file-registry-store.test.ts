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
