import { parseArgs } from "node:util";
import { ConnectError } from "@connectrpc/connect";
import { ConfigError, loadConfig } from "../config.js";
import { startServer } from "../server.js";
import { adminCallMessage, serverOf, UsageError } from "./admin-client.js";
import { keysCommand, out, projectsCommand, type Flags } from "./admin-commands.js";
import { promptsCommand } from "./prompt-commands.js";
import { packageVersion } from "./version.js";

const USAGE = `svc: the svc gateway

Usage:
  svc serve [--demo]                      start the gateway (embedded defaults: data in ./data)
  svc demo                                same as: svc serve --demo (built-in offline provider)
  svc version                             print the version (also: svc --version)
  svc projects create --name N --plan free|pro|enterprise [--rpm N] [--rpd N] [--user-rpm N] [--spend-cap-usd X] [--log-bodies on|off]
  svc projects list
  svc projects show PROJECT_ID            plan, limits and this month's usage
  svc projects update PROJECT_ID [--plan P] [--rpm N] [--rpd N] [--user-rpm N] [--spend-cap-usd X] [--log-bodies on|off]
                                          a value of "default" returns a limit to the plan's default
  svc keys create --project ID --mode live|test [--description D]
  svc keys list --project ID [--mode live|test]
  svc keys delete KEY_ID
  svc prompts put NAME --project ID --file F [--description D]   store a new version (--file - reads stdin)
  svc prompts list --project ID           every prompt (it pages through them all)
  svc prompts show NAME --project ID [--version N]

Admin commands (projects, keys, prompts) talk to a running server: --server URL (default
SVC_SERVER_URL, else http://$SVC_HOST:$SVC_GRPC_PORT as svc serve reads them, 127.0.0.1:8090),
--admin-token T (default SVC_ADMIN_TOKEN or $SVC_DATA_DIR/admin-token). Add --json for machine-readable output. Each command takes only the
options shown for it (and --help); any other is refused.
`;

/** Every option of any command, with its type. */
const OPTIONS = {
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
  // A prompt's version for `prompts show`; alone (`svc --version`) it asks for the CLI's version.
  version: { type: "boolean" },
} as const satisfies Record<string, { type: "string" | "boolean"; short?: string }>;

type Option = keyof typeof OPTIONS;

/** What the admin commands all take: where the server is, its token, and JSON output. */
const ADMIN: Option[] = ["server", "admin-token", "json"];
const LIMITS: Option[] = ["plan", "rpm", "rpd", "user-rpm", "spend-cap-usd", "log-bodies"];

interface CommandSpec {
  /** How many operands (ids, names) it takes after its subcommand; more is a usage error. */
  operands: number;
  /** The options it takes besides --help; any other is a usage error, never ignored. */
  options: Option[];
}

const COMMANDS: Record<string, CommandSpec> = {
  serve: { operands: 0, options: ["demo"] },
  demo: { operands: 0, options: [] },
  version: { operands: 0, options: ["json"] },
  "projects create": { operands: 0, options: [...ADMIN, "name", ...LIMITS] },
  "projects list": { operands: 0, options: ADMIN },
  "projects show": { operands: 1, options: ADMIN },
  "projects update": { operands: 1, options: [...ADMIN, ...LIMITS] },
  "keys create": { operands: 0, options: [...ADMIN, "project", "mode", "description"] },
  "keys list": { operands: 0, options: [...ADMIN, "project", "mode"] },
  "keys delete": { operands: 1, options: ADMIN },
  "prompts put": { operands: 1, options: [...ADMIN, "project", "file", "description"] },
  "prompts list": { operands: 0, options: [...ADMIN, "project"] },
  "prompts show": { operands: 1, options: [...ADMIN, "project", "version"] },
};

/** Commands without subcommands: what follows them is all operands. */
const SINGLE = new Set(["serve", "demo", "version"]);
const GROUPS = new Set(["projects", "keys", "prompts"]);

const optionList = (spec: CommandSpec) => [...spec.options, "help"].map((o) => `--${o}`).join(", ");

interface Parsed {
  command: string;
  spec: CommandSpec;
  values: Record<string, string | boolean | undefined>;
  operands: string[];
}

/**
 * Reads the command line in two passes: the first finds the command (options typed as any command
 * takes them; unknown ones tolerated), the second reads it strictly with that command's types and
 * refuses any option the command does not take, naming it and the command, rather than ignoring it.
 * Returns undefined when only the usage is wanted.
 */
