import { hash } from "node:crypto";
import {
  ApiStyle,
  BlockType,
  type ChatMessage,
  type ContentBlock,
  type ToolDefinition,
} from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { ChatRequestBody } from "../proxy/canonical.js";
import { isObject } from "../json.js";
import { isWellFormed } from "../text.js";
import { canonicalText, frame, parseForKey, writeCanonical } from "./canonical-form.js";

/**
 * The exact-match cache key of a chat request: SHA-256 (base64url, 43 characters) of the request's
 * canonical form. Two requests share a key when an upstream would see the same question, however a
 * client serialised it:
 *
 * - Key order inside JSON objects never matters (extra fields, tool schemas, tool inputs, raw blocks
 *   are parsed and rewritten with sorted keys).
 * - A parameter sent with its documented default is the same as leaving it out:
 *
 *   | style            | field               | left out means                     |
 *   |------------------|---------------------|------------------------------------|
 *   | chat-completions | temperature         | 1                                  |
 *   | chat-completions | top_p               | 1                                  |
 *   | chat-completions | n                   | 1                                  |
 *   | chat-completions | presence_penalty    | 0                                  |
 *   | chat-completions | frequency_penalty   | 0                                  |
 *   | chat-completions | logprobs            | false                              |
 *   | chat-completions | parallel_tool_calls | true                               |
 *   | chat-completions | response_format     | {"type":"text"}                    |
 *   | chat-completions | tool_choice         | "auto" with tools, "none" without  |
 *   | chat-completions | any field: null     | left out (its parameters are nullable, null = default) |
 *   | messages         | temperature         | 1                                  |
 *   | messages         | stop_sequences      | []                                 |
 *   | messages         | tool_choice         | {"type":"auto"} with tools         |
 *   | both             | message content "t" | [{"type":"text","text":"t"}] (the documented shorthand) |
 *   | both             | tool result "t"     | [{"type":"text","text":"t"}] (a tool message's, a tool_result block's content) |
 *   | messages         | system "t"          | [{"type":"text","text":"t"}]       |
 *
 *   Sources: https://platform.openai.com/docs/api-reference/chat/create and
 *   https://docs.anthropic.com/en/api/messages. Parameters without a documented default (max_tokens
 *   of chat-completions, top_p and top_k of messages, seed...) are only equal to themselves.
 * - What does not reach the model is left out: `stream` and `stream_options` (a cached answer is
 *   served either way), the request id, user id, X-Svc-Metadata, and the body's end-user tags
 *   (`user`, `safety_identifier`, `metadata`). Project, key and key mode are not in the key: the
 *   cache scopes entries by project and mode itself (cache-service.ts).
 *
 * Everything else is in: the style, model id, system, every message (role, blocks, tool calls and
 * their ids), temperature, max_tokens, tools, every other pass-through field, and the `anthropic-beta`
 * features named (sorted; a request without any keeps the key it always had). A parameter the
 * table does not know makes the key differ, which costs a miss, never a wrong answer.
 */
export function cacheKeyOf(req: ChatRequestBody & { betas?: readonly string[] }): string {
  const rules = rulesByStyle.get(req.style) ?? noRules;
  const material =
    `[${frame(KEY_VERSION)},${req.style},${frame(req.model)},${frame(req.system)},` +
    (req.betas?.length ? `[${req.betas.map((b) => frame(b)).join(",")}],` : "") +
    `${num(req.temperature ?? rules.temperature)},${num(req.maxTokens)},` +
    `[${req.messages.map(messageText).join(",")}],[${req.tools.map(toolText).join(",")}],` +
    `${extraText(req.extraJson, rules, req.tools.length > 0, req.style === ApiStyle.MESSAGES ? req.system : undefined)}]`;
  // One-shot hashing (Node 20.12+) skips the Hash object createHash would build for one update.
  // UTF-8 encoding (what hashing a string does) turns each lone surrogate into U+FFFD, which would
  // merge texts that differ only there (JSON allows "\ud800"); those rare texts are hashed as UTF-16
  // instead, whose bytes cannot equal a UTF-8 material's (its second byte is 0, never a UTF-8
  // material's `"`).
  return hash("sha256", isWellFormed(material) ? material : Buffer.from(material, "utf16le"), "base64url");
}

/** Bumped whenever the canonical form changes, so older entries stop matching instead of answering wrongly. */
const KEY_VERSION = "svc-cache-key/1";

interface StyleRules {
  /** What an omitted temperature means. */
  temperature: number | undefined;
  /** Top-level fields that never reach the model's answer. */
  ignored: ReadonlySet<string>;
  /** Canonical texts of documented defaults, by field. */
  defaults: ReadonlyMap<string, string>;
  /** The default `tool_choice` with and without tools. */
  toolChoice: { withTools: string | undefined; withoutTools: string | undefined };
  /** Whether an explicit null is the same as an omitted field. */
  nullIsOmitted: boolean;
}

