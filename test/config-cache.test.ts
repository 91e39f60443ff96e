import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../src/config.js";
import { cacheHeapWarning } from "../src/server.js";

describe("cache configuration", () => {
  it("defaults to a one-hour TTL, 256 MiB in memory and 4 MiB answers", () => {
    assert.deepEqual(loadConfig({}).cache, { enabled: true, ttlSeconds: 3600, maxBytes: 256 * 1024 * 1024, maxEntryBytes: 4 * 1024 * 1024 });
  });

  it("reads SVC_CACHE_TTL_SECONDS, SVC_CACHE_MAX_BYTES and SVC_CACHE_MAX_ENTRY_BYTES", () => {
    const env = { SVC_CACHE_TTL_SECONDS: "60", SVC_CACHE_MAX_BYTES: "1048576", SVC_CACHE_MAX_ENTRY_BYTES: "65536" };
    assert.deepEqual(loadConfig(env).cache, { enabled: true, ttlSeconds: 60, maxBytes: 1048576, maxEntryBytes: 65536 });
  });

  it("switches the cache off with SVC_CACHE_DISABLED=1 and refuses other words", () => {
    assert.equal(loadConfig({ SVC_CACHE_DISABLED: "1" }).cache.enabled, false);
    assert.throws(() => loadConfig({ SVC_CACHE_DISABLED: "maybe" }), (e) => e instanceof ConfigError && e.message.includes("SVC_CACHE_DISABLED"));
  });

  it("takes exactly the words its refusal lists, for every switch", () => {
    const on = ["1", "true", "yes"];
    const off = ["0", "false", "no"];
    for (const [name, read] of [
      ["SVC_CACHE_DISABLED", (env: NodeJS.ProcessEnv) => !loadConfig(env).cache.enabled],
      ["SVC_LIMITS_FAIL_CLOSED", (env: NodeJS.ProcessEnv) => loadConfig(env).limits.failClosed],
      ["SVC_LIMITS_ADMIT_AHEAD", (env: NodeJS.ProcessEnv) => loadConfig(env).limits.admitAhead],
    ] as const) {
      let message = "";
      assert.throws(() => loadConfig({ [name]: "maybe" }), (e: Error) => e instanceof ConfigError && Boolean((message = e.message)));
      assert.equal(message, `${name} must be 1, true, yes (on) or 0, false, no (off), got "maybe"`);
      for (const word of on) for (const v of [word, word.toUpperCase()]) assert.equal(read({ [name]: v }), true, `${name}=${v}`);
      for (const word of off) for (const v of [word, word.toUpperCase()]) assert.equal(read({ [name]: v }), false, `${name}=${v}`);
      for (const v of ["on", "off", "y", "n", "2"]) assert.throws(() => loadConfig({ [name]: v }), ConfigError, `${name}=${v}`);
    }
  });

  for (const [name, value] of [
    ["SVC_CACHE_TTL_SECONDS", "0"],
    ["SVC_CACHE_TTL_SECONDS", "2592001"],
    ["SVC_CACHE_MAX_BYTES", "lots"],
    ["SVC_CACHE_MAX_ENTRY_BYTES", "-1"],
  ] as const) {
    it(`refuses ${name}=${value}, naming the setting`, () => {
      assert.throws(() => loadConfig({ [name]: value }), (e) => e instanceof ConfigError && e.message.includes(name));
    });
  }
});

describe("the embedded cache's budget against the heap", () => {
  const GiB = 2 ** 30;
  it("is warned about at start when it is more than half of the process's heap, not on Redis or with the cache off", () => {
    const config = loadConfig({ SVC_CACHE_MAX_BYTES: String(256 * 2 ** 20) });
    assert.equal(cacheHeapWarning(config, 4 * GiB), undefined);
    assert.match(cacheHeapWarning(config, 256 * 2 ** 20) ?? "", /^SVC_CACHE_MAX_BYTES \(256 MiB\) is more than half of this process's JavaScript heap \(256 MiB\)/);
    assert.equal(cacheHeapWarning(loadConfig({ SVC_REDIS_URL: "redis://127.0.0.1:6379" }), 128 * 2 ** 20), undefined, "Redis holds the entries");
    assert.equal(cacheHeapWarning(loadConfig({ SVC_CACHE_DISABLED: "1" }), 128 * 2 ** 20), undefined);
  });
});
