import assert from "node:assert/strict";
import { toErrorInfo } from "../../src/core/errors.js";
import type { ClientCodec } from "../../src/facades/gateway/codec.js";
import { deepFreeze } from "./freeze.js";

/** A bad body: the case's name, the body, the expected error code and the field the message must name. */
export type InvalidCase = [name: string, body: unknown, code: string, field: string];

/** One `it` per case: the codec refuses the (frozen) body with a 400 of that code, naming the field. */
export function itRejects(codec: ClientCodec, cases: InvalidCase[]): void {
  for (const [name, body, code, field] of cases) {
    it(`rejects ${name} with ${code}, naming ${field}`, () => {
      assert.throws(() => codec.parseRequest(deepFreeze(body)), (err) => {
        const info = toErrorInfo(err);
        assert.deepEqual([info.status, info.type, info.code], [400, "invalid_request_error", code]);
        assert.ok(info.message.includes(field), `message "${info.message}" names ${field}`);
        return true;
      });
    });
  }
}
