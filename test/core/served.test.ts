import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import type { AddressInfo } from "node:net";
import net from "node:net";
import http2 from "node:http2";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import { invalidRequest } from "../../src/core/errors.js";
import { createCoreServer } from "../../src/core/grpc-server.js";
import { newRequestId } from "../../src/core/ids.js";
import { chatRequest } from "../../src/core/proxy/canonical.js";
import { checkWireChatRequest } from "../../src/core/proxy/wire-request.js";
import { internalErrorInterceptor } from "../../src/core/served.js";
import { parseChatCompletionsRequest } from "../../src/facades/gateway/chat-completions-parse.js";
import { messagesCodec } from "../../src/facades/gateway/messages-codec.js";
import { AuthService } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../src/gen/svc/common/v1/key_mode_pb.js";
import { ProxyService } from "../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { captureLog } from "../support/log-capture.js";

/**
 * What the core port adds to the implementations the facades call in process (src/core/served.ts):
 * requests checked before anything reaches the upstream, internal errors logged and hidden. The
 * client is @grpc/grpc-js loading the .proto files, so it shares no code with the server.
 */

const protoDir = fileURLToPath(new URL("../../proto", import.meta.url));

function loadGrpc(): any {
  const files = ["svc/auth/v1/auth_service.proto", "svc/proxy/v1/proxy_service.proto", "svc/telemetry/v1/telemetry_service.proto", "svc/limits/v1/limits_service.proto"];
  const def = protoLoader.loadSync(files, { includeDirs: [protoDir], keepCase: true, enums: String, longs: String, defaults: true, oneofs: true });
  return grpc.loadPackageDefinition(def);
}

const unary = <T>(client: any, method: string, req: object, md: grpc.Metadata): Promise<T> =>
  new Promise((resolve, reject) => client[method](req, md, (err: Error | null, res: T) => (err ? reject(err) : resolve(res))));

interface Streamed {
  events: any[];
  error?: grpc.ServiceError;
}

function stream(client: any, req: object, md: grpc.Metadata): Promise<Streamed> {
  return new Promise((resolve) => {
    const events: any[] = [];
    const call = client.StreamChat(req, md);
    call.on("data", (ev: any) => events.push(ev));
    call.on("error", (error: grpc.ServiceError) => resolve({ events, error }));
    call.on("end", () => resolve({ events }));
  });
}

const codeName = (c: number | undefined) => Object.keys(grpc.status).find((k) => (grpc.status as unknown as Record<string, number>)[k] === c);

/** The gRPC status, the spec's error code (from the trailers) and the message of a failed call. */
const failure = (e: grpc.ServiceError | undefined) =>
  e ? { status: codeName(e.code), code: String(e.metadata.get("svc-error-code")[0] ?? ""), message: e.details } : undefined;

