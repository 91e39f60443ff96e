import assert from "node:assert/strict";
import { createServer } from "node:net";
import { defaultServerUrl, resolveAdminTarget, UsageError } from "../../src/cli/admin-client.js";
import { ConfigError } from "../../src/config.js";
import { freePort } from "../support/redis.js";
import { startSvcServe } from "../support/svc-cli.js";

/** The CLI finds the server from the same settings `svc serve` listens on: SVC_HOST and SVC_GRPC_PORT. */
describe("the svc command's default server address", function () {
  this.timeout(60_000);
  const target = (env: NodeJS.ProcessEnv, server?: string) => resolveAdminTarget({ server, adminToken: "a-token-given-on-the-line" }, env).server;

  it("is where `svc serve` listens with the same SVC_HOST and SVC_GRPC_PORT; a wildcard host is reached on loopback", () => {
    for (const [env, url] of [
      [{}, "http://127.0.0.1:8090"],
      [{ SVC_GRPC_PORT: "18142" }, "http://127.0.0.1:18142"],
      [{ SVC_HOST: "127.0.0.2", SVC_GRPC_PORT: "18142" }, "http://127.0.0.2:18142"],
      [{ SVC_HOST: "0.0.0.0" }, "http://127.0.0.1:8090"],
      [{ SVC_HOST: "::" }, "http://127.0.0.1:8090"],
      [{ SVC_HOST: "0:0:0:0:0:0:0:0" }, "http://127.0.0.1:8090"],
      [{ SVC_HOST: "::1" }, "http://[::1]:8090"],
      [{ SVC_HOST: "gw-1.internal", SVC_GRPC_PORT: "9000" }, "http://gw-1.internal:9000"],
    ] as const) {
      assert.equal(target(env), url, JSON.stringify(env));
      assert.equal(defaultServerUrl(env), url, JSON.stringify(env));
    }
  });

  it("gives way to --server and SVC_SERVER_URL", () => {
    const env = { SVC_HOST: "127.0.0.2", SVC_GRPC_PORT: "0", SVC_SERVER_URL: "http://core.internal:8090" };
    assert.equal(target(env), "http://core.internal:8090");
    assert.equal(target(env, "http://other:1"), "http://other:1");
  });

  it("refuses a server URL with a query or fragment, an empty one included: every call's path would follow it", () => {
    for (const [env, server] of [
      [{}, "http://127.0.0.1:8090/?"],
      [{}, "http://127.0.0.1:8090#"],
      [{ SVC_SERVER_URL: "http://127.0.0.1:8090/?x=1" }, undefined],
    ] as const) {
      assert.throws(() => target(env, server), (e: Error) => e instanceof UsageError && /^the server must not have a query or fragment/.test(e.message), server ?? env.SVC_SERVER_URL);
    }
    // A user name and password in it are never shown back.
    assert.throws(() => target({}, "http://u:PASSLEAK@127.0.0.1:8090/?x"), (e: Error) => e instanceof UsageError && !e.message.includes("PASSLEAK") && e.message.includes("'http://***@127.0.0.1:8090/?***'"));
    assert.throws(() => target({}, "ftp://u:PASSLEAK@127.0.0.1:8090"), (e: Error) => e instanceof UsageError && !e.message.includes("PASSLEAK"));
  });

  it("refuses a bad SVC_HOST or SVC_GRPC_PORT, or SVC_GRPC_PORT=0 (a port only the banner tells), naming the setting", () => {
    for (const [env, message] of [
      [{ SVC_HOST: "999.1.1.1" }, /^SVC_HOST must be an IP address/],
      [{ SVC_GRPC_PORT: "abc" }, /^SVC_GRPC_PORT must be a port number/],
      [{ SVC_GRPC_PORT: "0" }, /^SVC_GRPC_PORT is 0, .* set --server or SVC_SERVER_URL/],
    ] as const) {
      assert.throws(() => target(env), (e: Error) => e instanceof ConfigError && message.test(e.message), JSON.stringify(env));
    }
  });

  it("finds a running `svc serve` from its own settings, on another loopback address than 127.0.0.1", async () => {
    const srv = await startSvcServe({ SVC_HOST: "127.0.0.2", SVC_GRPC_PORT: String(await freePort()) });
    try {
      assert.match(srv.grpcUrl, /^http:\/\/127\.0\.0\.2:\d+$/);
      const res = await srv.svcWithServeEnv("projects", "create", "--name", "found", "--plan", "free", "--json");
      assert.equal(res.code, 0, res.stderr);
      assert.equal(JSON.parse(res.stdout).name, "found");
    } finally {
      await srv.stop();
    }
  });

  it("finds a `svc serve` on an IPv6 address, which its banner writes in brackets", async function () {
    const ipv6 = await new Promise<boolean>((resolve) => {
      const probe = createServer().once("error", () => resolve(false));
      probe.listen(0, "::1", () => probe.close(() => resolve(true)));
    });
    if (!ipv6) this.skip();
    const srv = await startSvcServe({ SVC_HOST: "::1", SVC_GRPC_PORT: String(await freePort()) });
    try {
      assert.match(srv.grpcUrl, /^http:\/\/\[::1\]:\d+$/);
      assert.match(srv.gatewayUrl, /^http:\/\/\[::1\]:\d+$/);
      const res = await srv.svcWithServeEnv("projects", "list", "--json");
      assert.equal(res.code, 0, res.stderr);
      assert.deepEqual(JSON.parse(res.stdout), []);
    } finally {
      await srv.stop();
    }
  });
});

