import { readFileSync } from "node:fs";

/**
 * The name and version of the installed package, from its package.json: two folders up from
 * src/cli/ (run through tsx), three from dist/src/cli/ (the build).
 */
export function packageVersion(): { name: string; version: string } {
  for (const up of ["../../package.json", "../../../package.json"]) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(up, import.meta.url), "utf8")) as { name?: unknown; version?: unknown };
      if (pkg.name === "svc-gateway" && typeof pkg.version === "string") return { name: pkg.name, version: pkg.version };
    } catch {
      // not this one
    }
  }
  throw new Error("cannot find the svc-gateway package.json to read its version");
}
