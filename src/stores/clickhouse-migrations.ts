import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ClickHouseClient } from "@clickhouse/client";
import type { AppliedMigration } from "./telemetry-store.js";

/** A migration file: `<version>_<name>.sql`, the version a UTC timestamp `YYYYMMDDhhmmss`. */
export interface Migration {
  version: string;
  name: string;
  checksum: string;
  statements: string[];
}

const FILE = /^(\d{14})_([a-z0-9_]+)\.sql$/;

/**
 * `deploy/clickhouse/migrations` of this package, found from this module's location, which is
 * `src/stores/` when run as TypeScript and `dist/src/stores/` when built.
 */
export function defaultMigrationsDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const candidate = join(dir, "deploy", "clickhouse", "migrations");
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  throw new Error("cannot find deploy/clickhouse/migrations");
}

/** The migration files of a directory, oldest first. */
export function readMigrations(dir: string): Migration[] {
  return readdirSync(dir)
    .filter((f) => FILE.test(f))
    .sort()
    .map((f) => {
      const [, version, name] = FILE.exec(f)!;
      const text = readFileSync(join(dir, f), "utf8");
      return { version: version!, name: name!, checksum: createHash("sha256").update(text).digest("hex"), statements: splitStatements(text) };
    });
}

/**
 * The statements of a migration file: `--` comment lines dropped, then split where a line ends in
 * `;`. Migration files are ours, so this needs no full SQL lexer; they keep semicolons out of
 * string literals at line ends.
 */
export function splitStatements(text: string): string[] {
  const lines = text.split("\n").filter((l) => !l.trimStart().startsWith("--"));
  return lines
    .join("\n")
    .split(/;[ \t]*(?:\n|$)/)
    .map((s) => s.trim())
    .filter(Boolean);
}

/**
 * Applies the migrations not yet recorded in `schema_migrations`, in order, and records each. Every
 * statement is idempotent (`IF NOT EXISTS`), so a migration interrupted halfway, or applied by two
 * replicas starting together, is simply run again. Returns the migrations applied by this call.
 */
export async function applyMigrations(client: ClickHouseClient, dir = defaultMigrationsDir()): Promise<AppliedMigration[]> {
  await client.command({
    query: `CREATE TABLE IF NOT EXISTS schema_migrations
      (version String, name String, checksum String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))
      ENGINE = ReplacingMergeTree ORDER BY version`,
  });
  const rs = await client.query({ query: "SELECT DISTINCT version FROM schema_migrations", format: "JSONEachRow" });
  const done = new Set((await rs.json<{ version: string }>()).map((r) => r.version));
  const applied: AppliedMigration[] = [];
  for (const m of readMigrations(dir)) {
    if (done.has(m.version)) continue;
    for (const statement of m.statements) await client.command({ query: statement });
    await client.insert({
      table: "schema_migrations",
      columns: ["version", "name", "checksum"],
      values: [{ version: m.version, name: m.name, checksum: m.checksum }],
      format: "JSONEachRow",
      // A token of its own: chDB keeps settings for the session, so an insert must never inherit
      // the writer's last deduplication token.
      clickhouse_settings: { insert_deduplication_token: `migration-${m.version}` },
    });
    applied.push({ version: m.version, name: m.name });
  }
  return applied;
}
