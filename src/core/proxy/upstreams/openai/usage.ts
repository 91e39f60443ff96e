import { ApiStyle, FinishReason, type Usage } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { extraJson, isObject, withExtraField } from "../../../json.js";
import { usage as canonicalUsage, finishFromWord, tokenCount } from "../../canonical.js";

/** Usage fields the canonical model names; `total_tokens` is derivable, so it is not carried. */
const kUsageKnown: ReadonlySet<string> = new Set(["prompt_tokens", "completion_tokens", "total_tokens"]);


/**
 * Converts an OpenAI `usage` object; undefined when the upstream sent none (the gateway then counts
 * locally). `prompt_tokens` counts every input token, the cached ones
 * (`prompt_tokens_details.cached_tokens`, billed at a discount) and those written to the cache
 * (`cache_write_tokens`) included, as the canonical count does. Detail objects (prompt_tokens_details, completion_tokens_details) also ride in extra_json,
 * as sent, for a chat-style client.
 */
export function toUsage(usage: unknown): Usage | undefined {
  if (!isObject(usage)) return undefined;
  const inputTokens = tokenCount(usage.prompt_tokens);
  const details = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  return canonicalUsage({
    inputTokens,
    outputTokens: tokenCount(usage.completion_tokens),
    extraJson: extraJson(usage, kUsageKnown),
    cacheReadTokens: Math.min(tokenCount(details.cached_tokens), inputTokens),
    // Written to the provider's prompt cache: compatible servers that front Anthropic models
    // (OpenRouter) say so here, and bill it at the model's cache-write price.
    cacheWriteTokens: Math.min(tokenCount(details.cache_write_tokens), Math.max(0, inputTokens - tokenCount(details.cached_tokens))),
  });
}

const finishByName: Record<string, FinishReason> = {
  stop: FinishReason.END_TURN,
  length: FinishReason.MAX_TOKENS,
  tool_calls: FinishReason.TOOL_USE,
  function_call: FinishReason.TOOL_USE,
  content_filter: FinishReason.CONTENT_FILTER,
};

/** The `finish_reason` values a chat-style client gets back as they came from the canonical reason. */
const SAID = new Set(["stop", "length", "tool_calls", "content_filter"]);

/**
 * A choice's extra_json with its `finish_reason` kept in it when the canonical reason would not
 * give it back as sent (the legacy `function_call`, a value newer than this build): a chat-style
 * client gets that value, not the nearest one.
 */
export const withFinishReason = (extra: string, reason: unknown): string =>
  withExtraField(extra, "finish_reason", typeof reason === "string" && !SAID.has(reason) ? reason : undefined);

/**
 * Maps an OpenAI `finish_reason` (https://platform.openai.com/docs/api-reference/chat/object) by
 * finishFromWord; an unknown one is kept as sent for a chat client: withFinishReason.
 */
export const toFinishReason = (reason: unknown): FinishReason => finishFromWord(finishByName, reason);

/**
 * The finish reason of an answer for the client's style. OpenAI ends an answer whose tool calls were
 * forced (`tool_choice` naming a function, or "required") with `finish_reason` "stop", not
 * "tool_calls"; a messages-style client branches on `stop_reason` "tool_use" to run the tools (the
 * Anthropic SDK's tool runner stops on "end_turn"), so an answer that holds tool calls and finished
 * with "stop" is "tool_use" for it. A chat-style client gets the upstream's reason as sent; "length"
 * (a call cut short) stays max_tokens for both.
 */
export const finishForClient = (finish: FinishReason, hasToolCalls: boolean, clientStyle: ApiStyle): FinishReason =>
  finish === FinishReason.END_TURN && hasToolCalls && clientStyle === ApiStyle.MESSAGES ? FinishReason.TOOL_USE : finish;