describe("the svc command's admin token", () => {
  it("sends the data dir's generated token only to a server on this machine, never to one named elsewhere", async () => {
    const { mkdtempSync, rmSync, writeFileSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const dir = mkdtempSync(join(tmpdir(), "svc-token-"));
    try {
      writeFileSync(join(dir, "admin-token"), "local-token\n");
      const env = { SVC_DATA_DIR: dir };
      assert.equal(resolveAdminTarget({}, env).token, "local-token");
      assert.equal(resolveAdminTarget({ server: "http://127.0.0.2:8090" }, env).token, "local-token");
      assert.equal(resolveAdminTarget({ server: "http://localhost:8090" }, env).token, "local-token");
      assert.equal(resolveAdminTarget({ server: "http://[::1]:8090" }, env).token, "local-token");
      for (const flags of [{ server: "http://gw.example.com:8090" }, {}]) {
        const e = { ...env, ...(flags.server ? {} : { SVC_SERVER_URL: "http://10.1.2.3:8090" }) };
        assert.throws(() => resolveAdminTarget(flags, e), (err: Error) => /^no admin token for http:\/\/(gw\.example\.com|10\.1\.2\.3):8090: set SVC_ADMIN_TOKEN/.test(err.message));
      }
      // A token given for it is sent.
      assert.equal(resolveAdminTarget({ server: "http://gw.example.com:8090", adminToken: "t" }, env).token, "t");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses a token no header can carry without printing it, and says why the data dir's token could not be had", async () => {
    const { mkdirSync, mkdtempSync, rmSync, writeFileSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    for (const [flags, env, source] of [
      [{}, { SVC_ADMIN_TOKEN: "bad\nline-token-1234567890" }, "SVC_ADMIN_TOKEN"],
      [{ adminToken: "tab\tseparated-token-1234567890" }, {}, "--admin-token"],
      [{}, { SVC_ADMIN_TOKEN: "caf\u00e9-token-1234567890" }, "SVC_ADMIN_TOKEN"],
    ] as const) {
      assert.throws(
        () => resolveAdminTarget(flags, env),
        (err: Error) => err instanceof UsageError && err.message === `the admin token from ${source} must be printable ASCII without spaces or control characters; check it`,
      );
    }
    const dir = mkdtempSync(join(tmpdir(), "svc-token-"));
    try {
      const path = join(dir, "admin-token");
      writeFileSync(path, "\n");
      assert.throws(() => resolveAdminTarget({}, { SVC_DATA_DIR: dir }), (err: Error) => err instanceof UsageError && err.message.startsWith(`no admin token: ${path} is empty`));
      rmSync(path);
      mkdirSync(path);
      assert.throws(() => resolveAdminTarget({}, { SVC_DATA_DIR: dir }), (err: Error) => err instanceof UsageError && err.message.startsWith(`no admin token: ${path} cannot be read (EISDIR`));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
