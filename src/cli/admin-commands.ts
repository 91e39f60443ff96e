import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ApiKey, Project } from "../gen/svc/auth/v1/auth_service_pb.js";
import { KeyMode } from "../gen/svc/common/v1/key_mode_pb.js";
import { planName, planOf } from "../core/auth/plans.js";
import { type AdminTarget, createAdminClient, createLimitsAdminClient, madeAtFirstCall, resolveAdminTarget, UsageError } from "./admin-client.js";
import { type LimitFlags, limitChangeFromFlags, projectChangeFromFlags, projectDetailJson, projectDetailText } from "./project-view.js";
import { table } from "./table.js";

export interface Flags extends LimitFlags {
  json?: boolean;
  server?: string;
  adminToken?: string;
  name?: string;
  project?: string;
  mode?: string;
  description?: string;
}

/** A project as the CLI prints it with --json. */
const projectJson = (p: Project) => ({
  id: p.id,
  name: p.name,
  plan: planName(p.plan),
  created_at: p.createTime ? timestampDate(p.createTime).toISOString() : null,
});

/** A key as the CLI prints it with --json (never its value, except once at creation). */
const keyJson = (k: ApiKey) => ({
  id: k.id,
  project_id: k.projectId,
  mode: k.mode === KeyMode.TEST ? "test" : "live",
  description: k.description,
  display_prefix: k.displayPrefix,
  created_at: k.createTime ? timestampDate(k.createTime).toISOString() : null,
});

/** Prints `json` with --json, else the human-readable text. */
export const out = (flags: Flags, json: unknown, human: string) => {
  process.stdout.write(flags.json ? `${JSON.stringify(json, null, 2)}\n` : `${human}\n`);
};

export const need = (v: string | undefined, flag: string): string => {
  if (!v) throw new UsageError(`${flag} is required`);
  return v;
};

export async function projectsCommand(sub: string | undefined, args: string[], flags: Flags): Promise<void> {
  // Found once (the token may be read from a file), at the first call.
  let found: AdminTarget | undefined;
  const target = () => (found ??= resolveAdminTarget(flags));
  const client = madeAtFirstCall(() => createAdminClient(target()));
  switch (sub) {
    case "create": {
      const name = need(flags.name, "--name");
      need(flags.plan, "--plan");
      // The limit flags of `update` apply at creation too, in the same request (the project is
      // made with them or not at all); "default" is what a new project has anyway.
      const { plan, overrides, logBodies } = limitChangeFromFlags(flags);
      const { project } = await client.createProject({ name, plan: planOf(plan!), limitOverrides: overrides, logBodies });
      const j = projectDetailJson(project!);
      const human = `Created project ${project!.id} (${project!.name}, plan ${plan}).`;
      // The limits are shown when some were set, so the user sees what applies.
      const custom = Object.keys(overrides).length > 0 || logBodies === false;
      return out(flags, j, custom ? `${human}\n\n${projectDetailText(j)}` : human);
    }
    case "list": {
      const { projects } = await client.listProjects({});
      const rows = [["ID", "NAME", "PLAN", "CREATED"], ...projects.map((p) => Object.values(projectJson(p)).map(String))];
      return out(flags, projects.map(projectJson), projects.length ? table(rows) : "No projects yet.");
    }
    case "show": {
      const id = need(args[0], "PROJECT_ID");
      const { project } = await client.getProject({ projectId: id });
      // While the registry's Redis is down, a project this replica read before is still answered
      // (from memory) but its keys cannot be listed: the project is shown without their count.
      const keys = await client.listKeys({ projectId: id }).then(
        (r) => r.keys.length,
        (e: unknown) => {
          if (!(e instanceof ConnectError && e.code === Code.Unavailable)) throw e;
          process.stderr.write(`note: the key count is not shown: ${e.rawMessage}\n`);
          return undefined;
        },
      );
      // Usage is a nicety: a server without limits (or with its store down) still shows the project,
      // saying why the month's spend is missing (read as none spent, it would mislead).
      const usage = await createLimitsAdminClient(target()).getUsage({ projectId: id }).catch((e: unknown) => {
        const why = e instanceof ConnectError ? e.rawMessage : String((e as Error)?.message ?? e);
        process.stderr.write(`note: this month's spend and request counts are not shown: ${why}\n`);
        return undefined;
      });
      const j = projectDetailJson(project!, { keys, usage });
      return out(flags, j, projectDetailText(j));
    }
    case "update": {
      const id = need(args[0], "PROJECT_ID");
      const { project } = await client.updateProject(projectChangeFromFlags(id, flags));
      const j = projectDetailJson(project!);
      return out(flags, j, `Updated project ${j.id}.\n\n${projectDetailText(j)}`);
    }
    default:
      throw new UsageError(sub ? `unknown command 'projects ${sub}'` : `'projects' needs a subcommand`);
  }
}

export async function keysCommand(sub: string | undefined, args: string[], flags: Flags): Promise<void> {
  const client = madeAtFirstCall(() => createAdminClient(resolveAdminTarget(flags)));
  switch (sub) {
    case "create": {
      const mode = need(flags.mode, "--mode");
      if (mode !== "live" && mode !== "test") throw new UsageError(`--mode must be live or test, got '${mode}'`);
      const res = await client.createKey({
        projectId: need(flags.project, "--project"),
        mode: mode === "test" ? KeyMode.TEST : KeyMode.LIVE,
        description: flags.description ?? "",
      });
      return out(
        flags,
        { ...keyJson(res.key!), key: res.secret },
        `Created ${mode} key ${res.key!.id} in project ${res.key!.projectId}.\n\n  ${res.secret}\n\nThis is the only time the key is shown; store it somewhere safe (not in version control).`,
      );
    }
    case "list": {
      // --mode narrows the list to live or test keys.
      const mode = flags.mode;
      if (mode !== undefined && mode !== "live" && mode !== "test") throw new UsageError(`--mode must be live or test, got '${mode}'`);
      const all = (await client.listKeys({ projectId: need(flags.project, "--project") })).keys;
      const keys = mode === undefined ? all : all.filter((k) => (k.mode === KeyMode.TEST ? "test" : "live") === mode);
      const rows = [["ID", "MODE", "PREFIX", "DESCRIPTION", "CREATED"], ...keys.map((k) => { const j = keyJson(k); return [j.id, j.mode, j.display_prefix, j.description, String(j.created_at)]; })];
      return out(flags, keys.map(keyJson), keys.length ? table(rows) : mode ? `No ${mode} keys in this project.` : "No keys in this project.");
    }
    case "delete": {
      const id = need(args[0], "KEY_ID");
      await client.deleteKey({ keyId: id });
      return out(flags, { id, deleted: true }, `Deleted key ${id}; requests that use it now fail.`);
    }
    default:
      throw new UsageError(sub ? `unknown command 'keys ${sub}'` : `'keys' needs a subcommand`);
  }
}
