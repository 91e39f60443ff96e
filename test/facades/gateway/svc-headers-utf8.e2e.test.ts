import assert from "node:assert/strict";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import type { RequestLog } from "../../../src/gen/svc/telemetry/v1/telemetry_service_pb.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { eventually, rawRequest, type RawResponse } from "../../support/http.js";

/**
 * Non-ASCII text in X-Svc-Metadata and X-Svc-User-Id, sent as raw UTF-8 bytes (as curl and most
 * clients send it), is kept as the characters sent, not as Node's latin1 reading of its bytes; the
 * stored log row is read back to see it.
 */
describe("X-Svc-Metadata and X-Svc-User-Id with raw UTF-8 are logged as the characters sent", () => {
  let gw: TestGateway;
  let keys: Awaited<ReturnType<TestGateway["project"]>>;
  let n = 0;
  /** A header value whose bytes on the wire are `text`'s UTF-8 (Node's client writes header strings as latin1). */
  const utf8Bytes = (text: string) => Buffer.from(text, "utf8").toString("latin1");
  /**
   * POSTs a JSON body with the live key. The body goes as a Buffer: with a string body, Node's client
   * writes the head and the body in one utf8 write, which would encode the header values again.
   */
  const post = (path: string, body: object, headers: Record<string, string>) =>
    rawRequest(`${gw.gatewayUrl}${path}`, { headers: { "content-type": "application/json", "x-svc-api-key": keys.live, ...headers }, body: Buffer.from(JSON.stringify(body)) });
  const chat = () => ({ model: "chat-4o-mini", messages: [{ role: "user", content: `utf8 ${++n}` }] });

  before(async () => {
    gw = await startTestGateway();
    keys = await gw.project();
  });
  after(() => gw.close());

  /** The stored log row of the request `res` answered (logs are written off the request path). */
  async function logOf(res: RawResponse): Promise<RequestLog> {
    const requestId = String(res.headers["x-svc-request-id"]);
    let log: RequestLog | undefined;
    await eventually(async () => {
      try {
        log = (await gw.telemetry.getLog({ projectId: keys.projectId, keyMode: KeyMode.LIVE, requestId })).log;
      } catch {
        return false; // not written yet
      }
      return log !== undefined;
    }, 10_000, `log ${requestId}`);
    return log!;
  }

  const team = "café 日本 🎉";
  const user = "josé-日本";

  it("chat completions: raw UTF-8 metadata and user id", async () => {
    const res = await post("/v1/chat/completions", chat(), {
      "x-svc-metadata": utf8Bytes(JSON.stringify({ team, "ключ": "значение" })),
      "x-svc-user-id": utf8Bytes(user),
    });
    assert.equal(res.status, 200, res.text);
    const log = await logOf(res);
    assert.deepEqual({ ...log.metadata }, { team, "ключ": "значение" });
    assert.equal(log.userId, user);
  });

  it("messages: raw UTF-8 metadata", async () => {
    const body = { model: "assistant-3-5-haiku-20241022", max_tokens: 20, messages: [{ role: "user", content: `utf8 ${++n}` }] };
    const res = await post("/v1/messages", body, { "x-svc-metadata": utf8Bytes(JSON.stringify({ team })) });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual({ ...(await logOf(res)).metadata }, { team });
  });

  it("\\u escapes and ASCII are read as before", async () => {
    const escaped = JSON.stringify({ team }).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
    const res = await post("/v1/chat/completions", chat(), { "x-svc-metadata": escaped, "x-svc-user-id": "plain-user" });
    const log = await logOf(res);
    assert.deepEqual({ ...log.metadata }, { team });
    assert.equal(log.userId, "plain-user");
  });

  it("keeps a value whose bytes are not UTF-8 as latin1 (what fetch sends for \"é\")", async () => {
    const res = await post("/v1/chat/completions", chat(), { "x-svc-metadata": '{"team":"caf\xe9"}', "x-svc-user-id": "jos\xe9" });
    assert.equal(res.status, 200, res.text);
    const log = await logOf(res);
    assert.deepEqual({ ...log.metadata }, { team: "café" });
    assert.equal(log.userId, "josé");
  });

  it("logs the metadata and user id of a request whose body is refused", async () => {
    const res = await rawRequest(`${gw.gatewayUrl}/v1/chat/completions`, {
      headers: { "content-type": "application/json", "x-svc-api-key": keys.live, "x-svc-metadata": '{"team":"search"}', "x-svc-user-id": "u-7" },
      body: "{not json",
    });
    assert.equal(res.status, 400);
    const log = await logOf(res);
    assert.deepEqual({ ...log.metadata }, { team: "search" });
    assert.equal(log.userId, "u-7");
    assert.equal(log.errorCode, "invalid_json");
  });

  it("quotes a refused header's raw UTF-8 as the characters sent", async () => {
    const version = await post("/v1/messages", { model: "assistant-3-5-haiku-20241022", max_tokens: 5, messages: [{ role: "user", content: "v" }] }, { "provider-version": utf8Bytes("2024-01-01é") });
    assert.equal(version.status, 400);
    assert.match(version.json().error.message, /got '2024-01-01é'/);
    const age = await post("/v1/chat/completions", chat(), { "x-svc-cache-control": utf8Bytes("max-age=É") });
    assert.equal(age.status, 400);
    assert.match(age.json().error.message, /got 'É'/);
    const directive = await post("/v1/chat/completions", chat(), { "x-svc-cache-control": utf8Bytes("no-cachÉ") });
    assert.equal(directive.status, 400);
    assert.match(directive.json().error.message, /got 'no-cachÉ'/);
    const type = await post("/v1/chat/completions", chat(), { "content-type": utf8Bytes("text/plaiñ") });
    assert.equal(type.status, 400);
    assert.match(type.json().error.message, /got 'text\/plaiñ'/);
  });

  it("counts a UTF-8 user id's 256-character limit in characters, not bytes", async () => {
    const ok = await post("/v1/chat/completions", chat(), { "x-svc-user-id": utf8Bytes("é".repeat(256)) });
    assert.equal(ok.status, 200, ok.text);
    assert.equal((await logOf(ok)).userId, "é".repeat(256));
    const over = await post("/v1/chat/completions", chat(), { "x-svc-user-id": utf8Bytes("é".repeat(257)) });
    assert.equal(over.status, 400);
    assert.equal(over.json().error.code, "invalid_user_id");
  });
});
