import assert from "node:assert/strict";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { rawRequest } from "../../support/http.js";

/**
 * A number too large for a double (`1e309`, which JSON.parse reads as Infinity) in a numeric field
 * is out of range, and the message says so, instead of "must be a number, got number"; a fraction
 * where an integer belongs is shown as the number it is.
 */
describe("numeric fields: messages that name the problem", function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let key: string;
  before(async () => {
    gw = await startTestGateway();
    key = (await gw.project()).live;
  });
  after(() => gw?.close());

  /** Posts a body whose numbers are written as given (JSON.stringify cannot write 1e309). */
  const post = (path: string, body: string) =>
    rawRequest(`${gw.gatewayUrl}${path}`, { headers: { "content-type": "application/json", "x-svc-api-key": key }, body });
  const chat = (fields: string) => `{"model":"chat-4o-mini","messages":[{"role":"user","content":"n"}],${fields}}`;
  const messages = (fields: string) => `{"model":"assistant-3-5-haiku-20241022","messages":[{"role":"user","content":"n"}],${fields}}`;

  const cases: Array<[string, string, string, string, string]> = [
    ["chat temperature 1e309", "/v1/chat/completions", chat('"temperature":1e309'), "invalid_value", "`temperature` must be a finite number between 0 and 2, got a number too large to represent."],
    ["chat temperature -1e309", "/v1/chat/completions", chat('"temperature":-1e309'), "invalid_value", "`temperature` must be a finite number between 0 and 2, got a negative number too large to represent."],
    ["chat temperature \"1\"", "/v1/chat/completions", chat('"temperature":"1"'), "invalid_type", "`temperature` must be a number, got string."],
    ["chat max_tokens 1e309", "/v1/chat/completions", chat('"max_tokens":1e309'), "invalid_value", "`max_tokens` must be an integer between 1 and 2147483647, got a number too large to represent."],
    ["chat max_completion_tokens 1e309", "/v1/chat/completions", chat('"max_completion_tokens":1e309'), "invalid_value", "`max_completion_tokens` must be an integer between 1 and 2147483647, got a number too large to represent."],
    ["chat max_tokens 2.5", "/v1/chat/completions", chat('"max_tokens":2.5'), "invalid_type", "`max_tokens` must be an integer, got 2.5."],
    ["chat n 1e309", "/v1/chat/completions", chat('"n":1e309'), "unsupported_parameter", "`n` must be 1: the gateway returns a single choice, got a number too large to represent."],
    ["chat n 1.5", "/v1/chat/completions", chat('"n":1.5'), "invalid_type", "`n` must be an integer, got 1.5."],
    ["messages max_tokens 1e309", "/v1/messages", messages('"max_tokens":1e309'), "invalid_value", "`max_tokens` must be an integer between 1 and 2147483647, got a number too large to represent."],
    ["messages temperature 1e309", "/v1/messages", messages('"max_tokens":5,"temperature":1e309'), "invalid_value", "`temperature` must be a finite number between 0 and 1, got a number too large to represent."],
    ["messages top_p 1e309", "/v1/messages", messages('"max_tokens":5,"top_p":1e309'), "invalid_value", "`top_p` must be a finite number between 0 and 1, got a number too large to represent."],
    ["messages top_k -1e309", "/v1/messages", messages('"max_tokens":5,"top_k":-1e309'), "invalid_value", "`top_k` must be an integer between 0 and 2147483647, got a negative number too large to represent."],
    // Anywhere else (fields passed through, tools, tool inputs): JSON.parse's Infinity would reach the upstream as null.
    ["chat seed 1e400", "/v1/chat/completions", chat('"seed":1e400'), "invalid_value", "`seed` is a number too large to represent (beyond ±1.8e308)."],
    ["chat top_p -1e400", "/v1/chat/completions", chat('"top_p":-1e400'), "invalid_value", "`top_p` is a number too large to represent (beyond ±1.8e308)."],
    ["chat a long integer", "/v1/chat/completions", chat(`"logit_bias":{"50256":${"9".repeat(400)}}`), "invalid_value", "`logit_bias.50256` is a number too large to represent (beyond ±1.8e308)."],
    ["chat tool schema 9.9e308", "/v1/chat/completions", chat('"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"number","maximum":9.9e308}}}}}]'), "invalid_value", "`tools[0].function.parameters.properties.x.maximum` is a number too large to represent (beyond ±1.8e308)."],
    ["messages metadata-like field", "/v1/messages", messages('"max_tokens":5,"extra_thing":[1,2,-1E+999]'), "invalid_value", "`extra_thing[2]` is a number too large to represent (beyond ±1.8e308)."],
    // Many whole digits and a short exponent (1e349, 9e308) pass the range as surely as a long exponent does.
    ["chat a long mantissa with a two-digit exponent", "/v1/chat/completions", chat(`"seed":1${"0".repeat(250)}e99`), "invalid_value", "`seed` is a number too large to represent (beyond ±1.8e308)."],
    ["chat 300 digits with a one-digit exponent", "/v1/chat/completions", chat(`"seed":9${"0".repeat(299)}.5e9`), "invalid_value", "`seed` is a number too large to represent (beyond ±1.8e308)."],
  ];

  it("says the number is out of range, or which number it is", async () => {
    const got: Record<string, unknown> = {};
    const want: Record<string, unknown> = {};
    for (const [name, path, body, code, message] of cases) {
      const r = await post(path, body);
      got[name] = { status: r.status, code: r.json().error?.code, message: r.json().error?.message };
      want[name] = { status: 400, code, message };
    }
    assert.deepEqual(got, want);
  });
});
