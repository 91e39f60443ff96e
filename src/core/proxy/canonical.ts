import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  ApiStyle,
  BlockType,
  type ChatMessage,
  type Completion,
  type ContentBlock,
  FinishReason,
  type StreamChatRequest,
  type StreamChatResponse,
  type StreamChatResponseSchema,
  type ToolDefinition,
  type Usage,
} from "../../gen/svc/proxy/v1/proxy_service_pb.js";

/**
 * Complete canonical messages built as literals, for the request path. Protobuf's `create()` walks
 * the schema for every message and fills fields in whatever order the init has them; a literal is
 * several times cheaper (a chat request of one message: ~10 µs through `create()`) and always has
 * the same shape, which keeps the code that reads it fast too. Every field is set (the type checker
 * holds each literal to its schema); a field the caller leaves out gets its protobuf default.
 */

type Fields<T> = Partial<Omit<T, "$typeName">>;

export function contentBlock(b: Fields<ContentBlock>): ContentBlock {
  return {
    $typeName: "svc.proxy.v1.ContentBlock",
    type: b.type ?? BlockType.UNSPECIFIED,
    text: b.text ?? "",
    toolCallId: b.toolCallId ?? "",
    toolName: b.toolName ?? "",
    toolInputJson: b.toolInputJson ?? "",
    isError: b.isError ?? false,
    rawJson: b.rawJson ?? "",
    extraJson: b.extraJson ?? "",
    style: b.style ?? ApiStyle.UNSPECIFIED,
  };
}

export function chatMessage(m: Fields<ChatMessage>): ChatMessage {
  return {
    $typeName: "svc.proxy.v1.ChatMessage",
    role: m.role ?? "",
    blocks: m.blocks ?? [],
    contentIsString: m.contentIsString ?? false,
    extraJson: m.extraJson ?? "",
  };
}

export function toolDefinition(t: Fields<ToolDefinition>): ToolDefinition {
  return {
    $typeName: "svc.proxy.v1.ToolDefinition",
    name: t.name ?? "",
    description: t.description ?? "",
    inputSchemaJson: t.inputSchemaJson ?? "",
    extraJson: t.extraJson ?? "",
  };
}

/** The fields of a chat request a client's body gives (what a facade codec parses). */
export type ChatRequestBody = Pick<StreamChatRequest, "style" | "model" | "system" | "messages" | "temperature" | "maxTokens" | "stream" | "tools" | "extraJson">;

/** The fields that say who is asking, which the facade sets. */
export type ChatRequestCaller = Pick<StreamChatRequest, "requestId" | "projectId" | "keyId" | "keyMode" | "userId" | "metadata"> &
  Partial<Pick<StreamChatRequest, "betas">>;

/** A complete chat request from a parsed body and its caller. */
export function chatRequest(body: ChatRequestBody, who: ChatRequestCaller): StreamChatRequest {
  return {
    $typeName: "svc.proxy.v1.StreamChatRequest",
    requestId: who.requestId,
    projectId: who.projectId,
    keyId: who.keyId,
    keyMode: who.keyMode,
    style: body.style,
    model: body.model,
    system: body.system,
    messages: body.messages,
    temperature: body.temperature,
    maxTokens: body.maxTokens,
    stream: body.stream,
    tools: body.tools,
    extraJson: body.extraJson,
    userId: who.userId,
    metadata: who.metadata,
    betas: who.betas ?? [],
  };
}

/**
 * Tokens counted locally where the upstream reports none: about 4 characters a token. The prompt's
 * are its system text and message blocks (text and tool inputs).
 */
export const localTokens = (chars: number): number => Math.ceil(chars / 4);

export function localInputTokens(req: Pick<ChatRequestBody, "system" | "messages">): number {
  let chars = req.system.length;
  for (const m of req.messages) for (const b of m.blocks) chars += b.text.length + b.toolInputJson.length;
  return localTokens(chars);
}

/** The most tokens a count holds: Usage's fields are int32 on the wire. */
export const MAX_TOKENS_COUNT = 2_147_483_647;

/**
 * A token count an upstream reported, as the canonical count: a whole number from 0 to
 * MAX_TOKENS_COUNT (anything else, a negative or a string that is not digits, is 0). A count sent
 * as a string of digits (`"12"`, as some compatible servers write them) is that number: read as 0,
 * its tokens went unbilled and uncounted by the spend cap. No real request comes near the cap; one
 * from a broken upstream that reports 1e15 tokens is held to it, so its cost stays a figure the
 * request's log can store (and the core port can send), rather than the log refusing it.
 */
export const tokenCount = (v: unknown): number => {
  const n = typeof v === "string" && DIGITS.test(v) ? Number(v) : v;
  return typeof n === "number" && n > 0 ? Math.min(Math.floor(n), MAX_TOKENS_COUNT) : 0;
};
const DIGITS = /^\d{1,20}$/;

