import { parseArgs } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { ConfigError, loadConfig } from "../config.js";
import { carriesErrorInfo } from "../core/errors.js";
import { startServer } from "../server.js";
import { UsageError } from "./admin-client.js";
import { keysCommand, projectsCommand, type Flags } from "./admin-commands.js";
import { promptsCommand } from "./prompt-commands.js";

const USAGE = `svc: the svc gateway

Usage:
  svc serve [--demo]                      start the gateway (embedded defaults: data in ./data)
  svc demo                                same as: svc serve --demo (built-in offline provider)
  svc projects create --name N --plan free|pro|enterprise
  svc projects list
  svc projects show PROJECT_ID            plan, limits and this month's usage
  svc projects update PROJECT_ID [--plan P] [--rpm N] [--rpd N] [--user-rpm N] [--spend-cap-usd X] [--log-bodies on|off]
                                          a value of "default" returns a limit to the plan's default
  svc keys create --project ID --mode live|test [--description D]
  svc keys list --project ID
  svc keys delete KEY_ID
  svc prompts put NAME --project ID --file F [--description D]   store a new version (--file - reads stdin)
  svc prompts list --project ID           every prompt (it pages through them all)
  svc prompts show NAME --project ID [--version N]

Admin commands talk to a running server: --server URL (default SVC_SERVER_URL or
http://127.0.0.1:$SVC_GRPC_PORT, 8090), --admin-token T (default SVC_ADMIN_TOKEN or
$SVC_DATA_DIR/admin-token). Add --json for machine-readable output.
`;

/** How many operands (ids, names) each command takes after its subcommand; more is a usage error. */
const OPERANDS: Record<string, number> = {
  serve: 0,
  demo: 0,
  "projects create": 0,
  "projects list": 0,
  "projects show": 1,
  "projects update": 1,
  "keys create": 0,
  "keys list": 0,
  "keys delete": 1,
  "prompts put": 1,
  "prompts list": 0,
  "prompts show": 1,
};

async function serve(demo: boolean): Promise<void> {
  const config = loadConfig();
  const running = await startServer(config, { demo });
  const lines = [
    "svc gateway is running",
    `  gateway     ${running.gatewayUrl}/v1   (POST /chat/completions, /messages)`,
    `  management  ${running.managementUrl}/v1`,
    `  core gRPC   ${running.grpcUrl}   (gRPC, Connect and gRPC-Web)`,
    `  data dir    ${config.dataDir}${config.redisUrl ? " (registry in Redis)" : ""}`,
    running.adminTokenPath ? `  admin token ${running.adminTokenPath}` : "  admin token from SVC_ADMIN_TOKEN",
  ];
  if (running.demo) lines.push(`  demo provider ${running.demo.url} (every model is answered by the built-in fake provider)`);
  process.stdout.write(`${lines.join("\n")}\n`);
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`received ${signal}, shutting down\n`);
    await running.close();
    process.exit(0);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
}

async function main(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      demo: { type: "boolean" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
      server: { type: "string" },
      "admin-token": { type: "string" },
      name: { type: "string" },
      plan: { type: "string" },
      project: { type: "string" },
      mode: { type: "string" },
      description: { type: "string" },
      rpm: { type: "string" },
      rpd: { type: "string" },
      "user-rpm": { type: "string" },
      "spend-cap-usd": { type: "string" },
      "log-bodies": { type: "string" },
      file: { type: "string" },
      version: { type: "string" },
    },
  });
  const [cmd, sub, ...rest] = positionals;
  const flags: Flags = { ...values, adminToken: values["admin-token"], userRpm: values["user-rpm"], spendCapUsd: values["spend-cap-usd"], logBodies: values["log-bodies"] };
  if (values.help || !cmd || cmd === "help") {
    process.stdout.write(USAGE);
    return;
  }
  // serve and demo take no subcommand: what follows them is all operands.
  const noSub = cmd === "serve" || cmd === "demo";
  const operands = OPERANDS[noSub ? cmd : `${cmd} ${sub ?? ""}`];
  // An unknown subcommand is reported as such by its command, below.
  const extra = operands === undefined ? [] : (noSub ? [sub, ...rest].filter((a) => a !== undefined) : rest).slice(operands);
  if (extra.length) throw new UsageError(`unexpected argument '${extra[0]}'`);
  if (cmd === "serve") return serve(values.demo === true);
  if (cmd === "demo") return serve(true);
  if (cmd === "projects") return projectsCommand(sub, rest, flags);
  if (cmd === "keys") return keysCommand(sub, rest, flags);
  if (cmd === "prompts") return promptsCommand(sub, rest, flags);
  throw new UsageError(`unknown command '${cmd}'`);
}

main(process.argv.slice(2)).catch((e: unknown) => {
  const parseError = ["ERR_PARSE_ARGS_UNKNOWN_OPTION", "ERR_PARSE_ARGS_INVALID_OPTION_VALUE"].includes((e as NodeJS.ErrnoException)?.code ?? "");
  if (e instanceof UsageError || parseError) {
    process.stderr.write(`error: ${(e as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (e instanceof ConfigError) {
    process.stderr.write(`configuration error: ${e.message}\n`);
    process.exit(2);
  }
  if (e instanceof ConnectError) {
    // The server's own 503 (its registry's Redis is unreachable) says so itself: only a server
    // that did not answer at all gets the hint.
    const hint =
      (e.code === Code.Unavailable && !carriesErrorInfo(e)) || (e.code === Code.Unknown && /ECONNREFUSED|fetch failed/.test(e.rawMessage))
        ? " (is `svc serve` running? set --server or SVC_SERVER_URL)"
        : e.code === Code.Unauthenticated
          ? " (check SVC_ADMIN_TOKEN or --admin-token)"
          : "";
    // A server that is not the core (the gateway's or the management port) answers with no message.
    const message = e.rawMessage || `the server answered ${Code[e.code]} with no message; is --server the core's gRPC port (SVC_GRPC_PORT, 8090)?`;
    process.stderr.write(`error: ${message}${hint}\n`);
    process.exit(1);
  }
  process.stderr.write(`error: ${(e as Error)?.message ?? String(e)}\n`);
  process.exit(1);
});
