import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { toBinary } from "@bufbuild/protobuf";
import { completion, contentBlock } from "../../../src/core/proxy/canonical.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { BlockType, CompletionSchema } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";

const protoDir = fileURLToPath(new URL("../../../proto", import.meta.url));

const unary = <T>(client: any, method: string, req: object, md: grpc.Metadata): Promise<T> =>
  new Promise((resolve, reject) => client[method](req, md, (err: Error | null, res: T) => (err ? reject(err) : resolve(res))));

describe("CacheService over gRPC (independent @grpc/grpc-js client loading the .proto files)", () => {
  let gw: TestGateway;
  let cache: any;
  let md: grpc.Metadata;
  // A stored answer: a Completion in protobuf binary form, what the gateway serves as a hit.
  const payload = Buffer.from(toBinary(CompletionSchema, completion({ id: "chatcmpl-grpc", model: "chat-4o", blocks: [contentBlock({ type: BlockType.TEXT, text: "stored over gRPC" })] })));
  let entry: { project_id: string; key_mode: string; cache_key: string };

  before(async () => {
    gw = await startTestGateway();
    entry = { project_id: (await gw.project()).projectId, key_mode: "KEY_MODE_LIVE", cache_key: "a".repeat(64) };
    const def = protoLoader.loadSync(["svc/cache/v1/cache_service.proto"], { includeDirs: [protoDir], keepCase: true, enums: String, defaults: true });
    const pkg: any = grpc.loadPackageDefinition(def);
    cache = new pkg.svc.cache.v1.CacheService(new URL(gw.grpcUrl).host, grpc.credentials.createInsecure());
    md = new grpc.Metadata();
    md.set("authorization", `Bearer ${gw.adminToken}`);
  });
  after(async () => {
    cache.close();
    await gw.close();
  });

  it("serves a stored entry back with the same bytes and cost", async () => {
    await unary(cache, "PutEntry", { ...entry, payload, cost_usd: "0.0042", ttl_seconds: 0 }, md);
    const res = await unary<any>(cache, "GetEntry", entry, md);
    assert.equal(res.hit, true);
    assert.deepEqual(res.payload, payload);
    assert.equal(res.cost_usd, "0.0042");
  });

  it("misses for another project and for the other key mode", async () => {
    await unary(cache, "PutEntry", { ...entry, payload, cost_usd: "1" }, md);
    const other = (await gw.project()).projectId;
    assert.equal((await unary<any>(cache, "GetEntry", { ...entry, project_id: other }, md)).hit, false);
    assert.equal((await unary<any>(cache, "GetEntry", { ...entry, key_mode: "KEY_MODE_TEST" }, md)).hit, false);
  });

  it("shares its entries with the in-process client the gateway uses", async () => {
    await unary(cache, "PutEntry", { ...entry, cache_key: "b".repeat(64), payload, cost_usd: "2" }, md);
    const res = await gw.cache.getEntry({ projectId: entry.project_id, keyMode: KeyMode.LIVE, cacheKey: "b".repeat(64) });
    assert.equal(res.hit, true);
    assert.deepEqual(res.payload, new Uint8Array(payload));
  });

  it("refuses a malformed request with INVALID_ARGUMENT", async () => {
    await assert.rejects(unary(cache, "GetEntry", { ...entry, key_mode: "KEY_MODE_UNSPECIFIED" }, md), (e: any) => e.code === grpc.status.INVALID_ARGUMENT);
  });

  it("refuses to store a payload that is not a Completion (INVALID_ARGUMENT), or an entry of a project that does not exist (NOT_FOUND)", async () => {
    const garbage = Buffer.from([0, 1, 2, 254, 255, 10, 13]);
    const key = { ...entry, cache_key: "c".repeat(64) };
    await assert.rejects(unary(cache, "PutEntry", { ...key, payload: garbage, cost_usd: "1" }, md), (e: any) => {
      assert.equal(e.code, grpc.status.INVALID_ARGUMENT, e.message);
      assert.match(e.details, /payload/);
      return true;
    });
    assert.equal((await unary<any>(cache, "GetEntry", key, md)).hit, false, "nothing stored");
    await assert.rejects(unary(cache, "PutEntry", { ...key, project_id: "proj_nobody", payload, cost_usd: "1" }, md), (e: any) => e.code === grpc.status.NOT_FOUND);
  });

  it("refuses a Completion no gateway could serve: an extra_json that is not a JSON object, a raw_json that is not JSON, a negative token count", async () => {
    const key = { ...entry, cache_key: "d".repeat(64) };
    const bad = [
      [completion({ model: "chat-4o", extraJson: "{bad" }), "`extra_json` is not a JSON object"],
      [completion({ model: "chat-4o", blocks: [contentBlock({ type: BlockType.TEXT, text: "x", extraJson: "[1]" })] }), "`blocks[0].extra_json` is not a JSON object"],
      [completion({ model: "chat-4o", blocks: [contentBlock({ type: BlockType.OTHER, rawJson: "{bad" })] }), "`blocks[0].raw_json` is not JSON"],
      [completion({ model: "chat-4o", usage: { $typeName: "svc.proxy.v1.Usage", inputTokens: -5, outputTokens: 1, extraJson: "", cacheReadTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0 } }), "`usage.input_tokens` is negative"],
    ] as const;
    for (const [c, says] of bad) {
      await assert.rejects(unary(cache, "PutEntry", { ...key, payload: Buffer.from(toBinary(CompletionSchema, c)), cost_usd: "1" }, md), (e: any) => {
        assert.equal(e.code, grpc.status.INVALID_ARGUMENT, e.message);
        assert.ok(e.details.includes(says), e.details);
        return true;
      });
    }
    assert.equal((await unary<any>(cache, "GetEntry", key, md)).hit, false, "nothing stored");
  });

  it("answers NOT_FOUND for a lookup in a project that does not exist, rather than a miss that reads as a mistyped id's empty cache", async () => {
    await assert.rejects(unary(cache, "GetEntry", { ...entry, project_id: "proj_nobody" }, md), (e: any) => e.code === grpc.status.NOT_FOUND && /proj_nobody/.test(e.details));
  });
});
