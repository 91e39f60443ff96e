import assert from "node:assert/strict";
import { appendFileSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAuthService } from "../../src/core/auth/auth-service.js";
import { createDirectClient } from "../../src/core/direct-client.js";
import { toErrorInfo } from "../../src/core/errors.js";
import { AuthService, Plan } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../src/gen/svc/common/v1/key_mode_pb.js";
import { createFileRegistryStore, REGISTRY_FILE, REGISTRY_JOURNAL } from "../../src/stores/file-registry-store.js";
import { type KeyRecord, type ProjectRecord, type RegistryStore, RegistryUnavailableError } from "../../src/stores/registry-store.js";
import { smallDisk } from "../support/small-disk.js";

const project = (id: string, name = id): ProjectRecord => ({ id, name, plan: "free", createdAt: Date.now() });
const key = (i: number, projectId = "proj_n", description = ""): KeyRecord => ({ id: `key_${i}`, projectId, mode: "live", hash: `h_${i}`, displayPrefix: "p", description, createdAt: 10 + i });
/** A record too large for the last page of a file on a full disk to take. */
const big = "x".repeat(64 * 1024);
/** The journal's lines after its header (the generation it follows). */
const lines = (dir: string) => readFileSync(join(dir, REGISTRY_JOURNAL), "utf8").split("\n").filter(Boolean).slice(1);
const journalGeneration = (dir: string) => (JSON.parse(readFileSync(join(dir, REGISTRY_JOURNAL), "utf8").split("\n")[0]!) as { generation: number }).generation;
const snapshotOf = (dir: string) => JSON.parse(readFileSync(join(dir, REGISTRY_FILE), "utf8")) as { generation: number; projects: ProjectRecord[]; keys: KeyRecord[] };

/**
 * The embedded registry on a full disk (a small tmpfs filled up, where this machine lets the test
 * mount one): a change refused is applied nowhere, neither in the running server nor later on disk.
 */