describe("core port: requests checked before they reach the upstream", function () {
  this.timeout(60_000);
  let gw: TestGateway;
  let pkg: any;
  let md: grpc.Metadata;
  let proxy: any;
  let auth: any;
  let telemetry: any;
  let limits: any;
  let projectId: string;
  let keyId: string;
  let otherProjectKeyId: string;
  let deletedKeyId: string;

  before(async () => {
    gw = await startTestGateway({ SVC_TELEMETRY_FLUSH_INTERVAL_MS: "20" });
    pkg = loadGrpc();
    md = new grpc.Metadata();
    md.set("authorization", `Bearer ${gw.adminToken}`);
    const target = new URL(gw.grpcUrl).host;
    proxy = new pkg.svc.proxy.v1.ProxyService(target, grpc.credentials.createInsecure());
    auth = new pkg.svc.auth.v1.AuthService(target, grpc.credentials.createInsecure());
    telemetry = new pkg.svc.telemetry.v1.TelemetryService(target, grpc.credentials.createInsecure());
    limits = new pkg.svc.limits.v1.LimitsService(target, grpc.credentials.createInsecure());
    const p = await gw.project();
    projectId = p.projectId;
    keyId = p.liveKeyId;
    otherProjectKeyId = (await gw.project()).liveKeyId;
    const deleted = await gw.admin.createKey({ projectId, mode: KeyMode.LIVE });
    await gw.admin.deleteKey({ keyId: deleted.key!.id });
    deletedKeyId = deleted.key!.id;
  });
  after(async () => {
    proxy?.close();
    auth?.close();
    telemetry?.close();
    limits?.close();
    await gw?.close();
  });

  const CHAT = "API_STYLE_CHAT_COMPLETIONS";
  const MSGS = "API_STYLE_MESSAGES";
  const text = (t: string, style = CHAT, over: object = {}) => ({ type: "BLOCK_TYPE_TEXT", text: t, style, ...over });
  const chat = (marker: string, over: object = {}) => ({
    project_id: projectId,
    key_id: keyId,
    key_mode: "KEY_MODE_LIVE",
    style: CHAT,
    model: "chat-4o-mini",
    messages: [{ role: "user", blocks: [text(marker)], content_is_string: true }],
    ...over,
  });
  const messages = (marker: string, over: object = {}) => ({
    ...chat(marker),
    style: MSGS,
    model: "assistant-3-5-haiku-20241022",
    max_tokens: 20,
    messages: [{ role: "user", blocks: [text(marker, MSGS)], content_is_string: true }],
    ...over,
  });
  const user = (marker: string, style: string, ...blocks: object[]) => [{ role: "user", blocks: [text(marker, style), ...blocks] }];
  const toolTurns = (marker: string, style: string, input: string) => [
    { role: "user", blocks: [text(marker, style)] },
    { role: "assistant", blocks: [{ type: "BLOCK_TYPE_TOOL_USE", tool_call_id: "call_1", tool_name: "f", tool_input_json: input, style }] },
    style === CHAT
      ? { role: "tool", blocks: [{ type: "BLOCK_TYPE_TOOL_RESULT", tool_call_id: "call_1", text: "r", style }] }
      : { role: "user", blocks: [{ type: "BLOCK_TYPE_TOOL_RESULT", tool_call_id: "call_1", text: "r", style }] },
  ];

  // [name, request (its text carries the marker), gRPC status, the spec's code, what the message names]
  type Case = [string, (marker: string) => object, string, string, string];
  const cases: Case[] = [
    // Chat-completions style.
    ["malformed request extra_json", (m) => chat(m, { extra_json: "{bad" }), "INVALID_ARGUMENT", "invalid_value", "`extra_json`"],
    ["a request extra_json that is an array", (m) => chat(m, { extra_json: "[1]" }), "INVALID_ARGUMENT", "invalid_value", "`extra_json`"],
    ["a request extra_json naming the model", (m) => chat(m, { extra_json: '{"model":"gpt-4","stream":true}' }), "INVALID_ARGUMENT", "invalid_value", "`extra_json`"],
    ["n of 3 in extra_json", (m) => chat(m, { extra_json: '{"n":3}' }), "INVALID_ARGUMENT", "unsupported_parameter", "`n`"],
    ["1e400 in extra_json (it would go upstream as null)", (m) => chat(m, { extra_json: '{"seed":1e400}' }), "INVALID_ARGUMENT", "invalid_value", "`extra_json.seed`"],
    ["1e400 in an image block's raw_json", (m) => chat(m, { messages: [{ role: "user", blocks: [text(m), { type: "BLOCK_TYPE_IMAGE", raw_json: '{"type":"image_url","image_url":{"url":"https://x.test/a.png","n":[1e400]}}', style: CHAT }] }] }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].blocks[1].raw_json.image_url.n[0]`"],
    ["stream_options on a request that does not stream", (m) => chat(m, { extra_json: '{"stream_options":{"include_usage":true}}' }), "INVALID_ARGUMENT", "invalid_value", "`stream_options`"],
    ["stream_options that is not an object", (m) => chat(m, { stream: true, extra_json: '{"stream_options":5}' }), "INVALID_ARGUMENT", "invalid_type", "`stream_options`"],
    ["a messages-style top_k of -1", (m) => messages(m, { extra_json: '{"top_k":-1}' }), "INVALID_ARGUMENT", "invalid_value", "`top_k`"],
    ["a messages-style top_p of 2", (m) => messages(m, { extra_json: '{"top_p":2}' }), "INVALID_ARGUMENT", "invalid_value", "`top_p`"],
    ["messages-style stop_sequences that are not strings", (m) => messages(m, { extra_json: '{"stop_sequences":[1]}' }), "INVALID_ARGUMENT", "invalid_type", "`stop_sequences[0]`"],
    ["a messages-style metadata that is not an object", (m) => messages(m, { extra_json: '{"metadata":5}' }), "INVALID_ARGUMENT", "invalid_type", "`metadata`"],
    ["a messages-style tool_choice without a type", (m) => messages(m, { extra_json: '{"tool_choice":{}}' }), "INVALID_ARGUMENT", "missing_required_field", "`tool_choice.type`"],
    ["an image block whose raw_json has no type", (m) => chat(m, { messages: [{ role: "user", blocks: [text(m), { type: "BLOCK_TYPE_IMAGE", raw_json: "{}", style: CHAT }] }] }), "INVALID_ARGUMENT", "missing_required_field", "`messages[0].blocks[1].raw_json.type`"],
    ["65 metadata keys", (m) => chat(m, { metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, "v"])) }), "INVALID_ARGUMENT", "invalid_metadata", "at most 64"],
    ["a metadata value over 1024 characters", (m) => chat(m, { metadata: { k: "v".repeat(1025) } }), "INVALID_ARGUMENT", "invalid_metadata", "at most 1024"],
    ["malformed message extra_json", (m) => chat(m, { messages: [{ role: "user", blocks: [text(m)], extra_json: "{bad" }] }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].extra_json`"],
    ["a message extra_json naming the role", (m) => chat(m, { messages: [{ role: "user", blocks: [text(m)], extra_json: '{"role":"system"}' }] }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].extra_json`"],
    ["malformed block extra_json", (m) => chat(m, { messages: [{ role: "user", blocks: [text(m, CHAT, { extra_json: "{bad" })] }] }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].blocks[0].extra_json`"],
    ["malformed image raw_json", (m) => chat(m, { messages: user(m, CHAT, { type: "BLOCK_TYPE_IMAGE", raw_json: "{bad", style: CHAT }) }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].blocks[1].raw_json`"],
    ["malformed other raw_json", (m) => chat(m, { messages: user(m, CHAT, { type: "BLOCK_TYPE_OTHER", raw_json: "{bad", style: CHAT }) }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].blocks[1].raw_json`"],
    ["an image block without raw_json", (m) => chat(m, { messages: user(m, CHAT, { type: "BLOCK_TYPE_IMAGE", style: CHAT }) }), "INVALID_ARGUMENT", "missing_required_field", "`messages[0].blocks[1].raw_json`"],
    ["a block extra_json without a style", (m) => chat(m, { messages: [{ role: "user", blocks: [{ type: "BLOCK_TYPE_TEXT", text: m, extra_json: "{}" }] }] }), "INVALID_ARGUMENT", "missing_required_field", "`messages[0].blocks[0].style`"],
    ["malformed tool input_schema_json", (m) => chat(m, { tools: [{ name: "f", input_schema_json: "{bad" }] }), "INVALID_ARGUMENT", "invalid_value", "`tools[0].input_schema_json`"],
    ["malformed tool extra_json", (m) => chat(m, { tools: [{ name: "f", input_schema_json: "{}", extra_json: "{bad" }] }), "INVALID_ARGUMENT", "invalid_value", "`tools[0].extra_json`"],
    ["a tool extra_json renaming the function", (m) => chat(m, { tools: [{ name: "f", extra_json: '{"function":{"name":"g"}}' }] }), "INVALID_ARGUMENT", "invalid_value", "`tools[0].extra_json.function`"],
    ["a tool without a name", (m) => chat(m, { tools: [{ input_schema_json: "{}" }] }), "INVALID_ARGUMENT", "missing_required_field", "`tools[0].name`"],
    ["a tool name with spaces", (m) => chat(m, { tools: [{ name: "get weather" }] }), "INVALID_ARGUMENT", "invalid_value", "`tools[0].name`"],
    ["a tool-use input that is not JSON", (m) => chat(m, { messages: toolTurns(m, CHAT, "{bad") }), "INVALID_ARGUMENT", "invalid_value", "`messages[1].blocks[0].tool_input_json`"],
    ["a tool use without a call id", (m) => chat(m, { messages: [{ role: "assistant", blocks: [{ type: "BLOCK_TYPE_TOOL_USE", tool_name: "f", tool_input_json: "{}", style: CHAT }] }, { role: "user", blocks: [text(m)] }] }), "INVALID_ARGUMENT", "missing_required_field", "`messages[0].blocks[0].tool_call_id`"],
    ["temperature 5", (m) => chat(m, { temperature: 5 }), "INVALID_ARGUMENT", "invalid_value", "`temperature`"],
    ["max_tokens -1", (m) => chat(m, { max_tokens: -1 }), "INVALID_ARGUMENT", "invalid_value", "`max_tokens`"],
    ["max_tokens 0", (m) => chat(m, { max_tokens: 0 }), "INVALID_ARGUMENT", "invalid_value", "`max_tokens`"],
    ["max_completion_tokens 0 in extra_json", (m) => chat(m, { extra_json: '{"max_completion_tokens":0}' }), "INVALID_ARGUMENT", "invalid_value", "`max_completion_tokens`"],
    ["max_completion_tokens 1.5 in extra_json", (m) => chat(m, { extra_json: '{"max_completion_tokens":1.5}' }), "INVALID_ARGUMENT", "invalid_value", "`max_completion_tokens`"],
    ["the role wizard", (m) => chat(m, { messages: [{ role: "wizard", blocks: [text(m)] }] }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].role`"],
    ["an empty role", (m) => chat(m, { messages: [{ role: "", blocks: [text(m)] }] }), "INVALID_ARGUMENT", "missing_required_field", "`messages[0].role`"],
    ["an unspecified block type", (m) => chat(m, { messages: [{ role: "user", blocks: [{ type: "BLOCK_TYPE_UNSPECIFIED", text: m }] }] }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].blocks[0].type`"],
    ["empty messages", (m) => chat(m, { messages: [], system: m }), "INVALID_ARGUMENT", "invalid_value", "`messages`"],
    ["an empty project id", (m) => chat(m, { project_id: "" }), "INVALID_ARGUMENT", "missing_required_field", "`project_id`"],
    ["an unknown project", (m) => chat(m, { project_id: "proj_nope" }), "NOT_FOUND", "project_not_found", "proj_nope"],
    ["KEY_MODE_UNSPECIFIED", (m) => chat(m, { key_mode: "KEY_MODE_UNSPECIFIED" }), "INVALID_ARGUMENT", "invalid_value", "`key_mode`"],
    ["an empty key id", (m) => chat(m, { key_id: "" }), "INVALID_ARGUMENT", "missing_required_field", "`key_id`"],
    ["an unknown key", (m) => chat(m, { key_id: "key_nope" }), "NOT_FOUND", "key_not_found", "key_nope"],
    ["a deleted key", (m) => chat(m, { key_id: deletedKeyId }), "NOT_FOUND", "key_not_found", "No key with id"],
    ["another project's key", (m) => chat(m, { key_id: otherProjectKeyId }), "NOT_FOUND", "key_not_found", "No key with id"],
    ["a live key called as a test one", (m) => chat(m, { key_mode: "KEY_MODE_TEST" }), "INVALID_ARGUMENT", "invalid_value", "`key_mode`"],
    ["API_STYLE_UNSPECIFIED", (m) => chat(m, { style: "API_STYLE_UNSPECIFIED" }), "INVALID_ARGUMENT", "invalid_value", "`style`"],
    ["an empty model", (m) => chat(m, { model: "" }), "INVALID_ARGUMENT", "missing_required_field", "`model`"],
    ["a request id that is not the gateway's", (m) => chat(m, { request_id: "x" }), "INVALID_ARGUMENT", "invalid_value", "`request_id`"],
    ["a user id over 256 characters", (m) => chat(m, { user_id: "u".repeat(257) }), "INVALID_ARGUMENT", "invalid_user_id", "`user_id`"],
    ["a beta that is not a feature name", (m) => chat(m, { betas: ["a\r\nx-injected: 1"] }), "INVALID_ARGUMENT", "invalid_beta", "`betas`"],
    // Messages style.
    ["a messages-style request without max_tokens", (m) => messages(m, { max_tokens: undefined }), "INVALID_ARGUMENT", "missing_required_field", "`max_tokens`"],
    ["malformed messages-style extra_json", (m) => messages(m, { extra_json: "{bad" }), "INVALID_ARGUMENT", "invalid_value", "`extra_json`"],
    ["a messages-style extra_json naming max_tokens", (m) => messages(m, { extra_json: '{"max_tokens":100000}' }), "INVALID_ARGUMENT", "invalid_value", "`extra_json`"],
    ["a messages-style temperature of 1.5", (m) => messages(m, { temperature: 1.5 }), "INVALID_ARGUMENT", "invalid_value", "`temperature`"],
    ["a tool role in the messages style", (m) => messages(m, { messages: [{ role: "tool", blocks: [text(m, MSGS)] }] }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].role`"],
    ["malformed messages-style image raw_json", (m) => messages(m, { messages: user(m, MSGS, { type: "BLOCK_TYPE_IMAGE", raw_json: "{bad", style: MSGS }) }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].blocks[1].raw_json`"],
    ["a messages-style block extra_json naming its type", (m) => messages(m, { messages: user(m, MSGS, text("x", MSGS, { extra_json: '{"type":"image"}' })) }), "INVALID_ARGUMENT", "invalid_value", "`messages[0].blocks[1].extra_json`"],
    ["malformed messages-style tool schema", (m) => messages(m, { tools: [{ name: "f", input_schema_json: "{bad" }] }), "INVALID_ARGUMENT", "invalid_value", "`tools[0].input_schema_json`"],
    ["a messages-style tool-use input that is not an object", (m) => messages(m, { messages: toolTurns(m, MSGS, "[1]") }), "INVALID_ARGUMENT", "invalid_value", "`messages[1].blocks[0].tool_input_json`"],
    ["a malformed messages-style tool-use input", (m) => messages(m, { messages: toolTurns(m, MSGS, "{bad") }), "INVALID_ARGUMENT", "invalid_value", "`messages[1].blocks[0].tool_input_json`"],
  ];

  it("refuses each bad StreamChat request with the HTTP endpoints' error, sends nothing upstream and logs no internal error", async () => {
    const before = gw.demo!.requests.length;
    const got: Record<string, unknown> = {};
    const want: Record<string, unknown> = {};
    const lines = await captureLog(async () => {
      for (const [i, [name, build, status, code, field]] of cases.entries()) {
        const r = await stream(proxy, build(`refused-${i}`), md);
        const f = failure(r.error);
        got[name] = { status: f?.status, code: f?.code, names: f?.message.includes(field), events: r.events.length };
        want[name] = { status, code, names: true, events: 0 };
      }
    });
    assert.deepEqual(got, want);
    assert.equal(gw.demo!.requests.length, before, "nothing reached the upstream");
    assert.ok(!gw.demo!.requests.some((r) => JSON.stringify(r.body).includes("refused-")));
    assert.deepEqual(lines.filter((l) => l.includes('"level":"error"')), [], "a refusal is not an internal error");
  });

  it("still serves a good request of each style, with what the facades carry in extra_json", async () => {
    const chatReq = chat("served-chat", {
      request_id: newRequestId(),
      temperature: 2,
      max_tokens: 30,
      stream: true,
      extra_json: '{"top_p":0.5,"n":1,"stream_options":{"include_usage":true}}',
      messages: [
        { role: "system", blocks: [text("be brief")], content_is_string: true },
        { role: "user", blocks: [text("served-chat", CHAT, { extra_json: '{"cache_control":{"type":"ephemeral"}}' }), { type: "BLOCK_TYPE_IMAGE", raw_json: '{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}', style: CHAT }], extra_json: '{"name":"ann"}' },
      ],
      tools: [{ name: "get_weather", input_schema_json: '{"type":"object"}', extra_json: '{"function":{"strict":true}}' }],
      user_id: "user-1",
      metadata: { team: "red" },
    });
    const a = await stream(proxy, chatReq, md);
    assert.equal(a.error, undefined, a.error?.details);
    assert.equal(a.events.at(-1).event, "message_end");
    const msgReq = messages("served-messages", {
      temperature: 1,
      system: "sys",
      extra_json: '{"system":[{"type":"text","text":"sys"}],"top_k":3}',
      tools: [{ name: "f", input_schema_json: '{"type":"object"}', extra_json: '{"type":"custom"}' }, { extra_json: '{"type":"web_search_20250305","name":"web_search"}' }],
      messages: toolTurns("served-messages", MSGS, '{"city":"Paris"}'),
      betas: ["prompt-caching-2024-07-31"],
    });
    const b = await stream(proxy, msgReq, md);
    assert.equal(b.error, undefined, b.error?.details);
    assert.equal(b.events[0].event, "completion");
    // A custom tool carried whole, and a custom tool's call (free-text input) sent back.
    const customReq = chat("served-custom", {
      tools: [{ extra_json: '{"type":"custom","custom":{"name":"grammar"}}' }],
      messages: [
        { role: "user", blocks: [text("served-custom", CHAT)] },
        { role: "assistant", blocks: [{ type: "BLOCK_TYPE_TOOL_USE", tool_call_id: "call_1", tool_name: "grammar", tool_input_json: "free text", extra_json: '{"type":"custom"}', style: CHAT }] },
        { role: "tool", blocks: [{ type: "BLOCK_TYPE_TOOL_RESULT", tool_call_id: "call_1", text: "r", style: CHAT }] },
      ],
    });
    const c = await stream(proxy, customReq, md);
    assert.equal(c.error, undefined, c.error?.details);
    const sent = (marker: string) => gw.demo!.requests.find((r) => JSON.stringify(r.body).includes(marker));
    assert.deepEqual(sent("served-custom")?.body.tools, [{ type: "custom", custom: { name: "grammar" } }]);
    assert.deepEqual((sent("served-custom")?.body.messages as Array<{ tool_calls?: unknown }>)[1]!.tool_calls, [{ type: "custom", id: "call_1", custom: { name: "grammar", input: "free text" } }]);
    assert.equal(sent("served-chat")?.body.top_p, 0.5);
    assert.equal(sent("served-messages")?.headers["anthropic-beta"], "prompt-caching-2024-07-31");
  });

  it("refuses a RecordRequest log the gateway would not record, records one it would", async () => {
    const now = Math.floor(Date.now() / 1000);
    const good = (over: object = {}) => ({
      request_id: newRequestId(),
      time: { seconds: String(now), nanos: 0 },
      project_id: projectId,
      key_id: keyId,
      key_mode: "KEY_MODE_LIVE",
      endpoint: "/v1/chat/completions",
      model: "chat-4o-mini",
      provider: "openai",
      status: 200,
      cache: "MISS",
      cost_usd: "0.0001",
      ...over,
    });
    const refused: Array<[string, object, string, string, string]> = [
      ["cache maybe", good({ cache: "maybe" }), "INVALID_ARGUMENT", "invalid_value", "`cache`"],
      ["no cache", good({ cache: "" }), "INVALID_ARGUMENT", "missing_required_field", "`cache`"],
      ["cache hit in lower case", good({ cache: "hit" }), "INVALID_ARGUMENT", "invalid_value", "`cache`"],
      ["nanos -1", good({ time: { seconds: String(now), nanos: -1 } }), "INVALID_ARGUMENT", "invalid_value", "`time.nanos`"],
      ["nanos 10^9", good({ time: { seconds: String(now), nanos: 1_000_000_000 } }), "INVALID_ARGUMENT", "invalid_value", "`time.nanos`"],
      ["status 0", good({ status: 0 }), "INVALID_ARGUMENT", "invalid_value", "`status`"],
      ["status 600", good({ status: 600 }), "INVALID_ARGUMENT", "invalid_value", "`status`"],
      ["request id x", good({ request_id: "x" }), "INVALID_ARGUMENT", "invalid_value", "`request_id`"],
      ["no time", good({ time: null }), "INVALID_ARGUMENT", "missing_required_field", "`time`"],
      ["an unknown project", good({ project_id: "proj_nope" }), "NOT_FOUND", "project_not_found", "proj_nope"],
      ["KEY_MODE_UNSPECIFIED", good({ key_mode: "KEY_MODE_UNSPECIFIED" }), "INVALID_ARGUMENT", "invalid_value", "`key_mode`"],
      ["no key id", good({ key_id: "" }), "INVALID_ARGUMENT", "missing_required_field", "`key_id`"],
      ["no endpoint", good({ endpoint: "" }), "INVALID_ARGUMENT", "missing_required_field", "`endpoint`"],
      ["another endpoint", good({ endpoint: "/v1/embeddings" }), "INVALID_ARGUMENT", "invalid_value", "`endpoint`"],
    ];
    const got: Record<string, unknown> = {};
    const want: Record<string, unknown> = {};
    for (const [name, l, status, code, field] of refused) {
      const f = failure(await unary(telemetry, "RecordRequest", { log: l }, md).then(() => undefined, (e) => e));
      got[name] = { status: f?.status, code: f?.code, names: f?.message.includes(field) };
      want[name] = { status, code, names: true };
    }
    assert.deepEqual(got, want);
    const ok = good({ cache: "HIT" });
    await unary(telemetry, "RecordRequest", { log: ok }, md);
    const list = () => gw.telemetry.listLogs({ projectId, keyMode: KeyMode.LIVE, pageSize: 100 });
    const end = Date.now() + 20_000;
    let logs = (await list()).logs;
    while (logs.length === 0 && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 100));
      logs = (await list()).logs;
    }
    await new Promise((r) => setTimeout(r, 300)); // anything refused but queued would be written by now
    assert.deepEqual((await list()).logs.map((x) => [x.requestId, x.cache]), [[(ok as { request_id: string }).request_id, "HIT"]], "only the good log was recorded");
  });

  it("answers NOT_FOUND for Settle, Rescind, GetUsage, ListLogs and GetAnalytics of a project that does not exist, and charges nothing", async () => {
    const ghost = "proj_ghost0123456789";
    const calls: Array<[string, any, string, object]> = [
      ["Settle", limits, "Settle", { project_id: ghost, cost_usd: "3.5" }],
      ["Rescind", limits, "Rescind", { project_id: ghost, reservation_id: "rsv_2026-11_abc" }],
      ["GetUsage", limits, "GetUsage", { project_id: ghost }],
      ["ListLogs", telemetry, "ListLogs", { project_id: ghost, key_mode: "KEY_MODE_LIVE" }],
      ["GetAnalytics", telemetry, "GetAnalytics", { project_id: ghost, start_time: { seconds: "0" }, end_time: { seconds: "3600" }, granularity: "GRANULARITY_HOUR" }],
    ];
    const got: Record<string, unknown> = {};
    for (const [name, client, method, req] of calls) {
      const f = failure(await unary(client, method, req, md).then(() => undefined, (e) => e));
      got[name] = [f?.status, f?.code];
    }
    assert.deepEqual(got, Object.fromEntries(calls.map(([name]) => [name, ["NOT_FOUND", "project_not_found"]])));
    // A real project's usage is still read.
    const usage = await unary<{ spent_usd: string }>(limits, "GetUsage", { project_id: projectId }, md);
    assert.match(usage.spent_usd, /^\d/);
  });

  it("answers DEADLINE_EXCEEDED, not CANCELED, when the caller's deadline passes while the upstream has not answered", async () => {
    // Over Connect with only the header (a client that does not time the call out itself, as
    // grpc-js does): the server's own answer is what the caller gets.
    for (const marker of ["[[fake:delay=3000]]", "[[fake:stall]]"]) {
      const req = { projectId, keyId, keyMode: "KEY_MODE_LIVE", style: CHAT, model: "chat-4o-mini", stream: true, messages: [{ role: "user", blocks: [{ type: "BLOCK_TYPE_TEXT", text: `deadline ${marker}`, style: CHAT }], contentIsString: true }] };
      const json = Buffer.from(JSON.stringify(req));
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), json]);
      frame.writeUInt32BE(json.length, 1);
      const res = await fetch(`${gw.grpcUrl}/svc.proxy.v1.ProxyService/StreamChat`, {
        method: "POST",
        headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", "connect-timeout-ms": "600", authorization: `Bearer ${gw.adminToken}` },
        body: frame,
      });
      const body = Buffer.from(await res.arrayBuffer());
      // The last envelope is the end of the stream (flag 2), with the error.
      let at = 0;
      let end: { error?: { code: string } } | undefined;
      while (at < body.length) {
        const len = body.readUInt32BE(at + 1);
        if (body[at]! & 2) end = JSON.parse(body.subarray(at + 5, at + 5 + len).toString());
        at += 5 + len;
      }
      assert.equal(end?.error?.code, "deadline_exceeded", `${marker}: ${body.toString()}`);
    }
  });

  it("cuts an error message that quotes a long input, which in gRPC's grpc-message header would reset the caller's connection", async () => {
    const got = [
      ["GetUsage", failure(await unary(limits, "GetUsage", { project_id: "x".repeat(100 * 1024) }, md).then(() => undefined, (e) => e))],
      ["StreamChat", failure((await stream(proxy, chat("long model", { model: "m".repeat(100_000) }), md)).error)],
    ] as const;
    for (const [method, f] of got) {
      assert.ok(f, method);
      assert.ok(["NOT_FOUND", "INVALID_ARGUMENT"].includes(String(f.status)), `${method}: ${f.status} ${f.code}`);
      assert.ok(f.message.length <= 1024, `${method}: a message of ${f.message.length} characters`);
    }
    // The same connection serves the next call.
    const usage = await unary<{ spent_usd: string }>(limits, "GetUsage", { project_id: projectId }, md);
    assert.match(usage.spent_usd, /^\d/);
  });

  it("refuses a Connect JSON request with a field or enum name it does not know, rather than dropping it and changing nothing", async () => {
    const call = (body: object) =>
      fetch(`${gw.grpcUrl}/svc.auth.v1.AuthService/UpdateProject`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${gw.adminToken}` },
        body: JSON.stringify(body),
      });
    for (const body of [
      { projectId, limitOverrides: { requestsPerMinuet: 5 } },
      { projectId, limitOverride: { requestsPerMinute: 5 } },
      { projectId, plan: "PLAN_GOLD" },
    ]) {
      const res = await call(body);
      assert.equal(res.status, 400, JSON.stringify(body));
      const err = (await res.json()) as { code: string; message: string };
      assert.equal(err.code, "invalid_argument");
      assert.match(err.message, /requestsPerMinuet|limitOverride|PLAN_GOLD/);
    }
    // Bytes that are not UTF-8 are refused, not stored with U+FFFD in their place.
    const raw = Buffer.concat([Buffer.from('{"plan":"PLAN_FREE","name":"ab'), Buffer.from([0xff, 0xfe]), Buffer.from('cd"}')]);
    const notUtf8 = await fetch(`${gw.grpcUrl}/svc.auth.v1.AuthService/CreateProject`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${gw.adminToken}` }, body: raw });
    assert.equal(notUtf8.status, 400);
    assert.equal(((await notUtf8.json()) as { code: string }).code, "invalid_argument");
    const ok = await call({ projectId, limitOverrides: { requestsPerMinute: 500 } });
    assert.equal(ok.status, 200, await ok.clone().text());
    assert.equal(((await ok.json()) as { project: { limitOverrides: { requestsPerMinute: number } } }).project.limitOverrides.requestsPerMinute, 500);
  });

  it("refuses a call without an authority it can read (HTTP/1.0 without Host, an empty Host, an h2 :authority of '['), and stays up", async () => {
    const url = new URL(gw.grpcUrl);
    const raw = (text: string) =>
      new Promise<string>((resolve) => {
        const s = net.connect(Number(url.port), url.hostname, () => s.write(text));
        let got = "";
        s.on("data", (d) => (got += d));
        s.on("error", () => resolve(got));
        s.on("close", () => resolve(got));
        setTimeout(() => s.destroy(), 2_000);
      });
    const head = `Authorization: Bearer ${gw.adminToken}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`;
    for (const text of [`POST /svc.auth.v1.AuthService/ListProjects HTTP/1.0\r\n${head}`, `POST /svc.auth.v1.AuthService/ListProjects HTTP/1.1\r\nHost:\r\nConnection: close\r\n${head}`]) {
      const answer = await raw(text);
      assert.match(answer, /^HTTP\/1\.1 400 /, answer);
      assert.match(answer, /"code":"invalid_argument"/, answer);
    }
    const h2Status = await new Promise<string>((resolve) => {
      const session = http2.connect(gw.grpcUrl);
      session.on("error", () => {});
      const st = session.request({ ":method": "POST", ":path": "/svc.auth.v1.AuthService/ListProjects", ":authority": "[", "content-type": "application/json", authorization: `Bearer ${gw.adminToken}` });
      st.on("response", (h) => resolve(String(h[":status"])));
      st.on("error", (e) => resolve(String(e)));
      st.on("close", () => session.close());
      st.resume();
      st.end("{}");
    });
    assert.equal(h2Status, "400");
    // Still serving.
    const usage = await unary<{ spent_usd: string }>(limits, "GetUsage", { project_id: projectId }, md);
    assert.match(usage.spent_usd, /^\d/);
  });

  it("DeleteKey is not marked idempotent: a second call answers NOT_FOUND", async () => {
    const created = await unary<any>(auth, "CreateKey", { project_id: projectId, mode: "KEY_MODE_TEST" }, md);
    await unary(auth, "DeleteKey", { key_id: created.key.id }, md);
    const again = failure(await unary(auth, "DeleteKey", { key_id: created.key.id }, md).then(() => undefined, (e) => e));
    assert.deepEqual([again?.status, again?.code], ["NOT_FOUND", "key_not_found"]);
    const def: any = protoLoader.loadSync(["svc/auth/v1/auth_service.proto"], { includeDirs: [protoDir], keepCase: true });
    assert.equal(def["svc.auth.v1.AuthService"].DeleteKey.options.idempotency_level, "IDEMPOTENCY_UNKNOWN");
    assert.equal(AuthService.method.deleteKey.idempotency, MethodOptions_IdempotencyLevel.IDEMPOTENCY_UNKNOWN);
  });
});

