#!/usr/bin/env node
// The `svc` command. TypeScript runs directly through tsx's loader (no build step to forget).
import { register } from "tsx/esm/api";

register();
await import("../src/cli/main.ts");
