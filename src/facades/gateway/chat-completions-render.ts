import {
  ApiStyle,
  BlockType,
  FinishReason,
  type Completion,
  type Usage,
} from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { parseExtra, type JsonObject } from "../../core/json.js";
import { sameStyleCallExtra, toolCall } from "../../core/proxy/upstreams/openai/tool-call.js";

/** Canonical finish reasons in chat-completions words (https://platform.openai.com/docs/api-reference/chat/object). */
const finishNames: Record<FinishReason, string | null> = {
  // None: the upstream said none (finish_reason null, a stream without one), passed on as such.
  [FinishReason.UNSPECIFIED]: null,
  [FinishReason.END_TURN]: "stop",
  [FinishReason.STOP_SEQUENCE]: "stop",
  [FinishReason.PAUSE_TURN]: "stop",
  [FinishReason.MAX_TOKENS]: "length",
  [FinishReason.TOOL_USE]: "tool_calls",
  [FinishReason.CONTENT_FILTER]: "content_filter",
};

export const finishName = (r: FinishReason): string | null => (Object.hasOwn(finishNames, r) ? finishNames[r]! : "stop");

/** Seconds since the epoch; an upstream of the other style reports no creation time. */
export const createdOr = (created: number): number => created || Math.floor(Date.now() / 1000);

/** Extras written in the chat-completions style; another style's extras mean nothing to this client. */
export const sameStyleExtra = (style: ApiStyle, json: string): JsonObject =>
  style === ApiStyle.CHAT_COMPLETIONS ? parseExtra(json) : {};

/**
 * The `usage` object. `prompt_tokens` counts every input token, those read from or written to the
 * prompt cache included. Its details (cached tokens, reasoning tokens) are a same-style upstream's as
 * sent; another style's cache reads are written as `prompt_tokens_details.cached_tokens`.
 */
export function renderUsage(usage: Usage | undefined, style: ApiStyle): JsonObject {
  const prompt = usage?.inputTokens ?? 0;
  const completion = usage?.outputTokens ?? 0;
  const out: JsonObject = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, ...sameStyleExtra(style, usage?.extraJson ?? "") };
  if (style !== ApiStyle.CHAT_COMPLETIONS && usage?.cacheReadTokens) out.prompt_tokens_details = { cached_tokens: usage.cacheReadTokens };
  return out;
}

/** The answer's text, refusal and tool calls in chat-completions shape. */
export function answerParts(c: Completion): { text: string; refusal: string; toolCalls: JsonObject[] } {
  let text = "";
  let refusal = "";
  const toolCalls: JsonObject[] = [];
  for (const b of c.blocks) {
    if (b.type === BlockType.TEXT) text += b.text;
    else if (b.type === BlockType.REFUSAL) refusal += b.text;
    else if (b.type === BlockType.TOOL_USE) toolCalls.push(toolCall(b, sameStyleCallExtra(b)));
  }
  return { text, refusal, toolCalls };
}

/** A whole answer as a `chat.completion` object. */
export function renderChatCompletion(c: Completion): JsonObject {
  const style = c.upstreamStyle;
  const { text, refusal, toolCalls } = answerParts(c);
  // No text: null, as OpenAI writes a message of tool calls or a refusal only, and as the openai
  // SDK's stream helper assembles any answer that streamed no text. A chat-style upstream's own
  // empty text stays "" (its `content: null` comes back through its extras).
  const message: JsonObject = {
    role: "assistant",
    content: text !== "" ? text : toolCalls.length || refusal !== "" || style !== ApiStyle.CHAT_COMPLETIONS ? null : "",
    refusal: refusal !== "" ? refusal : null,
    annotations: [],
    ...sameStyleExtra(style, c.messageExtraJson),
  };
  if (toolCalls.length) message.tool_calls = toolCalls;
  return {
    id: c.id,
    object: "chat.completion",
    created: createdOr(c.created),
    model: c.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishName(c.finishReason), ...sameStyleExtra(style, c.choiceExtraJson) }],
    usage: renderUsage(c.usage, style),
    ...sameStyleExtra(style, c.extraJson),
  };
}

/** An answer cut short, as a `chat.completion` object: `finish_reason` null unless the stream had sent one. */
export function renderPartialChatCompletion(c: Completion): JsonObject {
  const out = renderChatCompletion(c);
  if (c.finishReason === FinishReason.UNSPECIFIED) (out.choices as JsonObject[])[0]!.finish_reason = null;
  return out;
}