/** A usage; `inputTokens` counts every input token, the cache's reads and writes (subsets of it) included. */
export function usage(u: Fields<Usage>): Usage {
  return {
    $typeName: "svc.proxy.v1.Usage",
    inputTokens: u.inputTokens ?? 0,
    outputTokens: u.outputTokens ?? 0,
    extraJson: u.extraJson ?? "",
    cacheReadTokens: u.cacheReadTokens ?? 0,
    cacheWriteTokens: u.cacheWriteTokens ?? 0,
    cacheWrite1hTokens: u.cacheWrite1hTokens ?? 0,
  };
}

export function completion(c: Fields<Completion>): Completion {
  return {
    $typeName: "svc.proxy.v1.Completion",
    id: c.id ?? "",
    model: c.model ?? "",
    created: c.created ?? 0,
    blocks: c.blocks ?? [],
    finishReason: c.finishReason ?? FinishReason.UNSPECIFIED,
    stopSequence: c.stopSequence ?? "",
    usage: c.usage,
    costUsd: c.costUsd ?? "",
    upstreamStyle: c.upstreamStyle ?? ApiStyle.UNSPECIFIED,
    extraJson: c.extraJson ?? "",
    messageExtraJson: c.messageExtraJson ?? "",
    choiceExtraJson: c.choiceExtraJson ?? "",
  };
}

/**
 * An answer's creation time, in seconds since the epoch, when its upstream gives none: the
 * messages style has no such field, and an OpenAI-compatible upstream may leave it out.
 */
/**
 * An upstream's finish word (`finish_reason`, `stop_reason`) as a canonical reason, by its style's
 * table. A word this build does not know still ended the answer: END_TURN (the word itself is kept
 * for a client of that style). None at all (null, a stream that never said) is UNSPECIFIED: an
 * answer that did not say it finished, passed on as such and never cached.
 */
export const finishFromWord = (table: Readonly<Record<string, FinishReason>>, word: unknown): FinishReason =>
  typeof word === "string" && word !== "" ? (Object.hasOwn(table, word) ? table[word]! : FinishReason.END_TURN) : FinishReason.UNSPECIFIED;

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

/** The one event of a non-stream answer. */
export function completionEvent(value: Completion): StreamChatResponse {
  return { $typeName: "svc.proxy.v1.StreamChatResponse", event: { case: "completion", value } };
}

/** A stream event as the adapters describe it: nested messages may be given as plain fields. */
export type StreamEventInit = MessageInitShape<typeof StreamChatResponseSchema>["event"];

/** A complete stream event: the `create(StreamChatResponseSchema, { event })` of the adapters, as literals. */
export function streamEvent(e: StreamEventInit): StreamChatResponse {
  return { $typeName: "svc.proxy.v1.StreamChatResponse", event: eventValue(e) };
}

function eventValue(e: StreamEventInit): StreamChatResponse["event"] {
  switch (e?.case) {
    case "messageStart": {
      const s = e.value;
      return {
        case: "messageStart",
        value: {
          $typeName: "svc.proxy.v1.MessageStart",
          id: s.id ?? "",
          model: s.model ?? "",
          created: s.created ?? 0,
          usage: s.usage ? usage(s.usage) : undefined,
          upstreamStyle: s.upstreamStyle ?? ApiStyle.UNSPECIFIED,
          extraJson: s.extraJson ?? "",
          choiceExtraJson: s.choiceExtraJson ?? "",
          deltaExtraJson: s.deltaExtraJson ?? "",
        },
      };
    }
    case "blockStart":
      return {
        case: "blockStart",
        value: { $typeName: "svc.proxy.v1.BlockStart", index: e.value.index ?? 0, block: e.value.block ? contentBlock(e.value.block) : undefined },
      };
    case "blockDelta": {
      const d = e.value;
      return {
        case: "blockDelta",
        value: { $typeName: "svc.proxy.v1.BlockDelta", index: d.index ?? 0, text: d.text ?? "", partialJson: d.partialJson ?? "", rawJson: d.rawJson ?? "", choiceExtraJson: d.choiceExtraJson ?? "", deltaExtraJson: d.deltaExtraJson ?? "" },
      };
    }
    case "blockStop":
      return { case: "blockStop", value: { $typeName: "svc.proxy.v1.BlockStop", index: e.value.index ?? 0 } };
    case "messageEnd": {
      const m = e.value;
      return {
        case: "messageEnd",
        value: {
          $typeName: "svc.proxy.v1.MessageEnd",
          finishReason: m.finishReason ?? FinishReason.UNSPECIFIED,
          stopSequence: m.stopSequence ?? "",
          usage: m.usage ? usage(m.usage) : undefined,
          costUsd: m.costUsd ?? "",
          choiceExtraJson: m.choiceExtraJson ?? "",
          deltaExtraJson: m.deltaExtraJson ?? "",
        },
      };
    }
    case "completion":
      return { case: "completion", value: completion({ ...e.value, blocks: e.value.blocks?.map(contentBlock), usage: e.value.usage ? usage(e.value.usage) : undefined }) };
    default:
      return { case: undefined };
  }
}
