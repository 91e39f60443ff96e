import { ApiStyle } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { ConnectError } from "@connectrpc/connect";
import { invalidRequest } from "../errors.js";
import { parsePrice, type Prices, scalePrice } from "./cost.js";

/** A public model id's route: the client surface it is served on, its upstream and its prices. */
export interface ModelRoute {
  /** The public id, e.g. `chat-4o`. */
  id: string;
  /** The client surface the id is served on (spec 4.1 lists each id under one endpoint). */
  surface: ApiStyle;
  /** The provider name, a key of the providers table. */
  provider: string;
  /** The provider's model name. */
  upstreamModel: string;
  /** USD per 1M input tokens, as a decimal string. */
  inputPer1M: string;
  /** USD per 1M output tokens, as a decimal string. */
  outputPer1M: string;
  /** USD per 1M input tokens read from the provider's prompt cache, as a decimal string. */
  cacheReadPer1M: string;
  /** USD per 1M input tokens written to the provider's prompt cache (a five-minute entry), as a decimal string. */
  cacheWritePer1M: string;
  /** USD per 1M input tokens written to a one-hour entry of the provider's prompt cache, as a decimal string. */
  cacheWrite1hPer1M: string;
  /**
   * The most output tokens the upstream model writes in one answer: what a spend cap reserves for a
   * request that sets no `max_tokens` (chat completions makes it optional), and for one whose
   * `max_tokens` is above it when it is the model's own ceiling (`maxOutputTokensKnown`).
   */
  maxOutputTokens: number;
  /**
   * Whether `maxOutputTokens` is the upstream model's own ceiling (a default model's, or one the
   * configuration states) rather than the fallback guessed for a model that states none: only a
   * known ceiling bounds a request's `max_tokens` (the upstream refuses more).
   */
  maxOutputTokensKnown?: boolean;
  /**
   * The most input tokens the upstream model bills for one image: what a spend cap reserves for
   * each image in a request (an image given by URL is a few bytes of text, billed as hundreds or
   * thousands of tokens).
   */
  imageTokens: number;
}

/** The output ceiling of a configured model that states none: high, so a spend cap's reservation is too. */
export const FALLBACK_MAX_OUTPUT_TOKENS = 32_768;

/** The `max_tokens` a messages-style upstream (which requires one) is sent for a request that sets none, at most. */
export const DEFAULT_MAX_TOKENS = 4096;

/**
 * The most output tokens a request that sets no `max_tokens` may get from `route`'s upstream: a
 * chat-completions-style upstream is sent no limit (the model's ceiling applies); a messages-style
 * one requires a limit and is sent DEFAULT_MAX_TOKENS, or the model's known ceiling when lower (the
 * upstream refuses more than its ceiling).
 */
export function unlimitedOutputTokens(route: ModelRoute, providerStyle: ApiStyle): number {
  if (providerStyle !== ApiStyle.MESSAGES) return route.maxOutputTokens;
  return route.maxOutputTokensKnown === false ? DEFAULT_MAX_TOKENS : Math.min(DEFAULT_MAX_TOKENS, route.maxOutputTokens);
}

/** The image ceiling of a configured model that states none: gpt-4o-mini's (the dearest in tokens), rounded up. */
export const FALLBACK_IMAGE_TOKENS = 50_000;

/**
 * The most tokens one image costs: gpt-4o and gpt-4-turbo, high detail, 85 + 170 a 512-pixel tile
 * with at most 2 x 4 tiles (the image scaled into 2048 x 2048, then its short side to 768); gpt-4o-mini
 * the same tiles at 2,833 + 5,667 a tile; Claude about 1,600 (width x height / 750, images resized
 * to about 1.15 megapixels). https://platform.openai.com/docs/guides/images-vision,
 * https://docs.anthropic.com/en/docs/build-with-claude/vision.
 */
const GPT4O_IMAGE = 85 + 170 * 8;
const GPT4O_MINI_IMAGE = 2_833 + 5_667 * 8;
const CLAUDE_IMAGE = 1_600;

const chat = ApiStyle.CHAT_COMPLETIONS;
const messages = ApiStyle.MESSAGES;

/**
 * The prompt-cache prices a model gets when none are set, from its input price and the style of the
 * provider it is routed to, as the providers bill them: a messages-style (Anthropic) upstream bills
 * cache writes at 1.25x the input price (2x for a one-hour entry) and cache reads at 0.1x; a
 * chat-completions-style (OpenAI) upstream bills cached input at 0.5x and has no cache writes
 * (priced as plain input). Rounded up to the 6th decimal.
 */
export function defaultCachePrices(inputPer1M: string, upstreamStyle: ApiStyle): Pick<ModelRoute, "cacheReadPer1M" | "cacheWritePer1M" | "cacheWrite1hPer1M"> {
  return upstreamStyle === ApiStyle.MESSAGES
    ? { cacheReadPer1M: scalePrice(inputPer1M, 1n, 10n), cacheWritePer1M: scalePrice(inputPer1M, 5n, 4n), cacheWrite1hPer1M: scalePrice(inputPer1M, 2n, 1n) }
    : { cacheReadPer1M: scalePrice(inputPer1M, 1n, 2n), cacheWritePer1M: scalePrice(inputPer1M, 1n, 1n), cacheWrite1hPer1M: scalePrice(inputPer1M, 1n, 1n) };
}

