/**
 * A child process for the file-descriptor test: run under a low `ulimit -n`, it fills its
 * descriptors with open files, then makes an upstream call to URL, and prints the error it got as
 * JSON (`{status, code}`), or `ok`.
 *
 *   node --import tsx test/support/emfile-upstream.ts URL
 */
import { openSync } from "node:fs";
import { Cancellation } from "../../src/core/cancel.js";
import { toErrorInfo } from "../../src/core/errors.js";
import { createUpstreamHttp } from "../../src/core/proxy/upstream-http.js";

const url = process.argv[2]!;
const http = createUpstreamHttp({ connectMs: 2000, firstByteMs: 2000, idleMs: 2000, totalMs: 5000 });
const held: number[] = [];
try {
  for (;;) held.push(openSync("/dev/null", "r"));
} catch {
  // every descriptor taken
}
try {
  const res = await http.send({ url, headers: {}, body: "{}" }, new Cancellation());
  await res.text(1024);
  process.stdout.write("ok\n");
} catch (e) {
  const info = toErrorInfo(e);
  process.stdout.write(`${JSON.stringify({ status: info.status, code: info.code })}\n`);
}
process.exit(0);
