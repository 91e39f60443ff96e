import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { retryGuidanceOf, toErrorInfo, type ErrorInfo } from "../../../../../src/core/errors.js";
import { StreamChatRequestSchema } from "../../../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { createAnthropicAdapter } from "../../../../../src/core/proxy/upstreams/anthropic/adapter.js";

const adapter = createAnthropicAdapter();
const body = (type: string, message: string) => JSON.stringify({ type: "error", error: { type, message } });

const cases: { name: string; status: number; body: string; expected: ErrorInfo }[] = [
  {
    name: "a 400 keeps its status and type",
    status: 400,
    body: body("invalid_request_error", "max_tokens: Field required"),
    expected: { status: 400, type: "invalid_request_error", code: "upstream_invalid_request_error", message: "Upstream error: max_tokens: Field required" },
  },
  {
    name: "a 404 keeps its status and type",
    status: 404,
    body: body("not_found_error", "model: claude-9"),
    expected: { status: 404, type: "not_found_error", code: "upstream_not_found_error", message: "Upstream error: model: claude-9" },
  },
  {
    name: "a 403 keeps its status and type",
    status: 403,
    body: body("permission_error", "Your API key does not have permission to use the specified resource."),
    expected: { status: 403, type: "permission_error", code: "upstream_permission_error", message: "Upstream error: Your API key does not have permission to use the specified resource." },
  },
  {
    name: "a 401 keeps its status and type",
    status: 401,
    body: body("authentication_error", "invalid x-api-key"),
    expected: { status: 401, type: "authentication_error", code: "upstream_authentication_error", message: "Upstream error: invalid x-api-key" },
  },
  {
    name: "a 413 keeps its status and type",
    status: 413,
    body: body("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    expected: { status: 413, type: "request_too_large", code: "upstream_request_too_large", message: "Upstream error: Request exceeds the maximum allowed number of bytes." },
  },
  {
    name: "a 429 is a rate_limit_error",
    status: 429,
    body: body("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    expected: { status: 429, type: "rate_limit_error", code: "upstream_rate_limited", message: "Upstream rate limit: Number of request tokens has exceeded your per-minute rate limit" },
  },
  {
    name: "a 529 overloaded is a 502 upstream_overloaded",
    status: 529,
    body: body("overloaded_error", "Overloaded"),
    expected: { status: 502, type: "api_error", code: "upstream_overloaded", message: "Upstream error: Overloaded" },
  },
  {
    name: "a 402 billing_error (the provider account cannot be billed) is a 502 the operator must clear, as OpenAI's insufficient_quota is",
    status: 402,
    body: body("billing_error", "Your credit balance is too low to access the Anthropic API."),
    expected: { status: 502, type: "api_error", code: "upstream_quota_exhausted", message: "The upstream provider's account cannot be billed (HTTP 402): Your credit balance is too low to access the Anthropic API." },
  },
  {
    name: "a 500 is a 502 upstream_error",
    status: 500,
    body: body("api_error", "Internal server error"),
    expected: { status: 502, type: "api_error", code: "upstream_error", message: "Upstream error: Internal server error" },
  },
  {
    name: "a 503 with an HTML page is a 502 that does not echo the page",
    status: 503,
    body: "<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>",
    expected: { status: 502, type: "api_error", code: "upstream_error", message: "The upstream provider answered with HTTP 503." },
  },
  {
    name: "a 4xx with a body that is not JSON is an invalid_request_error",
    status: 422,
    body: "unprocessable",
    expected: { status: 422, type: "invalid_request_error", code: "upstream_invalid_request_error", message: "The upstream provider answered with HTTP 422." },
  },
  {
    name: "a 4xx with an odd error type falls back to invalid_request_error",
    status: 400,
    body: body("Weird Type!", "bad"),
    expected: { status: 400, type: "invalid_request_error", code: "upstream_invalid_request_error", message: "Upstream error: bad" },
  },
  {
    name: "an empty 502 is a 502 upstream_error",
    status: 502,
    body: "",
    expected: { status: 502, type: "api_error", code: "upstream_error", message: "The upstream provider answered with HTTP 502." },
  },
];

describe("anthropic error conversion", () => {
  for (const c of cases) {
    it(c.name, () => {
      assert.deepEqual(toErrorInfo(adapter.convertError(c.status, c.body)), c.expected);
    });
  }

  it("tells the SDKs not to retry a billing_error, in a response or in a stream's error event", () => {
    assert.deepEqual(retryGuidanceOf(adapter.convertError(402, body("billing_error", "low"))), { "x-should-retry": "false" });
    const streamed = adapter.createStreamConverter(create(StreamChatRequestSchema, { model: "m" }));
    assert.throws(() => streamed.push({ event: "error", data: JSON.stringify({ type: "error", error: { type: "billing_error", message: "low" } }) }), (e: unknown) => toErrorInfo(e).code === "upstream_quota_exhausted");
  });

  it("answers an authentication_error or permission_error event in a stream as the same refusal made with a 401 or 403: the gateway's credentials, a 502", () => {
    for (const type of ["authentication_error", "permission_error"]) {
      const streamed = adapter.createStreamConverter(create(StreamChatRequestSchema, { model: "m" }));
      assert.throws(
        () => streamed.push({ event: "error", data: JSON.stringify({ type: "error", error: { type, message: "invalid x-api-key" } }) }),
        (e: unknown) => {
          assert.deepEqual(toErrorInfo(e), { status: 502, type: "api_error", code: "upstream_authentication_failed", message: `The upstream provider refused the gateway's credentials (${type === "authentication_error" ? "an" : "a"} ${type} event in its stream): invalid x-api-key` });
          assert.deepEqual(retryGuidanceOf(e as never), { "x-should-retry": "false" });
          return true;
        },
      );
    }
  });

  it("cuts a very long upstream message to 500 characters, between characters, ending in …", () => {
    const info = toErrorInfo(adapter.convertError(400, body("invalid_request_error", "x".repeat(5000))));
    assert.equal(info.message, `Upstream error: ${"x".repeat(500)}…`);
    // Not between the two halves of a character outside the BMP.
    const emoji = toErrorInfo(adapter.convertError(400, body("invalid_request_error", `${"x".repeat(499)}😀 and more`)));
    assert.equal(emoji.message, `Upstream error: ${"x".repeat(499)}…`);
  });
});
