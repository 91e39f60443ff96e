import { ApiStyle } from "../../gen/svc/proxy/v1/proxy_service_pb.js";

/**
 * The rules of a chat request that both ways into ProxyService.StreamChat hold it to: the HTTP
 * facades' codecs, which check a client's JSON as they parse it (src/facades/gateway), and the
 * check of a canonical request that arrives over the network (wire-request.ts). Constants only, so
 * sharing them costs the facades' hot path nothing.
 */

/** The roles a chat-completions message may have. */
export const CHAT_ROLES = ["system", "developer", "user", "assistant", "tool", "function"] as const;
/**
 * The roles a messages-style message may have: the system prompt is a field of its own, and
 * `system` a system message within the conversation (the Anthropic SDK's `SystemMessageParam`, text only).
 */
export const MESSAGES_ROLES = ["user", "assistant", "system"] as const;

/** The roles of a style. */
export const rolesOf = (style: ApiStyle): readonly string[] => (style === ApiStyle.MESSAGES ? MESSAGES_ROLES : CHAT_ROLES);

/** The temperature range of each style: 0 to 2 in chat completions, 0 to 1 in messages (spec 2.2, 2.4). */
export const MAX_TEMPERATURE_CHAT = 2;
export const MAX_TEMPERATURE_MESSAGES = 1;
export const maxTemperatureOf = (style: ApiStyle): number => (style === ApiStyle.MESSAGES ? MAX_TEMPERATURE_MESSAGES : MAX_TEMPERATURE_CHAT);

/** The smallest `max_tokens` either style accepts (the largest is the int32 the core carries). */
export const MIN_MAX_TOKENS = 1;

/** A function or tool name, in both styles. */
export const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** A beta feature's name in `anthropic-beta` (e.g. `prompt-caching-2024-07-31`), and how many a request may name. */
export const BETA_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const MAX_BETAS = 32;

/** The longest end-user id (`X-Svc-User-Id`). */
export const MAX_USER_ID_CHARS = 256;

// The fields each level of a client's JSON that the canonical model names. A codec keeps every other
// field in that level's `extra_json`, so an `extra_json` never holds one of these: over the network
// one that did would override what the canonical fields say (the model, the stream flag...).

/** Top-level fields of a chat-completions request. */
export const CHAT_REQUEST_FIELDS: ReadonlySet<string> = new Set(["model", "messages", "temperature", "max_tokens", "stream", "tools"]);
/**
 * Top-level fields of a messages request. A `system` sent as blocks (cache_control...) is kept in
 * `extra_json` too, where it wins for a same-style upstream.
 */
export const MESSAGES_REQUEST_FIELDS: ReadonlySet<string> = new Set(["model", "max_tokens", "messages", "system", "temperature", "stream", "tools"]);
/** Fields of a message, in both styles. */
export const MESSAGE_FIELDS: ReadonlySet<string> = new Set(["role", "content"]);
/** Fields of a chat-completions text content part. */
export const CHAT_TEXT_PART_FIELDS: ReadonlySet<string> = new Set(["type", "text"]);
/** Fields of a chat-completions `tool_calls` item. */
export const CHAT_TOOL_CALL_FIELDS: ReadonlySet<string> = new Set(["id", "type", "function"]);
/** Fields of a chat-completions custom tool's call named by the canonical model (its `type` stays in extra_json, marking it). */
export const CHAT_CUSTOM_CALL_FIELDS: ReadonlySet<string> = new Set(["id", "custom"]);

/**
 * Whether a chat-style assistant turn says something without `content` (which is then null): it
 * called tools (`calls` of them) or a legacy function, refused (`refusal`, as OpenAI and the gateway
 * answer one) or answered in audio (`audio: {id}`, OpenAI's multi-turn audio form). `m`: the
 * message's fields.
 */
export const saysWithoutContent = (m: Readonly<Record<string, unknown>>, calls: number): boolean =>
  calls > 0 || (m.function_call !== undefined && m.function_call !== null) || typeof m.refusal === "string" || (typeof m.audio === "object" && m.audio !== null && !Array.isArray(m.audio));

/** Fields of a chat-completions tool; unnamed fields of its `function` ride under `function` in extra_json. */
export const CHAT_TOOL_FIELDS: ReadonlySet<string> = new Set(["type", "function"]);
/** Fields of a chat-completions tool's `function`. */
export const CHAT_FUNCTION_FIELDS: ReadonlySet<string> = new Set(["name", "description", "parameters"]);
/** Fields of a messages-style custom tool. */
export const MESSAGES_TOOL_FIELDS: ReadonlySet<string> = new Set(["name", "description", "input_schema"]);

/**
 * Whether a messages request's extra fields hold a `thread` (the message-threads beta: the upstream
 * keeps the conversation, and the turn sends only its new messages).
 */
export const carriesThread = (extra: { thread?: unknown }): boolean => extra.thread !== undefined && extra.thread !== null;
