import { randomBytes } from "node:crypto";
import { getHeapStatistics } from "node:v8";
import { chmod, link, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { type AddressInfo, createServer as createNetServer, type Socket } from "node:net";
import { join, resolve } from "node:path";
import type { Duplex } from "node:stream";
import type { Client, ConnectRouter } from "@connectrpc/connect";
import { applyClientTimeouts, clientTimeouts, type ClientTimeouts } from "./client-timeouts.js";
import { checkAdminToken, clusterWarnings, type Config, ConfigError, connectHost, providerWarning } from "./config.js";
import { type ErrorInfo, toErrorBody, toErrorInfo } from "./core/errors.js";
import { adminAuthInterceptor, adminTokenCheck } from "./core/admin-auth.js";
import { createAuthService } from "./core/auth/auth-service.js";
import { createCacheBackend } from "./core/cache/cache-backend.js";
import { createLimitsBackend } from "./core/limits/limits-backend.js";
import { createTelemetryBackend } from "./core/telemetry/telemetry-backend.js";
import { requestSummary } from "./core/telemetry/request-summary.js";
import { createDirectClient } from "./core/direct-client.js";
import { createCoreServer } from "./core/grpc-server.js";
import { newRequestId } from "./core/ids.js";
import { internalErrorInterceptor, servedCacheService, servedLimitsService, servedProxyService, servedTelemetryService } from "./core/served.js";
import { createPricing } from "./core/proxy/pricing.js";
import { createProxyService } from "./core/proxy/proxy-service.js";
import { createUpstreamHttp } from "./core/proxy/upstream-http.js";
import { createAnthropicAdapter } from "./core/proxy/upstreams/anthropic/adapter.js";
import { createOpenAiAdapter } from "./core/proxy/upstreams/openai/adapter.js";
import { startFakeProvider, type FakeProvider } from "./demo/fake-provider.js";
import { BodyBudget } from "./facades/gateway/body-budget.js";
import { createGatewayHandler } from "./facades/gateway/gateway-app.js";
import { answerClientError, answerHandedOver, fileAnswer, framingRefusal, requestIdOnSocket, shuttingDown, writeRefusal } from "./facades/http-errors.js";
import { cutText } from "./core/text.js";
import { createManagementApp } from "./facades/management/management-app.js";
import { ShutdownCut } from "./facades/gateway/serve-chat.js";
import { AuthService } from "./gen/svc/auth/v1/auth_service_pb.js";
import { CacheService } from "./gen/svc/cache/v1/cache_service_pb.js";
import { LimitsService } from "./gen/svc/limits/v1/limits_service_pb.js";
import { ApiStyle, ProxyService } from "./gen/svc/proxy/v1/proxy_service_pb.js";
import { TelemetryService } from "./gen/svc/telemetry/v1/telemetry_service_pb.js";
import { isEventStream, setSendStallMs } from "./drained.js";
import { noteWaitingForTurn } from "./facades/turn.js";
import { log } from "./logger.js";
import { embeddedDataIn, embeddedDataWarning } from "./stores/embedded-data.js";
import { removeLeftTemps } from "./stores/json-file.js";
import { createFileRegistryStore } from "./stores/file-registry-store.js";
import { createRedisRegistryStore, REVOKED } from "./stores/redis-registry-store.js";
import { inspectRedis, type RedisTarget } from "./stores/redis-connection.js";
import { dirProblem, makeDir } from "./stores/make-dir.js";

export interface ServeOptions {
  /** Run the built-in demo provider and send every provider's traffic to it. */
  demo?: boolean;
  /** How long clients may take to send a request, on all three ports (tests shorten them). */
  clientTimeouts?: Partial<ClientTimeouts>;
}

export interface RunningServer {
  gatewayUrl: string;
  managementUrl: string;
  grpcUrl: string;
  adminToken: string;
  /** Where the admin token was written, when it was generated rather than configured. */
  adminTokenPath: string | undefined;
  demo: FakeProvider | undefined;
  /** The in-process CacheService client, the one the gateway facade uses for its cache. */
  cache: Client<typeof CacheService>;
  /** The in-process LimitsService client, for the gateway facade: Admit before the upstream call, Settle after. */
  limits: Client<typeof LimitsService>;
  /**
   * The in-process TelemetryService client: RecordRequest after each gateway request (it only
   * queues, never waits on ClickHouse); ListLogs, GetLog, GetAnalytics and the prompts for the
   * management API. See docs/telemetry.md.
   */
  telemetry: Client<typeof TelemetryService>;
  close(): Promise<void>;
}

/** The largest request message the core port reads (see where it is used). */
export const coreReadMaxBytes = (config: Config): number => 2 * Math.max(config.maxRequestBytes, config.cache.maxEntryBytes) + 1024 * 1024;

/**
 * Whether SVC_REDIS_URL is to be used as a node of a Redis Cluster: what SVC_REDIS_CLUSTER says
 * (`setting`), checked against what the server said of itself at start (`seen`, undefined when it
 * did not say: not reached, or its user may not run INFO); unset, what the server said. A setting the
 * server contradicts is a configuration error: a cluster's node answers a single server's client
 * MOVED for most keys, and a cluster's client cannot use a single server at all.
 */
function redisCluster(setting: boolean | undefined, seen: boolean | undefined): boolean {
  if (setting === true && seen === false) {
    throw new ConfigError("SVC_REDIS_CLUSTER=1, but the Redis that SVC_REDIS_URL names is not a Redis Cluster node (its INFO says cluster_enabled:0): name a node of the cluster, or unset SVC_REDIS_CLUSTER for a single Redis server");
  }
  if (setting === false && seen === true) {
    throw new ConfigError("SVC_REDIS_URL names a node of a Redis Cluster (its INFO says cluster_enabled:1), but SVC_REDIS_CLUSTER=0 asks for a single Redis server, whose client that node would refuse most keys (MOVED): unset SVC_REDIS_CLUSTER, or set it to 1");
  }
  if (setting !== undefined) return setting;
  if (seen === undefined) {
    log.warn("could not ask Redis at start whether SVC_REDIS_URL names a Redis Cluster node (not reached, or its user may not run INFO): it is used as a single Redis server; set SVC_REDIS_CLUSTER=1 if it is a cluster node, SVC_REDIS_CLUSTER=0 to silence this");
    return false;
  }
  if (seen) log.info("SVC_REDIS_URL names a node of a Redis Cluster: the gateway learns the other nodes from it and follows the slots as they move");
  return seen;
}

/**
 * Starts the whole service in this process: the core services, served over gRPC for internal
 * callers and called in-process by the HTTP facades (gateway and management).
 */
export async function startServer(config: Config, opts: ServeOptions = {}): Promise<RunningServer> {
  // Settings only the machine can judge are checked before anything starts (the data dir's lock,
  // the telemetry store's migrations, the demo provider), each a ConfigError naming the setting.
  await checkHost(config.host);
  let redis: RedisTarget | undefined;
  if (config.redisUrl) {
    // A database or credentials Redis refuses would otherwise pass for an outage (and a refused
    // database leave the connections on database 0): stopped here, while it is a setting to fix.
    const seen = await inspectRedis(config.redisUrl, "SVC_REDIS_URL", undefined, { channel: REVOKED });
    if (seen.refused) throw new ConfigError(seen.refused);
    redis = { url: config.redisUrl, cluster: redisCluster(config.redisCluster, seen.cluster) };
  }
  await makeDataDir(config.dataDir);
  const cleanups: Array<() => Promise<void>> = [];
  const close = async () => {
    for (const c of cleanups.reverse()) await c().catch((e) => log.warn("shutdown step failed", { err: String(e) }));
  };
  try {
    // The data dir is this process's alone, in cluster mode too (the log spool, the embedded
    // engine, the admin token are each process's own: two replicas numbering spool files alike
    // overwrote each other's logs); it is locked before anything in it is read or written.
    cleanups.push(await lockDataDir(config.dataDir));
    const { token: adminToken, path: adminTokenPath } = await loadAdminToken(config);
    for (const warning of clusterWarnings(config)) log.warn(warning);
    if (config.redisUrl) {
      const unread = await embeddedDataIn(config.dataDir);
      if (unread.length > 0) log.warn(embeddedDataWarning(config.dataDir, unread));
    }
    let demo: FakeProvider | undefined;
    if (!opts.demo) {
      // Only the providers models are routed to: one the config file left without models is never called.
      const called = new Set([...config.models.values()].map((m) => m.provider));
      for (const p of config.providers.values()) {
        const warning = called.has(p.name) ? providerWarning(p) : undefined;
        if (warning) log.warn(warning);
      }
    } else {
      demo = await startFakeProvider(config.demoPort, "127.0.0.1").catch((e: NodeJS.ErrnoException) => {
        throw new Error(`cannot listen on 127.0.0.1:${config.demoPort} (SVC_DEMO_PORT): ${listenFailure(e)}`, { cause: e });
      });
      cleanups.push(() => demo!.close());
      for (const p of config.providers.values()) {
        p.baseUrl = p.style === ApiStyle.CHAT_COMPLETIONS ? `${demo.url}/v1` : demo.url;
        p.apiKey = "demo";
      }
    }

    let store;
    if (config.redisUrl) {
      store = createRedisRegistryStore(redis!);
    } else {
      store = await createFileRegistryStore(config.dataDir);
    }
    cleanups.push(() => store.close());

    const http = createUpstreamHttp(config.timeouts);
    cleanups.push(() => http.close());
    const adapters = new Map([
      [ApiStyle.CHAT_COMPLETIONS, createOpenAiAdapter()],
      [ApiStyle.MESSAGES, createAnthropicAdapter()],
    ]);
    const authImpl = createAuthService({ store });
    const proxyImpl = createProxyService({ models: config.models, providers: config.providers, adapters, http });
    const heapWarning = cacheHeapWarning(config, getHeapStatistics().heap_size_limit);
    if (heapWarning) log.warn(heapWarning);
    const cacheBackend = createCacheBackend(redis, config.cache);
    cleanups.push(() => cacheBackend.close());
    // Embedded, the month's spend and the day windows are kept in the data dir; closing writes them.
    const limitsBackend = await createLimitsBackend(redis, config.limits, store, config.dataDir);
    cleanups.push(() => limitsBackend.close());
    const auth = createDirectClient(AuthService, authImpl);
    /** Resolves when the project exists; rejects with 404 project_not_found otherwise. */
    const projectExists = (projectId: string) => auth.getProject({ projectId });
    // Closed after the HTTP servers (cleanups run in reverse), so the logs of the last requests are
    // flushed, or spooled, before exit. The prompt calls file and read prompts only under a project
    // that exists: 404 project_not_found otherwise, as CreateKey answers.
    const telemetryBackend = await createTelemetryBackend({ ...config, redisUrl: redis }, async (projectId) => {
      await projectExists(projectId);
    });
    cleanups.push(() => telemetryBackend.close());
    // The ports, stopped together at shutdown (none takes new work while another drains), before
    // anything above closes: each resolves once every request it took is done and its log record
    // handed to the telemetry writer (README, "Shutdown").
    const listeners: Array<() => Promise<void>> = [];
    cleanups.push(async () => {
      await Promise.all(listeners.map((stop) => stop().catch((e) => log.warn("shutdown step failed", { err: String(e) }))));
    });

    // The core port serves the same implementations, with what only calls from the network need
    // (src/core/served.ts): checks of the requests the facades build from validated input, and a
    // log of every internal error. The facades' in-process calls below skip both.
    const core = createCoreServer((router: ConnectRouter) => {
      router.service(AuthService, authImpl);
      router.service(ProxyService, servedProxyService(proxyImpl, async (projectId) => (await auth.listKeys({ projectId })).keys));
      router.service(CacheService, servedCacheService(cacheBackend.impl, projectExists));
      router.service(LimitsService, servedLimitsService(limitsBackend.impl, projectExists));
      router.service(TelemetryService, servedTelemetryService(telemetryBackend.impl, projectExists));
    }, [internalErrorInterceptor(), adminAuthInterceptor(adminToken)], opts.clientTimeouts, {
      // A call without the token is answered before its body is read, and no message is read past
      // twice the largest thing a message carries (a gateway request, a cached answer) plus 1 MiB
      // for the rest: a log's bodies are cut at 256 Ki characters each (request-trace.ts).
      authorize: adminTokenCheck(adminToken),
      readMaxBytes: coreReadMaxBytes(config),
    });
    const grpcPort = await listen(core.server, config.grpcPort, config.host, "SVC_GRPC_PORT");
    listeners.push(() => core.close());

    const proxy = createDirectClient(ProxyService, proxyImpl);
    const cache = createDirectClient(CacheService, cacheBackend.impl);
    const limits = createDirectClient(LimitsService, limitsBackend.impl);
    const telemetry = createDirectClient(TelemetryService, telemetryBackend.impl);
    const pricing = createPricing(config.models, config.providers);
    const shutdown = new ShutdownCut();
    const gateway = await serveHttp(createGatewayHandler({
        auth,
        proxy,
        cache,
        limits,
        pricing,
        cacheEnabled: config.cache.enabled,
        cacheShared: config.redisUrl !== undefined,
        cacheTtlSeconds: config.cache.ttlSeconds,
        maxCachedAnswerBytes: config.cache.maxEntryBytes,
        streamKeepAliveMs: config.streamKeepAliveMs,
        admitAhead: config.limits.admitAhead,
        maxRequestBytes: config.maxRequestBytes,
        bodyBudget: new BodyBudget(config.maxBodyBytesInFlight),
        // The writer queues in memory and never waits on the store: a request never waits for its log.
        record: (entry) => {
          if (log.enabled("debug")) log.debug("request", requestSummary(entry));
          void telemetry.recordRequest({ $typeName: "svc.telemetry.v1.RecordRequestRequest", log: entry }).catch((e) => log.warn("request log dropped", { err: String(e) }));
        },
        shutdown,
      }), config.gatewayPort, config.host, "SVC_GATEWAY_PORT", { errorHeaders: gatewayErrorHeaders, onCut: () => shutdown.cut(), timeouts: opts.clientTimeouts });
    listeners.push(gateway.close);
    const management = await serveHttp(createManagementApp({ auth, telemetry }).callback(), config.managementPort, config.host, "SVC_MANAGEMENT_PORT", { errorHeaders: managementErrorHeaders, timeouts: opts.clientTimeouts });
    listeners.push(management.close);

    const host = connectHost(config.host);
    return {
      gatewayUrl: `http://${host}:${gateway.port}`,
      managementUrl: `http://${host}:${management.port}`,
      grpcUrl: `http://${host}:${grpcPort}`,
      adminToken,
      adminTokenPath,
      demo,
      cache,
      limits,
      telemetry,
      close,
    };
  } catch (e) {
    await close();
    throw e;
  }
}

/**
 * SVC_HOST must be an address of this machine (or a name of one): a throwaway listener on a free
 * port of it tells, in a moment, what the first real port would otherwise find only after the
 * data dir was locked and the telemetry store migrated.
 */
async function checkHost(host: string): Promise<void> {
  const probe = createNetServer();
  await new Promise<void>((resolve, reject) => {
    probe.once("error", (e: NodeJS.ErrnoException) => {
      const why = e.code === "ENOTFOUND" || e.code === "EAI_AGAIN" ? "no such host name" : e.code === "EADDRNOTAVAIL" ? "not an address of this machine" : e.message;
      reject(new ConfigError(`SVC_HOST ${JSON.stringify(host)} cannot be listened on: ${why} (set it to an address of this machine, such as 127.0.0.1, or 0.0.0.0 for all of them)`));
    });
    probe.listen(0, host, () => probe.close(() => resolve()));
  });
}

/**
 * Creates the data dir (SVC_DATA_DIR), 0700 (it holds request logs and the admin token); one that
 * exists is left as it is. One that cannot be, or a file in its place, is a ConfigError naming the setting.
 */
async function makeDataDir(dir: string): Promise<void> {
  try {
    await makeDir(dir, 0o700);
    return;
  } catch (e) {
    throw new ConfigError(`SVC_DATA_DIR ${dir} cannot be used as the data directory: ${dirProblem(e)}`, { cause: e });
  }
}

/** Whether a request asked for its connection to close after its answer (HTTP/1.0 unless keep-alive). */
function closesAfter(req: IncomingMessage): boolean {
  const connection = req.headers.connection?.toLowerCase() ?? "";
  return req.httpVersion === "1.0" ? !/\bkeep-alive\b/.test(connection) : /\bclose\b/.test(connection);
}

/** When a request that asked to close its connection is probed after its client's FIN (probeGone), in ms after the FIN. */
const GONE_PROBES_MS = [0, 100, 1_000];

/**
 * A FIN on a request that asked for its connection to close: the client either ended only its
 * side (it still reads: answered, as `httpAllowHalfOpen` is set for) or closed the connection (it
 * left: a proxy in front whose client gave up, nginx's default HTTP/1.0 to its upstreams among
 * them). TCP tells the two apart only once something is sent: a closed client's side answers with
 * a reset, which the next write meets, and the response's 'close' then cancels the request (its
 * upstream call aborted, logged 499), as for a keep-alive client that leaves. So a few bytes every
 * reader skips are sent, a moment apart: an SSE comment in a stream under way, or, before an
 * HTTP/1.1 answer's head, an interim `100 Continue` (RFC 9110 15.2: a client parses the 1xx
 * responses it did not ask for). An HTTP/1.0 client may be sent nothing before its answer's head
 * (no 1xx), nor an answer of any other type anything within it: those are answered whole, as before.
 */
function probeGone(res: ServerResponse): void {
  const probe = () => {
    if (res.writableFinished || res.destroyed || res.socket?.destroyed !== false) return;
    if (!res.headersSent) {
      if (res.req.httpVersion !== "1.0") res.writeContinue();
    } else if (isEventStream(res) && !res.writableNeedDrain) {
      res.write(": \n\n");
    }
  };
  for (const ms of GONE_PROBES_MS) setTimeout(probe, ms).unref();
}

/** Why a listen failed, in words. */
const listenFailure = (e: NodeJS.ErrnoException): string =>
  e.code === "EADDRINUSE" ? "the port is in use (by another process, or by another of the gateway's own ports)"
  : e.code === "EACCES" ? "permission denied (ports below 1024 need privileges)"
  : e.code === "ENOTFOUND" || e.code === "EADDRNOTAVAIL" || e.code === "EAI_AGAIN" ? "no such address on this machine"
  : e.message;

/** Listens on host:port; a failure names the settings that chose them (`portSetting`, SVC_HOST). */
async function listen(server: import("node:net").Server, port: number, host: string, portSetting: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    const failed = (e: NodeJS.ErrnoException) => reject(new Error(`cannot listen on ${host}:${port} (${portSetting}, SVC_HOST): ${listenFailure(e)}`, { cause: e }));
    server.once("error", failed);
    server.listen(port, host, () => {
      server.off("error", failed);
      resolve();
    });
  });
  return (server.address() as AddressInfo).port;
}

