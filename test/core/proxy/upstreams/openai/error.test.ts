import assert from "node:assert/strict";
import { retryGuidanceOf, toErrorInfo } from "../../../../../src/core/errors.js";
import { createOpenAiAdapter } from "../../../../../src/core/proxy/upstreams/openai/adapter.js";

const adapter = createOpenAiAdapter();
const openAiError = (message: string, type: string, code: string | null, param: string | null = null) =>
  JSON.stringify({ error: { message, type, param, code } });

const cases: { name: string; status: number; body: string; expect: { status: number; type: string; code: string; message: RegExp } }[] = [
  {
    name: "a 400 keeps its status, type and code",
    status: 400,
    body: openAiError("Invalid value for 'response_format'.", "invalid_request_error", "invalid_value", "response_format"),
    expect: { status: 400, type: "invalid_request_error", code: "upstream_invalid_request_error", message: /^Upstream error: Invalid value for 'response_format'\.$/ },
  },
  {
    name: "a 404 gets upstream_ and its type as code",
    status: 404,
    body: openAiError("The model `gpt-9` does not exist.", "invalid_request_error", null),
    expect: { status: 404, type: "invalid_request_error", code: "upstream_invalid_request_error", message: /gpt-9/ },
  },
  {
    name: "a 4xx with a non-JSON body still names its status",
    status: 413,
    body: "<html><body>413 Request Entity Too Large</body></html>",
    expect: { status: 413, type: "invalid_request_error", code: "upstream_invalid_request_error", message: /status 413/ },
  },
  {
    name: "a 4xx whose type is not an error type's shape (spaces, markup) is passed on as invalid_request_error",
    status: 400,
    body: openAiError("x", "weird type!<script>", null),
    expect: { status: 400, type: "invalid_request_error", code: "upstream_invalid_request_error", message: /^Upstream error: x$/ },
  },
  {
    name: "a 403 keeps a type of its own (lower-case words)",
    status: 403,
    body: openAiError("Country not supported.", "unsupported_country_region_territory", null),
    expect: { status: 403, type: "unsupported_country_region_territory", code: "upstream_unsupported_country_region_territory", message: /Country/ },
  },
  {
    name: "a 429 is a rate_limit_error",
    status: 429,
    body: openAiError("Rate limit reached for gpt-4o on tokens per min (TPM).", "tokens", "rate_limit_exceeded"),
    expect: { status: 429, type: "rate_limit_error", code: "upstream_rate_limited", message: /Rate limit reached/ },
  },
  {
    name: "a 429 with an empty body is still a rate_limit_error",
    status: 429,
    body: "",
    expect: { status: 429, type: "rate_limit_error", code: "upstream_rate_limited", message: /rate limit/i },
  },
  {
    name: "a 429 insufficient_quota (the account is out of credit) is a 502 the operator must clear, not a rate limit to wait out",
    status: 429,
    body: openAiError("You exceeded your current quota, please check your plan and billing details.", "insufficient_quota", "insufficient_quota"),
    expect: { status: 502, type: "api_error", code: "upstream_quota_exhausted", message: /^The upstream provider's account has no quota left \(HTTP 429\): You exceeded your current quota/ },
  },
  {
    name: "a 500 becomes a 502 api_error",
    status: 500,
    body: openAiError("The server had an error while processing your request.", "server_error", null),
    expect: { status: 502, type: "api_error", code: "upstream_error", message: /status 500/ },
  },
  {
    name: "a 503 with an HTML body becomes a 502 that does not echo the body",
    status: 503,
    body: "<html><head><title>503 Service Temporarily Unavailable</title></head></html>",
    expect: { status: 502, type: "api_error", code: "upstream_error", message: /^The upstream provider failed with status 503\.$/ },
  },
  {
    name: "a compatible server's error as a string keeps its words",
    status: 400,
    body: JSON.stringify({ error: "max_tokens is too large" }),
    expect: { status: 400, type: "invalid_request_error", code: "upstream_invalid_request_error", message: /^Upstream error: max_tokens is too large$/ },
  },
  {
    name: "vLLM's top-level error object keeps its words and type",
    status: 400,
    body: JSON.stringify({ object: "error", message: "This model's maximum context length is 4096 tokens.", type: "BadRequestError", param: null, code: 400 }),
    expect: { status: 400, type: "invalid_request_error", code: "upstream_invalid_request_error", message: /^Upstream error: This model's maximum context length is 4096 tokens\.$/ },
  },
];

describe("openai error conversion", () => {
  for (const c of cases) {
    it(c.name, () => {
      const info = toErrorInfo(adapter.convertError(c.status, c.body));
      assert.deepEqual({ status: info.status, type: info.type, code: info.code }, { status: c.expect.status, type: c.expect.type, code: c.expect.code });
      assert.match(info.message, c.expect.message);
    });
  }

  it("tells the SDKs not to retry an account out of quota", () => {
    const err = adapter.convertError(429, openAiError("You exceeded your current quota.", "insufficient_quota", "insufficient_quota"));
    assert.deepEqual(retryGuidanceOf(err), { "x-should-retry": "false" });
  });
});

describe("OpenAI-style upstream errors: a long message", () => {
  it("is cut to 500 characters, between characters, ending in …", () => {
    const info = toErrorInfo(adapter.convertError(400, openAiError("y".repeat(2000), "invalid_request_error", null)));
    assert.equal(info.message, `Upstream error: ${"y".repeat(500)}…`);
  });
});