function parseCommandLine(argv: string[]): Parsed | undefined {
  const first = parseArgs({ args: argv, allowPositionals: true, strict: false, tokens: true, options: OPTIONS });
  const [cmd, sub] = first.positionals;
  if (first.values.help === true || cmd === "help") return undefined;
  let command: string;
  if (cmd === undefined) {
    if (first.values.version !== true) {
      const option = first.tokens.find((t) => t.kind === "option");
      if (option) {
        throw new UsageError(option.name in OPTIONS ? `${option.rawName} needs a command (svc --help lists them)` : `unknown option '${option.rawName}'`);
      }
      return undefined;
    }
    command = "version";
  } else if (SINGLE.has(cmd)) command = cmd;
  else if (GROUPS.has(cmd)) {
    if (sub === undefined) throw new UsageError(`'${cmd}' needs a subcommand`);
    command = `${cmd} ${sub}`;
    if (!COMMANDS[command]) throw new UsageError(`unknown command '${command}'`);
  } else throw new UsageError(`unknown command '${cmd}'`);
  const spec = COMMANDS[command]!;

  // `prompts show` reads --version as a version number; elsewhere it is a switch (svc --version).
  const options = command === "prompts show" ? { ...OPTIONS, version: { type: "string" } as const } : OPTIONS;
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, strict: true, tokens: true, options });
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    const unknown = err.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && /Unknown option '([^']+)'/.exec(err.message);
    if (unknown) throw new UsageError(`unknown option '${unknown[1]}' for 'svc ${command}' (it takes ${optionList(spec)})`);
    if (err.code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") throw new UsageError(`${err.message} (svc ${command})`);
    throw e;
  }
  const seen = new Set<string>();
  for (const t of parsed.tokens) {
    if (t.kind !== "option") continue;
    const name = t.name as Option;
    // `svc --version` is the version command asked for as an option.
    if (command === "version" && name === "version" && cmd === undefined) continue;
    if (name !== "help" && !spec.options.includes(name)) {
      throw new UsageError(`'svc ${command}' does not take --${name} (it takes ${optionList(spec)})`);
    }
    if (seen.has(name)) throw new UsageError(`--${name} is given more than once`);
    seen.add(name);
  }
  // What follows the command (and its subcommand) is operands; `svc --version` has no command word.
  const operands = parsed.positionals.slice(cmd === undefined ? 0 : SINGLE.has(command) ? 1 : 2);
  if (operands.length > spec.operands) throw new UsageError(`unexpected argument '${operands[spec.operands]}'`);
  return { command, spec, values: parsed.values, operands };
}

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

/** The server the admin command talks to, for its error messages. */
let server = "";

async function main(argv: string[]): Promise<void> {
  const parsed = parseCommandLine(argv);
  if (!parsed) {
    process.stdout.write(USAGE);
    return;
  }
  const { command, values, operands } = parsed;
  const str = (name: string) => values[name] as string | undefined;
  const flags: Flags & { file?: string; version?: string } = {
    json: values.json === true,
    server: str("server"),
    adminToken: str("admin-token"),
    name: str("name"),
    plan: str("plan"),
    project: str("project"),
    mode: str("mode"),
    description: str("description"),
    rpm: str("rpm"),
    rpd: str("rpd"),
    userRpm: str("user-rpm"),
    spendCapUsd: str("spend-cap-usd"),
    logBodies: str("log-bodies"),
    file: str("file"),
    version: command === "prompts show" ? str("version") : undefined,
  };
  server = serverOf(flags);
  const [group, sub] = command.split(" ");
  if (command === "version") {
    const pkg = packageVersion();
    return out(flags, pkg, `${pkg.name} ${pkg.version}`);
  }
  if (command === "serve") return serve(values.demo === true);
  if (command === "demo") return serve(true);
  if (group === "projects") return projectsCommand(sub, operands, flags);
  if (group === "keys") return keysCommand(sub, operands, flags);
  return promptsCommand(sub, operands, flags);
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
    process.stderr.write(`error: ${adminCallMessage(e, server)}\n`);
    process.exit(1);
  }
  process.stderr.write(`error: ${(e as Error)?.message ?? String(e)}\n`);
  process.exit(1);
});
