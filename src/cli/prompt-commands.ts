import { readFileSync } from "node:fs";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { MAX_PROMPT_BYTES } from "../core/telemetry/telemetry-service.js";
import type { Prompt } from "../gen/svc/telemetry/v1/telemetry_service_pb.js";
import { createTelemetryAdminClient, madeAtFirstCall, resolveAdminTarget, UsageError } from "./admin-client.js";
import { type Flags, need, out } from "./admin-commands.js";
import { printable, table } from "./table.js";

/** The largest prompt version: an int32, as GetPromptRequest.version and the management API's ?version= take it. */
const MAX_PROMPT_VERSION = 2_147_483_647;

/** Strict UTF-8: refuses malformed bytes; a leading BOM is kept, as the file has it. */
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** A prompt as the CLI prints it with --json. */
const promptJson = (p: Prompt, withContent: boolean) => ({
  name: p.name,
  version: p.version,
  description: p.description,
  created_at: p.createTime ? timestampDate(p.createTime).toISOString() : null,
  ...(withContent ? { content: p.content } : {}),
});

/**
 * `svc prompts put NAME --project ID --file F [--description D]` stores a new version of a prompt
 * (the first is version 1); `svc prompts list --project ID` (every prompt: it pages through them all)
 * and `svc prompts show NAME --project ID [--version N]` read them back, as the management API's
 * /v1/prompts does for a key's project.
 */
export async function promptsCommand(sub: string | undefined, args: string[], flags: Flags & { file?: string; version?: string }): Promise<void> {
  const client = madeAtFirstCall(() => createTelemetryAdminClient(resolveAdminTarget(flags)));
  // The server refuses a project id that names no project (NotFound, exit code 1) on every prompt
  // call, so a mistyped one files and lists nothing.
  const project = () => need(flags.project, "--project");
  switch (sub) {
    case "put": {
      const name = need(args[0], "NAME");
      const path = need(flags.file, "--file");
      const projectId = project();
      let bytes: Buffer;
      try {
        bytes = path === "-" ? readFileSync(0) : readFileSync(path);
      } catch (e) {
        throw new UsageError(`cannot read --file ${path}: ${(e as Error).message}`);
      }
      // Checked here too: a file far past it would fail on the transport's message limit instead, with its words.
      if (bytes.length > MAX_PROMPT_BYTES) throw new UsageError(`--file ${path} is ${bytes.length} bytes; a prompt version holds at most ${MAX_PROMPT_BYTES} (1 MiB)`);
      // Stored as UTF-8 text: a file in another encoding (Latin-1, UTF-16) is refused rather than
      // stored with its bytes replaced by U+FFFD.
      let content: string;
      try {
        content = utf8.decode(bytes);
      } catch {
        throw new UsageError(`--file ${path} is not UTF-8 text: convert it first (e.g. iconv -t UTF-8)`);
      }
      // The service refuses an empty prompt naming its field (`content`), which is not an option here.
      if (content === "") throw new UsageError(`--file ${path} is empty: a prompt needs some text`);
      const { prompt } = await client.putPrompt({ projectId, name, content, description: flags.description ?? "" });
      return out(flags, promptJson(prompt!, false), `Stored prompt ${prompt!.name} version ${prompt!.version} in project ${projectId}.`);
    }
    case "list": {
      // Every prompt, a page of at most 1000 (the largest the server gives) at a time.
      const projectId = project();
      const prompts: Prompt[] = [];
      let pageToken = "";
      do {
        const page = await client.listPrompts({ projectId, pageSize: 1000, pageToken });
        prompts.push(...page.prompts);
        pageToken = page.nextPageToken;
      } while (pageToken);
      const rows = [["NAME", "VERSION", "DESCRIPTION", "CREATED"], ...prompts.map((p) => { const j = promptJson(p, false); return [j.name, String(j.version), j.description, String(j.created_at)]; })];
      return out(flags, prompts.map((p) => promptJson(p, false)), prompts.length ? table(rows) : "No prompts.");
    }
    case "show": {
      const name = need(args[0], "NAME");
      let version = 0;
      if (flags.version !== undefined) {
        // A version is an int32 on the wire (and never goes past it): a larger number could not be
        // sent at all, so it is refused here, as any other bad value.
        version = /^\d+$/.test(flags.version) ? Number(flags.version) : NaN;
        if (!(version >= 1 && version <= MAX_PROMPT_VERSION)) throw new UsageError(`--version must be a whole number from 1 to ${MAX_PROMPT_VERSION}, got '${flags.version}'`);
      }
      // An unknown name or version is the server's NotFound (exit code 1).
      const prompt = (await client.getPrompt({ projectId: project(), name, version })).prompt!;
      return out(flags, promptJson(prompt, true), `${printable(prompt.name)} version ${prompt.version}${prompt.description ? ` (${printable(prompt.description)})` : ""}\n\n${prompt.content}`);
    }
    default:
      throw new UsageError(sub ? `unknown command 'prompts ${sub}'` : `'prompts' needs a subcommand`);
  }
}
