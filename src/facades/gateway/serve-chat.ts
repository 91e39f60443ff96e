import type { IncomingMessage, ServerResponse } from "node:http";
import { equals } from "@bufbuild/protobuf";
import { type Client, Code, ConnectError, createContextValues } from "@connectrpc/connect";
import type { AuthService } from "../../gen/svc/auth/v1/auth_service_pb.js";
import type { CacheService, GetEntryRequest, GetEntryResponse } from "../../gen/svc/cache/v1/cache_service_pb.js";
import { KeyMode } from "../../gen/svc/common/v1/key_mode_pb.js";
import { type ProjectLimits, ProjectLimitsSchema } from "../../gen/svc/common/v1/project_limits_pb.js";
import { type AdmitResponse, Decision, type LimitsService } from "../../gen/svc/limits/v1/limits_service_pb.js";
import type { RequestLog } from "../../gen/svc/telemetry/v1/telemetry_service_pb.js";
import {
  ApiStyle,
  type Completion,
  FinishReason,
  type ProxyService,
  type StreamChatRequest,
  type StreamChatResponse,
} from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { hasLimits } from "../../core/auth/project-limits.js";
import { cacheKeyOf } from "../../core/cache/cache-key.js";
import { encodeCompletion, encodedCompletionBytes } from "../../core/proxy/completion-binary.js";
import { Cancellation, cancellationKey } from "../../core/cancel.js";
import { chatRequest, completionEvent } from "../../core/proxy/canonical.js";
import { isCanceled } from "../../core/proxy/proxy-service.js";
import { carriesThread } from "../../core/proxy/request-rules.js";
import { SENT_UPSTREAM, sentUpstream } from "../../core/proxy/upstream-http.js";
import { CompletionAssembler } from "../../core/proxy/completion-assembler.js";
import type { Pricing } from "../../core/proxy/pricing.js";
import { toErrorBody, toErrorInfo } from "../../core/errors.js";
import { parseExtra } from "../../core/json.js";
import { Lru } from "../../core/lru.js";
import { atMostEvery, log } from "../../logger.js";
import { answeredBody, shuttingDown } from "../http-errors.js";
import { waitedForTurnMs } from "../turn.js";
import { type CachePolicy, cachePolicyOf } from "./cache-control.js";
import type { ClientCodec, ParsedChatRequest } from "./codec.js";
import { admissionError, rateLimitHeaders } from "./rate-limit-headers.js";
import type { BodyBudget } from "./body-budget.js";
import { apiKeyOf, betasOf, type BodyText, checkProviderVersion, contentTypeError, type JsonBody, metadataOf, notUtf8, parseJsonBody, partialBodyOf, readBodyText, refuseOverflowedNumbers, userIdOf } from "./request-input.js";
import { CachedAnswer, CachedAnswers, type PreparedRequest, PreparedRequests } from "./hit-memo.js";
import { MAX_LOGGED_BODY_CHARS, RequestTrace } from "./request-trace.js";
import { beginStream, type ReadAhead, type SvcHeaders, svcHeaders, writeCompletion, writeError, writeJson, writeStream } from "./respond.js";

export interface GatewayDeps {
  auth: Client<typeof AuthService>;
  proxy: Client<typeof ProxyService>;
  cache: Client<typeof CacheService>;
  limits: Client<typeof LimitsService>;
  pricing: Pricing;
  /** False when the cache is switched off (SVC_CACHE_DISABLED): no lookups, no stores, no single flight. */
  cacheEnabled: boolean;
  /**
   * True when the cache is shared with other processes (Redis): an answer is stored as soon as it
   * is whole, before its last bytes go out, so a client that sends the same request on to another
   * replica finds it. A cache of this process's own is filled just after the answer is written.
   */
  cacheShared?: boolean;
  /** The largest answer the cache stores, in bytes (SVC_CACHE_MAX_ENTRY_BYTES). */
  maxCachedAnswerBytes?: number;
  /** Seconds an answer is kept when its request names none (SVC_CACHE_TTL_SECONDS; the cache service's default). */
  cacheTtlSeconds?: number;
  /** A live stream quiet this long gets an SSE keep-alive comment (SVC_STREAM_KEEPALIVE_MS; 0: none). */
  streamKeepAliveMs?: number;
  /**
   * Admit a live request while its key is being verified, on the limits the key's project had at
   * its last verification (SVC_LIMITS_ADMIT_AHEAD): on Redis the admission then shares the key's
   * round trip instead of taking one of its own. The admission is rescindable, and taken back
   * whenever the verdict does not match it.
   */
  admitAhead?: boolean;
  maxRequestBytes: number;
  /** The bytes of bodies coming in, all requests together (SVC_MAX_BODY_BYTES_IN_FLIGHT): body-budget.ts. */
  bodyBudget?: BodyBudget;
  /** Takes each request's log record (telemetry); must not block or throw. */
  record?: (log: RequestLog) => void;
  /** Whether request and response bodies go into the log records. */
  logBodies?: boolean;
  /** The server's shutdown: what cuts the requests still running when its grace period ends. */
  shutdown?: ShutdownCut;
}

/**
 * The cut that ends a shutdown's grace period (server.ts, README "Shutdown"), as the requests see
 * it. `cut()` aborts every upstream call still running: a stream already answering ends with the
 * style's SSE error event (503 `shutting_down`: logged as a 200 with that error code, billed for
 * what was streamed, as any stream cut short), and a request still waiting for its answer is
 * answered 503 `shutting_down` (billed for its prompt when it had reached the upstream, as when a
 * client leaves). A request that would call the upstream after the cut is refused so, unbilled.
 */
export class ShutdownCut {
  #cut = false;
  readonly #calls = new Set<Cancellation>();

  get isCut(): boolean {
    return this.#cut;
  }

  /** Aborts `call` at the cut; returns what stops watching it (the call's answer is written). */
  watch(call: Cancellation): () => void {
    this.#calls.add(call);
    return () => this.#calls.delete(call);
  }

