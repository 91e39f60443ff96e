import { ApiStyle, BlockType, type Completion, type ContentBlock, type StreamChatRequest } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { extraJson, isObject, type JsonObject, withExtraField } from "../../../json.js";
import { completion, contentBlock } from "../../canonical.js";
import { invalidUpstreamResponse } from "./error.js";
import { answerCallExtra, callParts } from "./tool-call.js";
import { finishForClient, toFinishReason, toUsage, withFinishReason } from "./usage.js";

const kTopKnown: ReadonlySet<string> = new Set(["id", "object", "created", "model", "choices", "usage"]);
const kMessageKnown: ReadonlySet<string> = new Set(["role", "content", "tool_calls", "refusal"]);
/** Choice fields the canonical model names; the others (`logprobs`) ride in choice_extra_json. */
const kChoiceKnown: ReadonlySet<string> = new Set(["index", "message", "finish_reason"]);

/**
 * Converts a non-stream OpenAI `chat.completion` (https://platform.openai.com/docs/api-reference/chat/object).
 * Fields the canonical model does not name (system_fingerprint, service_tier; annotations; the
 * choice's logprobs) ride in the extra_json fields so a chat-style client gets them back. A refusal
 * is a block of its own, which a messages-style client reads as text.
 */
export function parseOpenAiCompletion(body: unknown, req: StreamChatRequest): Completion {
  if (!isObject(body) || !Array.isArray(body.choices)) throw invalidUpstreamResponse("no `choices` array");
  const choice = body.choices.find((c) => isObject(c) && c.index === 0) ?? body.choices[0];
  if (!isObject(choice)) throw invalidUpstreamResponse("no choice");
  const message = isObject(choice.message) ? choice.message : {};
  const blocks = blocksOf(message);
  const hasToolCalls = blocks.some((b) => b.type === BlockType.TOOL_USE);
  return completion({
    id: typeof body.id === "string" ? body.id : "",
    model: req.model,
    created: typeof body.created === "number" && body.created > 0 ? Math.trunc(body.created) : 0,
    blocks,
    finishReason: finishForClient(toFinishReason(choice.finish_reason), hasToolCalls, req.style),
    usage: toUsage(body.usage),
    upstreamStyle: ApiStyle.CHAT_COMPLETIONS,
    extraJson: extraJson(body, kTopKnown),
    // A `content: null` the canonical answer would give back as "" (a legacy function_call, an
    // audio answer) is kept as sent.
    messageExtraJson: withExtraField(extraJson(message, kMessageKnown), "content", message.content === null ? null : undefined),
    choiceExtraJson: withFinishReason(extraJson(choice, kChoiceKnown, true), choice.finish_reason), // a null logprobs is left out
  });
}

function blocksOf(message: JsonObject): ContentBlock[] {
  const blocks: ContentBlock[] = [];
  if (typeof message.content === "string" && message.content !== "") {
    blocks.push(contentBlock({ type: BlockType.TEXT, text: message.content }));
  }
  if (typeof message.refusal === "string" && message.refusal !== "") {
    blocks.push(contentBlock({ type: BlockType.REFUSAL, text: message.refusal }));
  }
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) if (isObject(call)) blocks.push(toolUseBlock(call));
  }
  return blocks;
}

function toolUseBlock(call: JsonObject): ContentBlock {
  // A custom tool's call: its free-text input kept as it is, the block marked as such.
  const custom = call.type === "custom" && isObject(call.custom);
  const { name, input } = callParts(call, custom);
  return contentBlock({
    type: BlockType.TOOL_USE,
    toolCallId: typeof call.id === "string" ? call.id : "",
    toolName: name,
    toolInputJson: input,
    extraJson: answerCallExtra(call, custom),
    style: ApiStyle.CHAT_COMPLETIONS,
  });
}
