import {
  ApiStyle,
  BlockType,
  type ContentBlock,
  type Usage,
} from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { extraJson, isObject, parseExtra, type JsonObject } from "../../../json.js";
import { contentBlock, MAX_TOKENS_COUNT, tokenCount, usage } from "../../canonical.js";

/**
 * Conversions between messages-style content blocks (https://docs.anthropic.com/en/api/messages) and
 * canonical ContentBlocks, shared by the upstream adapter (answers) and the messages client codec
 * (requests and rendered answers), so both directions agree on where each field lives.
 */

// The fields of each block type the canonical block names (exported for the check of requests that
// come over the network, core/proxy/wire-request.ts: an extra_json never holds one of them).
export const TEXT_KEYS: ReadonlySet<string> = new Set(["type", "text"]);
export const TOOL_USE_KEYS: ReadonlySet<string> = new Set(["type", "id", "name", "input"]);
// `content` is deliberately not listed: an array content stays in extra_json verbatim (see below).
export const TOOL_RESULT_KEYS: ReadonlySet<string> = new Set(["type", "tool_use_id", "is_error"]);
const USAGE_KEYS = new Set(["input_tokens", "output_tokens"]);

/** Joins the text blocks of a messages-style content array (non-text items are skipped). */
export function joinTexts(items: readonly unknown[], sep = "\n\n"): string {
  const texts: string[] = [];
  for (const it of items) if (isObject(it) && it.type === "text" && typeof it.text === "string") texts.push(it.text);
  return texts.join(sep);
}

/**
 * A messages-style block as a canonical block (style MESSAGES). A tool_result's `text` is its content
 * as plain text, for other styles and token counts; when the content is an array (text, images,
 * documents) the array itself also rides in extra_json, where it wins for a same-style upstream.
 */
export function blockFromWire(b: JsonObject): ContentBlock {
  const style = ApiStyle.MESSAGES;
  switch (b.type) {
    case "text":
      return contentBlock({ type: BlockType.TEXT, text: String(b.text ?? ""), extraJson: extraJson(b, TEXT_KEYS), style });
    case "tool_use":
      return contentBlock({
        type: BlockType.TOOL_USE,
        toolCallId: String(b.id ?? ""),
        toolName: String(b.name ?? ""),
        toolInputJson: JSON.stringify(b.input ?? {}),
        extraJson: extraJson(b, TOOL_USE_KEYS),
        style,
      });
    case "tool_result": {
      const c = b.content;
      const text = typeof c === "string" ? c : Array.isArray(c) ? joinTexts(c) : "";
      const keys = typeof c === "string" || c === undefined ? new Set([...TOOL_RESULT_KEYS, "content"]) : TOOL_RESULT_KEYS;
      return contentBlock({
        type: BlockType.TOOL_RESULT,
        toolCallId: String(b.tool_use_id ?? ""),
        text,
        isError: b.is_error === true,
        extraJson: extraJson(b, keys),
        style,
      });
    }
    case "image":
      return contentBlock({ type: BlockType.IMAGE, rawJson: JSON.stringify(b), style });
    default:
      return contentBlock({ type: BlockType.OTHER, rawJson: JSON.stringify(b), style });
  }
}

/** Parses a tool input JSON text; anything that is not a JSON object becomes {} (the API requires an object). */
export function toolInput(json: string): JsonObject {
  try {
    const v: unknown = json ? JSON.parse(json) : {};
    return isObject(v) ? v : {};
  } catch {
    return {};
  }
}

/**
 * A canonical block as a messages-style block. Extra fields (never a named key, by construction) and raw blocks are only meaningful in
 * the style they were written in, so a block from another style contributes its named fields only,
 * and its image/other blocks are left out (undefined); callers that can translate them do so first.
 */
export function blockToWire(b: ContentBlock): JsonObject | undefined {
  const same = b.style === ApiStyle.MESSAGES;
  const extra = same ? parseExtra(b.extraJson) : {};
  switch (b.type) {
    case BlockType.TEXT:
      return { type: "text", text: b.text, ...extra };
    case BlockType.REFUSAL:
      // Another style's refusal (OpenAI's): what the model said instead of answering, as text.
      return { type: "text", text: b.text };
    case BlockType.TOOL_USE:
      return { type: "tool_use", id: b.toolCallId, name: b.toolName, input: toolInput(b.toolInputJson), ...extra };
    case BlockType.TOOL_RESULT:
      // An array content in extra wins over the plain-text copy; an empty text means "no content".
      return {
        type: "tool_result",
        tool_use_id: b.toolCallId,
        ...(b.text ? { content: b.text } : {}),
        ...(b.isError ? { is_error: true } : {}),
        ...extra,
      };
    default:
      return same && b.rawJson ? (JSON.parse(b.rawJson) as JsonObject) : undefined;
  }
}

/**
 * A messages-style usage object as canonical Usage. Its `input_tokens` are only the input neither
 * read from nor written to the prompt cache; the canonical count is all of the input, so it adds
 * `cache_creation_input_tokens` and `cache_read_input_tokens`, which are also kept as the cache
 * counts, with the one-hour writes of `cache_creation.ephemeral_1h_input_tokens` (billed dearer than
 * five-minute ones). The other counters (the cache's, as sent, server tools) ride in extra_json.
 */
export function usageFromWire(u: unknown): Usage {
  if (!isObject(u)) return usage({});
  return usageFromCounts(tokenCount(u.input_tokens), tokenCount(u.cache_creation_input_tokens), tokenCount(u.cache_read_input_tokens), tokenCount(u.output_tokens), extraJson(u, USAGE_KEYS), oneHourWrites(u));
}

/** The one-hour cache writes a messages-style usage object reports (`cache_creation.ephemeral_1h_input_tokens`), 0 when none. */
export const oneHourWrites = (u: JsonObject): number => (isObject(u.cache_creation) ? tokenCount(u.cache_creation.ephemeral_1h_input_tokens) : 0);

/** Canonical usage from a messages-style answer's counts: `uncached` is its `input_tokens`; `write1h` are of `cacheWrite`. */
export const usageFromCounts = (uncached: number, cacheWrite: number, cacheRead: number, output: number, extra: string, write1h = 0): Usage =>
  usage({ inputTokens: Math.min(uncached + cacheWrite + cacheRead, MAX_TOKENS_COUNT), outputTokens: output, extraJson: extra, cacheReadTokens: cacheRead, cacheWriteTokens: cacheWrite, cacheWrite1hTokens: Math.min(write1h, cacheWrite) });

/** The input tokens a messages-style `input_tokens` counts: those neither read from nor written to the cache. */
export const uncachedInput = (u: Usage): number => Math.max(0, u.inputTokens - u.cacheReadTokens - u.cacheWriteTokens);

