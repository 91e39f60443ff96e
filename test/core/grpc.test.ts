import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { createClient } from "@connectrpc/connect";
import { request } from "node:http";
import http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { AuthService, Plan } from "../../src/gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../../src/gen/svc/common/v1/key_mode_pb.js";
import { ApiStyle, ProxyService } from "../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { createDirectClient } from "../../src/core/direct-client.js";
import { newRequestId } from "../../src/core/ids.js";
import { loadConfig } from "../../src/config.js";
import { coreReadMaxBytes } from "../../src/server.js";
import { createProxyService } from "../../src/core/proxy/proxy-service.js";
import { createUpstreamHttp } from "../../src/core/proxy/upstream-http.js";
import { createAnthropicAdapter } from "../../src/core/proxy/upstreams/anthropic/adapter.js";
import { createOpenAiAdapter } from "../../src/core/proxy/upstreams/openai/adapter.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { captureLog } from "../support/log-capture.js";

const protoDir = fileURLToPath(new URL("../../proto", import.meta.url));

/** Loads the .proto files themselves, so this client shares no code with the server. */
function loadGrpc(): any {
  const def = protoLoader.loadSync(["svc/auth/v1/auth_service.proto", "svc/proxy/v1/proxy_service.proto"], {
    includeDirs: [protoDir],
    keepCase: true,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(def);
}

const unary = <T>(client: any, method: string, req: object, md: grpc.Metadata): Promise<T> =>
  new Promise((resolve, reject) => client[method](req, md, (err: Error | null, res: T) => (err ? reject(err) : resolve(res))));

describe("core over gRPC (independent @grpc/grpc-js client loading the .proto files)", () => {
  let gw: TestGateway;
  let pkg: any;
  let md: grpc.Metadata;
  let target: string;

  before(async () => {
    gw = await startTestGateway();
    pkg = loadGrpc();
    md = new grpc.Metadata();
    md.set("authorization", `Bearer ${gw.adminToken}`);
    target = new URL(gw.grpcUrl).host;
  });
  after(() => gw.close());

  it("creates a project and keys, and verifies a key, through AuthService", async () => {
    const auth = new pkg.svc.auth.v1.AuthService(target, grpc.credentials.createInsecure());
    const { project } = await unary<any>(auth, "CreateProject", { name: "grpc", plan: "PLAN_PRO" }, md);
    assert.match(project.id, /^proj_/);
    const created = await unary<any>(auth, "CreateKey", { project_id: project.id, mode: "KEY_MODE_TEST", description: "from grpc" }, md);
    assert.match(created.secret, /^svc_sk_test_/);
    const verified = await unary<any>(auth, "VerifyKey", { secret: created.secret }, md);
    assert.equal(verified.project.id, project.id);
    assert.equal(verified.key.mode, "KEY_MODE_TEST");
    auth.close();
  });

  it("refuses calls without the admin token", async () => {
    const auth = new pkg.svc.auth.v1.AuthService(target, grpc.credentials.createInsecure());
    await assert.rejects(unary(auth, "ListProjects", {}, new grpc.Metadata()), (e: any) => e.code === grpc.status.UNAUTHENTICATED);
    auth.close();
  });

  it("refuses calls with a wrong token alike over gRPC, gRPC-Web and Connect (unary and streaming, HTTP/1.1 and HTTP/2)", async () => {
    const wrong = [(next: any) => (req: any) => { req.header.set("authorization", "Bearer not-the-token"); return next(req); }];
    const transports = {
      grpc: createGrpcTransport({ baseUrl: gw.grpcUrl, interceptors: wrong }),
      "grpc-web": createGrpcWebTransport({ baseUrl: gw.grpcUrl, httpVersion: "1.1", interceptors: wrong }),
      "connect h1": createConnectTransport({ baseUrl: gw.grpcUrl, httpVersion: "1.1", interceptors: wrong }),
      "connect h2": createConnectTransport({ baseUrl: gw.grpcUrl, httpVersion: "2", interceptors: wrong }),
    };
    const refused = (what: string) => (e: unknown) => {
      assert.ok(e instanceof ConnectError, `${what}: ${String(e)}`);
      assert.equal(e.code, Code.Unauthenticated, `${what}: ${e.message}`);
      assert.match(e.rawMessage, /admin token/, what);
      return true;
    };
    for (const [name, transport] of Object.entries(transports)) {
      await assert.rejects(createClient(AuthService, transport).listProjects({}), refused(`${name} unary`));
      // Calls with a body, many in turn on kept-alive connections: each gets its answer, none a
      // failed write of its body (the HTTP/1.1 body is read and dropped, not cut off).
      const bodies = await Promise.allSettled(Array.from({ length: 30 }, (_, i) => createClient(AuthService, transport).createProject({ name: `p${i}-${"x".repeat(4000)}`, plan: Plan.PRO })));
      bodies.forEach((r, i) => assert.ok(r.status === "rejected" && refused(`${name} call ${i} with a body`)(r.reason)));
      const stream = createClient(ProxyService, transport).streamChat({ projectId: "p", style: ApiStyle.MESSAGES, model: "m", messages: [] });
      await assert.rejects((async () => { for await (const _ of stream); })(), refused(`${name} stream`));
    }
  });

  it("answers a call without the token before reading its body, and refuses a message over the size it reads", async () => {
    // Headers promise 64 MiB; 256 KiB is sent and the rest never is. The answer must come anyway.
    const call = (authorization: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request(`${gw.grpcUrl}/svc.auth.v1.AuthService/ListProjects`, {
          method: "POST",
          headers: { "content-type": "application/proto", "content-length": 64 * 1024 * 1024, authorization },
        });
        req.on("response", (res) => {
          let body = "";
          res.on("data", (d) => (body += d));
          res.on("end", () => resolve({ status: res.statusCode!, body }));
        });
        req.on("error", reject);
        req.write(Buffer.alloc(256 * 1024));
        setTimeout(() => reject(new Error("no answer within 5 s")), 5_000).unref();
      });
    const anon = await call("Bearer wrong");
    assert.equal(anon.status, 401);
    assert.deepEqual(JSON.parse(anon.body), { code: "unauthenticated", message: "missing or invalid admin token" });
    assert.ok(64 * 1024 * 1024 > coreReadMaxBytes(loadConfig({})), "the default read limit is under the size promised");
    const admin = await call(`Bearer ${gw.adminToken}`);
    assert.equal(JSON.parse(admin.body).code, "resource_exhausted", admin.body);
  });

  it("reads and drops the rest of an over-size gRPC message after refusing it, so a client still sending it is not left blocked", async () => {
    // HTTP/2, gRPC framing: a 20 MiB message, sent as the server takes it. Refused once past the read
    // limit, its remainder must still be taken (flow control would otherwise hold the sender until
    // the 300 s request timeout).
    const session = http2.connect(gw.grpcUrl);
    try {
      const ended = await new Promise<{ status: string; at: number }>((resolve, reject) => {
        const stream = session.request({ ":method": "POST", ":path": "/svc.auth.v1.AuthService/ListProjects", "content-type": "application/grpc", te: "trailers", authorization: `Bearer ${gw.adminToken}` });
        let status = "";
        stream.on("trailers", (t) => (status = String(t["grpc-status"] ?? "")));
        stream.on("response", (h) => (status ||= String(h["grpc-status"] ?? "")));
        stream.on("error", reject);
        stream.resume();
        const size = 20 * 1024 * 1024;
        const head = Buffer.alloc(5);
        head.writeUInt32BE(size, 1);
        stream.write(head);
        const chunk = Buffer.alloc(64 * 1024);
        let sent = 0;
        const pump = () => {
          while (sent < size) {
            sent += chunk.length;
            if (!stream.write(chunk)) return void stream.once("drain", pump);
          }
          stream.end();
        };
        pump();
        stream.on("close", () => resolve({ status, at: sent }));
        setTimeout(() => reject(new Error(`the stream stayed open; ${sent} bytes sent`)), 15_000).unref();
      });
      assert.equal(ended.status, String(Code.ResourceExhausted));
    } finally {
      session.close();
    }
  });

  it("cuts a message Connect itself wrote (its JSON decoder quoting a 100,000-character field name) to 1024 characters: the call is answered and its connection kept", async () => {
    const session = http2.connect(gw.grpcUrl);
    try {
      const call = (body: string) => rawGrpcCall(session, "/svc.auth.v1.AuthService/CreateProject", "application/grpc+json", Buffer.from(body), `Bearer ${gw.adminToken}`);
      const long = await call(`{"${"k".repeat(100_000)}":1}`);
      assert.equal(long.status, String(Code.InvalidArgument));
      assert.ok(long.message.length <= 1100 && decodeURIComponent(long.message).endsWith("…"), `${long.message.length} characters`);
      // The same connection still takes calls.
      const next = await call(`{"name":"after","plan":"PLAN_FREE"}`);
      assert.equal(next.status, "0", next.message);
    } finally {
      session.close();
    }
  });

  it("answers a StreamChat whose binary request does not parse as Connect answers a unary one (its parser's words), without logging a server fault", async () => {
    const session = http2.connect(gw.grpcUrl);
    try {
      let got = { status: "", message: "" };
      const lines = await captureLog(async () => {
        // Field 1 (a string) claiming 255 bytes, then the message ends.
        got = await rawGrpcCall(session, "/svc.proxy.v1.ProxyService/StreamChat", "application/grpc", Buffer.from([0x0a, 0xff, 0x01]), `Bearer ${gw.adminToken}`);
      });
      assert.equal(got.status, String(Code.Internal));
      assert.match(decodeURIComponent(got.message), /^parse binary: /);
      assert.deepEqual(lines.filter((l) => l.includes("core call failed")), []);
    } finally {
      session.close();
    }
  });

  it("maps errors to gRPC status codes", async () => {
    const auth = new pkg.svc.auth.v1.AuthService(target, grpc.credentials.createInsecure());
    await assert.rejects(unary(auth, "VerifyKey", { secret: "nope" }, md), (e: any) => e.code === grpc.status.UNAUTHENTICATED);
    await assert.rejects(unary(auth, "GetProject", { project_id: "proj_missing" }, md), (e: any) => e.code === grpc.status.NOT_FOUND);
    auth.close();
  });

  it("gives grpc-js messages it reads as written: commas, colons, slashes, percent signs and non-ASCII", async () => {
    const auth = new pkg.svc.auth.v1.AuthService(target, grpc.credentials.createInsecure());
    // grpc-js decodes grpc-message with decodeURI: reserved characters must not be percent-encoded.
    await assert.rejects(unary(auth, "VerifyKey", { secret: "" }, md), (e: any) => e.details === "Missing API key: send it in the X-Svc-Api-Key header.");
    await assert.rejects(unary(auth, "CreateProject", { name: "x", plan: "PLAN_UNSPECIFIED" }, md), (e: any) => e.details === "`plan` must be one of free, pro, enterprise.");
    await assert.rejects(unary(auth, "GetProject", { project_id: "proj_100%/é" }, md), (e: any) => e.details === "No project with id 'proj_100%/é'.");
    auth.close();
  });

  it("streams a chat through ProxyService.StreamChat", async () => {
    const proxy = new pkg.svc.proxy.v1.ProxyService(target, grpc.credentials.createInsecure());
    const { projectId, liveKeyId } = await gw.project();
    const call = proxy.StreamChat(
      {
        request_id: newRequestId(),
        project_id: projectId,
        key_id: liveKeyId,
        key_mode: "KEY_MODE_LIVE",
        style: "API_STYLE_CHAT_COMPLETIONS",
        model: "chat-4o-mini",
        messages: [{ role: "user", blocks: [{ type: "BLOCK_TYPE_TEXT", text: "over grpc" }], content_is_string: true }],
        stream: true,
      },
      md,
    );
    const kinds: string[] = [];
    let text = "";
    let cost = "";
    for await (const ev of call) {
      kinds.push(ev.event);
      if (ev.event === "block_delta") text += ev.block_delta.text;
      if (ev.event === "message_end") cost = ev.message_end.cost_usd;
    }
    assert.equal(kinds[0], "message_start");
    assert.equal(kinds.at(-1), "message_end");
    assert.ok(kinds.includes("block_start") && kinds.includes("block_stop"));
    assert.equal(text, "Echo: over grpc");
    assert.match(cost, /^\d+(\.\d+)?$/);
    proxy.close();
  });

  it("answers alike in-process and over gRPC, Connect-gRPC and gRPC-Web", async () => {
    const interceptors = [(next: any) => (req: any) => { req.header.set("authorization", `Bearer ${gw.adminToken}`); return next(req); }];
    const grpcProxy = createClient(ProxyService, createGrpcTransport({ baseUrl: gw.grpcUrl, interceptors }));
    const webProxy = createClient(ProxyService, createGrpcWebTransport({ baseUrl: gw.grpcUrl, httpVersion: "1.1", interceptors }));
    const { projectId, liveKeyId } = await gw.project();
    const req = {
      requestId: newRequestId(),
      projectId,
      keyId: liveKeyId,
      keyMode: KeyMode.LIVE,
      style: ApiStyle.MESSAGES,
      model: "assistant-3-haiku-20240307",
      maxTokens: 50,
      messages: [{ role: "user", blocks: [{ type: 1, text: "same answer" }], contentIsString: true }],
    };
    const collect = async (stream: AsyncIterable<any>) => {
      const out = [];
      for await (const ev of stream) {
        const c = ev.event.value;
        out.push({ kind: ev.event.case, text: c.blocks?.map((b: any) => b.text).join(""), usage: c.usage && [c.usage.inputTokens, c.usage.outputTokens], cost: c.costUsd, model: c.model, finish: c.finishReason });
      }
      return out;
    };
    // The in-process client the facades use: the same implementation, called without serialising.
    const config = loadConfig({ SVC_OPENAI_BASE_URL: `${gw.demo!.url}/v1`, SVC_ANTHROPIC_BASE_URL: gw.demo!.url, SVC_OPENAI_API_KEY: "demo", SVC_ANTHROPIC_API_KEY: "demo" });
    const http = createUpstreamHttp(config.timeouts);
    const adapters = new Map([[ApiStyle.CHAT_COMPLETIONS, createOpenAiAdapter()], [ApiStyle.MESSAGES, createAnthropicAdapter()]]);
    const direct = createDirectClient(ProxyService, createProxyService({ models: config.models, providers: config.providers, adapters, http }));
    try {
      const a = await collect(grpcProxy.streamChat(req));
      const b = await collect(webProxy.streamChat(req));
      const c = await collect(direct.streamChat(req));
      assert.equal(a.length, 1);
      assert.equal(a[0]!.kind, "completion");
      assert.equal(a[0]!.text, "Echo: same answer");
      assert.deepEqual(b, a);
      assert.deepEqual(c, a);
      const streamed = { ...req, stream: true };
      const kinds = (evs: any[]) => evs.map((e) => e.kind);
      assert.deepEqual(kinds(await collect(direct.streamChat(streamed))), kinds(await collect(grpcProxy.streamChat(streamed))));
    } finally {
      await http.close();
    }
  });

  it("in-process unary calls return messages without a serialisation round trip", async () => {
    const project = { id: "p", name: "n", plan: Plan.FREE };
    const authDirect = createDirectClient(AuthService, { async listProjects() { return { projects: [project] }; } });
    const listed = await authDirect.listProjects({});
    assert.equal(listed.$typeName, "svc.auth.v1.ListProjectsResponse");
    assert.equal(listed.projects[0]!.id, "p");
  });
});

/** One gRPC call over a raw HTTP/2 session: the message framed, the status and message read from headers or trailers. */
function rawGrpcCall(session: http2.ClientHttp2Session, path: string, contentType: string, message: Buffer, authorization = ""): Promise<{ status: string; message: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": path, "content-type": contentType, te: "trailers", ...(authorization ? { authorization } : {}) });
    let status = "";
    let text = "";
    const read = (h: http2.IncomingHttpHeaders) => {
      status ||= String(h["grpc-status"] ?? "");
      text ||= String(h["grpc-message"] ?? "");
    };
    stream.on("response", read);
    stream.on("trailers", read);
    stream.on("error", reject);
    stream.resume();
    stream.on("close", () => resolve({ status, message: text }));
    const head = Buffer.alloc(5);
    head.writeUInt32BE(message.length, 1);
    stream.end(Buffer.concat([head, message]));
  });
}