  cut(): void {
    this.#cut = true;
    const calls = [...this.#calls];
    this.#calls.clear();
    for (const c of calls) c.abort();
  }
}

const cacheOff: CachePolicy = { lookup: false, store: false, ttlSeconds: 0 };

/** One client style's endpoint. */
export interface Surface {
  path: string;
  style: ApiStyle;
  codec: ClientCodec;
}

/** What a request in flight gave the requests waiting on it (Flights): ABANDONED when its client left. */
export const ABANDONED = Symbol("abandoned");
/** What `clientGone` gives. */
const GONE = Symbol("gone");

/** Resolves when the client of a response not yet written goes away (at once when it has). */
function clientGone(res: ServerResponse): Promise<typeof GONE> {
  if (res.destroyed) return Promise.resolve(GONE);
  return new Promise((resolve) => res.once("close", () => resolve(GONE)));
}
type Landed = Completion | undefined | typeof ABANDONED;

/** How many requests wait on each flight now (a flight is read ahead of its own client while any do). */
const waitersOf = new WeakMap<Promise<Landed>, number>();
/** What wakes a flight's stream that waits on its client, so it reads on for the waiter that came. */
const wakersOf = new WeakMap<Promise<Landed>, () => void>();
/**
 * For how many seconds a flight's answer is stored (0: not at all): its request's own cache
 * policy. A waiter whose policy keeps it longer (the flight's request sent `no-store` or a short
 * `max-age`, which apply to that request only) stores it itself.
 */
const keptForOf = new WeakMap<Promise<Landed>, number>();

/**
 * The most of a stream, written and not yet taken by its client, that a request whose answer
 * others wait on holds so as to read its upstream on: its waiters get the answer when the upstream
 * has sent it, not when a slow (or stalled) client has read it. Beyond it the waiters are let go,
 * each to call the upstream, and the upstream waits on the client again, as any stream's does.
 * Characters, as node:http counts a response's text not yet sent (`writableLength`).
 */
export const READ_AHEAD_MAX_CHARS = 8 * 1024 * 1024;

/**
 * Identical requests in flight in this process, by project, key mode and cache key: a second one
 * waits for the first one's answer instead of calling the upstream again (single flight). The
 * promise gives undefined when the first one ended without a cacheable answer, and ABANDONED when
 * its client left, aborting its upstream call: then one waiter takes its place.
 */
export type Flights = Map<string, Promise<Landed>>;

/**
 * When identical requests last landed, by flight key: a flight is stamped when it ends with its
 * answer stored. A request whose cache lookup was made before an identical one's answer was stored
 * (its lookup missed) and that finds no flight when it comes to call the upstream (the other one
 * ended meanwhile: on Redis a whole upstream call fits in one request's admission round trip)
 * looks again instead of calling. Stamps sit in a fixed table of slots by a hash of the key, so
 * nothing is kept per request; two keys in one slot only cost an extra lookup.
 */
export class Landings {
  static readonly SLOTS = 4096;
  #clock = 0;
  readonly #at = new Float64Array(Landings.SLOTS);

  /** The time of a lookup made now, for `since`. */
  now(): number {
    return this.#clock;
  }

  /** Stamps an identical request's answer as stored. */
  landed(flightKey: string): void {
    this.#at[slotOf(flightKey)] = ++this.#clock;
  }

