import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { lacksKey, type ProviderConfig } from "../../config.js";
import {
  ApiStyle,
  type Completion,
  ProxyService,
  type StreamChatRequest,
  type StreamChatResponse,
  type Usage,
} from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { cancelOf } from "../cancel.js";
import { apiError, toErrorInfo, withoutSecrets, withRetryGuidance } from "../errors.js";
import { newRequestId } from "../ids.js";
import { atMostEvery, log } from "../../logger.js";
import { parseUpstreamJson } from "../json.js";
import { type SseEvent, SseParser } from "../sse.js";
import { cutMarked } from "../text.js";
import { completionEvent, localInputTokens, localTokens, nowSeconds, usage as canonicalUsage } from "./canonical.js";
import { costPico, formatUsd, type Prices } from "./cost.js";
import { type ModelRoute, pricesOf, unlimitedOutputTokens, unservedModel } from "./models.js";
import { SENT_UPSTREAM, type UpstreamHttp, type UpstreamResponse } from "./upstream-http.js";
import { credentialsRefused, type StreamConverter, UPSTREAM_SAID, type UpstreamAdapter, type UpstreamTarget } from "./upstreams/adapter.js";

export interface ProxyDeps {
  models: Map<string, ModelRoute>;
  providers: Map<string, ProviderConfig>;
  adapters: Map<ApiStyle, UpstreamAdapter>;
  http: UpstreamHttp;
}

const MAX_RESPONSE_CHARS = 64 * 1024 * 1024;
/** The errors of a 2xx stream that the upstream billed all the same: it had the prompt. */
const UNREAD_2XX_STREAM = new Set(["upstream_invalid_response", "upstream_stream_incomplete"]);

const EVENT_STREAM = /^\s*text\/event-stream\s*(;|$)/i;

const invalidResponse = (what: string): ConnectError =>
  apiError(502, "api_error", "upstream_invalid_response", `The upstream provider sent an invalid response: ${what}.`);

interface Route {
  model: ModelRoute;
  provider: ProviderConfig;
  adapter: UpstreamAdapter;
  prices: Prices;
}

/** Creates the ProxyService implementation: route the model, call its upstream, price the answer. */
export function createProxyService(deps: ProxyDeps): ServiceImpl<typeof ProxyService> {
  const routes = new Map<string, Route>();
  const alarms = new Map<string, () => boolean>();
  for (const model of deps.models.values()) {
    const provider = deps.providers.get(model.provider)!;
    const adapter = deps.adapters.get(provider.style);
    if (!adapter) throw new Error(`no upstream adapter for provider ${provider.name}`);
    routes.set(model.id, { model, provider, adapter, prices: pricesOf(model) });
  }

  function routeFor(req: StreamChatRequest): Route {
    const route = routes.get(req.model);
    const unserved = unservedModel(route?.model, req.model, req.style);
    if (unserved) throw unserved;
    const { provider } = route!;
    if (lacksKey(provider)) {
      const setting = provider.apiKeyEnv ? `set ${provider.apiKeyEnv}` : `name the variable holding it in the config file (providers.${provider.name}.apiKeyEnv)`;
      // Retrying cannot help until the operator acts: the SDKs are told not to (x-should-retry).
      throw withRetryGuidance(
        apiError(502, "api_error", "upstream_not_configured", `No API key is configured for the ${provider.name} provider: ${setting}, or start the gateway with --demo for the built-in provider.`),
        noRetry,
      );
    }
    return route!;
  }

  return {
    async *streamChat(req: StreamChatRequest, ctx: HandlerContext): AsyncGenerator<StreamChatResponse> {
      if (!req.requestId) req.requestId = newRequestId();
      try {
        const route = routeFor(req);
        const target: UpstreamTarget = {
          provider: route.provider.name,
          style: route.provider.style,
          baseUrl: route.provider.baseUrl,
          apiKey: route.provider.apiKey,
          upstreamModel: route.model.upstreamModel,
          defaultMaxTokens: unlimitedOutputTokens(route.model, route.provider.style),
        };
        const res = await deps.http.send(route.adapter.buildRequest(req, target), cancelOf(ctx));
        try {
          if (res.status >= 400) throw withRetryGuidance(upstreamError(route.adapter, res.status, await res.text()), res.errorHeaders);
          if (res.status >= 300) throw redirected(route.provider, res.status, res.errorHeaders.location);
          if (!req.stream) {
            let answer: Completion;
            try {
              answer = await completion(route, req, res);
            } catch (e) {
              // The upstream answered 2xx: it had the prompt and bills it, whatever became of its
              // body (cut off, not JSON, too large), as for a client that leaves after the request
              // went out (SENT_UPSTREAM tells the gateway to charge it).
              if (e instanceof ConnectError && e.code !== Code.Canceled) e.metadata.set(SENT_UPSTREAM, "1");
              throw e;
            }
            yield completionEvent(answer);
            return;
          }
          // An answer that is not an event stream (a JSON body, an HTML error page) is a bad answer, not
          // a stream cut short. No content-type at all is let through: the body decides then.
          if (res.contentType !== "" && !EVENT_STREAM.test(res.contentType)) {
            throw invalidResponse(`a streamed answer came as ${JSON.stringify(res.contentType.slice(0, 100))}, not text/event-stream`);
          }
          // The events are yielded here rather than through a nested generator (`yield*`): each event
          // would pay a second generator step and its promises.
          const events = new UpstreamEvents(route, req);
          for await (const chunk of res.body) {
            for (const ev of events.push(chunk)) yield ev;
            events.check();
            // The answer is whole ([DONE], message_stop): it ends here, whatever the upstream does
            // with its connection after (holds it open past the idle timeout, sends more).
            if (events.complete) {
              res.finishAnswer();
              break;
            }
          }
          for (const ev of events.end()) yield ev;
          events.check();
        } catch (e) {
          // A 2xx stream that cannot be read (no event stream, not the style's events), or that broke
          // off or ended before its first event, had the prompt, as a 2xx answer that cannot be read
          // has (above): billed for it. (Broken off after its first event, the stream is priced on
          // what it carried: the gateway's partialCost.)
          if (req.stream && res.status < 300 && e instanceof ConnectError && UNREAD_2XX_STREAM.has(toErrorInfo(e).code)) e.metadata.set(SENT_UPSTREAM, "1");
          // The upstream's words reach the client and the log: never the gateway's own credential in them.
          throw withoutSecrets(e, route.provider.apiKey);
        } finally {
          res.dispose();
        }
      } catch (e) {
        operatorAlarm(alarms, req.model, routes.get(req.model), e);
        throw e;
      }
    },
  };
}

