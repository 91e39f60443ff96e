import type { ClientTimeouts } from "../../src/client-timeouts.js";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { startTestGateway, type TestGateway } from "./gateway.js";

/** A scripted upstream provider on a free loopback port. */
export interface ScriptedUpstream {
  server: http.Server;
  /** `http://127.0.0.1:<port>`: an Anthropic-style base URL; add `/v1` for an OpenAI-style one. */
  base: string;
  close(): Promise<void>;
}

/** Starts an upstream that hands each request's JSON body (and the request) to `answer`, which writes the response. */
export async function scriptedUpstream<B>(answer: (body: B, res: http.ServerResponse, req: http.IncomingMessage) => void): Promise<ScriptedUpstream> {
  const server = http.createServer((req, res) => {
    let text = "";
    req.on("data", (d: Buffer) => (text += d));
    req.on("end", () => answer(JSON.parse(text) as B, res, req));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { server, base, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** A gateway whose providers are one scripted upstream (both styles), and a live key on it. */
export interface ScriptedGateway {
  upstream: ScriptedUpstream;
  gw: TestGateway;
  /** A live key of `projectId`. */
  key: string;
  projectId: string;
}

/**
 * Registers mocha hooks that start a scripted upstream and a gateway with both providers pointed at
 * it (plus `env`) before the suite's tests, and stop both after them. The returned object's fields
 * are set once `before` has run.
 */
export function gatewayOnScriptedUpstream<B>(answer: (body: B, res: http.ServerResponse, req: http.IncomingMessage) => void, env: Record<string, string> = {}, clientTimeouts?: Partial<ClientTimeouts>): ScriptedGateway {
  const s = {} as ScriptedGateway;
  before(async () => {
    s.upstream = await scriptedUpstream(answer);
    const base = s.upstream.base;
    s.gw = await startTestGateway({ SVC_OPENAI_BASE_URL: `${base}/v1`, SVC_OPENAI_API_KEY: "sk-test", SVC_ANTHROPIC_BASE_URL: base, SVC_ANTHROPIC_API_KEY: "sk-ant-test", ...env }, false, clientTimeouts);
    const p = await s.gw.project();
    s.key = p.live;
    s.projectId = p.projectId;
  });
  after(async () => {
    await s.gw?.close();
    await s.upstream?.close();
  });
  return s;
}
