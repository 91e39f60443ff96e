import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";

const protoDir = fileURLToPath(new URL("../../../proto", import.meta.url));

const unary = <T>(client: any, method: string, req: object, md: grpc.Metadata): Promise<T> =>
  new Promise((resolve, reject) => client[method](req, md, (err: Error | null, res: T) => (err ? reject(err) : resolve(res))));

describe("CacheService over gRPC (independent @grpc/grpc-js client loading the .proto files)", () => {
  let gw: TestGateway;
  let cache: any;
  let md: grpc.Metadata;
  const payload = Buffer.from([0, 1, 2, 254, 255, 10, 13]);
  const entry = { project_id: "proj_grpc", key_mode: "KEY_MODE_LIVE", cache_key: "a".repeat(64) };

  before(async () => {
    gw = await startTestGateway();
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
    assert.equal((await unary<any>(cache, "GetEntry", { ...entry, project_id: "proj_other" }, md)).hit, false);
    assert.equal((await unary<any>(cache, "GetEntry", { ...entry, key_mode: "KEY_MODE_TEST" }, md)).hit, false);
  });

  it("shares its entries with the in-process client the gateway uses", async () => {
    await unary(cache, "PutEntry", { ...entry, cache_key: "b".repeat(64), payload, cost_usd: "2" }, md);
    const res = await gw.cache.getEntry({ projectId: "proj_grpc", keyMode: KeyMode.LIVE, cacheKey: "b".repeat(64) });
    assert.equal(res.hit, true);
    assert.deepEqual(res.payload, new Uint8Array(payload));
  });

  it("refuses a malformed request with INVALID_ARGUMENT", async () => {
    await assert.rejects(unary(cache, "GetEntry", { ...entry, key_mode: "KEY_MODE_UNSPECIFIED" }, md), (e: any) => e.code === grpc.status.INVALID_ARGUMENT);
  });
});
