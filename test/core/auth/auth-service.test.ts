import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConnectError, Code } from "@connectrpc/connect";
import { createAuthService } from "../../../src/core/auth/auth-service.js";
import { retryGuidanceOf, toErrorInfo } from "../../../src/core/errors.js";
import { AuthService, Plan } from "../../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { createFileRegistryStore } from "../../../src/stores/file-registry-store.js";
import { createDirectClient } from "../../../src/core/direct-client.js";
import { type RegistryStore, RegistryUnavailableError } from "../../../src/stores/registry-store.js";

describe("AuthService", () => {
  let dir: string;
  let store: RegistryStore;
  let auth: ReturnType<typeof createDirectClient<typeof AuthService>>;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), "svc-auth-"));
    store = await createFileRegistryStore(dir);
    auth = createDirectClient(AuthService, createAuthService({ store }));
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const rejects = async (p: Promise<unknown>, status: number, code: string, message?: string) => {
    await assert.rejects(p, (e: unknown) => {
      assert.ok(e instanceof ConnectError);
      const info = toErrorInfo(e);
      assert.equal(info.status, status);
      assert.equal(info.code, code);
      if (message !== undefined) assert.equal(info.message, message);
      return true;
    });
  };

  it("makes live and test keys with their prefix and at least 32 base62 characters", async () => {
    const { project } = await auth.createProject({ name: "p", plan: Plan.PRO });
    const live = await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE, description: "ci" });
    const test = await auth.createKey({ projectId: project!.id, mode: KeyMode.TEST });
    assert.match(live.secret, /^svc_sk_live_[0-9A-Za-z]{32,}$/);
    assert.match(test.secret, /^svc_sk_test_[0-9A-Za-z]{32,}$/);
    assert.equal(live.key!.description, "ci");
    assert.equal(live.key!.mode, KeyMode.LIVE);
    assert.notEqual(live.secret, test.secret);
  });

  it("stores only a hash of the key, never its value", async () => {
    const { project } = await auth.createProject({ name: "p", plan: Plan.PRO });
    const { secret } = await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    await store.close();
    const onDisk = readFileSync(join(dir, "registry.json"), "utf8");
    assert.ok(!onDisk.includes(secret));
    assert.ok(!onDisk.includes(secret.slice(16)));
  });

  it("never lists a key's value", async () => {
    const { project } = await auth.createProject({ name: "p", plan: Plan.PRO });
    const { secret } = await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    const { keys } = await auth.listKeys({ projectId: project!.id });
    assert.equal(keys.length, 1);
    assert.ok(!JSON.stringify(keys, (_k, v) => (typeof v === "bigint" ? String(v) : v)).includes(secret.slice(16)));
    assert.ok(secret.startsWith(keys[0]!.displayPrefix.replace("…", "")));
  });

  it("verifies a key to its project and mode", async () => {
    const { project } = await auth.createProject({ name: "p", plan: Plan.FREE });
    const { secret, key } = await auth.createKey({ projectId: project!.id, mode: KeyMode.TEST });
    const v = await auth.verifyKey({ secret });
    assert.equal(v.project!.id, project!.id);
    assert.equal(v.key!.id, key!.id);
    assert.equal(v.key!.mode, KeyMode.TEST);
  });

  it("rejects unknown, malformed and empty keys with 401 invalid_api_key", async () => {
    await rejects(auth.verifyKey({ secret: `svc_sk_live_${"a".repeat(40)}` }), 401, "invalid_api_key");
    await rejects(auth.verifyKey({ secret: "sk-not-ours" }), 401, "invalid_api_key");
    await rejects(auth.verifyKey({ secret: "" }), 401, "invalid_api_key");
  });

  it("rejects a deleted key on the very next call", async () => {
    const { project } = await auth.createProject({ name: "p", plan: Plan.PRO });
    const { secret, key } = await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    await auth.verifyKey({ secret });
    await auth.deleteKey({ keyId: key!.id });
    await rejects(auth.verifyKey({ secret }), 401, "invalid_api_key");
  });

  it("enforces the plan's keys-per-project limit at creation", async () => {
    const { project } = await auth.createProject({ name: "p", plan: Plan.FREE });
    await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    await auth.createKey({ projectId: project!.id, mode: KeyMode.TEST });
    await rejects(auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE }), 403, "key_limit_reached");
  });

  it("frees a key slot when a key is deleted", async () => {
    const { project } = await auth.createProject({ name: "p", plan: Plan.FREE });
    const a = await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    await auth.deleteKey({ keyId: a.key!.id });
    await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
  });

  it("refuses a project without a plan, a key without a mode or with control characters in its description, and unknown ids", async () => {
    await rejects(auth.createProject({ name: "p", plan: Plan.UNSPECIFIED }), 400, "invalid_value");
    await rejects(auth.createProject({ name: " ", plan: Plan.FREE }), 400, "invalid_value", "`name` must not be blank.");
    await rejects(auth.createProject({ name: "", plan: Plan.FREE }), 400, "missing_required_field", "`name` is required.");
    await rejects(auth.createProject({ name: "two\nlines", plan: Plan.FREE }), 400, "invalid_value");
    const { project } = await auth.createProject({ name: "p", plan: Plan.FREE });
    await rejects(auth.createKey({ projectId: project!.id, mode: KeyMode.UNSPECIFIED }), 400, "invalid_value");
    // A description is printed in `svc keys list`'s table: no newline to split its row, no escape for the terminal.
    for (const description of ["line1\nline2", "\u001b[31mred", "tab\there", "\u009b31mred", "a\u2028b", "\u202egnp.exe"]) {
      await rejects(auth.createKey({ projectId: project!.id, mode: KeyMode.TEST, description }), 400, "invalid_value");
    }
    assert.equal((await auth.createKey({ projectId: project!.id, mode: KeyMode.TEST, description: "laptop — é ✓" })).key!.description, "laptop — é ✓");
    // The limits count characters: an emoji is one, not its two UTF-16 units.
    assert.equal((await auth.createProject({ name: "🙂".repeat(200), plan: Plan.FREE })).project!.name, "🙂".repeat(200));
    await rejects(auth.createProject({ name: "🙂".repeat(201), plan: Plan.FREE }), 400, "invalid_value", "`name` must be 1 to 200 characters.");
    assert.equal((await auth.createKey({ projectId: project!.id, mode: KeyMode.TEST, description: "🙂".repeat(500) })).key!.description, "🙂".repeat(500));
    await rejects(auth.createKey({ projectId: project!.id, mode: KeyMode.TEST, description: "🙂".repeat(501) }), 400, "invalid_value", "`description` must be at most 500 characters.");
    await rejects(auth.createKey({ projectId: "proj_nope", mode: KeyMode.LIVE }), 404, "project_not_found");
    await rejects(auth.deleteKey({ keyId: "key_nope" }), 404, "key_not_found");
  });

  it("keeps projects and keys across a restart of the file store", async () => {
    const { project } = await auth.createProject({ name: "kept", plan: Plan.ENTERPRISE });
    const { secret } = await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    await store.close();
    store = await createFileRegistryStore(dir);
    auth = createDirectClient(AuthService, createAuthService({ store }));
    const v = await auth.verifyKey({ secret });
    assert.equal(v.project!.name, "kept");
    assert.equal(v.project!.plan, Plan.ENTERPRISE);
  });

  it("refuses to start on a registry file it cannot read, rather than start over and write an empty one", async () => {
    await auth.createProject({ name: "kept", plan: Plan.FREE });
    await store.close();
    const path = join(dir, "registry.json");
    for (const broken of ["{not json", "[]", '{"version":1}']) {
      writeFileSync(path, broken);
      await assert.rejects(createFileRegistryStore(dir), (e: Error) => e.message.includes(path) && e.message.includes("backup"));
      assert.equal(readFileSync(path, "utf8"), broken, "left as it was");
    }
    store = await createFileRegistryStore(join(dir, "fresh")); // for afterEach
  });

  it("gives the in-process client's errors the Connect codes a network client would see", async () => {
    await assert.rejects(auth.verifyKey({ secret: "x" }), (e: unknown) => e instanceof ConnectError && e.code === Code.Unauthenticated);
  });

  it("answers every call 503 auth_unavailable (Connect unavailable, Retry-After 1) while the store cannot be reached, and a store's bug stays internal", async () => {
    const { project } = await auth.createProject({ name: "p", plan: Plan.PRO });
    const { secret, key } = await auth.createKey({ projectId: project!.id, mode: KeyMode.LIVE });
    const down = new RegistryUnavailableError("redis is unreachable");
    const failing = (err: Error): RegistryStore => {
      const fail = async () => {
        throw err;
      };
      return { createProject: fail, getProject: fail, listProjects: fail, updateProject: fail, createKey: fail, listKeys: fail, deleteKey: fail, findKeyByHash: fail, close: async () => {} };
    };
    const outage = createDirectClient(AuthService, createAuthService({ store: failing(down) }));
    const unavailable = (e: unknown) => {
      assert.ok(e instanceof ConnectError);
      assert.equal(e.code, Code.Unavailable);
      assert.deepEqual(toErrorInfo(e).status, 503);
      assert.equal(toErrorInfo(e).type, "api_error");
      assert.equal(toErrorInfo(e).code, "auth_unavailable");
      assert.doesNotMatch(e.rawMessage, /redis/i, "names no internals");
      assert.deepEqual(retryGuidanceOf(e), { "retry-after": "1" });
      return true;
    };
    await assert.rejects(outage.verifyKey({ secret }), unavailable);
    await assert.rejects(outage.createProject({ name: "q", plan: Plan.PRO }), unavailable);
    await assert.rejects(outage.getProject({ projectId: project!.id }), unavailable);
    await assert.rejects(outage.listProjects({}), unavailable);
    await assert.rejects(outage.updateProject({ projectId: project!.id, plan: Plan.FREE }), unavailable);
    await assert.rejects(outage.createKey({ projectId: project!.id, mode: KeyMode.LIVE }), unavailable);
    await assert.rejects(outage.listKeys({ projectId: project!.id }), unavailable);
    await assert.rejects(outage.deleteKey({ keyId: key!.id }), unavailable);
    // Checks that need no store still come first.
    await rejects(outage.verifyKey({ secret: "sk-not-ours" }), 401, "invalid_api_key");
    await rejects(outage.createKey({ projectId: "", mode: KeyMode.LIVE }), 400, "missing_required_field");

    // The store answered but refused the write (Redis full): the same 503, saying so rather than "cannot be reached".
    assert.match(((await outage.createKey({ projectId: project!.id, mode: KeyMode.LIVE }).catch((e: unknown) => e)) as ConnectError).rawMessage, /cannot be reached/);
    const full = createDirectClient(AuthService, createAuthService({ store: failing(new RegistryUnavailableError("redis refused a write: OOM", { writesRefused: true })) }));
    const refused = await full.createKey({ projectId: project!.id, mode: KeyMode.LIVE }).catch((e: unknown) => e);
    assert.ok(unavailable(refused));
    assert.match((refused as ConnectError).rawMessage, /refuses writes.*nothing was changed/);

    const broken = createDirectClient(AuthService, createAuthService({ store: failing(new Error("WRONGTYPE")) }));
    const internal = (e: unknown) => toErrorInfo(e).status === 500 && toErrorInfo(e).code === "internal_error";
    await assert.rejects(broken.verifyKey({ secret }), internal);
    await assert.rejects(broken.listProjects({}), internal);
  });
});
