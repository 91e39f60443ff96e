import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { jsonTextBeyond, MAX_JSON_ITEMS, MAX_JSON_DEPTH } from "../../../src/core/json.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { rawRequest, type RawResponse } from "../../support/http.js";
import { captureLog } from "../../support/log-capture.js";

/**
 * JSON nested thousands of levels deep, anywhere a client can put JSON, is a 400 in the spec's
 * error shape (never a 500 from a stack overflow in the code that writes it back out), and the
 * limit is MAX_JSON_DEPTH (128) levels: a body at the limit is served, one level more is refused.
 */

/** `depth` nested arrays, as JSON text. */
const arrays = (depth: number) => "[".repeat(depth) + "]".repeat(depth);
/** `depth` nested objects `{"a":…}` around 1, as JSON text. */
const objects = (depth: number) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);

const errors = (lines: string[]) => lines.filter((l) => l.includes('"level":"error"'));

describe("deeply nested JSON: a 400 past 128 levels, never a 500", function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let key: string;

  before(async () => {
    gw = await startTestGateway();
    key = (await gw.project()).live;
  });
  after(() => gw?.close());

  const post = (path: string, body: string, headers: Record<string, string> = {}): Promise<RawResponse> =>
    rawRequest(`${gw.gatewayUrl}${path}`, { headers: { "content-type": "application/json", "x-svc-api-key": key, ...headers }, body });
  const chat = (marker: string, extra = "") => `{"model":"chat-4o-mini","messages":[{"role":"user","content":"${marker}"}]${extra && `,${extra}`}}`;
  const messages = (marker: string, extra = "") => `{"model":"assistant-3-5-haiku-20241022","max_tokens":5,"messages":[{"role":"user","content":"${marker}"}]${extra && `,${extra}`}}`;

  it("refuses a body nested thousands of levels deep in any pass-through field, 400 json_too_deep", async () => {
    const cases: Array<[string, string, string]> = [
      ["chat: an extra field, 5,000 arrays", "/v1/chat/completions", chat("deep-1", `"x":${arrays(5000)}`)],
      ["chat: metadata, 20,000 arrays", "/v1/chat/completions", chat("deep-2", `"metadata":{"a":${arrays(20_000)}}`)],
      ["chat: a tool's parameters, 5,000 objects", "/v1/chat/completions", chat("deep-3", `"tools":[{"type":"function","function":{"name":"f","parameters":${objects(5000)}}}]`)],
      ["chat: a message's extra field", "/v1/chat/completions", `{"model":"chat-4o-mini","messages":[{"role":"user","content":"deep-4","x":${arrays(5000)}}]}`],
      ["messages: metadata, 5,000 arrays", "/v1/messages", messages("deep-5", `"metadata":{"a":${arrays(5000)}}`)],
      ["messages: a tool's input_schema, 5,000 objects", "/v1/messages", messages("deep-6", `"tools":[{"name":"f","input_schema":${objects(5000)}}]`)],
      ["messages: 300,000 arrays", "/v1/messages", messages("deep-7", `"metadata":${arrays(300_000)}`)],
    ];
    const before = gw.demo!.requests.length;
    const got: Record<string, unknown> = {};
    const want: Record<string, unknown> = {};
    const lines = await captureLog(async () => {
      for (const [name, path, body] of cases) {
        const r = await post(path, body);
        got[name] = { status: r.status, type: r.json().error?.type, code: r.json().error?.code, message: r.json().error?.message };
        want[name] = { status: 400, type: "invalid_request_error", code: "json_too_deep", message: "The request body nests arrays and objects more than 128 levels deep." };
      }
    });
    assert.deepEqual(got, want);
    assert.deepEqual(errors(lines), [], "no internal error");
    assert.equal(gw.demo!.requests.length, before, "nothing reached the upstream");
  });

  it("serves a body at exactly 128 levels and refuses one at 129", async () => {
    // The body is level 1, so 127 arrays inside it make 128 levels.
    const atLimit = await post("/v1/chat/completions", chat("depth-128", `"x":${arrays(MAX_JSON_DEPTH - 1)}`));
    assert.equal(atLimit.status, 200, atLimit.text);
    const sent = gw.demo!.requests.find((r) => JSON.stringify(r.body).includes("depth-128"));
    assert.ok(sent, "the request at the limit reached the upstream");
    assert.equal(JSON.stringify((sent.body as { x: unknown }).x), arrays(MAX_JSON_DEPTH - 1), "carried as sent");
    const over = await post("/v1/chat/completions", chat("depth-129", `"x":${arrays(MAX_JSON_DEPTH)}`));
    assert.equal(over.status, 400, over.text);
    assert.equal(over.json().error.code, "json_too_deep");
    // Same on /v1/messages, through a tool's JSON Schema (nested objects, not arrays).
    const schema = (levels: number) => '{"type":"object","properties":{"a":'.repeat(levels) + '{"type":"string"}' + "}}".repeat(levels);
    // body, tools, tool, then 2 levels per schema level, then the leaf: 3 + 2 * 62 + 1 = 128.
    const ok = await post("/v1/messages", messages("schema-128", `"tools":[{"name":"f","input_schema":${schema(62)}}]`));
    assert.equal(ok.status, 200, ok.text);
    const deeper = await post("/v1/messages", messages("schema-130", `"tools":[{"name":"f","input_schema":${schema(63)}}]`));
    assert.equal(deeper.status, 400, deeper.text);
    assert.equal(deeper.json().error.code, "json_too_deep");
  });

  it("refuses a body of more than 200,000 JSON items, 400 json_too_complex, before parsing it; serves one of exactly that many", async () => {
    // Items: each array and object, and each `:` and `,`. `chat()` holds 10 of them ({ : , : [ { : , : ,)
    // and `"x":[…]` 2 more (: [); n elements in `x` add n - 1 commas, and one more each when an element is `[]`.
    const filler = (n: number, unit: string) => `"x":[${Array(n).fill(unit).join(",")}]`;
    const atLimit = await post("/v1/chat/completions", chat("items-at-limit", filler((MAX_JSON_ITEMS - 12) / 2, "[]")));
    assert.equal(atLimit.status, 200, atLimit.text);
    const numbers = await post("/v1/chat/completions", chat("items-at-limit-2", filler(MAX_JSON_ITEMS - 11, "7")));
    assert.equal(numbers.status, 200, numbers.text);
    const before = gw.demo!.requests.length;
    const keys = (n: number) => `"x":{${Array.from({ length: n }, (_, i) => `"k${i}":1`).join(",")}}`;
    const cases: Array<[string, string, string]> = [
      ["one item too many", "/v1/chat/completions", chat("items-over-1", filler(MAX_JSON_ITEMS - 10, "7"))],
      ["4 MB of empty objects", "/v1/chat/completions", chat("items-over-2", filler(1_300_000, "{}"))],
      ["4 MB of numbers", "/v1/chat/completions", chat("items-over-3", filler(2_000_000, "1"))],
      ["one object of 190,000 keys", "/v1/chat/completions", chat("items-over-4", keys(190_000))],
      ["messages: content blocks", "/v1/messages", messages("items-over-5", `"x":[${Array(MAX_JSON_ITEMS / 2).fill('{"type":"text"}').join(",")}]`)],
    ];
    const got: Record<string, unknown> = {};
    const want: Record<string, unknown> = {};
    for (const [name, path, body] of cases) {
      const started = performance.now();
      const r = await post(path, body);
      got[name] = { status: r.status, error: r.json().error };
      want[name] = { status: 400, error: { type: "invalid_request_error", code: "json_too_complex", message: "The request body holds more than 200000 JSON items in all (each `[`, `{`, `:` and `,` outside strings: an array or object counts one, an array element one, an object member two)." } };
      // Refused from a scan of its text: such bodies took from half a second to seconds to parse and write out again.
      assert.ok(performance.now() - started < 1000, `${name}: answered in ${Math.round(performance.now() - started)} ms`);
    }
    assert.deepEqual(got, want);
    assert.equal(gw.demo!.requests.length, before, "nothing reached the upstream");
  });

  it("refuses X-Svc-Metadata nested past the limit, 400 invalid_metadata; keeps one at the limit", async () => {
    const lines = await captureLog(async () => {
      const r = await post("/v1/chat/completions", chat("meta-deep"), { "x-svc-metadata": `{"a":${arrays(7000)}}` });
      assert.equal(r.status, 400, r.text);
      assert.deepEqual(r.json().error, { type: "invalid_request_error", code: "invalid_metadata", message: "X-Svc-Metadata must not nest arrays and objects more than 128 levels deep." });
    });
    assert.deepEqual(errors(lines), [], "no internal error");
    const ok = await post("/v1/chat/completions", chat("meta-128"), { "x-svc-metadata": `{"a":${arrays(MAX_JSON_DEPTH - 1)}}` });
    assert.equal(ok.status, 200, ok.text);
    const over = await post("/v1/chat/completions", chat("meta-129"), { "x-svc-metadata": `{"a":${arrays(MAX_JSON_DEPTH)}}` });
    assert.equal(over.status, 400, over.text);
    assert.equal(over.json().error.code, "invalid_metadata");
  });

  it("management API: a page cursor holding deep JSON is a 400, not a 500", async () => {
    const cursor = Buffer.from(arrays(5000)).toString("base64url");
    const lines = await captureLog(async () => {
      const r = await rawRequest(`${gw.managementUrl}/v1/logs?cursor=${cursor}`, { method: "GET", headers: { authorization: `Bearer ${key}` } });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json().error.code, "invalid_page_token");
    });
    assert.deepEqual(errors(lines), []);
  });

  describe("core port: StreamChat with deep JSON texts", () => {
    const protoDir = fileURLToPath(new URL("../../../proto", import.meta.url));
    let proxy: any;
    let md: grpc.Metadata;
    let projectId: string;
    let keyId: string;
    before(async () => {
      const def = protoLoader.loadSync(["svc/proxy/v1/proxy_service.proto"], { includeDirs: [protoDir], keepCase: true, enums: String, longs: String, defaults: true, oneofs: true });
      const pkg: any = grpc.loadPackageDefinition(def);
      proxy = new pkg.svc.proxy.v1.ProxyService(new URL(gw.grpcUrl).host, grpc.credentials.createInsecure());
      md = new grpc.Metadata();
      md.set("authorization", `Bearer ${gw.adminToken}`);
      ({ projectId, liveKeyId: keyId } = await gw.project());
    });
    after(() => proxy?.close());

    const stream = (req: object): Promise<{ events: unknown[]; error?: grpc.ServiceError }> =>
      new Promise((resolve) => {
        const events: unknown[] = [];
        const call = proxy.StreamChat(req, md);
        call.on("data", (ev: unknown) => events.push(ev));
        call.on("error", (error: grpc.ServiceError) => resolve({ events, error }));
        call.on("end", () => resolve({ events }));
      });
    const CHAT = "API_STYLE_CHAT_COMPLETIONS";
    const request = (marker: string, over: object = {}) => ({
      project_id: projectId,
      key_id: keyId,
      key_mode: "KEY_MODE_LIVE",
      style: CHAT,
      model: "chat-4o-mini",
      messages: [{ role: "user", blocks: [{ type: "BLOCK_TYPE_TEXT", text: marker, style: CHAT }], content_is_string: true }],
      ...over,
    });

    it("refuses each deep (json_too_deep) or too wide (json_too_complex) JSON text INVALID_ARGUMENT, naming it; serves one at the limit", async () => {
      const cases: Array<[string, object, string]> = [
        ["request extra_json", { extra_json: `{"x":${arrays(5000)}}` }, "`extra_json`"],
        ["tool input_schema_json", { tools: [{ name: "f", input_schema_json: objects(5000) }] }, "`tools[0].input_schema_json`"],
        ["tool extra_json", { tools: [{ name: "f", extra_json: `{"function":{"x":${arrays(5000)}}}` }] }, "`tools[0].extra_json`"],
        ["message extra_json", { messages: [{ role: "user", blocks: [{ type: "BLOCK_TYPE_TEXT", text: "m", style: CHAT }], extra_json: `{"x":${arrays(5000)}}` }] }, "`messages[0].extra_json`"],
        ["block raw_json", { messages: [{ role: "user", blocks: [{ type: "BLOCK_TYPE_OTHER", raw_json: `{"type":"x","x":${arrays(5000)}}`, style: CHAT }] }] }, "`messages[0].blocks[0].raw_json`"],
        ["request extra_json, one level past the limit", { extra_json: `{"x":${arrays(MAX_JSON_DEPTH)}}` }, "`extra_json`"],
      ];
      const wide: Array<[string, object, string]> = [
        ["request extra_json, too many items", { extra_json: `{"x":[${Array(MAX_JSON_ITEMS).fill("1").join(",")}]}` }, "`extra_json`"],
        ["tool input_schema_json, too many items", { tools: [{ name: "f", input_schema_json: `{"x":[${Array(MAX_JSON_ITEMS / 2).fill("[]").join(",")}]}` }] }, "`tools[0].input_schema_json`"],
      ];
      const before = gw.demo!.requests.length;
      const got: Record<string, unknown> = {};
      const want: Record<string, unknown> = {};
      const lines = await captureLog(async () => {
        for (const [i, [name, over, field]] of cases.entries()) {
          const r = await stream(request(`core-deep-${i}`, over));
          got[name] = { status: r.error?.code, code: String(r.error?.metadata.get("svc-error-code")[0] ?? ""), names: r.error?.details.includes(field), events: r.events.length };
          want[name] = { status: grpc.status.INVALID_ARGUMENT, code: "json_too_deep", names: true, events: 0 };
        }
        for (const [i, [name, over, field]] of wide.entries()) {
          const r = await stream(request(`core-wide-${i}`, over));
          got[name] = { status: r.error?.code, code: String(r.error?.metadata.get("svc-error-code")[0] ?? ""), names: r.error?.details.includes(field), events: r.events.length };
          want[name] = { status: grpc.status.INVALID_ARGUMENT, code: "json_too_complex", names: true, events: 0 };
        }
      });
      assert.deepEqual(got, want);
      assert.deepEqual(errors(lines), [], "no internal error");
      assert.equal(gw.demo!.requests.length, before, "nothing reached the upstream");
      const ok = await stream(request("core-128", { extra_json: `{"x":${arrays(MAX_JSON_DEPTH - 1)}}` }));
      assert.equal(ok.error, undefined, ok.error?.details);
    });
  });
});