describe("file registry store: a change its disk cannot take", function () {
  this.timeout(60_000);
  const disk = smallDisk("512k", "svc-reg-full-");
  const { fill, unfill } = disk;
  let dir = "";
  let n = 0;
  beforeEach(() => {
    dir = join(disk.path, `data${++n}`);
    mkdirSync(dir);
  });
  afterEach(() => {
    unfill();
    rmSync(dir, { recursive: true, force: true });
  });
  const refused = (e: Error) => e instanceof RegistryUnavailableError && e.writesRefused && /ENOSPC/.test(e.message);

  it("refuses it as unavailable (refused writes) and keeps it out of memory and off disk", async () => {
    const store = await createFileRegistryStore(dir);
    await store.createProject(project("proj_a"));
    fill();
    await assert.rejects(store.createProject(project("proj_b", big)), refused);
    await assert.rejects(store.updateProject("proj_a", (p) => ({ ...p, plan: "pro", name: big })), refused);
    await assert.rejects(store.createKey(key(1, "proj_a", big), 10), refused);
    assert.deepEqual((await store.listProjects()).map((p) => p.id), ["proj_a"], "the refused project is not listed");
    assert.equal((await store.getProject("proj_a"))?.plan, "free", "the refused update is not applied");
    assert.deepEqual(await store.listKeys("proj_a"), []);
    assert.equal(await store.findKeyByHash("h_1"), undefined, "the refused key does not verify");
    unfill();
    await store.createProject(project("proj_c"));
    assert.deepEqual(lines(dir).map((l) => (JSON.parse(l) as { project: ProjectRecord }).project.id), ["proj_a", "proj_c"], "the journal holds no part of the refused changes");
    await store.close();
    const again = await createFileRegistryStore(dir);
    assert.deepEqual((await again.listProjects()).map((p) => [p.id, p.plan]), [["proj_a", "free"], ["proj_c", "free"]]);
    assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith(".tmp")), [], "no temporary file left");
    await again.close();
  });

  it("refuses every change of a batch its disk cannot take, and applies none of them", async () => {
    const store = await createFileRegistryStore(dir);
    await store.createProject(project("proj_a"));
    fill();
    const results = await Promise.allSettled([store.createProject(project("proj_b", big)), store.createKey(key(1, "proj_a", big), 10), store.createKey(key(2, "proj_a", big), 10), store.updateProject("proj_a", (p) => ({ ...p, plan: "pro", name: big }))]);
    for (const r of results) assert.ok(r.status === "rejected" && r.reason instanceof RegistryUnavailableError, JSON.stringify(r));
    assert.deepEqual((await store.listProjects()).map((p) => [p.id, p.plan]), [["proj_a", "free"]]);
    assert.deepEqual(await store.listKeys("proj_a"), []);
    await store.close();
  });

  it("answers the admin call 503 auth_unavailable saying nothing was changed", async () => {
    const store = await createFileRegistryStore(dir);
    const auth = createDirectClient(AuthService, createAuthService({ store }));
    const { project: made } = await auth.createProject({ name: "kept", plan: Plan.ENTERPRISE });
    fill();
    // Small changes go on while the journal's last page has room for them.
    let made_keys = 0;
    let refusal: unknown;
    for (let i = 0; i < 200 && refusal === undefined; i++) {
      try {
        await auth.createKey({ projectId: made!.id, mode: KeyMode.LIVE });
        made_keys++;
      } catch (e) {
        refusal = e;
      }
    }
    const info = toErrorInfo(refusal);
    assert.equal(info.status, 503);
    assert.equal(info.code, "auth_unavailable");
    assert.match(info.message, /nothing was changed/);
    assert.equal((await auth.listKeys({ projectId: made!.id })).keys.length, made_keys, "every key acknowledged is listed, the refused one is not");
    unfill();
    await store.close();
    const again = await createFileRegistryStore(dir);
    assert.equal((await again.listKeys(made!.id)).length, made_keys, "and they are all kept");
    await again.close();
  });

  it("keeps every change in the journal when the disk refuses the compaction, and compacts later", async () => {
    const store = await createFileRegistryStore(dir);
    await store.createProject(project("proj_n"));
    await Promise.all(Array.from({ length: 20 }, (_, i) => store.createKey(key(i), 100)));
    fill();
    // The last change's lines fit; the snapshot of the whole registry does not.
    await store.close();
    assert.equal(lines(dir).length, 21, "the journal is kept whole");
    assert.equal(snapshotOf(dir).keys.length, 0, "the snapshot is still the one written at open: no part of a new one");
    assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith(".tmp")), [], "no temporary file left");
    unfill();
    const again = await createFileRegistryStore(dir);
    assert.equal((await again.listKeys("proj_n")).length, 20);
    await again.close();
    assert.deepEqual(lines(dir), [], "compacted at the next clean stop");
    assert.equal(snapshotOf(dir).keys.length, 20);
  });
});

describe("file registry store: changes made together", () => {
  let dir = "";
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), "svc-reg-batch-"))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("are each worked out on what the ones before them left, and all kept across a reopen", async () => {
    const store = await createFileRegistryStore(dir);
    const p: ProjectRecord = { id: "proj_n", name: "n", plan: "free", createdAt: 1 };
    // The project and 30 keys for it at once: the keys see the project, and its limit of 10 holds.
    const [, ...made] = await Promise.all([store.createProject(p), ...Array.from({ length: 30 }, (_, i) => store.createKey(key(i), (q) => (q.id === "proj_n" ? 10 : 0)))]);
    assert.equal(made.filter(Boolean).length, 10);
    assert.deepEqual((await store.listKeys("proj_n")).map((k) => k.id), Array.from({ length: 10 }, (_, i) => `key_${i}`));
    // Deletes and a plan change at once; a key deleted twice is found once.
    const [d0, d0again, d1, updated] = await Promise.all([store.deleteKey("key_0"), store.deleteKey("key_0"), store.deleteKey("key_1"), store.updateProject("proj_n", (q, keys) => ({ ...q, plan: "pro", name: `n with ${keys} keys` }))]);
    assert.equal(d0?.id, "key_0");
    assert.equal(d0again, undefined);
    assert.equal(d1?.id, "key_1");
    assert.equal(updated?.name, "n with 8 keys");
    assert.equal(await store.findKeyByHash("h_0"), undefined);
    assert.equal((await store.findKeyByHash("h_2"))?.project?.plan, "pro");
    // A key deleted and created again in one batch counts once.
    const [, , recounted] = await Promise.all([store.deleteKey("key_2"), store.createKey(key(40), 8), store.createKey(key(41), 8)]);
    assert.equal(recounted, false, "the limit of 8 holds: one deleted, one created, the next refused");
    await store.close();
    const again = await createFileRegistryStore(dir);
    assert.deepEqual((await again.listKeys("proj_n")).map((k) => k.id), [...Array.from({ length: 7 }, (_, i) => `key_${i + 3}`), "key_40"]);
    assert.equal((await again.getProject("proj_n"))?.name, "n with 8 keys");
    await again.close();
  });
});

