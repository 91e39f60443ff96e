import { parseArgs } from "node:util";
import { ConnectError } from "@connectrpc/connect";
import { ConfigError, loadConfig } from "../config.js";
import { startServer } from "../server.js";
import { adminCallMessage, adminTokenSource, serverOf, UsageError } from "./admin-client.js";
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
--admin-token T (default SVC_ADMIN_TOKEN or $SVC_DATA_DIR/admin-token). Add --json for
machine-readable output. Each command takes only the options shown for it (and --help); any other
is refused. svc COMMAND --help shows a command's own usage and options.
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
  /** What follows the command on its usage line (`svc <command> <usage>`). */
  usage: string;
  /** What it does, in a line. */
  about: string;
  /** Where an option means something of its own here: its help on this command. */
  optionHelp?: Partial<Record<Option, string>>;
}

const LIMIT_USAGE = "[--rpm N] [--rpd N] [--user-rpm N] [--spend-cap-usd X] [--log-bodies on|off]";

const COMMANDS: Record<string, CommandSpec> = {
  serve: { operands: 0, options: ["demo"], usage: "[--demo]", about: "start the gateway (settings from the environment and svc.config.json; data in ./data by default)" },
  demo: { operands: 0, options: [], usage: "", about: "same as: svc serve --demo (built-in offline provider)" },
  version: { operands: 0, options: ["json"], usage: "[--json]", about: "print the package's name and version (also: svc --version)" },
  "projects create": { operands: 0, options: [...ADMIN, "name", ...LIMITS], usage: `--name N --plan free|pro|enterprise ${LIMIT_USAGE} [--json]`, about: "create a project, with its limits set in the same step", optionHelp: { plan: "free, pro or enterprise (required): keys per project and default limits" } },
  "projects list": { operands: 0, options: ADMIN, usage: "[--json]", about: "list the projects" },
  "projects show": { operands: 1, options: ADMIN, usage: "PROJECT_ID [--json]", about: "a project's plan, limits, keys and this month's spend" },
  "projects update": { operands: 1, options: [...ADMIN, ...LIMITS], usage: `PROJECT_ID [--plan P] ${LIMIT_USAGE} [--json]`, about: "change a project's plan, limits or body logging" },
  "keys create": { operands: 0, options: [...ADMIN, "project", "mode", "description"], usage: "--project ID --mode live|test [--description D] [--json]", about: "create a key (its value is shown this once)" },
  "keys list": { operands: 0, options: [...ADMIN, "project", "mode"], usage: "--project ID [--mode live|test] [--json]", about: "list a project's keys (never their values)", optionHelp: { mode: "only live, or only test, keys" } },
  "keys delete": { operands: 1, options: ADMIN, usage: "KEY_ID [--json]", about: "delete a key: its very next request fails" },
  "prompts put": { operands: 1, options: [...ADMIN, "project", "file", "description"], usage: "NAME --project ID --file F [--description D] [--json]", about: "store a new version of a prompt" },
  "prompts list": { operands: 0, options: [...ADMIN, "project"], usage: "--project ID [--json]", about: "every prompt of a project, at its latest version (it pages through them all)" },
  "prompts show": { operands: 1, options: [...ADMIN, "project", "version"], usage: "NAME --project ID [--version N] [--json]", about: "a prompt's content, at its latest version or --version N" },
};

/** Each option's value, as its help shows it, and what it does. */
const OPTION_HELP: Record<Option, [value: string, about: string]> = {
  demo: ["", "answer every model from the built-in offline provider"],
  json: ["", "machine-readable output"],
  help: ["", "show this help"],
  server: ["URL", "the core's gRPC address (default SVC_SERVER_URL, else http://$SVC_HOST:$SVC_GRPC_PORT, 127.0.0.1:8090)"],
  "admin-token": ["T", "the admin token (default SVC_ADMIN_TOKEN, else the file $SVC_DATA_DIR/admin-token)"],
  name: ["N", "the project's name (required)"],
  plan: ["P", "free, pro or enterprise: keys per project and default limits"],
  project: ["ID", "the project (required)"],
  mode: ["live|test", "the key's mode (required)"],
  description: ["D", "a description to keep with it"],
  rpm: ["N", "requests per minute (live keys), or default for the plan's"],
  rpd: ["N", "requests per day (live keys), or default for the plan's"],
  "user-rpm": ["N", "requests per minute per X-Svc-User-Id, or default"],
  "spend-cap-usd": ["X", "monthly spend cap in USD, or default"],
  "log-bodies": ["on|off", "keep request and response bodies in the logs"],
  file: ["F", "the file holding the prompt (- reads stdin)"],
  version: ["N", "the prompt version (default: the latest)"],
};

