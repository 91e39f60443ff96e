import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { LIMITS, rowOfLog } from "../../../src/core/telemetry/log-row.js";
import { cutText, isWellFormed } from "../../../src/core/text.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import { type RequestLog, RequestLogSchema } from "../../../src/gen/svc/telemetry/v1/telemetry_service_pb.js";
import { T0 } from "../../support/telemetry.js";

const LONE_HIGH = "\ud83d";
const LONE_LOW = "\ude00";
const EMOJI = "😀"; // "\ud83d\ude00"

const logOf = (over: Partial<Omit<RequestLog, "$typeName" | "$unknown">> = {}): RequestLog =>
  create(RequestLogSchema, {
    requestId: "req_000000000000000000000001",
    projectId: "proj_a",
    keyId: "key_1",
    keyMode: KeyMode.LIVE,
    endpoint: "/v1/chat/completions",
    model: "chat-4o",
    provider: "openai",
    status: 200,
    cache: "MISS",
    requestBody: "{}",
    responseBody: "{}",
    ...over,
  });

const rowOf = (l: RequestLog) => rowOfLog(l, { bodyTtlDays: 30, nowMs: T0 }).row;

/** Every string of a row, metadata keys and values included, with where it is. */
function strings(row: object): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [k, v] of Object.entries(row)) {
    if (typeof v === "string") out.push([k, v]);
    else if (v && typeof v === "object") for (const [mk, mv] of Object.entries(v)) out.push([`${k} key`, mk], [`${k}[${mk}]`, String(mv)]);
  }
  return out;
}

describe("log row", () => {
  it("makes every string of the row well-formed: a lone surrogate becomes U+FFFD, whole characters stay", () => {
    const odd = (s: string) => `${s}${LONE_HIGH}x${LONE_LOW}${EMOJI}`;
    const row = rowOf(
      logOf({
        keyId: odd("key"),
        endpoint: odd("/v1/x"),
        model: odd("m"),
        provider: odd("p"),
        errorType: odd("t"),
        errorCode: odd("c"),
        cache: odd("miss"),
        userId: odd("alice"),
        metadata: { [odd("k")]: odd("v"), plain: `{"k":"${LONE_HIGH}"}` },
        requestBody: odd("{}"),
        responseBody: odd("{}"),
      }),
    );
    for (const [where, s] of strings(row)) assert.ok(isWellFormed(s), `${where}: ${JSON.stringify(s)}`);
    assert.equal(row.user_id, `alice\ufffdx\ufffd${EMOJI}`);
    assert.equal(row.metadata[`k\ufffdx\ufffd${EMOJI}`], `v\ufffdx\ufffd${EMOJI}`);
    assert.equal(row.metadata.plain, `{"k":"\ufffd"}`);
    assert.equal(row.request_body, `{}\ufffdx\ufffd${EMOJI}`);
    // What JSON.stringify writes for the row has no surrogate escape left for the engine to refuse.
    assert.doesNotMatch(JSON.stringify(row), /\\ud[89a-f]/i);
  });

  it("cuts free text at its limit between characters, never inside a surrogate pair", () => {
    const at = (n: number) => "a".repeat(n - 1) + EMOJI.repeat(4); // the n-th code unit is an emoji's first half
    const row = rowOf(
      logOf({
        userId: at(LIMITS.text),
        metadata: { [at(LIMITS.metadataKey)]: at(LIMITS.metadataValue) },
        requestBody: at(LIMITS.bodyChars),
        responseBody: "b".repeat(LIMITS.bodyChars) + EMOJI, // cut right before a pair: nothing to drop
      }),
    );
    assert.equal(row.user_id, "a".repeat(LIMITS.text - 1), "the half emoji is dropped, not replaced");
    assert.deepEqual(row.metadata, { ["a".repeat(LIMITS.metadataKey - 1)]: "a".repeat(LIMITS.metadataValue - 1) });
    assert.equal(row.request_body, "a".repeat(LIMITS.bodyChars - 1));
    assert.equal(row.response_body, "b".repeat(LIMITS.bodyChars));
    // One more code unit of room keeps the whole emoji.
    assert.equal(rowOf(logOf({ userId: "a".repeat(LIMITS.text - 2) + EMOJI.repeat(4) })).user_id, "a".repeat(LIMITS.text - 2) + EMOJI);
  });

  it("keeps well-formed text as it is", () => {
    const body = `{"content":"${"日本語 ".repeat(1000)}${EMOJI}"}`;
    const row = rowOf(logOf({ requestBody: body, userId: "ünï", metadata: { team: "search" } }));
    assert.equal(row.request_body, body);
    assert.equal(row.user_id, "ünï");
    assert.deepEqual(row.metadata, { team: "search" });
  });

  it("cutText: at most n code units, one fewer where the n-th starts a pair", () => {
    assert.equal(cutText("abc", 5), "abc");
    assert.equal(cutText("abc", 2), "ab");
    assert.equal(cutText(`a${EMOJI}b`, 2), "a");
    assert.equal(cutText(`a${EMOJI}b`, 3), `a${EMOJI}`);
    assert.equal(cutText(`${EMOJI}`, 1), "");
    assert.equal(cutText(`a${LONE_LOW}b`, 2), `a${LONE_LOW}`, "a lone second half is left for wellFormed to replace");
  });
});