/**
 * The registry's journal: a change appends its lines (costing what it changes, not the registry's
 * size), the registry is compacted into registry.json now and then and at a clean stop, and a crash
 * at any point leaves a registry that opens with every acknowledged change.
 */
describe("file registry store: its journal", () => {
  let dir = "";
  const opened: RegistryStore[] = [];
  const open = async () => {
    const s = await createFileRegistryStore(dir);
    opened.push(s);
    return s;
  };
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), "svc-reg-journal-"))));
  afterEach(async () => {
    for (const s of opened.splice(0)) await s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("takes each change as lines appended, leaving the snapshot alone until a compaction", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    await store.close(); // compacts: the snapshot holds the project
    const snapshot = readFileSync(join(dir, REGISTRY_FILE), "utf8");
    const store2 = await open();
    for (let i = 0; i < 5; i++) await store2.createKey(key(i), 100);
    await store2.deleteKey("key_0");
    await store2.updateProject("proj_n", (p) => ({ ...p, plan: "pro" }));
    assert.equal(readFileSync(join(dir, REGISTRY_FILE), "utf8"), snapshot, "the snapshot is not rewritten per change");
    assert.deepEqual(lines(dir).map((l) => Object.keys(JSON.parse(l) as object)[0]), ["key", "key", "key", "key", "key", "deleteKey", "project"]);
    // A crash now (no close): the next open reads the snapshot and the journal over it.
    const after = await createFileRegistryStore(dir);
    assert.deepEqual((await after.listKeys("proj_n")).map((k) => k.id), ["key_1", "key_2", "key_3", "key_4"]);
    assert.equal((await after.getProject("proj_n"))?.plan, "pro");
    assert.equal((await after.findKeyByHash("h_0")), undefined);
    assert.equal((await after.findKeyByHash("h_4"))?.project?.plan, "pro");
    await after.close();
  });

  it("compacts once the journal outgrows the snapshot (and 1 MiB), and every change is still there", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    const description = "d".repeat(1000);
    for (let i = 0; i < 1200; i += 100) await Promise.all(Array.from({ length: 100 }, (_, j) => store.createKey(key(i + j, "proj_n", description), 1e9)));
    assert.ok(existsSync(join(dir, REGISTRY_FILE)), "a snapshot was written");
    assert.ok(statSync(join(dir, REGISTRY_JOURNAL)).size < 1024 * 1024, "the journal was emptied");
    assert.ok(snapshotOf(dir).keys.length >= 1000);
    const crashed = await createFileRegistryStore(dir);
    assert.equal((await crashed.listKeys("proj_n")).length, 1200);
    await crashed.close();
  });

  it("leaves unread a journal of a generation the snapshot already holds (a crash inside a compaction), and starts it anew", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    await Promise.all([store.createKey(key(1), 100), store.createKey(key(2), 100)]);
    await store.deleteKey("key_1");
    await store.createKey(key(1, "proj_n", "made again"), 100);
    await store.updateProject("proj_n", (p) => ({ ...p, plan: "enterprise" }));
    const journal = readFileSync(join(dir, REGISTRY_JOURNAL));
    assert.equal(journalGeneration(dir), 1, "a new registry is generation 1 from its start");
    await store.close(); // compacts: generation 2
    assert.equal(snapshotOf(dir).generation, 2);
    assert.equal(journalGeneration(dir), 2);
    assert.deepEqual(lines(dir), []);
    writeFileSync(join(dir, REGISTRY_JOURNAL), journal); // as if the crash came before the journal was started anew
    const again = await open();
    assert.deepEqual((await again.listKeys("proj_n")).map((k) => [k.id, k.description]), [["key_1", "made again"], ["key_2", ""]]);
    assert.equal((await again.getProject("proj_n"))?.plan, "enterprise");
    assert.equal((await again.findKeyByHash("h_1"))?.key.description, "made again");
    assert.equal(journalGeneration(dir), 2, "started anew for the snapshot's generation");
    assert.deepEqual(lines(dir), []);
  });

  it("restores a backup that copied the journal, then the snapshot, across a compaction: a key deleted meanwhile stays deleted", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    await store.createKey(key(1), 100);
    await store.createKey(key(2), 100);
    const backup = mkdtempSync(join(tmpdir(), "svc-reg-backup-"));
    try {
      copyFileSync(join(dir, REGISTRY_JOURNAL), join(backup, REGISTRY_JOURNAL)); // the journal first: it creates key_1
      await store.deleteKey("key_1");
      await store.close(); // a compaction between the two copies
      copyFileSync(join(dir, REGISTRY_FILE), join(backup, REGISTRY_FILE));
      const restored = await createFileRegistryStore(backup);
      assert.deepEqual((await restored.listKeys("proj_n")).map((k) => k.id), ["key_2"], "the older journal is not read over the newer snapshot");
      assert.equal(await restored.findKeyByHash("h_1"), undefined, "the deleted key does not come back");
      await restored.close();
    } finally {
      rmSync(backup, { recursive: true, force: true });
    }
  });

  it("refuses to start on a journal newer than its snapshot (a backup copied the other way round), and leaves both files as they are", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    await store.close(); // generation 2
    const oldSnapshot = readFileSync(join(dir, REGISTRY_FILE), "utf8");
    const s2 = await open();
    await s2.createKey(key(1), 100);
    await s2.close(); // generation 3
    const s3 = await open();
    await s3.deleteKey("key_1");
    await s3.createKey(key(2), 100);
    writeFileSync(join(dir, REGISTRY_FILE), oldSnapshot); // generation 2, under a journal that follows 3
    const journal = readFileSync(join(dir, REGISTRY_JOURNAL), "utf8");
    await assert.rejects(createFileRegistryStore(dir), (e: Error) => e.message.includes(join(dir, REGISTRY_JOURNAL)) && /follows generation 3 .* which is generation 2/.test(e.message) && e.message.includes("restore both from one backup"));
    assert.equal(readFileSync(join(dir, REGISTRY_JOURNAL), "utf8"), journal);
    assert.equal(readFileSync(join(dir, REGISTRY_FILE), "utf8"), oldSnapshot);
  });

  it("drops a torn last line (no newline: never acknowledged) and appends after the last whole one", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    const whole = statSync(join(dir, REGISTRY_JOURNAL)).size;
    appendFileSync(join(dir, REGISTRY_JOURNAL), '{"key":{"id":"key_9","projectId":"proj_n","mo');
    const again = await open();
    assert.equal(statSync(join(dir, REGISTRY_JOURNAL)).size, whole, "cut back to its last whole line");
    await again.createKey(key(3), 10);
    const third = await createFileRegistryStore(dir);
    assert.deepEqual((await third.listKeys("proj_n")).map((k) => k.id), ["key_3"]);
    await third.close();
  });

  it("refuses to start on a whole line that is no registry change, and leaves both files as they are", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    await store.close();
    const s2 = await open();
    await s2.createKey(key(1), 10);
    const path = join(dir, REGISTRY_JOURNAL);
    const good = readFileSync(path, "utf8");
    const snapshot = readFileSync(join(dir, REGISTRY_FILE), "utf8");
    for (const bad of ["{not json\n", '{"project":{"id":"p"}}\n', '{"drop":"everything"}\n', '{"deleteKey":"key_1","key":{}}\n', '{"generation":1}\n', "\n"]) {
      writeFileSync(path, good + bad);
      await assert.rejects(createFileRegistryStore(dir), (e: Error) => e.message.includes(path) && e.message.includes("line 3") && e.message.includes("backup"), JSON.stringify(bad));
      assert.equal(readFileSync(path, "utf8"), good + bad, "the journal left as it was");
      assert.equal(readFileSync(join(dir, REGISTRY_FILE), "utf8"), snapshot, "the snapshot left as it was");
    }
    // A journal without its header is damage too.
    writeFileSync(path, good.slice(good.indexOf("\n") + 1));
    await assert.rejects(createFileRegistryStore(dir), (e: Error) => e.message.includes("line 1") && e.message.includes("not its header"));
    writeFileSync(path, good);
  });

  it("opens a data dir taken back to a release before the journal after a clean stop, and back again: what that release changed is kept", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    await store.createKey(key(1), 10);
    await store.close(); // generation 2, the journal its header only
    // The earlier release: reads registry.json alone, and rewrites it whole (no generation) on a change.
    const earlier = snapshotOf(dir);
    writeFileSync(join(dir, REGISTRY_FILE), JSON.stringify({ version: 1, projects: earlier.projects, keys: [...earlier.keys, key(2)] }));
    const again = await open();
    assert.deepEqual((await again.listKeys("proj_n")).map((k) => k.id), ["key_1", "key_2"]);
    await again.createKey(key(3), 10);
    await again.close();
    assert.equal(snapshotOf(dir).generation, 3);
    const third = await open();
    assert.deepEqual((await third.listKeys("proj_n")).map((k) => k.id), ["key_1", "key_2", "key_3"]);
  });

  it("refuses a data dir taken back to a release before the journal without a clean stop (the journal holds changes that release never saw), naming the choices", async () => {
    const store = await open();
    await store.createProject(project("proj_n"));
    await store.close(); // generation 2
    const s2 = await open();
    await s2.createKey(key(1), 10); // in the journal; then a crash (no close)
    writeFileSync(join(dir, REGISTRY_FILE), JSON.stringify({ version: 1, projects: [project("proj_n")], keys: [key(2)] }));
    const journal = readFileSync(join(dir, REGISTRY_JOURNAL), "utf8");
    await assert.rejects(createFileRegistryStore(dir), (e: Error) => /written by a release before the journal \(a rollback\)/.test(e.message) && e.message.includes(`move ${REGISTRY_JOURNAL} aside`));
    assert.equal(readFileSync(join(dir, REGISTRY_JOURNAL), "utf8"), journal, "left as it was");
  });

  it("opens the registry.json of earlier releases (no journal), and leaves everything in it at a clean stop", async () => {
    // As releases before the journal wrote it: indented, every project and key in one file.
    writeFileSync(join(dir, REGISTRY_FILE), JSON.stringify({ version: 1, projects: [project("proj_n")], keys: [key(1)] }, null, 2));
    const store = await open();
    assert.deepEqual((await store.listKeys("proj_n")).map((k) => k.id), ["key_1"]);
    assert.equal(snapshotOf(dir).generation, 1, "written as generation 1 at once: a registry.json without one is from then on an earlier release's rewrite");
    // Taken back to the earlier release right away, without a clean stop: its rewrite is told from this one's.
    const crashedCopy = mkdtempSync(join(tmpdir(), "svc-reg-early-"));
    try {
      await store.createKey(key(2), 10);
      copyFileSync(join(dir, REGISTRY_JOURNAL), join(crashedCopy, REGISTRY_JOURNAL));
      writeFileSync(join(crashedCopy, REGISTRY_FILE), JSON.stringify({ version: 1, projects: [project("proj_n")], keys: [key(1), key(3)] }));
      await assert.rejects(createFileRegistryStore(crashedCopy), /a release before the journal \(a rollback\)/);
    } finally {
      rmSync(crashedCopy, { recursive: true, force: true });
    }
    await store.close();
    // What a release before the journal reads after a clean stop: all of it.
    assert.deepEqual(snapshotOf(dir).keys.map((k) => k.id), ["key_1", "key_2"]);
    assert.deepEqual(lines(dir), []);
  });
});
