/**
 * Bench child: the floor. A bare pass-through proxy with no features: node:http in, an undici Pool
 * out to the fake upstream, status, headers and body piped back. Any Node gateway on this machine
 * pays at least this much per request.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Pool } from "undici";
import { serveParent } from "./proc.js";

const upstream = process.env.BENCH_UPSTREAM;
if (!upstream) throw new Error("BENCH_UPSTREAM is required");

// The same pool settings the gateway's upstream Agent uses.
const pool = new Pool(upstream, { connections: 256, pipelining: 1, keepAliveTimeout: 30_000 });

const hopByHop = new Set(["connection", "keep-alive", "transfer-encoding", "host", "proxy-connection", "te", "upgrade", "trailer"]);

const server = http.createServer((req, res) => {
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !hopByHop.has(k)) headers[k] = v;
  pool.request({ path: req.url ?? "/", method: req.method as "POST", headers, body: req }).then(
    (up) => {
      const out: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !hopByHop.has(k)) out[k] = v;
      res.writeHead(up.statusCode, out);
      up.body.on("error", () => res.destroy());
      up.body.pipe(res);
    },
    (err) => {
      if (res.headersSent) return res.destroy();
      res.writeHead(502, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: `floor proxy: ${String(err?.message ?? err)}` } }));
    },
  );
});
server.keepAliveTimeout = 65_000;
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const { port } = server.address() as AddressInfo;

serveParent({}, async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  await pool.close();
}).ready({ url: `http://127.0.0.1:${port}` });