describe("check of a StreamChatRequest from the network", () => {
  const who = { requestId: newRequestId(), projectId: "proj_1", keyId: "key_1", keyMode: KeyMode.LIVE, userId: "u", metadata: { a: "b" } };

  // Whatever the HTTP endpoints accept, the core port accepts in canonical form: the same rules.
  const chatBodies: object[] = [
    { model: "chat-4o", messages: [{ role: "user", content: "hi" }] },
    {
      model: "chat-4o", temperature: 2, max_tokens: 1, stream: true, top_p: 0.5, n: 1, stream_options: { include_usage: true }, seed: 1, user: "u", logprobs: true,
      messages: [
        { role: "developer", content: "be brief" },
        { role: "user", name: "ann", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: "https://x/y.png" } }, { type: "file", file: { file_id: "f1" } }] },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: '{"a":1}' } }, { id: "call_2", function: { name: "g", arguments: "" } }] },
        { role: "tool", tool_call_id: "call_1", content: [{ type: "text", text: "done" }] },
        { role: "tool", tool_call_id: "call_2", content: "done" },
        { role: "assistant", content: null, function_call: { name: "f", arguments: "{}" } },
        { role: "function", name: "f", content: "r" },
        { role: "assistant", content: "ok", refusal: null, tool_calls: null },
      ],
      tools: [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object" }, strict: true } }, { type: "function", function: { name: "f" } }],
      tool_choice: "auto",
    },
  ];
  const messagesBodies: object[] = [
    { model: "assistant-3-5-haiku-20241022", max_tokens: 5, messages: [{ role: "user", content: "hi" }] },
    {
      model: "assistant-3-5-haiku-20241022", max_tokens: 300, temperature: 1, stream: true, top_k: 3, thinking: { type: "enabled", budget_tokens: 1024 },
      system: [{ type: "text", text: "sys", cache_control: { type: "ephemeral" } }],
      messages: [
        { role: "user", content: [{ type: "text", text: "look", cache_control: { type: "ephemeral" } }, { type: "image", source: { type: "url", url: "https://x.test/a.png" } }] },
        { role: "assistant", content: [{ type: "thinking", thinking: "t", signature: "s" }, { type: "tool_use", id: "toolu_1", name: "f", input: { a: 1 } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "20C" }] }, { type: "tool_result", tool_use_id: "toolu_2", content: "x", is_error: true }, { type: "tool_result", tool_use_id: "toolu_3" }] },
        { role: "assistant", content: [] },
      ],
      tools: [
        { name: "get_weather", description: "Weather", input_schema: { type: "object" }, cache_control: { type: "ephemeral" } },
        { type: "custom", name: "f", input_schema: { type: "object" } },
        { type: "web_search_20250305", name: "web_search", max_uses: 5 },
      ],
      tool_choice: { type: "any" },
      metadata: { user_id: "u" },
    },
  ];

  it("accepts every request the HTTP codecs build", () => {
    for (const body of chatBodies) checkWireChatRequest(chatRequest(parseChatCompletionsRequest(body), who));
    for (const body of messagesBodies) checkWireChatRequest(chatRequest(messagesCodec.parseRequest(body), { ...who, betas: ["prompt-caching-2024-07-31"] }));
  });
});