/** A route's parsed prices. */
export const pricesOf = (m: ModelRoute): Prices => ({
  input: parsePrice(m.inputPer1M),
  output: parsePrice(m.outputPer1M),
  cacheRead: parsePrice(m.cacheReadPer1M),
  cacheWrite: parsePrice(m.cacheWritePer1M),
  cacheWrite1h: parsePrice(m.cacheWrite1hPer1M),
});

/**
 * The default routes: each spec model id maps to the provider model it stands for, priced at that
 * model's list price per 1M tokens (input/output, and the prompt cache's reads and writes), with that
 * model's documented output ceiling. Cache prices are the multiples of `defaultCachePrices`, except
 * where the provider lists a rounded price (Claude 3 Haiku: $0.30 five-minute writes, $0.03 reads).
 */
export const defaultModels: readonly ModelRoute[] = [
  { id: "chat-4o", surface: chat, provider: "openai", upstreamModel: "gpt-4o", inputPer1M: "2.50", outputPer1M: "10.00", cacheReadPer1M: "1.25", cacheWritePer1M: "2.50", cacheWrite1hPer1M: "2.50", maxOutputTokens: 16384, imageTokens: GPT4O_IMAGE },
  { id: "chat-4o-mini", surface: chat, provider: "openai", upstreamModel: "gpt-4o-mini", inputPer1M: "0.15", outputPer1M: "0.60", cacheReadPer1M: "0.075", cacheWritePer1M: "0.15", cacheWrite1hPer1M: "0.15", maxOutputTokens: 16384, imageTokens: GPT4O_MINI_IMAGE },
  { id: "chat-4-turbo", surface: chat, provider: "openai", upstreamModel: "gpt-4-turbo", inputPer1M: "10", outputPer1M: "30", cacheReadPer1M: "5", cacheWritePer1M: "10", cacheWrite1hPer1M: "10", maxOutputTokens: 4096, imageTokens: GPT4O_IMAGE },
  { id: "chat-4", surface: chat, provider: "openai", upstreamModel: "gpt-4", inputPer1M: "30", outputPer1M: "60", cacheReadPer1M: "15", cacheWritePer1M: "30", cacheWrite1hPer1M: "30", maxOutputTokens: 8192, imageTokens: GPT4O_IMAGE },
  { id: "chat-3.5-turbo", surface: chat, provider: "openai", upstreamModel: "gpt-3.5-turbo", inputPer1M: "0.50", outputPer1M: "1.50", cacheReadPer1M: "0.25", cacheWritePer1M: "0.50", cacheWrite1hPer1M: "0.50", maxOutputTokens: 4096, imageTokens: GPT4O_IMAGE },
  { id: "assistant-3-5-sonnet-20241022", surface: messages, provider: "anthropic", upstreamModel: "claude-3-5-sonnet-20241022", inputPer1M: "3", outputPer1M: "15", cacheReadPer1M: "0.30", cacheWritePer1M: "3.75", cacheWrite1hPer1M: "6", maxOutputTokens: 8192, imageTokens: CLAUDE_IMAGE },
  { id: "assistant-3-5-haiku-20241022", surface: messages, provider: "anthropic", upstreamModel: "claude-3-5-haiku-20241022", inputPer1M: "0.80", outputPer1M: "4", cacheReadPer1M: "0.08", cacheWritePer1M: "1", cacheWrite1hPer1M: "1.6", maxOutputTokens: 8192, imageTokens: CLAUDE_IMAGE },
  { id: "assistant-3-opus-20240229", surface: messages, provider: "anthropic", upstreamModel: "claude-3-opus-20240229", inputPer1M: "15", outputPer1M: "75", cacheReadPer1M: "1.50", cacheWritePer1M: "18.75", cacheWrite1hPer1M: "30", maxOutputTokens: 4096, imageTokens: CLAUDE_IMAGE },
  { id: "assistant-3-sonnet-20240229", surface: messages, provider: "anthropic", upstreamModel: "claude-3-sonnet-20240229", inputPer1M: "3", outputPer1M: "15", cacheReadPer1M: "0.30", cacheWritePer1M: "3.75", cacheWrite1hPer1M: "6", maxOutputTokens: 4096, imageTokens: CLAUDE_IMAGE },
  { id: "assistant-3-haiku-20240307", surface: messages, provider: "anthropic", upstreamModel: "claude-3-haiku-20240307", inputPer1M: "0.25", outputPer1M: "1.25", cacheReadPer1M: "0.03", cacheWritePer1M: "0.30", cacheWrite1hPer1M: "0.50", maxOutputTokens: 4096, imageTokens: CLAUDE_IMAGE },
];

/**
 * Why a public model id is not served on a surface: 400 model_not_found for an id the gateway does
 * not know, 400 model_not_supported for one served on the other endpoint; undefined when it is served.
 */
export function unservedModel(route: ModelRoute | undefined, model: string, style: ApiStyle): ConnectError | undefined {
  if (!route) return invalidRequest("model_not_found", `The model '${model}' does not exist or is not served by this gateway.`);
  if (route.surface !== style) {
    const path = route.surface === ApiStyle.CHAT_COMPLETIONS ? "/v1/chat/completions" : "/v1/messages";
    return invalidRequest("model_not_supported", `The model '${model}' is not served on this endpoint; use ${path}.`);
  }
  return undefined;
}