/**
 * The headers of a gateway answer to a request node:http could not parse: its request line may not
 * have been read, so the surface (and which name its SDK reads the request id from) is unknown, and
 * the id goes out under both (`x-request-id` for openai, `request-id` for anthropic).
 */
function gatewayErrorHeaders(socket: Duplex): Record<string, string> {
  // A request whose body broke off or timed out has its id already: its log and this answer share it.
  const id = requestIdOnSocket(socket) ?? newRequestId();
  return { "X-Svc-Request-Id": id, "x-request-id": id, "request-id": id, "X-Svc-Cache": "MISS", "X-Svc-Cost": "0" };
}

/** The management API's answers all carry an id (its Koa app sets it): node:http's refusals too. */
const managementErrorHeaders = (): Record<string, string> => ({ "X-Svc-Request-Id": newRequestId() });

/** How long the requests in flight at shutdown get to finish before they are cut (README, "Shutdown"). */
const SHUTDOWN_GRACE_MS = 5_000;
/** After the cut, how long the cut requests get to write their last event, and then to file their logs. */
const CUT_SETTLE_MS = 1_000;

interface HttpOptions {
  /**
   * The headers of an answer to a request node:http could not parse (the gateway's carry a request
   * id, like all its responses), and of the 503 of a request that arrives during shutdown.
   */
  errorHeaders?: (socket: Duplex) => Record<string, string>;
  /** Cuts the requests still running when the shutdown's grace period ends (ShutdownCut). */
  onCut?: () => void;
  /** How long a client may take to send a request (src/client-timeouts.ts; tests shorten them). */
  timeouts?: Partial<ClientTimeouts>;
}