/** The help of one command: its usage line and every option it takes. */
function commandHelp(command: string): string {
  const spec = COMMANDS[command]!;
  // Its own options first, then those every admin command takes.
  const options = [...spec.options.filter((o) => !ADMIN.includes(o)), ...spec.options.filter((o) => ADMIN.includes(o)), "help" as const];
  const rows = options.map((o) => {
    const [value, about] = OPTION_HELP[o];
    return [`--${o}${value ? ` ${value}` : ""}`, spec.optionHelp?.[o] ?? about];
  });
  const width = Math.max(...rows.map(([flag]) => flag!.length));
  return [
    `svc ${command}: ${spec.about}`,
    "",
    `Usage: svc ${command}${spec.usage ? ` ${spec.usage}` : ""}`,
    "",
    "Options:",
    ...rows.map(([flag, about]) => `  ${flag!.padEnd(width)}  ${about}`),
    "",
  ].join("\n");
}

/** The help of a group (projects, keys, prompts): its commands. */
function groupHelp(group: string): string {
  const commands = Object.keys(COMMANDS).filter((c) => c.startsWith(`${group} `));
  return [
    `svc ${group}: ${commands.map((c) => c.slice(group.length + 1)).join(", ")}`,
    "",
    "Usage:",
    ...commands.map((c) => `  svc ${c} ${COMMANDS[c]!.usage}`),
    "",
    `svc ${group} COMMAND --help shows a command's options.`,
    "",
  ].join("\n");
}

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
 * The help asked for with --help (or `svc help ...`): a command's own, a group's, or the usage of
 * them all. A command that does not exist is a usage error, as it is without --help.
 */
function helpFor(words: string[]): string {
  const [cmd, sub] = words;
  if (cmd === undefined) return USAGE;
  if (SINGLE.has(cmd)) return commandHelp(cmd);
  if (!GROUPS.has(cmd)) throw new UsageError(`unknown command '${cmd}'`);
  if (sub === undefined) return groupHelp(cmd);
  if (!COMMANDS[`${cmd} ${sub}`]) throw new UsageError(`unknown command '${cmd} ${sub}'`);
  return commandHelp(`${cmd} ${sub}`);
}

/**
 * `--rpm -1` and `--description "-x"` as `--rpm=-1` and `--description=-x`: a value that starts with
 * one `-` after an option that takes one is that option's value, unless it is an option the CLI
 * knows (`-h`). A word that starts with `--` never is (`--name --json` is still a missing value, and
 * a mistyped option is refused, not taken as a name). node's parseArgs refuses such a value as
 * ambiguous, so a bad number got its words instead of the CLI's own check, and a description that
 * starts with a dash could only be given with `=`.
 */
function dashValuesAttached(argv: string[], options: Record<string, { type: "string" | "boolean"; short?: string }>): string[] {
  const known = (arg: string) => (arg.startsWith("--") ? arg.slice(2).split("=")[0]! in options : Object.values(options).some((o) => o.short && arg === `-${o.short}`));
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv[i + 1];
    if (arg === "--") {
      out.push(...argv.slice(i));
      break;
    }
    if (arg.startsWith("--") && !arg.includes("=") && options[arg.slice(2)]?.type === "string" && next !== undefined && next.startsWith("-") && !next.startsWith("--") && !known(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}

type Tokens = NonNullable<ReturnType<typeof parseArgs>["tokens"]>;

/** `-zh`, `-dash`: several short options in one word, which the CLI never takes (its one short option is -h). */
const isCluster = (word: string) => /^-[^-]./.test(word);

/**
 * Help is asked for only by the words -h and --help themselves: parseArgs reads `-zh` or `-dash`
 * (a name that starts with a dash, given without `--` before it) as short options, -h among them,
 * and those printed the help with exit code 0 where `-q` was refused as the unknown option it is.
 */
function helpAsked(argv: string[], tokens: Tokens): boolean {
  return tokens.some((t) => t.kind === "option" && t.name === "help" && (argv[t.index] === "-h" || argv[t.index] === "--help"));
}

/**
 * The word an unknown short option came from, to name it in the refusal: `-dash`, not the `-d`
 * parseArgs found in it.
 */
function wordOf(rawName: string, args: string[], options: Record<string, { type: "string" | "boolean"; short?: string }>): string {
  if (rawName.startsWith("--")) return rawName;
  const { tokens } = parseArgs({ args, allowPositionals: true, strict: false, tokens: true, options });
  const token = tokens.find((t) => t.kind === "option" && t.rawName === rawName);
  return token ? args[token.index]! : rawName;
}

/**
 * Reads the command line in two passes: the first finds the command (options typed as any command
 * takes them; unknown ones tolerated), the second reads it strictly with that command's types and
 * refuses any option the command does not take, naming it and the command, rather than ignoring it.
 * Returns the help text when help is wanted (--help, -h, `svc help ...`, or no command at all).
 */
function parseCommandLine(argv: string[]): Parsed | { help: string } {
  const first = parseArgs({ args: argv, allowPositionals: true, strict: false, tokens: true, options: OPTIONS });
  const [cmd, sub] = first.positionals;
  if (cmd === "help") return { help: helpFor(first.positionals.slice(1)) };
  if (helpAsked(argv, first.tokens)) return { help: helpFor(first.positionals) };
  let command: string;
  if (cmd === undefined) {
    if (first.values.version !== true) {
      const option = first.tokens.find((t) => t.kind === "option");
      if (option) {
        throw new UsageError(option.name in OPTIONS && !isCluster(argv[option.index]!) ? `${option.rawName} needs a command (svc --help lists them)` : `unknown option '${argv[option.index]}'`);
      }
      return { help: USAGE };
    }
    command = "version";
  } else if (SINGLE.has(cmd)) command = cmd;
  else if (GROUPS.has(cmd)) {
    groupInError = cmd;
    if (sub === undefined) throw new UsageError(`'${cmd}' needs a subcommand`);
    command = `${cmd} ${sub}`;
    if (!COMMANDS[command]) throw new UsageError(`unknown command '${command}'`);
  } else throw new UsageError(`unknown command '${cmd}'`);
  const spec = COMMANDS[command]!;
  commandInError = command;

  // `prompts show` reads --version as a version number; elsewhere it is a switch (svc --version).
  const options = command === "prompts show" ? { ...OPTIONS, version: { type: "string" } as const } : OPTIONS;
  const args = dashValuesAttached(argv, options);
  let parsed;
  try {
    parsed = parseArgs({ args, allowPositionals: true, strict: true, tokens: true, options });
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    const unknown = err.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && /Unknown option '([^']+)'/.exec(err.message);
    if (unknown) throw new UsageError(`unknown option '${wordOf(unknown[1]!, args, options)}' for 'svc ${command}' (it takes ${optionList(spec)})`);
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
  serving = true;
  const config = loadConfig();
  // A signal while it starts (a Redis slow to answer holds the start for seconds) is kept and acted
  // on once it has started: a clean stop, exit code 0, not Node's default death (exit code 143)
  // half-way through opening the data dir and the log store. bin/svc.js catches them from its
  // first moment (ServeSignals); run otherwise, from here on.
  // SIGHUP: the terminal or ssh session that ran `svc serve` closed: as clean a stop (Node's default
  // for SIGHUP is to die at once, losing the logs and charges not yet written).
  const signals = serveSignals();
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
  let stopping = false;
  signals.handler = (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`received ${signal}, shutting down\n`);
    void running.close().then(() => process.exit(0));
  };
  if (signals.first) return signals.handler(`${signals.first} while starting`);
  // Said once the signals are handled: whoever waits for this line may stop it at once.
  process.stdout.write(`${lines.join("\n")}\n`);
}