describe("jsonTextBeyond", () => {
  it("counts the text itself as level 1, arrays and objects alike", () => {
    for (const [text, depth] of [["1", 0], ['"[[["', 0], ["[]", 1], ["{}", 1], ['{"a":[{"b":[]}]}', 4], [arrays(3), 3], [objects(3), 3], ['[1,[2,[3]],{"a":{}}]', 3], [arrays(7), 7], [objects(6), 6], ['{"a":[{"b":[]}],"c":{"d":{}}}', 4]] as const) {
      const padded = text.padEnd(40); // past the length below which the text is not read
      assert.equal(jsonTextBeyond(padded, depth, Infinity), undefined, `${text} is not deeper than ${depth}`);
      if (depth > 0) assert.equal(jsonTextBeyond(padded, depth - 1, Infinity), "depth", `${text} is deeper than ${depth - 1}`);
    }
  });

  it("does not read a text too short to nest past the limit", () => {
    assert.equal(jsonTextBeyond("[[[[]]]", 3, Infinity), undefined, "7 characters cannot hold 4 levels of JSON: not read");
    assert.equal(jsonTextBeyond(arrays(4), 3, Infinity), "depth", "8 can: [[[[]]]]");
  });

  it("reads depth and the count of items from the text, not from inside strings", () => {
    const cases: Array<[string, number, number, string | undefined]> = [
      [arrays(4), 4, 4, undefined],
      [arrays(5), 4, 10, "depth"],
      // 2 arrays, 2 objects, 1 member, 3 commas.
      ['[{},[],{"a":[]}]', 10, 8, undefined],
      ['[{},[],{"a":[]}]', 10, 7, "items"],
      ['[1,2,3,4,5,6,7,8,9]', 2, 8, "items"],
      ['{"a":1,"b":2,"c":3}', 2, 6, undefined],
      ['{"a":1,"b":2,"c":3}', 2, 5, "items"],
      // Brackets, colons and commas in strings, escaped quotes and escaped backslashes before a closing quote.
      [`{"[[[[,:[[": "\\"[[[[,::{", "a\\\\": "{{{{{{{,,:"}`, 1, 4, undefined],
      [`["\\\\", [[]]]`, 2, 10, "depth"],
      // Not JSON: left to JSON.parse.
      ['["[[[[[[[[[[[[[[', 1, 1, undefined],
      [`[${"[],".repeat(10)}`, 5, 5, "items"],
    ];
    for (const [text, depth, items, want] of cases) {
      assert.equal(jsonTextBeyond(text, depth, items), want, `${text} against depth ${depth}, items ${items}`);
    }
  });
});
