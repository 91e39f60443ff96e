import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const bin = fileURLToPath(new URL("../../bin/svc.js", import.meta.url));

const COMMANDS = [
  "serve", "demo", "version",
  "projects create", "projects list", "projects show", "projects update",
  "keys create", "keys list", "keys delete",
  "prompts put", "prompts list", "prompts show",
];

/** `svc --help` and `svc COMMAND --help`: no server is needed, and none is started. */
describe("svc help: each command's own usage and options", function () {
  this.timeout(120_000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-help-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  // A private data dir and a port nothing listens on: `svc serve --help` must not start a server.
  // At most 4 at a time: each one loads the CLI (through tsx when there is no build), and 26 at once
  // on a busy 2-core machine ran past the per-process timeout.
  let running = 0;
  const waiting: Array<() => void> = [];
  const slot = async () => {
    if (running < 4) running++;
    else await new Promise<void>((r) => waiting.push(r)); // the slot is handed over by release()
  };
  const release = () => {
    const next = waiting.shift();
    if (next) next();
    else running--;
  };
  const svc = async (...args: string[]) => {
    await slot();
    try {
      return await run(...args);
    } finally {
      release();
    }
  };
  const run = (...args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const env = { PATH: process.env.PATH, SVC_DATA_DIR: join(dir, "data"), SVC_GATEWAY_PORT: "0", SVC_MANAGEMENT_PORT: "0", SVC_GRPC_PORT: "0" };
      execFile(process.execPath, [bin, ...args], { env, cwd: dir, timeout: 60_000 }, (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr });
      });
    });
  const options = (text: string) => [...text.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1]).sort();

  it("prints a command's usage line and exactly the options it takes, with exit code 0, for every command", async () => {
    const global = (await svc("--help")).stdout;
    const [helps, refusals] = await Promise.all([
      Promise.all(COMMANDS.map((c) => svc(...c.split(" "), "--help"))),
      // The options the command line parser takes, as its refusal of an unknown one lists them.
      Promise.all(COMMANDS.map((c) => svc(...c.split(" "), "--no-such-option"))),
    ]);
    COMMANDS.forEach((command, i) => {
      const help = helps[i]!;
      assert.equal(help.code, 0, `${command}: ${help.stderr}`);
      assert.notEqual(help.stdout, global, `${command}: its own help, not the global usage`);
      assert.ok(help.stdout.startsWith(`svc ${command}: `), help.stdout);
      assert.match(help.stdout, new RegExp(`^Usage: svc ${command}\\b`, "m"), command);
      const taken = /\(it takes (.*)\)/.exec(refusals[i]!.stderr)?.[1]?.split(", ").sort();
      assert.ok(taken, `${command}: ${refusals[i]!.stderr}`);
      assert.deepEqual(options(help.stdout), taken, `${command}: the help lists the options the command takes`);
      assert.doesNotMatch(help.stdout, /svc gateway is running/);
      // A usage error prints its message, then that command's own help, not the whole CLI's.
      assert.equal(refusals[i]!.code, 2);
      assert.equal(refusals[i]!.stderr.slice(refusals[i]!.stderr.indexOf("\n\n") + 2), help.stdout, `${command}: the command's help after its usage error`);
    });
    const keysCreate = helps[COMMANDS.indexOf("keys create")]!.stdout;
    assert.match(keysCreate, /^Usage: svc keys create --project ID --mode live\|test \[--description D\] \[--json\]$/m);
    assert.match(keysCreate, /^ {2}--project ID +the project \(required\)$/m);
  });

  it("lists a group's commands for `svc GROUP --help`, takes `svc help COMMAND`, and keeps the global usage for `svc --help`", async () => {
    const [group, helpWord, flag, global, bare] = await Promise.all([
      svc("keys", "--help"),
      svc("help", "keys", "create"),
      svc("keys", "create", "--help"),
      svc("--help"),
      svc("help"),
    ]);
    assert.equal(group.code, 0);
    assert.deepEqual([...group.stdout.matchAll(/^ {2}svc (\S+ \S+)/gm)].map((m) => m[1]), ["keys create", "keys list", "keys delete"]);
    assert.equal(helpWord.code, 0);
    assert.equal(helpWord.stdout, flag.stdout);
    assert.equal(global.code, 0);
    assert.match(global.stdout, /^svc: the svc gateway/);
    assert.match(global.stdout, /svc COMMAND --help shows a command's own usage and options/);
    assert.equal(bare.stdout, global.stdout);
  });

  it("takes only -h and --help as help: a word of short options with h in it is refused as the unknown option it is", async () => {
    const [short, ...refused] = await Promise.all([
      svc("projects", "list", "-h"),
      svc("projects", "list", "-zh"),
      svc("keys", "delete", "-oh"),
      svc("prompts", "put", "-dash", "--project", "P", "--file", "f"),
      svc("-zh"),
    ]);
    assert.equal(short.code, 0);
    assert.match(short.stdout, /^svc projects list: /);
    for (const [res, word] of refused.map((r, i) => [r, ["-zh", "-oh", "-dash", "-zh"][i]!] as const)) {
      assert.equal(res.code, 2, `${word}: ${res.stdout}`);
      assert.match(res.stderr, new RegExp(`^error: unknown option '${word}'`), word);
      assert.equal(res.stdout, "");
    }
  });

  it("refuses help for a command that does not exist, with exit code 2", async () => {
    for (const args of [["nope", "--help"], ["keys", "nope", "--help"], ["help", "nope"]]) {
      const res = await svc(...args);
      assert.equal(res.code, 2, args.join(" "));
      assert.match(res.stderr, /^error: unknown command '(keys )?nope'/, args.join(" "));
    }
  });
});