describe("core port: internal errors", () => {
  /** A core server whose services fail as a bug would, behind the served router's interceptor. */
  async function failingCore() {
    const routes = (router: ConnectRouter) => {
      router.service(AuthService, {
        async listProjects() {
          throw new TypeError("cannot read /srv/secret/path of undefined");
        },
        async getProject() {
          throw new ConnectError("boom inside the store", Code.Internal);
        },
        async deleteKey() {
          throw invalidRequest("missing_required_field", "`key_id` is required.");
        },
      });
      router.service(ProxyService, {
        async *streamChat(req) {
          yield { event: { case: "blockStop", value: { index: 0 } } };
          throw new RangeError(`stream broke for ${req.requestId} at /srv/secret/file.ts`);
        },
      });
    };
    const core = createCoreServer(routes, [internalErrorInterceptor()]);
    await new Promise<void>((r) => core.server.listen(0, "127.0.0.1", r));
    const target = `127.0.0.1:${(core.server.address() as AddressInfo).port}`;
    const pkg = loadGrpc();
    return {
      auth: new pkg.svc.auth.v1.AuthService(target, grpc.credentials.createInsecure()),
      proxy: new pkg.svc.proxy.v1.ProxyService(target, grpc.credentials.createInsecure()),
      close: () => core.close(),
    };
  }

  const errors = (lines: string[]) => lines.filter((l) => l.includes('"level":"error"')).map((l) => JSON.parse(l));

  it("logs each one once with its stack and answers INTERNAL with the generic message only", async () => {
    const core = await failingCore();
    const md = new grpc.Metadata();
    const requestId = newRequestId();
    const outcomes: unknown[] = [];
    try {
      const lines = await captureLog(async () => {
        for (const method of ["ListProjects", "GetProject"]) {
          const e = await unary(core.auth, method, {}, md).then(() => undefined, (x) => x);
          outcomes.push(failure(e));
        }
        const s = await stream(core.proxy, { request_id: requestId }, md);
        outcomes.push({ ...failure(s.error), events: s.events.length });
        const refused = await unary(core.auth, "DeleteKey", {}, md).then(() => undefined, (x) => x);
        outcomes.push(failure(refused));
      });
      const generic = "The server had an error while processing the request.";
      assert.deepEqual(outcomes, [
        { status: "INTERNAL", code: "internal_error", message: generic },
        { status: "INTERNAL", code: "internal_error", message: generic },
        { status: "INTERNAL", code: "internal_error", message: generic, events: 1 },
        { status: "INVALID_ARGUMENT", code: "missing_required_field", message: "`key_id` is required." },
      ]);
      const logged = errors(lines);
      assert.deepEqual(logged.map((l) => l.procedure), ["/svc.auth.v1.AuthService/ListProjects", "/svc.auth.v1.AuthService/GetProject", "/svc.proxy.v1.ProxyService/StreamChat"], "each once, a refusal not at all");
      assert.match(logged[0].err, /TypeError: cannot read \/srv\/secret\/path of undefined\n\s+at /, "with its stack");
      assert.match(logged[1].err, /boom inside the store/);
      assert.match(logged[2].err, /RangeError: stream broke/);
      assert.equal(logged[2].requestId, requestId, "with the request id of the call");
    } finally {
      core.auth.close();
      core.proxy.close();
      await core.close();
    }
  });
});
