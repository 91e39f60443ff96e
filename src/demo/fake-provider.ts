import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { isObject, type JsonObject } from "../core/json.js";
import { serveAnthropicFake } from "./anthropic-fake.js";
import { serveOpenAiFake } from "./openai-fake.js";

/** A request the fake provider received, kept so tests can see exactly what the gateway sent. */
export interface RecordedRequest {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: JsonObject;
}

export interface FakeProvider {
  /** Base URL, e.g. http://127.0.0.1:41234 (the chat-completions style lives under /v1). */
  url: string;
  /** The most recent requests, oldest first (at most 100). */
  requests: RecordedRequest[];
  /** Requests whose response has not finished or been abandoned yet. */
  inFlight(): number;
  close(): Promise<void>;
}

/**
 * The built-in demo provider: one HTTP server that speaks both upstream styles
 * (`POST /v1/chat/completions` and `POST /v1/messages`), so the gateway runs end to end with no
 * provider credentials (`svc serve --demo`), and tests and benchmarks have a real HTTP upstream.
 */
export async function startFakeProvider(port = 0, host = "127.0.0.1"): Promise<FakeProvider> {
  const requests: RecordedRequest[] = [];
  let inFlight = 0;
  const sockets = new Set<import("node:net").Socket>();
  const server = http.createServer((req, res) => {
    inFlight++;
    res.once("close", () => inFlight--);
    route(req, res, requests).catch(() => {
      if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "fake provider failure", type: "server_error" } }));
    });
  });
  server.keepAliveTimeout = 60_000;
  server.on("connection", (s) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  const { port: actual } = server.address() as AddressInfo;
  return {
    url: `http://${host}:${actual}`,
    requests,
    inFlight: () => inFlight,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

async function route(req: IncomingMessage, res: ServerResponse, requests: RecordedRequest[]): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
  const path = (req.url ?? "/").split("?")[0]!;
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "null");
  } catch {
    body = undefined;
  }
  if (req.method !== "POST" || !isObject(body)) {
    res.writeHead(req.method !== "POST" ? 404 : 400, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message: "the demo provider takes POST with a JSON object body", type: "invalid_request_error" } }));
    return;
  }
  requests.push({ path, headers: { ...req.headers }, body });
  if (requests.length > 100) requests.shift();
  if (path === "/v1/chat/completions") return serveOpenAiFake(req, res, body);
  if (path === "/v1/messages") return serveAnthropicFake(req, res, body);
  res.writeHead(404, { "content-type": "application/json" });
  res.end(JSON.stringify({ error: { message: `unknown path ${path}`, type: "not_found_error" } }));
}