/**
 * Upstream failures that only the operator can clear (a refused or missing provider key, an account
 * out of quota, a redirect, a provider that cannot be reached): each request's log has them, and
 * the server's log says so too, at most once a minute per model and kind, so that a dead
 * provider or a revoked key shows where an operator looks.
 */
const OPERATOR_CODES = new Set(["upstream_authentication_failed", "upstream_quota_exhausted", "upstream_not_configured", "upstream_redirected", "upstream_unreachable"]);

/** The low-level reason under an error (ECONNREFUSED, a DNS failure, a TLS refusal), when it has one. */
function causeOf(e: unknown): string | undefined {
  let c: unknown = (e as { cause?: unknown }).cause;
  for (let depth = 0; c instanceof Error && depth < 4; depth++) {
    const code = (c as NodeJS.ErrnoException).code;
    if (code || !(c as { cause?: unknown }).cause) return code ? `${code}: ${c.message}` : c.message;
    c = (c as { cause?: unknown }).cause;
  }
  return undefined;
}

/** `alarms`: one gate per model and kind, the service's own; `route`, the model's, when it has one. */
function operatorAlarm(alarms: Map<string, () => boolean>, model: string, route: Route | undefined, e: unknown): void {
  if (!(e instanceof ConnectError)) return;
  const info = toErrorInfo(e);
  if (!OPERATOR_CODES.has(info.code)) return;
  const key = `${model} ${info.code}`;
  let gate = alarms.get(key);
  if (!gate) alarms.set(key, (gate = atMostEvery(60_000)));
  if (gate()) log.warn("upstream failing: requests for this model are answered with errors only the operator can clear (logged at most once a minute)", { model, provider: route?.provider.name, baseUrl: route?.provider.baseUrl, code: info.code, message: info.message, cause: causeOf(e) });
}

/** Retry guidance for an error that only the operator can clear. */
const noRetry = { "x-should-retry": "false" };

/**
 * A redirect from the upstream, which the gateway does not follow (the request would go, with the
 * provider's key, wherever it points): nearly always a base URL that needs changing (http for
 * https, a path without /v1), so the message names the setting, and the SDKs are told not to retry.
 */
function redirected(provider: ProviderConfig, status: number, location: string | string[] | undefined): ConnectError {
  // Without a user, password or query: a login page's redirect may carry a token, and the message
  // reaches the client and the server's log.
  const to = typeof location === "string" && location !== "" ? ` to ${cutMarked(location.replace(/\/\/[^/?#]*@/, "//").replace(/[?#].*$/s, ""), 200)}` : "";
  const setting = provider.baseUrlSetting ?? `the ${provider.name} provider's base URL`;
  return withRetryGuidance(
    apiError(502, "api_error", "upstream_redirected", `The upstream provider answered HTTP ${status}, a redirect${to}, which the gateway does not follow: check ${setting}.`),
    noRetry,
  );
}

/** An upstream's error answer (its status and body) as the client's error: see credentialsRefused for 401 and 403. */
function upstreamError(adapter: UpstreamAdapter, status: number, body: string): ConnectError {
  const passed = adapter.convertError(status, body);
  if (status === 401 || status === 403) {
    return credentialsRefused(`HTTP ${status}`, passed.rawMessage.startsWith(UPSTREAM_SAID) ? passed.rawMessage.slice(UPSTREAM_SAID.length) : undefined);
  }
  return passed;
}