/**
 * Serves an HTTP facade. `handler`'s promise (if it returns one) settles when the request is done:
 * shutdown waits for it, not only for the connection to close, since the gateway files a request's
 * log after its answer ends.
 *
 * Shutdown (`close`): the port stops accepting and idle keep-alive connections are closed at once;
 * a response in flight whose headers are not sent yet goes out with `Connection: close`; a request
 * arriving meanwhile on a connection still open (a stream's, whose headers said keep-alive) is not
 * served: 503 `shutting_down`, `Connection: close`. The requests in flight get SHUTDOWN_GRACE_MS to
 * finish; then `onCut` cuts those still running, and they get CUT_SETTLE_MS to send their last
 * words before every connection is closed, and as long again to file their logs.
 */
async function serveHttp(
  handler: (req: IncomingMessage, res: ServerResponse) => unknown,
  port: number,
  host: string,
  portSetting: string,
  opts: HttpOptions = {},
): Promise<{ port: number; close: () => Promise<void> }> {
  let closing = false;
  /** Requests taken: until both the handler is done and the response closed. */
  const open = new Set<ServerResponse>();
  let drained: (() => void) | undefined;
  /** The request each connection is answering now (the last one, when pipelined). */
  const answering = new WeakMap<Socket, ServerResponse>();
  /** The answers of each connection queued behind an earlier pipelined one, not yet given the socket. */
  const queued = new WeakMap<Socket, Set<ServerResponse>>();
  /**
   * Node never ends an answer queued behind a pipelined one whose connection closes first: it is
   * not destroyed and never emits 'close', so its handler would go on (its upstream call not
   * aborted, a stream written into memory) and its log and shutdown wait for a 'close' that never
   * comes. It is destroyed here with its connection, and closed, as an answer with the socket is.
   */
  const queue = (socket: Socket, res: ServerResponse) => {
    let waiting = queued.get(socket);
    if (!waiting) {
      const set = (waiting = new Set());
      queued.set(socket, set);
      socket.once("close", () => {
        for (const r of set) {
          r.destroy();
          r.emit("close");
        }
        set.clear();
      });
    }
    waiting.add(res);
    res.once("socket", () => waiting.delete(res));
  };
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    if (closing) return refuseWhileClosing(res, opts.errorHeaders?.(req.socket));
    const refusal = framingRefusal(req);
    if (refusal) return writeRefusal(res, refusal, opts.errorHeaders?.(req.socket));
    // HTTP/1.0 has no chunked framing: such a body's framing is in doubt (RFC 9112 6.1), so its
    // connection is not kept once the request is answered.
    if (req.httpVersion === "1.0" && req.headers["transfer-encoding"] !== undefined) res.shouldKeepAlive = false;
    const socket = req.socket;
    answering.set(socket, res);
    open.add(res);
    if (res.socket === null) queue(socket, res);
    let left = 2;
    const done = () => {
      if (--left > 0) return;
      open.delete(res);
      // Not kept for an idle keep-alive connection.
      if (answering.get(socket) === res) answering.delete(socket);
      if (closing && open.size === 0) drained?.();
    };
    res.once("close", done);
    const start = () => {
      const p = handler(req, res);
      if (p instanceof Promise) p.then(done, done);
      else done();
    };
    if (res.socket !== null) return start();
    // Pipelined behind an answer not yet out: served once that answer is written (this one is
    // given the socket then), not at once. Node reads every request a chunk holds (hundreds of
    // small ones in 64 KiB) before it pauses a connection whose answers are not read: served at
    // once, a client that sends them and reads nothing had every answer made and held.
    noteWaitingForTurn(req);
    let started = false;
    res.once("socket", (given: Socket) => {
      // The connection cut as the answer before it ended (a client that stopped reading): never
      // served. Node gives it the dead socket all the same, which closes nothing more.
      if (given.destroyed) {
        res.destroy();
        res.emit("close");
        return;
      }
      started = true;
      start();
    });
    // Dropped unserved with its connection (queue()): its handler's part is done.
    res.once("close", () => {
      if (!started) done();
    });
  };
  // Host is checked by framingRefusal, which answers in the spec's shape (node:http's own had no body).
  const server = createServer({ requireHostHeader: false }, onRequest);
  // Every header is kept, within the size limit: past node:http's default count (2000 lines' worth)
  // the rest were dropped unseen, a key or Content-Type among them.
  server.maxHeadersCount = 0;
  // `Expect: 100-continue`: the client is told to send its body when the handler starts reading it,
  // so one answered before (a bad key, a body declared too large) uploads nothing.
  server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => {
    const onListener = (event: string | symbol) => {
      if (event !== "data" && event !== "readable") return;
      req.off("newListener", onListener);
      if (!res.headersSent && !res.writableEnded) res.writeContinue();
    };
    req.on("newListener", onListener);
    onRequest(req, res);
  });
  // Any other expectation is one this server cannot meet: 417, in the spec's shape.
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) =>
    writeRefusal(res, { status: 417, type: "invalid_request_error", code: "expectation_failed", message: `The expectation '${cutText(String(req.headers.expect), 100)}' is not supported; only 100-continue is.` }, opts.errorHeaders?.(req.socket)),
  );
  // CONNECT (a client that takes this port for a forward proxy): node:http closed the connection
  // without a word.
  server.on("connect", (_req: IncomingMessage, socket: Duplex) =>
    answerHandedOver(socket, { status: 405, type: "invalid_request_error", code: "method_not_allowed", message: "CONNECT is not supported: this is not a proxy." }, "Method Not Allowed", opts.errorHeaders?.(socket) ?? {}),
  );
  // A client's FIN (its side ended) while its request is being answered: on a keep-alive request it
  // is the client leaving (an SDK's abort closes its socket), which cancels the request and its
  // upstream call, as Node does by default. On a request that asked for the connection to close
  // (`Connection: close`, HTTP/1.0: `nc -N`, curl --http1.0, a shutdown(SHUT_WR) after the request)
  // it says only that nothing more is sent: that request is answered, then the connection closes.
  // Node's default dropped that answer, already paid upstream.
  (server as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
  const timeouts = clientTimeouts(opts.timeouts);
  server.on("connection", (socket: Socket) => {
    setSendStallMs(socket, timeouts.sendStallMs);
    socket.on("end", () => {
      const res = answering.get(socket);
      if (!res || res.writableFinished) return;
      if (!closesAfter(res.req)) socket.destroy();
      else probeGone(res);
    });
  });
  server.on("clientError", (err: Error, socket) => answerClientError(err, socket, opts.errorHeaders?.(socket)));
  applyClientTimeouts(server, timeouts);
  const actual = await listen(server, port, host, portSetting);
  /** Whether every request taken is done within `ms`. */
  const drainedWithin = (ms: number) =>
    new Promise<boolean>((resolve) => {
      if (open.size === 0) return resolve(true);
      const timer = setTimeout(() => resolve(false), ms);
      drained = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  return {
    port: actual,
    close: async () => {
      closing = true;
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      // The last answer taken on each connection closes it; those queued before it (pipelined)
      // go out first, as the requests taken they are.
      for (const res of open) if (!res.headersSent && answering.get(res.req.socket) === res) res.shouldKeepAlive = false;
      if (!(await drainedWithin(SHUTDOWN_GRACE_MS))) {
        if (opts.onCut) {
          opts.onCut();
          await drainedWithin(CUT_SETTLE_MS);
          // A request whose body is still arriving gets no answer from its handler (it waits on the
          // body): it is answered here, 503 shutting_down under its own request id, as the cut
          // requests are, before its connection goes. The answer is filed on the socket, and the
          // handler's read of the body ends with it (node:http would only drop the rest unread), so
          // its log says so.
          for (const res of open) {
            // One queued behind a pipelined answer (no socket yet) cannot be answered before it:
            // it goes with its connection below.
            if (res.headersSent || res.destroyed || res.req.complete || res.socket === null) continue;
            fileAnswer(res.socket!, refuseWhileClosing(res, opts.errorHeaders?.(res.socket!)));
            res.once("finish", () => res.req.destroy(new Error("the gateway is shutting down")));
          }
        }
        // What is left loses its connection: a client that does not read, a handler still waiting.
        server.closeAllConnections();
        if (!(await drainedWithin(CUT_SETTLE_MS))) log.warn("requests still running at shutdown are abandoned (a gateway request's log is lost)", { setting: portSetting, requests: open.size });
      }
      // Connections left idle by the answers given meanwhile.
      server.closeAllConnections();
      await stopped;
    },
  };
}

/** The answer to a request that arrives on an open connection during shutdown: 503 `shutting_down`, unread, and the connection closed. Returns the answer written. */
function refuseWhileClosing(res: ServerResponse, headers: Record<string, string> | undefined): ErrorInfo {
  const info = toErrorInfo(shuttingDown());
  const body = JSON.stringify(toErrorBody(info));
  res.shouldKeepAlive = false;
  res.writeHead(503, { ...headers, "Retry-After": "1", "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(body), Connection: "close" });
  res.end(body);
  return info;
}

/**
 * The admin credential for the gRPC port and the CLI: SVC_ADMIN_TOKEN, or a token generated into
 * `<dataDir>/admin-token` (mode 0600) at first start and reused after.
 */
async function loadAdminToken(config: Config): Promise<{ token: string; path: string | undefined }> {
  const path = join(config.dataDir, "admin-token");
  // A token a process killed between writing it aside and moving it into place left there.
  await removeLeftTemps(path).catch(() => {});
  if (config.adminToken) {
    // A token file left from before (a rotation to SVC_ADMIN_TOKEN) is the admin token again the
    // day the setting is lost: said at each start, so that it is deleted.
    if (await stat(path).then(() => true, () => false)) {
      log.warn("the admin token file is not used while SVC_ADMIN_TOKEN is set, and would be the admin token again if the setting were unset: delete it if that token is retired", { path });
    }
    return { token: config.adminToken, path: undefined };
  }
  let text: string | undefined;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code !== "ENOENT") {
      // Owned by another user (a run under sudo), or not a file: a configuration error naming it.
      throw new ConfigError(`the admin token file ${path} cannot be read (${err.message}); give the gateway's user access to it, remove it to have a new token generated, or set SVC_ADMIN_TOKEN`);
    }
  }
  const found = text?.trim();
  // A token written there by hand is held to the same rule as SVC_ADMIN_TOKEN, and to the file
  // mode of a generated one: readable by other local users, it would open every project to them.
  if (found) {
    checkAdminToken(found, `the admin token in ${path}`);
    await ownerOnly(path);
    return { token: found, path };
  }
  // Written aside, owner-only, then moved into place: an empty file found there (made by hand,
  // perhaps readable by everyone) is replaced, never filled with the token under its own mode.
  const token = `svc_admin_${randomBytes(24).toString("base64url")}`;
  const aside = `${path}.${process.pid}.tmp`;
  try {
    await writeFile(aside, `${token}\n`, { mode: 0o600 });
    await rename(aside, path);
  } catch (e) {
    await rm(aside, { force: true }).catch(() => {});
    throw unwritableDataDir(config.dataDir, e);
  }
  return { token, path };
}

/**
 * A warning when the embedded cache's byte budget could take most of this process's JavaScript
 * heap (`--max-old-space-size`, a container's memory): filled, it would leave too little for the
 * requests themselves, and the process would die out of memory rather than refuse anything.
 */
export function cacheHeapWarning(config: Pick<Config, "redisUrl" | "cache">, heapLimitBytes: number): string | undefined {
  if (config.redisUrl || !config.cache.enabled || config.cache.maxBytes <= heapLimitBytes / 2) return undefined;
  const mib = (n: number) => `${Math.round(n / 2 ** 20)} MiB`;
  return `SVC_CACHE_MAX_BYTES (${mib(config.cache.maxBytes)}) is more than half of this process's JavaScript heap (${mib(heapLimitBytes)}): a full cache would leave too little for requests; lower it, or give Node a larger heap (--max-old-space-size)`;
}

/** The data dir refused a write at start (a full disk, a read-only mount): a configuration error naming it. */
function unwritableDataDir(dir: string, e: unknown): Error {
  const err = e as NodeJS.ErrnoException;
  if (!err?.code) return err;
  const remedy = err.code === "EACCES" || err.code === "EPERM" ? "give the gateway's user write access to it" : err.code === "ENOSPC" || err.code === "EDQUOT" ? "free space on its disk" : "check it";
  return new ConfigError(`SVC_DATA_DIR ${dir} cannot be written (${err.message}); ${remedy}, or set SVC_DATA_DIR to another directory`);
}

/** Makes a secret's file 0600, saying so when it was not. */
async function ownerOnly(path: string): Promise<void> {
  if (process.platform === "win32") return; // no POSIX modes to hold it to
  const mode = (await stat(path)).mode & 0o777;
  if ((mode & 0o077) === 0) return;
  await chmod(path, 0o600);
  log.warn("the admin token file was open to other users (its group or everyone): made it owner-only (0600)", { path, was: `0${mode.toString(8)}` });
}

/** Data dirs this process holds: a second server in this process must not take one over. */
const lockedDirs = new Set<string>();

/**
 * Makes this process the only one on the data dir: `svc.pid` holds its pid, the kernel's start
 * time of that pid and the boot's id. The file appears whole (written aside, then linked into
 * place, which fails if one is there), so a process starting at the same moment never reads it half
 * written. A file left by a process that is gone (a crash, a kill) is taken over: its pid is not
 * running, or runs another process, this one included (pids are reused; in a container the
 * restarted gateway is often pid 1 again, as its crashed predecessor was), or has exited and awaits
 * its parent's reaping (a zombie). Where start times cannot
 * be read (no /proc), a running pid other than this one holds the lock. The lock tells processes
 * of one machine and pid namespace apart: two containers sharing a data dir volume are not caught.
 * A dir held by a live process is a ConfigError naming SVC_DATA_DIR (`svc serve` exits 2).
 */
async function lockDataDir(dir: string): Promise<() => Promise<void>> {
  const path = join(dir, "svc.pid");
  const key = resolve(dir);
  if (lockedDirs.has(key)) throw new ConfigError(`SVC_DATA_DIR ${dir} is in use by this process; set SVC_DATA_DIR to another directory`);
  const thisBoot = await bootId();
  const mine = `${process.pid} ${(await procStat(process.pid))?.started ?? ""} ${thisBoot}`.trim();
  const aside = `${path}.${process.pid}.${randomBytes(4).toString("hex")}`;
  try {
    await writeFile(aside, mine, { mode: 0o644 }).catch((e: unknown) => {
      throw unwritableDataDir(dir, e);
    });
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        await link(aside, path);
        lockedDirs.add(key);
        return async () => {
          lockedDirs.delete(key);
          await rm(path, { force: true });
        };
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      }
      const text = await readFile(path, "utf8").catch(() => undefined);
      if (text === undefined) continue; // gone meanwhile: try again
      const [pidText, started, boot] = text.trim().split(/\s+/);
      const pid = Number(pidText);
      const now = pid > 0 ? await procStat(pid) : undefined;
      const sameBoot = !boot || boot === thisBoot;
      // The writer is still there when its pid (not this process's) runs, with the start time it
      // wrote in the same boot where those can be read. A process that has died but is not yet
      // reaped by its parent (a zombie, `kill -9` a moment ago) still answers kill(pid, 0) with its
      // start time: its state says it is gone.
      const exited = now !== undefined && (now.state === "Z" || now.state === "X");
      const writer = pid > 0 && pid !== process.pid && alive(pid) && !exited && (started && now?.started ? sameBoot && now.started === started : true);
      if (writer) throw new ConfigError(`SVC_DATA_DIR ${dir} is in use by process ${pid}; stop it or set SVC_DATA_DIR to another directory`);
      // Moved out of the way under a name of its own, then checked: what was moved must be the
      // stale file read above, not the fresh lock of a process that took it over meanwhile (that
      // one is put back, and holds the dir).
      const moved = `${aside}.stale`;
      if (await rename(path, moved).then(() => true, () => false)) {
        const was = await readFile(moved, "utf8").catch(() => "");
        if (was !== text) {
          await link(moved, path).catch(() => {});
          await rm(moved, { force: true });
          throw new ConfigError(`SVC_DATA_DIR ${dir} is in use by another process starting now; set SVC_DATA_DIR to another directory`);
        }
        await rm(moved, { force: true });
      }
    }
    throw new Error(`cannot lock the data dir ${dir}`);
  } finally {
    await rm(aside, { force: true });
  }
}

/** This boot's id (Linux); "" where unknown. Start times count from boot, so they compare within one. */
async function bootId(): Promise<string> {
  return (await readFile("/proc/sys/kernel/random/boot_id", "utf8").catch(() => "")).trim();
}

/**
 * A process's state (`R`, `S`, ... `Z` for one that exited and awaits its parent, `X` dead) and
 * when it started, in clock ticks since boot (Linux: fields 3 and 22 of /proc/<pid>/stat);
 * undefined where unknown (no /proc, no such process).
 */
async function procStat(pid: number): Promise<{ state: string; started: string } | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces) start at field 3.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state: fields[0] ?? "", started: fields[19] ?? "" };
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