  /** Whether an answer for the key (or one sharing its slot) was stored after a lookup made at `t`. */
  since(flightKey: string, t: number): boolean {
    return this.#at[slotOf(flightKey)]! > t;
  }
}

/** A slot of Landings: the key's last characters (those of its cache key, a hash) mixed. */
function slotOf(key: string): number {
  let h = 0;
  for (let i = Math.max(0, key.length - 6); i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) | 0;
  return h & (Landings.SLOTS - 1);
}

/**
 * What one gateway's requests share: identical requests in flight, the identities of recent keys,
 * and what repeated cache hits reuse.
 */
export interface GatewayState {
  flights: Flights;
  landings: Landings;
  identities: Identities;
  /** Bodies of recent hits, parsed (hit-memo.ts). */
  prepared: PreparedRequests;
  /** Stored answers decoded and rendered (hit-memo.ts). */
  answers: CachedAnswers;
}

export const newGatewayState = (): GatewayState => ({
  flights: new Map(),
  landings: new Landings(),
  identities: new Identities(),
  prepared: new PreparedRequests(),
  answers: new CachedAnswers(),
});


/**
 * Serves one gateway request; never throws (errors become the spec's error response). Order:
 * key, body, cache lookup, admission (live keys: rate limits and the spend-cap reservation, which
 * a hit does not need), an identical request already in flight, else the upstream; then the answer
 * is stored and the reservation settled to the real cost. For a key verified lately, the body is
 * read, parsed and looked up in the cache while the key is verified again (`ahead`), and with
 * `admitAhead` admitted too, but nothing of it is used, and none of its errors is answered, before
 * the key is known good; any other key's body is read only once the key is.
 */
export async function serveChat(req: IncomingMessage, res: ServerResponse, s: Surface, deps: GatewayDeps, state: GatewayState, requestId: string): Promise<void> {
  const trace = new RequestTrace(requestId, s.path, waitedForTurnMs(req));
  try {
    await serve(req, res, s, deps, state, trace);
  } finally {
    // Logs are filed per project: a request refused before its key named one (401) has none, and is
    // not recorded (the access log and the 401 answer are its trace).
    if (deps.record && trace.projectId) {
      const record = deps.record;
      const file = () => {
        try {
          record(trace.toLog());
        } catch (e) {
          log.warn("request log not recorded", { requestId, err: String(e) });
        }
      };
      // Node reports an answer whose client reset the connection part-way through it (a slow
      // reader of a long one that stopped reading) as finished all the same, its socket errored.
      if (res.writableFinished && !req.socket.errored) file();
      else if (res.destroyed || res.writableFinished) {
        undelivered(trace);
        file();
      } else whenDelivered(req, res, trace, file);
    }
  }
}

/**
 * Files the log of an answer handed to Node but not yet out: one queued behind an earlier
 * pipelined answer on its connection, or one whose bytes wait on a slow reader. It goes out
 * ('finish'), or the client leaves first: the response's 'close' (one still queued is closed with
 * its connection: server.ts); logged then as 499 client_closed_request, as any answer its client
 * never got.
 */
function whenDelivered(req: IncomingMessage, res: ServerResponse, trace: RequestTrace, file: () => void): void {
  const socket = req.socket;
  const done = () => {
    res.off("finish", done);
    res.off("close", done);
    // An answer goes out while its connection is up; 'finish' also comes, its connection gone,
    // for one whose client reset the connection part-way through it.
    if (!res.writableFinished || socket.destroyed) undelivered(trace);
    file();
  };
  res.on("finish", done);
  res.on("close", done);
}

/**
 * Marks an answer its client never got whole as 499 client_closed_request; one the log already
 * records as failed keeps what it records (a stream the shutdown cut, a client already seen to leave).
 */
function undelivered(trace: RequestTrace): void {
  if (trace.errorCode === "") trace.failed({ status: 499, type: "", code: "" });
}

async function serve(req: IncomingMessage, res: ServerResponse, s: Surface, deps: GatewayDeps, state: GatewayState, trace: RequestTrace): Promise<void> {
  const { flights, landings, identities, prepared, answers } = state;
  const requestId = trace.requestId;
  const svc = svcHeaders(requestId, s.codec);
  let bodies = false;
  let limitHeaders: Record<string, string> | undefined;
  let early: Promise<Ahead> | undefined;
  try {
    const secret = apiKeyOf(req);
    const verifying = deps.auth.verifyKey({ $typeName: "svc.auth.v1.VerifyKeyRequest", secret });
    const guess = identities.get(secret);
    // The body is read, parsed and looked up in the cache while the key is verified only for a key
    // verified lately (its guessed identity): any other waits for its verdict, so a made-up key
    // costs no parse of the body it sends (a refused key's body is drained unread: writeError). A
    // client that waits for `100 Continue` before sending its body (Expect) is told to send it (by
    // the body's first read: server.ts) once its key is known good, so a refused key uploads nothing.
    early = guess !== undefined && req.headers.expect === undefined ? ahead(req, s, deps, guess, prepared, landings) : verifying.then(() => ahead(req, s, deps, guess, prepared, landings), () => unread(s));
    let verified: Awaited<typeof verifying>;
    try {
      verified = await verifying;
    } catch (e) {
      identities.forget(secret);
      throw e;
    }
    const { key, project } = verified;
    identities.remember(secret, project!.id, key!.mode, project!.effectiveLimits);
    bodies = deps.record !== undefined && deps.logBodies !== false && project!.logBodies;
    trace.projectId = project!.id;
    trace.keyId = key!.id;
    trace.keyMode = key!.mode;
    const pre = await early;
    // The body as sent, also when it is refused (not JSON, not sent as JSON).
    if (bodies && pre.text !== undefined) trace.requestBody = pre.text;
    if (!pre.body) {
      // A body refused or broken off: its log still has what the headers said, where they are good.
      headersForLog(req, trace);
      throw pre.error;
    }
    const body = pre.body;
    const v = body.value as { model?: unknown; stream?: unknown } | null;
    if (typeof v?.model === "string") {
      trace.model = v.model;
      trace.provider = deps.pricing.providerOf(v.model);
    }
    trace.stream = v?.stream === true;
    const badHeader = headersForLog(req, trace);
    if (badHeader !== undefined) throw badHeader;
    const { metadata, userId } = trace;
    let betas: string[] = [];
    if (s.style === ApiStyle.MESSAGES) {
      checkProviderVersion(req);
      betas = betasOf(req);
    }
    const asked = cachePolicyOf(req);
    if (!pre.parsed) throw pre.error;
    const parsed = pre.parsed;
    // A turn of a message thread (the threads beta: the upstream keeps the conversation, and the
    // answer's id anchors the next turn) is never answered from the cache or shared: another
    // conversation's answer would continue the wrong thread.
    const policy = deps.cacheEnabled && !inThread(parsed) ? asked : cacheOff;
    const chat = chatRequest(parsed, { requestId, projectId: project!.id, keyId: key!.id, keyMode: key!.mode, userId, metadata, betas });
    // A model this endpoint does not serve is refused before the limits count the request.
    deps.pricing.checkServed(chat.model, chat.style);
    const cached = policy.lookup || policy.store;
    const scope: GetEntryRequest = { $typeName: "svc.cache.v1.GetEntryRequest", projectId: chat.projectId, keyMode: chat.keyMode, cacheKey: cached ? pre.cacheKey : "" };

    let hit: CachedAnswer | undefined;
    // When the cache was last looked in for this request (Landings).
    let lookedAt = 0;
    if (policy.lookup) {
      // The lookup made while the key was verified, when it was made for this key's scope.
      let got = pre.guess?.projectId === scope.projectId && pre.guess.keyMode === scope.keyMode ? await pre.lookup : undefined;
      if (got) lookedAt = pre.lookedAt;
      else {
        lookedAt = landings.now();
        got = await deps.cache.getEntry(scope);
      }
      if (got.hit) hit = decodedHit(answers, got.payload, requestId, chat.model);
      if (hit) {
        if (!pre.prepared) prepared.remember(pre.memoPath, body.text, { value: body.value, parsed, cacheKey: pre.cacheKey });
      }
    }

    // Test keys are never limited or capped (spec 8.1); a project with no limit set skips the call.
    let admission: AdmitResponse | undefined;
    const limits = project!.effectiveLimits;
    const limited = key!.mode === KeyMode.LIVE && hasLimits(limits);
    const admitUser = s.style === ApiStyle.CHAT_COMPLETIONS ? userId : "";
    const flightKey = `${scope.projectId}:${scope.keyMode}:${scope.cacheKey}`;
    // A request identical to one in flight waits for that one's answer and is served it as a hit:
    // admitted as a hit (counted, nothing reserved, never refused by the spend cap), rescindably,
    // since it calls the upstream itself, under a reservation of its own, if no answer comes.
    const waits = !hit && policy.lookup && flights.has(flightKey);
    let reservesNothing = false as boolean;
    if (pre.admitting) admission = await adoptAhead(deps, pre.admitting, limited ? { projectId: chat.projectId, userId: admitUser, limits, hit: hit !== undefined || waits } : undefined);
    if (limited) {
      if (!admission) {
        reservesNothing = waits;
        admission = await deps.limits.admit({ projectId: chat.projectId, userId: admitUser, maxCostUsd: hit || waits ? "0" : deps.pricing.worstCaseUsd(chat), limits, rescindable: waits });
      }
      // Refused by the spend cap as a miss, while an identical request took flight meanwhile (it
      // was admitted first, and the cap had room for one worst case): this one waits on that one,
      // admitted as the hit it will be, as a request that found it in flight is.
      if (admission.decision === Decision.SPEND_CAPPED && !hit && !reservesNothing && policy.lookup && flights.has(flightKey)) {
        reservesNothing = true;
        admission = await deps.limits.admit({ projectId: chat.projectId, userId: admitUser, maxCostUsd: "0", limits, rescindable: true });
      }
      limitHeaders = rateLimitHeaders(admission, s.style);
      if (admission.decision !== Decision.ALLOWED) throw refused(admission, deps, chat);
    }
    let cost = "0";
    try {
      if (hit) return await serveHit(res, svc, limitHeaders, s.codec, parsed, hit, trace, bodies);
      let gone: Promise<typeof GONE> | undefined;
      // The flight this request took before its own admission, taking the place of one whose client
      // left: identical requests wait on it meanwhile. Let go (landed ABANDONED, or with an answer
      // found in the cache) when this request does not call the upstream after all.
      let claim: { flight: Promise<Landed>; land: (c: Landed) => void } | undefined;
      const letGo = (c: Landed) => {
        if (!claim) return;
        if (flights.get(flightKey) === claim.flight) flights.delete(flightKey);
        claim.land(c);
        claim = undefined;
      };
      // Set once a flight this request waited on failed, or gave an answer the cache does not
      // store: it calls the upstream itself then, and waits on no other flight (one of the other
      // waiters' own calls, which would fail or be unstorable the same way, one after another).
      let onItsOwn = false;
      try {
        lead: for (;;) {
          for (;;) {
            // An identical request in flight: its answer, served as a hit. When its client left (which
            // aborts its upstream call), the first waiter back takes its place and the others wait on
            // that one; when it failed, each waiter calls the upstream itself.
            const other = () => {
              const f = policy.lookup && !onItsOwn ? flights.get(flightKey) : undefined;
              return f === claim?.flight ? undefined : f;
            };
            let twin = other();
            while (twin) {
              // A waiter whose own client leaves stops waiting then (logged 499 at once), and never takes over.
              const on = twin;
              waitersOf.set(on, (waitersOf.get(on) ?? 0) + 1);
              wakersOf.get(on)?.();
              const shared = await Promise.race([on, (gone ??= clientGone(res))]).finally(() => waitersOf.set(on, waitersOf.get(on)! - 1));
              if (shared === GONE || res.destroyed) {
                trace.failed({ status: 499, type: "", code: "" });
                return;
              }
              if (shared === ABANDONED) twin = other();
              else if (shared) {
                const mine = keptSeconds(policy, deps);
                if ((keptForOf.get(on) ?? 0) < mine) {
                  keptForOf.set(on, mine);
                  void store(deps, scope, shared, policy);
                }
                return await serveHit(res, svc, limitHeaders, s.codec, parsed, new CachedAnswer(shared), trace, bodies);
              } else {
                twin = undefined;
                onItsOwn = true;
              }
            }
            if (!reservesNothing || !admission) break;
            // The answer waited for did not come (its request failed, or its client left): this one
            // calls the upstream, so it reserves its worst case as any miss does. When the client
            // left, it takes the flight first, so the other waiters wait on it rather than each
            // reserving a worst case of its own (a tight spend cap would refuse them); then it looks
            // again. When the request failed, each waiter goes on its own (onItsOwn).
            if (cached && !onItsOwn && !flights.has(flightKey)) {
              let land: (c: Landed) => void = () => {};
              claim = { flight: new Promise<Landed>((r) => (land = r)), land: (c) => land(c) };
              flights.set(flightKey, claim.flight);
            }
            reservesNothing = false;
            admission = await reserveOwn(deps, admission, { projectId: chat.projectId, userId: admitUser, maxCostUsd: deps.pricing.worstCaseUsd(chat), limits: limits! });
            limitHeaders = rateLimitHeaders(admission, s.style);
            if (admission.decision !== Decision.ALLOWED) throw refused(admission, deps, chat);
          }
          // An identical request ended, its answer stored, after this one's lookup missed: the answer
          // is in the cache now. Looked up again, then round again (one may have started meanwhile).
          if (policy.lookup && landings.since(flightKey, lookedAt)) {
            lookedAt = landings.now();
            const again = await deps.cache.getEntry(scope);
            const stored = again.hit ? decodedHit(answers, again.payload, requestId, chat.model) : undefined;
            if (stored) {
              letGo(stored.completion);
              return await serveHit(res, svc, limitHeaders, s.codec, parsed, stored, trace, bodies);
            }
            continue lead;
          }
          break;
        }
      } catch (e) {
        letGo(ABANDONED);
        throw e;
      }
      // No await between the lookup above and this: two identical requests cannot both miss it.
      let land: (c: Landed) => void = claim?.land ?? (() => {});
      const leader = claim !== undefined || (cached && !flights.has(flightKey));
      const flight = claim?.flight ?? (leader ? new Promise<Landed>((r) => (land = r)) : undefined);
      if (flight && !claim) flights.set(flightKey, flight);
      if (flight) keptForOf.set(flight, keptSeconds(policy, deps));
      let answer: Completion | undefined;
      // The answer is stored as soon as it is whole, before its last bytes go to the client: on
      // Redis, a client that sends the same request on to another replica once it has the answer
      // finds it there (in this process's own cache, just after: store).
      let storing: Promise<void> | undefined;
      // Its waiters are answered as soon as it is whole too, not once its client has the last bytes.
      // The answer found storable (keep, once whole), so its size is not reckoned again at its end.
      let fits: Completion | undefined;
      const storableAnswer = (c: Completion | undefined): boolean => {
        if (c !== undefined && c === fits) return true;
        if (!storable(c, deps.maxCachedAnswerBytes)) return false;
        fits = c;
        return true;
      };
      const keep = policy.store || flight ? (c: Completion) => {
        if (!storableAnswer(c)) return;
        if (policy.store) storing ??= store(deps, scope, c, policy);
        if (flight) land(c);
      } : undefined;
      try {
        // A stream that turns out to have no whole form to store (thinking, logprobs, too long)
        // lets its waiters go at once, to call the upstream each: they would get nothing from it.
        const unkept = leader && chat.stream ? () => {
          land(undefined);
          if (flights.get(flightKey) === flight) flights.delete(flightKey);
        } : undefined;
        // While others wait on it, a stream is read on ahead of its own client, up to
        // READ_AHEAD_MAX_CHARS held for it; a client that holds it back beyond that lets them go,
        // each to call the upstream, rather than keep them waiting on its reading.
        const readAhead: ReadAhead | undefined = unkept && flight ? {
          now() {
            if (!waitersOf.get(flight)) return false;
            if (res.writableLength < READ_AHEAD_MAX_CHARS) return true;
            unkept();
            return false;
          },
          watch(wake) {
            wakersOf.set(flight, wake);
            return () => wakersOf.delete(flight);
          },
        } : undefined;
        answer = await callUpstream(res, svc, limitHeaders, s, deps, chat, parsed, trace, bodies, keep, unkept, readAhead);
        cost = svc["X-Svc-Cost"];
        trace.costUsd = cost;
      } catch (e) {
        // The client left before the answer's first event (any non-stream answer, a stream's
        // start), the shutdown cut the request there, the upstream timed out there, or its 2xx
        // answer could not be read (cut off, not JSON, too large), after the request went out: the
        // upstream has the prompt and bills it, so the month is charged for it (the errors say so:
        // SENT_UPSTREAM). One that never left the gateway, or that the upstream refused, costs nothing.
        if (sentUpstream(e)) {
          const part = deps.pricing.partialAnswer(chat, undefined, 0);
          cost = part.costUsd;
          trace.costUsd = cost;
          trace.used(part.usage);
        }
        throw e;
      } finally {
        if (leader) {
          // Its client left (not the shutdown's cut, which ends the waiters too): a waiter takes over.
          const abandoned = answer === undefined && res.destroyed && !res.writableFinished && !deps.shutdown?.isCut;
          // An answer the cache would not store (one that does not say how it finished, one over
          // its entry limit) is not served to its waiters either: they ask the upstream, as a later
          // request would.
          land(abandoned ? ABANDONED : storableAnswer(answer) ? answer : undefined);
          // An answer to store keeps its flight, landed, until it is in the cache: an identical
          // request arriving meanwhile (the store is a round trip on Redis) is served it as a hit.
          if (!(policy.store && storableAnswer(answer))) flights.delete(flightKey);
        }
      }
      const stored = storing ?? (policy.store && storableAnswer(answer) ? store(deps, scope, answer!, policy) : undefined);
      if (stored && flight) {
        void stored.then(() => {
          if (flights.get(flightKey) === flight) flights.delete(flightKey);
          landings.landed(flightKey);
        });
      }
    } finally {
      // A degraded admission (store down, failing open) has no reservation id: settling it still
      // charges the month once the store can record it.
      // A re-admission refused here (reserveOwn) reserved nothing and has nothing to settle.
      if (admission?.decision === Decision.ALLOWED) settle(deps, chat.projectId, admission.reservationId, cost);
    }
  } catch (err) {
    const { info, body, written } = writeError(res, svc, err, limitHeaders, trace.costUsd);
    await written;
    // A client that left before any of the answer got no first byte (its ttfb stays 0); one that
    // node:http answered (a broken or late body: answerClientError) got its answer.
    if (res.headersSent || answeredBody(res.socket) !== undefined) trace.firstByte();
    // An error after the answer's head went out reached the client (if at all) inside it.
    if (res.headersSent && info.status !== 499) trace.failedInStream(info, res.statusCode);
    else trace.failed(info);
    if (bodies && body) trace.responseBody = body;
  } finally {
    // An admission made ahead that the request never came to (its key or its headers refused).
    if (early && deps.admitAhead) void early.then((pre) => dropAhead(deps, pre.admitting));
  }
}

/**
 * Reads the request's metadata and user id into its log, each that is good, so a request refused
 * for one (or for its body) still logs the other; returns the first refusal (the metadata's before
 * the user id's), undefined when both are good.
 */
function headersForLog(req: IncomingMessage, trace: RequestTrace): unknown {
  let refusal: unknown;
  try {
    trace.metadata = metadataOf(req);
  } catch (e) {
    refusal = e;
  }
  try {
    trace.userId = userIdOf(req);
  } catch (e) {
    refusal ??= e;
  }
  return refusal;
}

const undecodableLogged = atMostEvery(60_000);

/**
 * A stored answer, decoded; undefined (a miss, answered by the upstream and stored anew) when its
 * payload is not one this build can read: an entry another replica wrote in a form this one does
 * not know, or damaged in the store. Logged at most once a minute.
 */
function decodedHit(answers: CachedAnswers, payload: Uint8Array, requestId: string, model: string): CachedAnswer | undefined {
  try {
    const hit = answers.of(payload);
    // The gateway's own entries name the model they answer (it is in their key): one naming another
    // (put on the core port) would answer the client in another model's name.
    if (hit.completion.model !== model) throw new Error(`the entry answers for the model '${hit.completion.model}', not '${model}'`);
    return hit;
  } catch (e) {
    if (undecodableLogged()) {
      log.warn("a cached answer could not be decoded: answered as a miss", { requestId, err: String(e) });
    }
    return undefined;
  }
}

/** A key's project and mode, fixed for as long as the key exists, and its project's limits when last verified. */
interface Identity {
  projectId: string;
  keyMode: KeyMode;
  limits: ProjectLimits | undefined;
}

/**
 * The identity of each key verified lately, by secret, so a request's cache lookup can start while
 * its key is being verified (on Redis, both are a round trip). A guess only picks where to look:
 * the answer found is used only once the key is verified, and only when the verified key's project
 * and mode are the guessed ones; a key that fails verification is forgotten.
 */
export class Identities {
  static readonly MAX = 10_000;
  /** The least recently used goes first when full. */
  readonly #bySecret = new Lru<string, Identity>();

