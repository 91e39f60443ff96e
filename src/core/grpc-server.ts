import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";

export interface CoreServer {
  server: net.Server;
  close(): Promise<void>;
}

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/**
 * Serves the core over gRPC, Connect and gRPC-Web on one port. HTTP/2 without TLS (h2c, what gRPC
 * clients speak) and HTTP/1.1 (Connect and gRPC-Web from curl or browsers) share it: the first bytes
 * of each connection tell the HTTP/2 preface from an HTTP/1 request line.
 */
export function createCoreServer(routes: (router: ConnectRouter) => void, interceptors: Interceptor[]): CoreServer {
  const handler = connectNodeAdapter({ routes, interceptors });
  const h2 = http2.createServer({}, handler);
  const h1 = http.createServer(handler);
  const sessions = new Set<http2.ServerHttp2Session>();
  // HTTP/1 sockets handed over by the sniffer are not tracked by `h1` (it never listens), so
  // idle keep-alive connections are tracked here to close them at shutdown.
  const h1Sockets = new Set<net.Socket>();
  const busy = new Set<net.Socket>();
  let closing = false;
  h1.on("connection", (socket: net.Socket) => {
    h1Sockets.add(socket);
    socket.once("close", () => h1Sockets.delete(socket));
  });
  h1.on("request", (req, res) => {
    busy.add(req.socket);
    res.once("close", () => {
      busy.delete(req.socket);
      if (closing) req.socket.end();
    });
  });
  h2.on("session", (s) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
  });
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.once("readable", function sniff() {
      const head: Buffer | null = socket.read(Math.min(PREFACE.length, socket.readableLength));
      if (head === null) {
        socket.once("readable", sniff);
        return;
      }
      socket.unshift(head);
      const isH2 = head.length > 0 && PREFACE.subarray(0, head.length).equals(head);
      (isH2 ? h2 : h1).emit("connection", socket);
    });
  });
  return {
    server,
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        server.close(() => resolve());
        for (const s of sessions) s.close();
        for (const s of h1Sockets) if (!busy.has(s)) s.end();
        // Calls still running after a grace period are cut.
        setTimeout(() => {
          for (const s of sockets) s.destroy();
        }, 2_000).unref();
      }),
  };
}