async function completion(route: Route, req: StreamChatRequest, res: UpstreamResponse): Promise<Completion> {
  const text = await res.text(MAX_RESPONSE_CHARS);
  if (text.length > MAX_RESPONSE_CHARS) {
    throw apiError(502, "api_error", "upstream_invalid_response", `The upstream provider's answer is larger than the gateway reads (${MAX_RESPONSE_CHARS / (1024 * 1024)} Mi characters); a stream has no such limit.`);
  }
  let json: unknown;
  try {
    json = parseUpstreamJson(text);
  } catch {
    throw apiError(502, "api_error", "upstream_invalid_response", "The upstream provider sent a response that is not JSON.");
  }
  const c = route.adapter.parseCompletion(json, req);
  c.model = req.model;
  if (c.id === "") c.id = answerId(req);
  if (c.created === 0) c.created = nowSeconds();
  c.usage = settleUsage(c.usage, req, () => c.blocks.reduce((n, b) => n + b.text.length + b.toolInputJson.length, 0));
  c.costUsd = formatUsd(costPico(route.prices, c.usage));
  return c;
}

/**
 * The id of an answer whose upstream gave none (a compatible server's), in the request's style: an
 * empty id reads as none to the SDKs (the openai stream helper then drops the answer's usage).
 */
function answerId(req: StreamChatRequest): string {
  const suffix = req.requestId.startsWith("req_") ? req.requestId.slice(4) : req.requestId;
  return req.style === ApiStyle.MESSAGES ? `msg_${suffix}` : `chatcmpl-${suffix}`;
}

/**
 * An upstream stream's text as canonical events: SSE framing, the adapter's conversion, and the
 * usage and cost settled on `messageEnd`.
 */
class UpstreamEvents {
  readonly #parser = new SseParser();
  readonly #converter: StreamConverter;
  #outChars = 0;
  /** Whether the body held at least one SSE event. */
  #sawEvent = false;
  #failure: unknown;

  constructor(
    private readonly route: Route,
    private readonly req: StreamChatRequest,
  ) {
    this.#converter = route.adapter.createStreamConverter(req);
  }

  /**
   * The events a chunk of the body completes. A failure (an upstream error event, a malformed
   * chunk) is held until `check()`, so the events before it in the same chunk still go out first.
   */
  push(chunk: string): StreamChatResponse[] {
    const out: StreamChatResponse[] = [];
    try {
      for (const sse of this.#parser.push(chunk)) this.#convert(sse, out);
    } catch (e) {
      this.#failure = e;
    }
    return out;
  }

  /** The events left when the body has ended; an answer cut short fails at `check()`. */
  end(): StreamChatResponse[] {
    const out: StreamChatResponse[] = [];
    try {
      for (const sse of this.#parser.end()) this.#convert(sse, out);
      // A body without a single event was never a stream: a bad answer, not one that broke off.
      if (!this.#sawEvent) throw invalidResponse("a streamed answer held no server-sent events");
      if (!this.#converter.complete && !this.#converter.finished) {
        throw apiError(502, "api_error", "upstream_stream_incomplete", "The upstream provider ended the stream before the answer was complete.");
      }
      for (const ev of this.#converter.end()) out.push(this.#finish(ev));
    } catch (e) {
      this.#failure = e;
    }
    return out;
  }

  /** Whether the upstream's last event ([DONE], message_stop) came: nothing after it is passed on. */
  get complete(): boolean {
    return this.#converter.complete;
  }

  /** Throws the failure met by the last `push` or `end`, after its events were passed on. */
  check(): void {
    if (this.#failure !== undefined) throw this.#failure;
  }

  #convert(sse: SseEvent, out: StreamChatResponse[]): void {
    // After the answer's last event, the same chunk's rest (a second message_stop, a stray delta)
    // is not part of it: the client's stream, the log and the cache all end at that event.
    if (this.#converter.complete) return;
    this.#sawEvent = true;
    for (const ev of this.#converter.push(sse)) out.push(this.#finish(ev));
  }

  #finish(ev: StreamChatResponse): StreamChatResponse {
    const e = ev.event;
    // Raw deltas (thinking, signatures) are output too, counted as their JSON, as for an answer cut short.
    if (e.case === "blockDelta") this.#outChars += e.value.text.length + e.value.partialJson.length + e.value.rawJson.length;
    else if (e.case === "messageStart") {
      if (e.value.created === 0) e.value.created = nowSeconds();
      if (e.value.id === "") e.value.id = answerId(this.req);
    }
    else if (e.case === "messageEnd") {
      e.value.usage = settleUsage(e.value.usage, this.req, () => this.#outChars);
      e.value.costUsd = formatUsd(costPico(this.route.prices, e.value.usage));
    }
    return ev;
  }
}

/** The upstream's usage when it gave one; otherwise counted locally (~4 characters a token). */
function settleUsage(usage: Usage | undefined, req: StreamChatRequest, outChars: () => number): Usage {
  if (usage && (usage.inputTokens > 0 || usage.outputTokens > 0)) return usage;
  return canonicalUsage({ inputTokens: localInputTokens(req), outputTokens: localTokens(outChars()), extraJson: usage?.extraJson ?? "" });
}

/** True when the error is the client going away, which is not the upstream's fault. */
export const isCanceled = (e: unknown): boolean => e instanceof ConnectError && e.code === Code.Canceled;