const canon = (fields: Record<string, unknown>): ReadonlyMap<string, string> =>
  new Map(Object.entries(fields).map(([k, v]) => [k, writeCanonical(v)]));

const noRules: StyleRules = {
  temperature: undefined,
  ignored: new Set(),
  defaults: new Map(),
  toolChoice: { withTools: undefined, withoutTools: undefined },
  nullIsOmitted: false,
};

const rulesByStyle = new Map<ApiStyle, StyleRules>([
  [
    ApiStyle.CHAT_COMPLETIONS,
    {
      temperature: 1,
      ignored: new Set(["stream", "stream_options", "user", "safety_identifier", "metadata"]),
      defaults: canon({
        top_p: 1,
        n: 1,
        presence_penalty: 0,
        frequency_penalty: 0,
        logprobs: false,
        parallel_tool_calls: true,
        response_format: { type: "text" },
      }),
      toolChoice: { withTools: writeCanonical("auto"), withoutTools: writeCanonical("none") },
      nullIsOmitted: true,
    },
  ],
  [
    ApiStyle.MESSAGES,
    {
      temperature: 1,
      ignored: new Set(["stream", "metadata"]),
      defaults: canon({ stop_sequences: [] }),
      toolChoice: { withTools: writeCanonical({ type: "auto" }), withoutTools: undefined },
      nullIsOmitted: false,
    },
  ],
]);

const num = (n: number | undefined): string => (n === undefined ? "null" : JSON.stringify(n));

/**
 * The request's top-level extra fields, sorted, without ignored fields and documented defaults.
 * `system` is a messages-style request's system text: its `system` given as one plain text block
 * (kept whole in extra_json for the upstream) is that text, already in the key, as a string
 * `system` is, and is left out.
 */
function extraText(json: string, rules: StyleRules, hasTools: boolean, system: string | undefined): string {
  const v = parseForKey(json);
  if (v === null || typeof v !== "object" || Array.isArray(v)) return writeCanonical(v);
  const obj = v as Record<string, unknown>;
  const toolChoice = hasTools ? rules.toolChoice.withTools : rules.toolChoice.withoutTools;
  const parts: string[] = [];
  for (const k of Object.keys(obj).sort()) {
    if (rules.ignored.has(k)) continue;
    const value = obj[k];
    if (value === null && rules.nullIsOmitted) continue;
    const text = writeCanonical(value);
    if (rules.defaults.get(k) === text) continue;
    if (k === "tool_choice" && text === toolChoice) continue;
    if (k === "system" && system !== undefined && isOneTextBlock(value, system)) continue;
    parts.push(`${frame(k)}:${text}`);
  }
  return parts.length ? `{${parts.join(",")}}` : "null";
}

/** `content_is_string` is left out: a string content is the documented shorthand for one text block. */
function messageText(m: ChatMessage): string {
  return `[${frame(m.role)},[${m.blocks.map(blockText).join(",")}],${canonicalText(m.extraJson)}]`;
}

/**
 * A messages-style tool input was a JSON object in the request, so its key order is irrelevant; a
 * chat-completions `arguments` is a string the client wrote, kept as it is.
 */
function blockText(b: ContentBlock): string {
  const input = b.style === ApiStyle.MESSAGES ? canonicalText(b.toolInputJson) : frame(b.toolInputJson);
  let { rawJson, extraJson } = b;
  // A tool result's content as one plain text block is the same result as that text as a string:
  // kept whole for the upstream (a chat tool message's in raw_json, a tool_result block's in its
  // extra_json), left out of the key.
  if (b.type === BlockType.TOOL_RESULT) {
    if (rawJson !== "" && isOneTextBlock(parseForKey(rawJson), b.text)) rawJson = "";
    if (extraJson !== "") {
      const extra = parseForKey(extraJson);
      if (isObject(extra) && Object.keys(extra).length === 1 && isOneTextBlock(extra.content, b.text)) extraJson = "";
    }
  }
  return (
    `[${b.type},${b.style},${frame(b.text)},${frame(b.toolCallId)},${frame(b.toolName)},${input},` +
    `${b.isError},${canonicalText(rawJson)},${canonicalText(extraJson)}]`
  );
}

/** Whether a value is `[{"type":"text","text":text}]`, and nothing more. */
function isOneTextBlock(v: unknown, text: string): boolean {
  if (!Array.isArray(v) || v.length !== 1) return false;
  const only: unknown = v[0];
  return isObject(only) && Object.keys(only).length === 2 && only.type === "text" && only.text === text;
}

function toolText(t: ToolDefinition): string {
  return `[${frame(t.name)},${frame(t.description)},${canonicalText(t.inputSchemaJson)},${canonicalText(t.extraJson)}]`;
}
