import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { clusterWarnings, ConfigError, loadConfig, providerWarning } from "../src/config.js";
import { coreReadMaxBytes } from "../src/server.js";

/** Runs `fn` with the path of a config file in a directory of its own, removed after. */
function withConfigFile(fn: (file: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), "svc-config-"));
  try {
    fn(join(dir, "svc.config.json"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Bad settings stop the server at start with a message naming the setting, never start it quietly wrong. */
describe("configuration values", () => {
  for (const [name, value] of [
    ["SVC_GATEWAY_PORT", "0x50"],
    ["SVC_GATEWAY_PORT", "1e3"],
    ["SVC_GATEWAY_PORT", " 80 x"],
    ["SVC_MAX_REQUEST_BYTES", "1e20"],
    ["SVC_MAX_REQUEST_BYTES", "abc"],
    ["SVC_CACHE_TTL_SECONDS", "0x10"],
    ["SVC_UPSTREAM_TOTAL_TIMEOUT_MS", "2147483648"],
    ["SVC_UPSTREAM_FIRST_BYTE_TIMEOUT_MS", "99999999999"],
    ["SVC_REDIS_URL", "notaurl"],
    ["SVC_REDIS_URL", "http://127.0.0.1:6379"],
    ["SVC_LOG_LEVEL", "loud"],
    ["SVC_HOST", "999.1.1.1"],
    ["SVC_HOST", "10.0.0"],
    ["SVC_HOST", "http://127.0.0.1"],
    ["SVC_HOST", "127.0.0.1:8090"],
    ["SVC_HOST", "[::1]"],
    ["SVC_HOST", "my host"],
    // Taken as a path, only whitespace made a directory named " " in the working directory.
    ["SVC_DATA_DIR", " "],
    ["SVC_TELEMETRY_SPOOL_DIR", "\t "],
  ]) {
    it(`refuses ${name}=${value}, naming the setting and the value`, () => {
      // SVC_REDIS_URL is only quoted in part: it may hold a password.
      const shown = name === "SVC_REDIS_URL" ? JSON.stringify(value.slice(0, 8)) : JSON.stringify(value);
      assert.throws(() => loadConfig({ [name]: value }), (e: Error) => e instanceof ConfigError && e.message.includes(name) && e.message.includes(shown));
    });
  }

  it("states the largest value a whole-number setting takes, and refuses body sizes the server could not start with", () => {
    for (const [name, value, max] of [
      ["SVC_CACHE_TTL_SECONDS", "0", "2592000 (30 days)"],
      ["SVC_CACHE_TTL_SECONDS", "2592001", "2592000 (30 days)"],
      ["SVC_TELEMETRY_FLUSH_INTERVAL_MS", "0", "60000"],
      ["SVC_TELEMETRY_BATCH_SIZE", "0", "100000"],
      ["SVC_TELEMETRY_BODY_TTL_DAYS", "1.5", "3650"],
      // The core port reads messages of twice these, which its HTTP/2 stack caps below 4 GiB: larger
      // values stopped the start half-way with an internal message (readMaxBytes ... <= 4294967295).
      ["SVC_MAX_REQUEST_BYTES", "2200000000", "268435456 (256 MiB)"],
      ["SVC_MAX_REQUEST_BYTES", "-5", "268435456 (256 MiB)"],
      ["SVC_CACHE_MAX_ENTRY_BYTES", "268435457", "268435456 (256 MiB)"],
    ]) {
      assert.throws(() => loadConfig({ [name]: value }), (e: Error) => e instanceof ConfigError && e.message.includes(name) && e.message.includes(`up to ${max},`), `${name}=${value}`);
    }
    withConfigFile((file) => {
      writeFileSync(file, JSON.stringify({ maxRequestBytes: 2_200_000_000 }));
      assert.throws(() => loadConfig({ SVC_CONFIG: file }), (e: Error) => e instanceof ConfigError && e.message.includes("config maxRequestBytes must be a positive integer up to 268435456 (256 MiB)"));
    });
    const largest = loadConfig({ SVC_MAX_REQUEST_BYTES: "268435456", SVC_CACHE_MAX_ENTRY_BYTES: "268435456" });
    assert.equal(coreReadMaxBytes(largest) <= 2 ** 32 - 1, true, "the core port's limit stays within what its HTTP/2 stack takes");
  });

  it("takes plain decimal numbers, the longest timer Node keeps, Redis URLs and the four log levels", () => {
    const c = loadConfig({ SVC_GATEWAY_PORT: "8088", SVC_UPSTREAM_TOTAL_TIMEOUT_MS: String(2 ** 31 - 1), SVC_REDIS_URL: "rediss://user:pw@example.com:6380/2", SVC_LOG_LEVEL: "warn" });
    assert.equal(c.gatewayPort, 8088);
    assert.equal(c.timeouts.totalMs, 2 ** 31 - 1);
    assert.equal(c.redisUrl, "rediss://user:pw@example.com:6380/2");
  });

  it("refuses a config file's model or provider name, or price, of the wrong type or empty, rather than coercing it", () => {
    withConfigFile((file) => {
      const model = { surface: "chat-completions", provider: "openai", upstreamModel: "gpt-x", inputPer1M: "1", outputPer1M: "2" };
      for (const [change, says] of [
        [{ upstreamModel: {} }, "config models.m.upstreamModel must be a non-empty string without spaces at either end, got {}"],
        [{ upstreamModel: " " }, 'config models.m.upstreamModel must be a non-empty string without spaces at either end, got " "'],
        [{ upstreamModel: "" }, 'config models.m.upstreamModel must be a non-empty string without spaces at either end, got ""'],
        [{ upstreamModel: 4 }, "config models.m.upstreamModel must be a non-empty string without spaces at either end, got 4"],
        [{ provider: ["openai"] }, 'config models.m.provider must be a non-empty string without spaces at either end, got ["openai"]'],
        [{ provider: "openai " }, 'config models.m.provider must be a non-empty string without spaces at either end, got "openai "'],
        [{ inputPer1M: ["1"] }, 'config models.m.inputPer1M must be a price in USD per 1M tokens, a decimal string such as "2.50", got ["1"]'],
        [{ cacheReadPer1M: true }, "config models.m.cacheReadPer1M must be a price in USD per 1M tokens"],
      ] as const) {
        writeFileSync(file, JSON.stringify({ models: { m: { ...model, ...change } } }));
        assert.throws(() => loadConfig({ SVC_CONFIG: file }), (e: Error) => e instanceof ConfigError && e.message.startsWith(says), JSON.stringify(change));
      }
      writeFileSync(file, JSON.stringify({ models: { "": model } }));
      assert.throws(() => loadConfig({ SVC_CONFIG: file }), (e: Error) => e instanceof ConfigError && e.message.includes('the model id "": a model id must be a non-empty string'));
      // A price may be a JSON number, as the whole-number settings may.
      writeFileSync(file, JSON.stringify({ models: { m: { ...model, inputPer1M: 2.5, outputPer1M: 10 } } }));
      const m = loadConfig({ SVC_CONFIG: file }).models.get("m")!;
      assert.deepEqual([m.provider, m.upstreamModel, m.inputPer1M, m.outputPer1M], ["openai", "gpt-x", "2.5", "10"]);
    });
  });

  it("refuses a price above 10000 USD per 1M tokens, beyond which a request's X-Svc-Cost would go past what its log holds", () => {
    withConfigFile((file) => {
      const model = { surface: "chat-completions", provider: "openai", upstreamModel: "gpt-x", inputPer1M: "1", outputPer1M: "2" };
      for (const [key, value] of [["inputPer1M", "123456789012345678901234567890"], ["outputPer1M", "10000.000001"], ["cacheReadPer1M", 10001], ["cacheWrite1hPer1M", "99999"]] as const) {
        writeFileSync(file, JSON.stringify({ models: { m: { ...model, [key]: value } } }));
        assert.throws(
          () => loadConfig({ SVC_CONFIG: file }),
          (e: Error) => e instanceof ConfigError && e.message.startsWith(`model m ${key}: price ${JSON.stringify(String(value))} is above 10000 USD per 1M tokens`),
          key,
        );
      }
      writeFileSync(file, JSON.stringify({ models: { m: { ...model, inputPer1M: "10000", outputPer1M: "10000" } } }));
      assert.equal(loadConfig({ SVC_CONFIG: file }).models.get("m")!.inputPer1M, "10000");
    });
  });

  it("refuses a provider style or model surface that only an object's prototype has (constructor, toString), or not a string", () => {
    withConfigFile((file) => {
      for (const [content, says] of [
        [{ providers: { p: { style: "constructor", baseUrl: "http://127.0.0.1:9/v1" } } }, 'config providers.p.style must be "chat-completions" or "messages"'],
        [{ providers: { p: { style: "__proto__", baseUrl: "http://127.0.0.1:9/v1" } } }, 'config providers.p.style must be "chat-completions" or "messages"'],
        [{ providers: { p: { style: ["messages"], baseUrl: "http://127.0.0.1:9" } } }, 'config providers.p.style must be "chat-completions" or "messages"'],
        [{ models: { m: { surface: "toString", provider: "openai", upstreamModel: "x", inputPer1M: "1", outputPer1M: "1" } } }, 'config models.m.surface must be "chat-completions" or "messages"'],
        [{ models: { m: { surface: "hasOwnProperty", provider: "openai", upstreamModel: "x", inputPer1M: "1", outputPer1M: "1" } } }, 'config models.m.surface must be "chat-completions" or "messages"'],
        [{ models: { m: { provider: "openai", upstreamModel: "x", inputPer1M: "1", outputPer1M: "1" } } }, `config models.m.surface must be "chat-completions" or "messages": the endpoint that serves a model id of one's own`],
      ] as const) {
        writeFileSync(file, JSON.stringify(content));
        assert.throws(() => loadConfig({ SVC_CONFIG: file }), (e: Error) => e instanceof ConfigError && e.message === says, JSON.stringify(content));
      }
    });
  });

  it("refuses a Redis URL whose database is not a number (the client would SELECT it as written), without showing its password", () => {
    for (const [value, shown] of [
      ["redis://127.0.0.1:6379/abc", 'its path is "abc"'],
      ["redis://:PWsecret3@127.0.0.1:6379/abc", 'its path is "abc"'],
      ["redis://127.0.0.1:6379/-1", 'its path is "-1"'],
      ["redis://127.0.0.1:6379/1.5", 'its path is "1.5"'],
      ["redis://127.0.0.1:6379/2/", 'its path is "2/"'],
      ["redis://127.0.0.1:6379?db=x", 'its db parameter is "x"'],
    ]) {
      assert.throws(
        () => loadConfig({ SVC_REDIS_URL: value }),
        (e: Error) => e instanceof ConfigError && e.message.startsWith("SVC_REDIS_URL names the database by number") && e.message.endsWith(shown) && !e.message.includes("PWsecret3"),
        value,
      );
    }
    // Named twice, the client takes the last, while a check would read the first.
    for (const value of ["redis://127.0.0.1:6379?db=3&db=x", "redis://127.0.0.1:6379?db=3&db=7"]) {
      assert.throws(() => loadConfig({ SVC_REDIS_URL: value }), (e: Error) => e instanceof ConfigError && e.message === "SVC_REDIS_URL names the database 2 times (db parameters); name it once", value);
    }
    // In the path and a parameter both: the client takes the path's and drops the parameter without a word.
    for (const value of ["redis://127.0.0.1:6379/0?db=2", "redis://:PWsecret3@127.0.0.1:6379/2?db=2"]) {
      assert.throws(() => loadConfig({ SVC_REDIS_URL: value }), (e: Error) => e instanceof ConfigError && e.message === "SVC_REDIS_URL names the database twice, in its path and in a db parameter; name it once", value);
    }
    // A % that starts no escape in the credentials, which are decoded for Redis: a configuration error, the value not shown.
    for (const [value, what] of [["redis://:PWsec%ret3@127.0.0.1:6379", "password"], ["redis://us%zzer:PWsecret3@127.0.0.1:6379", "user name"]]) {
      assert.throws(() => loadConfig({ SVC_REDIS_URL: value }), (e: Error) => e instanceof ConfigError && e.message.startsWith(`SVC_REDIS_URL's ${what} holds a % that starts no escape`) && !e.message.includes("PWsec"), value);
    }
    for (const value of ["redis://127.0.0.1:6379", "redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/0", "redis://u:p@127.0.0.1:6379/15", "redis://127.0.0.1:6379?db=3", "redis://127.0.0.1:6379/?db=3", "redis://:p%40ss%25@127.0.0.1:6379"]) {
      assert.equal(loadConfig({ SVC_REDIS_URL: value }).redisUrl, value);
    }
  });

  it("listens on an IP address or a host name given as SVC_HOST, 127.0.0.1 when unset", () => {
    assert.equal(loadConfig({}).host, "127.0.0.1");
    for (const host of ["0.0.0.0", "::", "::1", "127.0.0.2", "localhost", "gw-1.internal", "svc_gateway"]) assert.equal(loadConfig({ SVC_HOST: host }).host, host);
  });

  it("refuses an admin token shorter than 16 characters, or one a Bearer header cannot carry, without quoting it", () => {
    for (const [token, message] of [
      ["Zq9", /SVC_ADMIN_TOKEN is 3 characters long; an admin token must be at least 16/],
      ["fifteen-chars15", /SVC_ADMIN_TOKEN is 15 characters long/],
      ["with a space in the middle", /SVC_ADMIN_TOKEN must be printable ASCII without spaces/],
      ["ünïcödé-is-not-a-header-value", /SVC_ADMIN_TOKEN must be printable ASCII/],
    ] as const) {
      assert.throws(() => loadConfig({ SVC_ADMIN_TOKEN: token }), (e: Error) => e instanceof ConfigError && message.test(e.message) && !e.message.includes(token), token);
    }
    assert.equal(loadConfig({ SVC_ADMIN_TOKEN: "sixteen-chars-16" }).adminToken, "sixteen-chars-16");
    assert.equal(loadConfig({}).adminToken, undefined, "unset: svc serve generates one");
  });

  it("refuses a config file key it does not know, at any level, naming it", () => {
    withConfigFile((file) => {
      for (const [content, key] of [
        [{ modelz: {} }, "modelz"],
        [{ timeouts: { firstbyteMs: 5 } }, "firstbyteMs"],
        [{ models: { "chat-4o": { outputPer1m: "1" } } }, "outputPer1m"],
        [{ providers: { p: { style: "messages", baseUrl: "http://x", apiKey: "k" } } }, "apiKey"],
      ] as const) {
        writeFileSync(file, JSON.stringify(content));
        assert.throws(() => loadConfig({ SVC_CONFIG: file }), (e: Error) => e instanceof ConfigError && e.message.includes(`"${key}"`), key);
      }
      for (const [content, says] of [
        [{ providers: { p: { style: "messages", baseUrl: "http://x", apiKeyEnv: 5 } } }, "providers.p.apiKeyEnv must name an environment variable"],
        [{ providers: { p: { style: "messages", baseUrl: "http://x", apiKeyEnv: "MY KEY" } } }, "providers.p.apiKeyEnv must name an environment variable"],
        [{ providers: { p: { style: "messages", baseUrl: "http://x", apiKeyEnv: "sk-CFGLEAK-1234567" } } }, "providers.p.apiKeyEnv must name an environment variable (letters, digits and _), got a string that is not one (not shown: it may be the key itself)"],
        [{ providers: { p: { style: "chat-completions", baseUrl: "http://x/v1?api-version=1" } } }, "providers.p.baseUrl must not hold a query string"],
        [{ models: { "my-model": { surface: "chat-completions", provider: "openai", upstreamModel: "gpt-x" } } }, "models.my-model.inputPer1M is required"],
        [{ models: { "my-model": { surface: "chat-completions", upstreamModel: "gpt-x", inputPer1M: "1", outputPer1M: "2" } } }, "models.my-model.provider is required"],
      ] as const) {
        writeFileSync(file, JSON.stringify(content));
        assert.throws(() => loadConfig({ SVC_CONFIG: file }), (e: Error) => e instanceof ConfigError && e.message.includes(says), says);
      }
      writeFileSync(file, JSON.stringify({ timeouts: { firstByteMs: 5000 }, maxRequestBytes: 1024 }));
      assert.equal(loadConfig({ SVC_CONFIG: file }).timeouts.firstByteMs, 5000);
    });
  });
});

describe("providers that are probably set up wrong are warned about at start", () => {
  const keys = { SVC_OPENAI_API_KEY: "sk-x", SVC_ANTHROPIC_API_KEY: "sk-ant-x" };
  const warningsOf = (env: Record<string, string>) => [...loadConfig({ ...keys, ...env }).providers.values()].map(providerWarning).filter(Boolean);

  it("passes the documented shapes: OpenAI-style ending in /v1, Anthropic-style without it", () => {
    assert.deepEqual(warningsOf({}), []);
    assert.deepEqual(warningsOf({ SVC_OPENAI_BASE_URL: "http://127.0.0.1:9/v1/", SVC_ANTHROPIC_BASE_URL: "http://127.0.0.1:9/proxy" }), []);
  });

  it("reads SVC_STREAM_KEEPALIVE_MS: 15 s unset, 0 for none, else a positive number of milliseconds", () => {
    assert.equal(loadConfig({}).streamKeepAliveMs, 15_000);
    assert.equal(loadConfig({ SVC_STREAM_KEEPALIVE_MS: "0" }).streamKeepAliveMs, 0);
    assert.equal(loadConfig({ SVC_STREAM_KEEPALIVE_MS: "500" }).streamKeepAliveMs, 500);
    for (const bad of ["-1", "soon", "1.5"]) {
      assert.throws(() => loadConfig({ SVC_STREAM_KEEPALIVE_MS: bad }), (e: Error) => e instanceof ConfigError && e.message === `SVC_STREAM_KEEPALIVE_MS must be a whole number of milliseconds from 0 (no keep-alive) to 2147483647, got ${JSON.stringify(bad)}`, bad);
    }
  });

  it("refuses two of the three ports set to one number (0, a free port each, may repeat)", () => {
    assert.throws(() => loadConfig({ SVC_GATEWAY_PORT: "9000", SVC_MANAGEMENT_PORT: "9000" }), (e: Error) => e instanceof ConfigError && e.message === "SVC_GATEWAY_PORT and SVC_MANAGEMENT_PORT are both 9000: each server needs a port of its own");
    assert.throws(() => loadConfig({ SVC_GRPC_PORT: "8080" }), (e: Error) => e instanceof ConfigError && e.message === "SVC_GATEWAY_PORT and SVC_GRPC_PORT are both 8080: each server needs a port of its own");
    const c = loadConfig({ SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0" });
    assert.deepEqual([c.gatewayPort, c.managementPort, c.grpcPort], [0, 0, 0]);
  });

  it("says a redis URL that does not parse is a password to percent-encode, never showing it", () => {
    for (const url of ["redis://:p@ss:w/rd#1?%@127.0.0.1:6379", "rediss://user:p/w#1@host:6380"]) {
      assert.throws(() => loadConfig({ SVC_REDIS_URL: url }), (e: Error) => e instanceof ConfigError && e.message.startsWith("SVC_REDIS_URL is not a valid URL: percent-encode") && !e.message.includes("ss:w") && !e.message.includes("cret"), url);
    }
    assert.equal(loadConfig({ SVC_REDIS_URL: "redis://:p%40ss%3Aw%2Frd%231%3F%25@127.0.0.1:6379" }).redisUrl, "redis://:p%40ss%3Aw%2Frd%231%3F%25@127.0.0.1:6379");
  });

  it("reads SVC_DEMO_PORT as the other ports are (a decimal 0-65535), refusing anything else", () => {
    assert.equal(loadConfig({}).demoPort, 0);
    assert.equal(loadConfig({ SVC_DEMO_PORT: "9123" }).demoPort, 9123);
    for (const bad of ["abc", "99999", "-1", "1.5", "0x50", "1e3"]) {
      assert.throws(() => loadConfig({ SVC_DEMO_PORT: bad }), (e: Error) => e instanceof ConfigError && e.message.startsWith("SVC_DEMO_PORT must be a port number (0-65535)"), bad);
    }
  });

  it("refuses a base URL holding a user name or password (never sent), and never shows a password in a message", () => {
    const err = (env: Record<string, string>) => {
      try {
        loadConfig(env);
      } catch (e) {
        return (e as Error).message;
      }
      return assert.fail("accepted");
    };
    const refused = err({ SVC_OPENAI_BASE_URL: "http://u:BASEpw1@127.0.0.1:9/v1" });
    assert.match(refused, /^SVC_OPENAI_BASE_URL must not hold a user name or password/);
    assert.ok(!refused.includes("BASEpw1"), refused);
    for (const bad of ["http://u:PWsecret2@127.0.0.1:notaport/db", "ftp://u:PWsecret2@127.0.0.1/db", "http://default:PW/secret2@127.0.0.1:25999/db", "http://u:PW#secret2@127.0.0.1/db", "http://u:PW?secret2@127.0.0.1/db"]) {
      const message = err({ SVC_CLICKHOUSE_URL: bad });
      assert.match(message, /^SVC_CLICKHOUSE_URL must be an http\(s\) URL, got ".*:\/\/\*\*\*@127\.0\.0\.1/);
      assert.ok(!message.includes("PW") && !message.includes("secret2"), message);
    }
    // Without a scheme, or with a malformed one, everything up to the last `@` is masked.
    for (const bad of ["u:PWsecret2@127.0.0.1:9/v1", "http:/u:PW/secret2@127.0.0.1:9/v1", "http://u:PW/secret2@127.0.0.1:9/v1"]) {
      const message = err({ SVC_OPENAI_BASE_URL: bad });
      assert.match(message, /^SVC_OPENAI_BASE_URL must be an http\(s\) URL, got "(http:\/\/)?\*\*\*@127\.0\.0\.1:9\/v1"$/);
    }
    // A ClickHouse server's URL may carry its credentials.
    assert.equal(loadConfig({ SVC_CLICKHOUSE_URL: "http://u:pw@127.0.0.1:8123/db" }).telemetry.clickhouseUrl, "http://u:pw@127.0.0.1:8123/db");
  });

  it("refuses a base URL with a query string or fragment, which the endpoint's path would follow", () => {
    for (const [env, setting] of [[{ SVC_OPENAI_BASE_URL: "http://127.0.0.1:9/v1?x=1" }, "SVC_OPENAI_BASE_URL"], [{ SVC_ANTHROPIC_BASE_URL: "http://127.0.0.1:9/#a" }, "SVC_ANTHROPIC_BASE_URL"]] as const) {
      assert.throws(() => loadConfig(env), (e: Error) => e instanceof ConfigError && e.message.startsWith(`${setting} must not hold a query string or fragment`), setting);
    }
    // A query may carry a provider's key (`?key=...`): never shown.
    assert.throws(() => loadConfig({ SVC_OPENAI_BASE_URL: "https://gen.example.com/v1?key=AIzaLEAKCHECK123" }), (e: Error) => e instanceof ConfigError && !e.message.includes("LEAKCHECK") && e.message.includes('"https://gen.example.com/v1?***"'));
    // Not a base URL: a ClickHouse server's URL may carry settings in its query.
    assert.equal(loadConfig({ SVC_CLICKHOUSE_URL: "http://127.0.0.1:8123/db?clickhouse_setting_async_insert=1" }).telemetry.clickhouseUrl, "http://127.0.0.1:8123/db?clickhouse_setting_async_insert=1");
  });

  it("warns of a built-in provider at its public address without a key, and not of one elsewhere (a local server may take none)", () => {
    const warnings = [...loadConfig({}).providers.values()].map(providerWarning);
    assert.deepEqual(warnings, [
      "SVC_OPENAI_API_KEY is unset or empty: the openai provider's models are answered 502 upstream_not_configured until it is set (or start with --demo to answer every model from the built-in provider)",
      "SVC_ANTHROPIC_API_KEY is unset or empty: the anthropic provider's models are answered 502 upstream_not_configured until it is set (or start with --demo to answer every model from the built-in provider)",
    ]);
    assert.deepEqual([...loadConfig({ SVC_OPENAI_BASE_URL: "http://127.0.0.1:9/v1", SVC_ANTHROPIC_BASE_URL: "http://127.0.0.1:9" }).providers.values()].map(providerWarning), [undefined, undefined]);
  });

  it("refuses a provider API key with whitespace or control characters (a secret file's newline), naming the variable, never the key", () => {
    withConfigFile((file) => {
      writeFileSync(file, JSON.stringify({ providers: { local: { style: "chat-completions", baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "SVC_TEST_LOCAL_KEY" } } }));
      for (const [env, says] of [
        [{ SVC_OPENAI_API_KEY: "sk-HIDDENkey1\n" }, /^SVC_OPENAI_API_KEY holds leading or trailing whitespace \(such as the trailing newline of a secret file\)/],
        [{ SVC_ANTHROPIC_API_KEY: " sk-ant-HIDDENkey1" }, /^SVC_ANTHROPIC_API_KEY holds leading or trailing whitespace/],
        [{ SVC_OPENAI_API_KEY: "sk-HIDDEN\x01key1" }, /^SVC_OPENAI_API_KEY holds whitespace, control or non-ASCII characters/],
        [{ SVC_OPENAI_API_KEY: "sk-HIDDEN key1" }, /^SVC_OPENAI_API_KEY holds whitespace, control or non-ASCII characters/],
        [{ SVC_CONFIG: file, SVC_TEST_LOCAL_KEY: "HIDDENkey1\r\n" }, /^SVC_TEST_LOCAL_KEY \(the key of config providers\.local\) holds leading or trailing whitespace/],
      ] as const) {
        assert.throws(() => loadConfig(env), (e: Error) => e instanceof ConfigError && says.test(e.message) && !e.message.includes("HIDDEN"), JSON.stringify(env));
      }
      assert.equal(loadConfig({ SVC_OPENAI_API_KEY: "sk-proj-Ab_9-x" }).providers.get("openai")!.apiKey, "sk-proj-Ab_9-x");
      assert.equal(loadConfig({ SVC_CONFIG: file, SVC_TEST_LOCAL_KEY: "k.1" }).providers.get("local")!.apiKey, "k.1");
    });
  });

  it("warns of a config file's provider whose key variable is unset, wherever it is", () => {
    withConfigFile((file) => {
      writeFileSync(file, JSON.stringify({ providers: { local: { style: "chat-completions", baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "SVC_TEST_NO_SUCH_KEY" } } }));
      assert.deepEqual(warningsOf({ SVC_CONFIG: file }), ["the local provider names its key's variable SVC_TEST_NO_SUCH_KEY, which is unset or empty: its models are answered 502 upstream_not_configured until it is set"]);
      assert.deepEqual(warningsOf({ SVC_CONFIG: file, SVC_TEST_NO_SUCH_KEY: "k" }), []);
    });
  });

  it("keeps a built-in provider's key variable, and its base URL variable over the file, when the config file redefines it", () => {
    withConfigFile((file) => {
      const write = (p: object) => writeFileSync(file, JSON.stringify({ providers: p }));
      write({ openai: { style: "chat-completions", baseUrl: "http://127.0.0.1:9/v1" }, anthropic: { style: "messages", baseUrl: "https://api.anthropic.com" } });
      const cfg = loadConfig({ SVC_CONFIG: file, SVC_OPENAI_API_KEY: "sk-kept" });
      assert.deepEqual([cfg.providers.get("openai")!.apiKey, cfg.providers.get("openai")!.apiKeyEnv, cfg.providers.get("openai")!.baseUrl], ["sk-kept", "SVC_OPENAI_API_KEY", "http://127.0.0.1:9/v1"]);
      // Without its key at its public address: warned of and refused by name, as the built-in one is.
      assert.deepEqual([...cfg.providers.values()].map(providerWarning).filter(Boolean), [
        "SVC_ANTHROPIC_API_KEY is unset or empty: the anthropic provider's models are answered 502 upstream_not_configured until it is set (or start with --demo to answer every model from the built-in provider)",
      ]);
      assert.equal(loadConfig({ SVC_CONFIG: file, SVC_OPENAI_BASE_URL: "http://127.0.0.1:8/v1" }).providers.get("openai")!.baseUrl, "http://127.0.0.1:8/v1", "the variable wins over the file");
      write({ openai: { style: "chat-completions", baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "SVC_TEST_OTHER_KEY" } });
      const other = loadConfig({ SVC_CONFIG: file, SVC_OPENAI_API_KEY: "sk-not-this", SVC_TEST_OTHER_KEY: "sk-other" }).providers.get("openai")!;
      assert.deepEqual([other.apiKey, other.apiKeyEnv], ["sk-other", "SVC_TEST_OTHER_KEY"]);
    });
  });

  it("tells a config file's provider at a public address without apiKeyEnv to name one", () => {
    withConfigFile((file) => {
      writeFileSync(file, JSON.stringify({ providers: { oai2: { style: "chat-completions", baseUrl: "https://api.openai.com/v1" } } }));
      assert.deepEqual(warningsOf({ SVC_CONFIG: file }), [
        "the oai2 provider (https://api.openai.com/v1) needs a key and names no variable to read it from: its models are answered 502 upstream_not_configured until the config file gives it one (providers.oai2.apiKeyEnv)",
      ]);
    });
  });

  it("names the setting and where requests would go otherwise", () => {
    const [openai, anthropic] = warningsOf({ SVC_OPENAI_BASE_URL: "http://127.0.0.1:9", SVC_ANTHROPIC_BASE_URL: "http://127.0.0.1:9/v1" });
    assert.match(openai!, /^SVC_OPENAI_BASE_URL \(http:\/\/127\.0\.0\.1:9\) does not end in \/v1: chat requests go to http:\/\/127\.0\.0\.1:9\/chat\/completions/);
    assert.match(anthropic!, /^SVC_ANTHROPIC_BASE_URL \(http:\/\/127\.0\.0\.1:9\/v1\) ends in \/v1: messages requests go to http:\/\/127\.0\.0\.1:9\/v1\/v1\/messages/);
  });
});

describe("a cluster replica is warned at start of what it does not share", () => {
  it("warns of logs kept per replica without SVC_CLICKHOUSE_URL, and of an admin token of its own without SVC_ADMIN_TOKEN", () => {
    assert.deepEqual(clusterWarnings(loadConfig({})), [], "embedded: nothing to share");
    const both = clusterWarnings(loadConfig({ SVC_REDIS_URL: "redis://127.0.0.1:6379" }));
    assert.equal(both.length, 2);
    assert.match(both[0]!, /SVC_REDIS_URL is set without SVC_CLICKHOUSE_URL/);
    assert.match(both[1]!, /SVC_REDIS_URL is set without SVC_ADMIN_TOKEN/);
    assert.deepEqual(clusterWarnings(loadConfig({ SVC_REDIS_URL: "redis://127.0.0.1:6379", SVC_CLICKHOUSE_URL: "http://127.0.0.1:8123", SVC_ADMIN_TOKEN: "a-shared-admin-token" })), []);
  });
});

