import http from "node:http";
import type { AddressInfo } from "node:net";

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