/** The stop signals of `svc serve`, caught by bin/svc.js: the first that came before `handler` was set. */
interface ServeSignals {
  first: string | undefined;
  handler: ((signal: string) => void) | undefined;
}

/** Those bin/svc.js caught; when run otherwise (the built main.js directly), caught from here on. */
function serveSignals(): ServeSignals {
  const key = Symbol.for("svc.serve-signals");
  const caught = (globalThis as Record<symbol, ServeSignals | undefined>)[key];
  if (caught) return caught;
  const signals: ServeSignals = { first: undefined, handler: undefined };
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, () => (signals.handler ? signals.handler(signal) : void (signals.first ??= signal)));
  return signals;
}

/** Set once `svc serve` runs: output it cannot write then stops nothing. */
let serving = false;
/**
 * Output that cannot be written: a reader that stopped early (`svc projects list | head -1`, EPIPE),
 * a full disk or /dev/full (ENOSPC), a terminal hung up (EIO). Each killed the process with an
 * unhandled error and a stack trace: `svc serve` then died at its next log line, without its clean
 * shutdown (request logs and charges not yet written were lost). `svc serve` now goes on serving,
 * and stops cleanly on its signal, what it could not print dropped. An admin command whose reader
 * left stops quietly (exit code 0, as Node's own tools do); one whose output failed otherwise says
 * so on stderr, exit code 1.
 */
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (e: NodeJS.ErrnoException) => {
    if (serving) return;
    if (e.code === "EPIPE") process.exit(0);
    if (stream === process.stdout) process.stderr.write(`error: the output could not be written (${e.message}); the command itself may have taken effect\n`);
    process.exit(1);
  });
}

/** The server the admin command talks to, for its error messages. */
let server = "";
/** The command being read, once known: a usage error prints its help rather than the whole CLI's. */
let commandInError: string | undefined;
/** The command group being read, once known: its help, when the command in it is not. */
let groupInError: string | undefined;
let tokenSource: string | undefined;

async function main(argv: string[]): Promise<void> {
  const parsed = parseCommandLine(argv);
  if ("help" in parsed) {
    process.stdout.write(parsed.help);
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
  tokenSource = adminTokenSource(flags);
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
    const help = commandInError && COMMANDS[commandInError] ? commandHelp(commandInError) : groupInError ? groupHelp(groupInError) : USAGE;
    process.stderr.write(`error: ${(e as Error).message}\n\n${help}`);
    process.exit(2);
  }
  if (e instanceof ConfigError) {
    process.stderr.write(`configuration error: ${e.message}\n`);
    process.exit(2);
  }
  if (e instanceof ConnectError) {
    process.stderr.write(`error: ${adminCallMessage(e, server, process.env, tokenSource)}\n`);
    process.exit(1);
  }
  process.stderr.write(`error: ${(e as Error)?.message ?? String(e)}\n`);
  process.exit(1);
});