  get(secret: string): Identity | undefined {
    return this.#bySecret.get(secret);
  }

  remember(secret: string, projectId: string, keyMode: KeyMode, limits: ProjectLimits | undefined): void {
    const known = this.#bySecret.peek(secret);
    if (known) {
      known.limits = limits;
      return;
    }
    if (this.#bySecret.size >= Identities.MAX) this.#bySecret.shift();
    this.#bySecret.set(secret, { projectId, keyMode, limits });
  }

  forget(secret: string): void {
    this.#bySecret.delete(secret);
  }
}

/** The Ahead of a request whose body was never read (its key was refused first). */
const unread = (s: Surface): Ahead => ({ text: undefined, body: undefined, parsed: undefined, error: undefined, cacheKey: "", prepared: false, memoPath: s.path, guess: undefined, lookup: undefined, lookedAt: 0, admitting: undefined });

/** What a request works out while its key is being verified. */
interface Ahead {
  /** The body's text as sent, whether or not it is JSON; undefined when it could not be read (too large). */
  text: string | undefined;
  /** The body, or undefined with `error` when it could not be read or is not JSON. */
  body: JsonBody | undefined;
  /** The parsed request, or undefined with `error` when the body is not a valid request. */
  parsed: ParsedChatRequest | undefined;
  error: unknown;
  /** The cache key ("" when the cache is off (SVC_CACHE_DISABLED) or the body did not parse). */
  cacheKey: string;
  /** Whether body, parse and cache key came from an earlier hit's (PreparedRequests). */
  prepared: boolean;
  /** What prepared bodies of this request are filed under: the path, and its betas when it names any. */
  memoPath: string;
  /** The scope the lookup below was made in, from an earlier verification of the same key. */
  guess: Identity | undefined;
  lookup: Promise<GetEntryResponse | undefined> | undefined;
  /** When that lookup was made (Landings). */
  lookedAt: number;
  /** The admission made on the guessed identity (GatewayDeps.admitAhead). */
  admitting: AdmittedAhead | undefined;
}

/** An admission made before the key's verdict, on what the guessed identity said. */
interface AdmittedAhead {
  projectId: string;
  userId: string;
  limits: ProjectLimits;
  /** Undefined when the call failed: the request then makes its own, which fails in its turn. */
  response: Promise<AdmitResponse | undefined>;
  /** Set once the request has adopted it or taken it back. */
  done: boolean;
}

/**
 * Reads and parses the body, and looks the answer up in the cache under the key's guessed
 * identity, before the key's verdict. Never rejects: errors are kept and thrown in their turn, after
 * the key is known good (a bad key is a 401 whatever the body).
 */
async function ahead(req: IncomingMessage, s: Surface, deps: GatewayDeps, guess: Identity | undefined, prepared: PreparedRequests, landings: Landings): Promise<Ahead> {
  // Betas are part of the cache key (and so of what a prepared body stands for); a bad header is
  // refused in its turn, after the key.
  const betas = s.style === ApiStyle.MESSAGES ? betasOrNone(req) : [];
  const memoPath = betas.length ? `${s.path} ${betas.join(",")}` : s.path;
  const out: Ahead = { text: undefined, body: undefined, parsed: undefined, error: undefined, cacheKey: "", prepared: false, memoPath, guess: undefined, lookup: undefined, lookedAt: 0, admitting: undefined };
  let known: PreparedRequest | undefined;
  try {
    // A body not sent as JSON is read all the same (within the size limit), for the request's log.
    const badType = contentTypeError(req);
    let read: BodyText;
    try {
      read = await readBodyText(req, deps.maxRequestBytes, deps.bodyBudget);
    } catch (e) {
      out.text = partialBodyOf(e);
      throw badType ?? e;
    }
    const text = read.text;
    out.text = text;
    if (badType) throw badType;
    if (!read.utf8) throw notUtf8();
    known = deps.cacheEnabled ? prepared.get(memoPath, text) : undefined;
    if (known) {
      out.body = { text, value: known.value };
      out.parsed = known.parsed;
      out.prepared = true;
    } else {
      const body = parseJsonBody(text);
      out.body = body;
      const parsed = s.codec.parseRequest(body.value);
      refuseOverflowedNumbers(text, body.value);
      out.parsed = parsed;
    }
  } catch (e) {
    out.error = e;
    return out;
  }
  if (deps.cacheEnabled) {
    out.cacheKey = known ? known.cacheKey : cacheKeyOf(betas.length ? { ...out.parsed, betas } : out.parsed);
    if (guess && lookupAsked(req)) {
      out.guess = guess;
      out.lookedAt = landings.now();
      out.lookup = deps.cache.getEntry({ $typeName: "svc.cache.v1.GetEntryRequest", projectId: guess.projectId, keyMode: guess.keyMode, cacheKey: out.cacheKey }).catch(() => undefined);
    }
  }
  if (deps.admitAhead && guess?.keyMode === KeyMode.LIVE && hasLimits(guess.limits)) out.admitting = admitAhead(req, s, deps, guess.projectId, guess.limits, out.parsed);
  return out;
}

/**
 * Admits the request on its key's guessed identity, as a miss would be admitted (its worst case
 * reserved). Undefined when its user header is bad: the request is refused in its turn anyway.
 */
function admitAhead(req: IncomingMessage, s: Surface, deps: GatewayDeps, projectId: string, limits: ProjectLimits, parsed: ParsedChatRequest): AdmittedAhead | undefined {
  let userId = "";
  if (s.style === ApiStyle.CHAT_COMPLETIONS) {
    try {
      userId = userIdOf(req);
    } catch {
      return undefined;
    }
  }
  const maxCostUsd = deps.pricing.worstCaseUsd(parsed);
  const response = deps.limits.admit({ projectId, userId, maxCostUsd, limits, rescindable: true }).catch(() => undefined);
  return { projectId, userId, limits, response, done: false };
}

/**
 * The admission made ahead when it is the one this request needs (`need`: same project, user and
 * limits); otherwise it is taken back and the request admits itself. A hit reserves nothing, so a
 * hit that the ahead admission refused for a miss's worst case is decided again.
 */
async function adoptAhead(
  deps: GatewayDeps,
  a: AdmittedAhead,
  need: { projectId: string; userId: string; limits: ProjectLimits; hit: boolean } | undefined,
): Promise<AdmitResponse | undefined> {
  if (!need || a.projectId !== need.projectId || a.userId !== need.userId || !equals(ProjectLimitsSchema, a.limits, need.limits)) {
    // Taken back before the request's own admission, which must not count it.
    await dropAhead(deps, a);
    return undefined;
  }
  a.done = true;
  const r = await a.response;
  return r?.decision === Decision.SPEND_CAPPED && need.hit ? undefined : r;
}

/**
 * Replaces an admission that reserved nothing (a request that waited on an identical one) by one
 * that reserves `need.maxCostUsd`: the first is taken back, counts and all, so the request is
 * counted once. One with no reservation id (made while the store was down) has nothing to take back.
 */
async function reserveOwn(deps: GatewayDeps, zero: AdmitResponse, need: { projectId: string; userId: string; maxCostUsd: string; limits: ProjectLimits }): Promise<AdmitResponse> {
  if (zero.reservationId) {
    try {
      await deps.limits.rescind({ projectId: need.projectId, userId: need.userId, reservationId: zero.reservationId });
    } catch (e) {
      log.warn("an admission that reserved nothing could not be taken back", { projectId: need.projectId, err: String(e) });
    }
  }
  return deps.limits.admit(need);
}

/** Takes back an admission made ahead that the request will not use; never rejects. */
async function dropAhead(deps: GatewayDeps, a: AdmittedAhead | undefined): Promise<void> {
  if (!a || a.done) return;
  a.done = true;
  try {
    const r = await a.response;
    if (r?.decision !== Decision.ALLOWED || !r.reservationId) return;
    // Not rescinded while the store is down: the store takes it back once it answers (and says so, once an outage).
    await deps.limits.rescind({ projectId: a.projectId, userId: a.userId, reservationId: r.reservationId });
  } catch (e) {
    log.warn("an admission made ahead could not be taken back", { projectId: a.projectId, err: String(e) });
  }
}

/** The request's betas, or none when its header is bad (refused later, in its turn). */
function betasOrNone(req: IncomingMessage): string[] {
  try {
    return betasOf(req);
  } catch {
    return [];
  }
}

/** Whether the request's cache policy asks for a lookup; a bad header is refused later, in its turn. */
function lookupAsked(req: IncomingMessage): boolean {
  try {
    return cachePolicyOf(req).lookup;
  } catch {
    return false;
  }
}

/**
 * The first event of a stream, `next`. Should it take longer than `keepAliveMs`, `begin` commits
 * the stream meanwhile (beginStream) and a keep-alive comment goes out each quiet `keepAliveMs`, to
 * a client that is reading (as writeStream's keep-alive does), until it comes or fails.
 */
async function firstEvent<T>(next: Promise<T>, res: ServerResponse, keepAliveMs: number, begin: () => void): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const quiet = () => {
    if (res.destroyed || res.writableEnded) return;
    begin();
    if (!res.writableNeedDrain) res.write(": keep-alive\n\n");
    timer = setTimeout(quiet, keepAliveMs);
  };
  timer = setTimeout(quiet, keepAliveMs);
  try {
    return await next;
  } finally {
    clearTimeout(timer);
  }
}

/** An iterator whose first step fails with `error`: a stream begun before its first event, which failed. */
function failing<T>(error: unknown): AsyncIterator<T> {
  return {
    next: () => Promise.reject(error),
    return: () => Promise.resolve({ done: true, value: undefined }),
  };
}

/**
 * Calls the core's proxy and writes its answer, JSON or SSE. Returns the whole answer when it is
 * complete and cacheable, undefined otherwise (errors after the first byte are written as SSE).
 * `keep` is given the whole answer as soon as there is one, before its last bytes are written.
 */
async function callUpstream(
  res: ServerResponse,
  svc: SvcHeaders,
  extra: Record<string, string> | undefined,
  s: Surface,
  deps: GatewayDeps,
  chat: StreamChatRequest,
  parsed: ParsedChatRequest,
  trace: RequestTrace,
  bodies: boolean,
  keep?: (c: Completion) => void,
  unkept?: () => void,
  readAhead?: ReadAhead,
): Promise<Completion | undefined> {
  const shutdown = deps.shutdown;
  // After the shutdown's cut, no upstream call starts (a request that waited on an identical one
  // the cut ended, or on its key or admission meanwhile).
  if (shutdown?.isCut) throw shuttingDown();
  // A client that goes away aborts the upstream call (a Cancellation, not an AbortSignal:
  // core/cancel.ts), and so does the shutdown's cut, until the answer is written.
  // A client already gone (it left while the request waited its turn) is never called for.
  if (res.destroyed) throw new ConnectError("The client closed the request.", Code.Canceled);
  const cancel = new Cancellation();
  const unwatch = shutdown?.watch(cancel);
  // Whether the shutdown's cut came while the answer was still being written (its connection is
  // closed after, whether the client was reading or not): such a stream was cut, not left.
  let cutBeforeClose = false;
  res.once("close", () => {
    unwatch?.();
    if (res.writableFinished) return;
    cutBeforeClose = cancel.aborted && shutdown?.isCut === true;
    cancel.abort();
  });
  trace.upstreamStarted();
  const events = deps.proxy.streamChat(chat, { contextValues: createContextValues().set(cancellationKey, cancel) })[Symbol.asyncIterator]();
  // Errors before the first event are still plain HTTP errors; the upstream's time is logged either
  // way. Except for a stream whose first event takes longer than the keep-alive interval: it is
  // begun without it (its 200 and headers, then a keep-alive comment each quiet interval), so that
  // a proxy's idle timeout in front does not cut a connection that has sent nothing yet (a
  // reasoning model thinking before its first token); an error that comes first is then the
  // stream's error event, as one after it is.
  let first: IteratorResult<StreamChatResponse> | undefined;
  let firstFailed: { error: unknown } | undefined;
  let begun = false;
  const keepAliveMs = chat.stream ? (deps.streamKeepAliveMs ?? 0) : 0;
  try {
    first = keepAliveMs > 0 ? await firstEvent(events.next(), res, keepAliveMs, () => {
      beginStream(res, svc, extra, s.codec);
      begun = true;
      trace.firstByte(); // the answer's first bytes, its headers and a keep-alive, go out now
    }) : await events.next();
  } catch (e) {
    if (!begun) {
      trace.upstreamEnded();
      throw cutByShutdown(e, res, shutdown) ?? e;
    }
    firstFailed = { error: e };
  }
  if (first?.done) {
    const e = new Error("the proxy ended without an answer");
    if (!begun) throw e;
    firstFailed = { error: e };
  }
  if (!firstFailed) trace.firstByte();
  if (chat.stream) {
    // What the cache could hold, or the log keeps of a response body, whichever is more: no copy
    // of a longer answer is kept (it is streamed on all the same).
    const whole = new CompletionAssembler(Math.max(deps.maxCachedAnswerBytes ?? Infinity, MAX_LOGGED_BODY_CHARS));
    let usage: Completion["usage"];
    // What an answer cut short is billed on: the upstream's prompt count (with its prompt-cache
    // counts), when its stream gave one at the start, and the characters streamed since.
    let started: Completion["usage"];
    let outChars = 0;
    let unassemblable = unkept;
    const onEvent = (ev: StreamChatResponse) => {
      whole.push(ev);
      if (unassemblable && !whole.assemblable) {
        unassemblable();
        unassemblable = undefined;
      }
      const e = ev.event;
      // Raw deltas (thinking, signatures) are output the upstream bills too; counted as their JSON.
      if (e.case === "blockDelta") outChars += e.value.text.length + e.value.partialJson.length + e.value.rawJson.length;
      else if (e.case === "messageStart") started = e.value.usage;
      else if (e.case === "messageEnd") {
        usage = e.value.usage;
        const c = keep && whole.result();
        if (c) keep!(c);
      }
    };
    const partialCost = () => {
      // A stream begun and then failed before its first event costs what the same failure costs
      // answered as an HTTP error: nothing, unless the upstream had the prompt (serve's catch).
      if (firstFailed && !sentUpstream(firstFailed.error)) return "0";
      const part = deps.pricing.partialAnswer(chat, started, outChars);
      usage = part.usage;
      return part.costUsd;
    };
    const cutShort = shutdown && ((e: unknown) => {
      const cut = cutByShutdown(e, res, shutdown);
      return cut && toErrorInfo(cut);
    });
    const rest = firstFailed ? failing<StreamChatResponse>(firstFailed.error) : events;
    const failure = await writeStream(res, svc, extra, s.codec, parsed, first?.value, rest, onEvent, partialCost, cutShort, deps.streamKeepAliveMs, readAhead);
    trace.upstreamEnded();
    trace.used(usage);
    const clientGone = res.destroyed && !res.writableFinished;
    // What the client got: a 200 whose stream ended in an error event, or nothing more (it left:
    // 499 client_closed_request, as for a client that left before the answer). A stream the
    // shutdown cut while its client was not reading (its error event never written) was still
    // cut by the shutdown, not left: logged as the cut streams are.
    if (clientGone && cutBeforeClose) trace.failedInStream(toErrorInfo(shuttingDown()), res.statusCode);
    else if (clientGone) trace.failed({ status: 499, type: "", code: "" });
    else if (failure) trace.failedInStream(failure, res.statusCode);
    const answer = clientGone ? undefined : whole.result();
    if (bodies) {
      if (answer) trace.responseBody = JSON.stringify(s.codec.renderCompletion(answer));
      // Cut short; or whole, with parts the cache cannot rebuild (thinking, citations, per-chunk
      // fields): the log still has the answer as far as it can be written whole.
      else {
        trace.responseBody = partialBody(s.codec, whole, usage);
        if (trace.responseBody) trace.responseBodyDropped = whole.droppedChars;
        // No answer begun (a stream begun for its keep-alive whose upstream then failed): the
        // error its client was sent, as a request refused before its stream logs its error's body.
        else if (failure && !clientGone) trace.responseBody = JSON.stringify(toErrorBody(failure));
      }
    }
    return answer;
  }
  trace.upstreamEnded();
  const value = first!.value as StreamChatResponse; // a whole answer's one event: never begun early
  const answer = value.event.case === "completion" ? value.event.value : undefined;
  if (answer) keep?.(answer);
  const body = writeCompletion(res, svc, extra, s.codec, value);
  if (bodies) trace.responseBody = body;
  await events.return?.(); // let the core's stream run its cleanup now, not at garbage collection
  trace.answered(answer);
  return answer;
}

/**
 * What a call the shutdown's cut aborted tells its client, who is still there: 503 `shutting_down`,
 * marked as sent upstream when the aborted call was (so it is billed as a client that left would
 * be). Undefined for any other error, a client that left included.
 */
function cutByShutdown(e: unknown, res: ServerResponse, shutdown: ShutdownCut | undefined): ConnectError | undefined {
  if (!shutdown?.isCut || !isCanceled(e) || res.destroyed) return undefined;
  const err = shuttingDown();
  if (sentUpstream(e)) err.metadata.set(SENT_UPSTREAM, "1");
  return err;
}

/** The error of a refused admission; a spend-cap refusal says when the request could never fit the cap. */
const refused = (a: AdmitResponse, deps: GatewayDeps, chat: StreamChatRequest): Error =>
  admissionError(a, a.decision === Decision.SPEND_CAPPED ? deps.pricing.worstCaseUsd(chat) : undefined);

/**
 * The answer a stream carried before it was cut short, as the JSON of a whole answer of the
 * client's style with no finish reason, and the usage it was billed on; "" when nothing came.
 */
function partialBody(codec: ClientCodec, whole: CompletionAssembler, usage: Completion["usage"]): string {
  const part = whole.partial();
  if (!part) return "";
  try {
    return JSON.stringify(codec.renderPartial(usage ? { ...part, usage } : part));
  } catch (e) {
    // The log's copy of the body is best effort: it never changes what the request logs otherwise.
    log.warn("partial answer not rendered for the log", { err: String(e) });
    return "";
  }
}

/** Serves a stored (or shared in-flight) answer: no upstream call, so it costs nothing. */
async function serveHit(
  res: ServerResponse,
  svc: SvcHeaders,
  extra: Record<string, string> | undefined,
  codec: ClientCodec,
  parsed: ParsedChatRequest,
  hit: CachedAnswer,
  trace: RequestTrace,
  bodies: boolean,
): Promise<void> {
  // A request that waited on an identical one in flight may have lost its client meanwhile.
  if (res.destroyed) {
    trace.failed({ status: 499, type: "", code: "" });
    return;
  }
  const c = hit.completion;
  svc["X-Svc-Cache"] = "HIT";
  trace.cache = "HIT";
  trace.costSavedUsd = c.costUsd || "0";
  trace.answered(c);
  trace.firstByte();
  if (parsed.stream) {
    await writeStream(res, svc, extra, codec, parsed, completionEvent({ ...c, costUsd: "0" }), emptyEvents);
    if (bodies) trace.responseBody = hit.json(codec);
  } else {
    // The svc headers' cost stays "0": a hit costs nothing.
    const body = hit.json(codec);
    writeJson(res, 200, extra ? { ...svc, ...extra } : svc, body);
    if (bodies) trace.responseBody = body;
  }
}

/**
 * Whether an answer may be cached: one that said how it finished. An upstream answer without a
 * finish reason (finish_reason null, a stream with none, no message_delta) is passed on as it came,
 * and its repeats go to the upstream again rather than being served that answer for the TTL.
 */
/** Whether a request is a turn of a message thread (its extra fields read only when they may name one). */
const inThread = (r: ParsedChatRequest): boolean => r.style === ApiStyle.MESSAGES && r.extraJson.includes('"thread"') && carriesThread(parseExtra(r.extraJson));

/**
 * Whether the cache would store the answer: it says how it finished, and its payload fits the
 * cache's entry limit (`maxBytes`, SVC_CACHE_MAX_ENTRY_BYTES) and can be written at all (no lone
 * surrogate: encodeCompletion). Only such an answer is served to a flight's waiters.
 */
const storable = (c: Completion | undefined, maxBytes: number | undefined): boolean =>
  c !== undefined && c.finishReason !== FinishReason.UNSPECIFIED && (maxBytes === undefined || encodedCompletionBytes(c) <= maxBytes);

const emptyEvents: AsyncIterator<never> = { next: async () => ({ done: true, value: undefined }) };

/**
 * Stores an answer off the request's path: the client already has it, and the cache never fails a
 * request. A cache shared with other replicas is written at once (GatewayDeps.cacheShared); this
 * process's own is written once the answer's bytes have been handed to the socket (setImmediate:
 * after this turn's writes), so encoding and storing the entry never delays the answer, and an
 * identical request arriving meanwhile finds the answer's flight, kept until the store ends
 * (serve), and is served it as a hit. Resolves when the entry is in the store (or the store
 * failed); never rejects. An answer the cache's bytes cannot carry as it is (a lone surrogate:
 * encodeCompletion) is not stored, so its repeats are answered as it was, by the upstream.
 */
function store(deps: GatewayDeps, scope: GetEntryRequest, c: Completion, policy: CachePolicy): Promise<void> {
  if (deps.cacheShared) return storeNow(deps, scope, c, policy);
  return new Promise<void>((resolve) => setImmediate(() => void storeNow(deps, scope, c, policy).then(resolve)));
}

function storeNow(deps: GatewayDeps, scope: GetEntryRequest, c: Completion, policy: CachePolicy): Promise<void> {
  const { projectId, keyMode, cacheKey } = scope;
  const payload = encodeCompletion(c);
  if (!payload) return stored;
  return deps.cache
    .putEntry({ $typeName: "svc.cache.v1.PutEntryRequest", projectId, keyMode, cacheKey, payload, costUsd: c.costUsd, ttlSeconds: policy.ttlSeconds })
    .then(
      () => {},
      (e) => log.warn("cache store failed", { err: String(e) }),
    );
}

const stored = Promise.resolve();

/** For how many seconds a request's policy keeps its answer: 0 when it stores none. */
const keptSeconds = (policy: CachePolicy, deps: GatewayDeps): number => (policy.store ? policy.ttlSeconds || (deps.cacheTtlSeconds ?? 0) : 0);

/** Settles a reservation to the real cost ("0" releases it), off the request's path. */
function settle(deps: GatewayDeps, projectId: string, reservationId: string, costUsd: string): void {
  deps.limits.settle({ projectId, reservationId, costUsd }).catch((e) => log.warn("spend settle failed", { err: String(e) }));
}
