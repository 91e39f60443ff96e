import {
  ApiStyle,
  BlockType,
  type ChatMessage,
  type StreamChatRequest,
  type ToolDefinition,
} from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { isObject, parseExtra, setOwn, type JsonObject } from "../../../json.js";
import { blockToWire } from "./blocks.js";
import { DEFAULT_MAX_TOKENS } from "../../models.js";
import { chatToMessagesBody } from "./from-chat.js";

/**
 * The messages-style request body for a canonical request. A request that came in messages style
 * is rebuilt as the client sent it, unknown fields included; any other style is translated.
 */
export function buildMessagesBody(req: StreamChatRequest, model: string, defaultMaxTokens = DEFAULT_MAX_TOKENS): JsonObject {
  const body = req.style === ApiStyle.MESSAGES ? sameStyleBody(req, defaultMaxTokens) : chatToMessagesBody(req, defaultMaxTokens);
  body.model = model;
  if (req.stream) body.stream = true;
  return body;
}

function sameStyleBody(req: StreamChatRequest, defaultMaxTokens: number): JsonObject {
  const extra = parseExtra(req.extraJson);
  const body: JsonObject = {
    model: "",
    max_tokens: req.maxTokens ?? defaultMaxTokens,
    messages: req.messages.map(messageToWire),
  };
  // A system sent as blocks (cache_control, citations) is kept whole in extra and wins over its text.
  if (req.system && extra.system === undefined) body.system = req.system;
  if (req.temperature !== undefined) body.temperature = req.temperature;
  if (req.tools.length) body.tools = req.tools.map(toolToWire);
  // Unknown fields never replace the named ones (they cannot hold them, by construction).
  for (const k in extra) if (!Object.hasOwn(body, k)) setOwn(body, k, extra[k]);
  return body;
}

function messageToWire(m: ChatMessage): JsonObject {
  const only = m.blocks.length === 1 ? m.blocks[0] : undefined;
  const content =
    m.contentIsString && only?.type === BlockType.TEXT && !only.extraJson
      ? only.text
      : m.blocks.map(blockToWire).filter((b) => b !== undefined);
  return { role: m.role, content, ...parseExtra(m.extraJson) };
}

function toolToWire(t: ToolDefinition): JsonObject {
  // A server tool (web search, code execution...) has no name of its own and rides whole in extra.
  if (!t.name) return parseExtra(t.extraJson);
  const schema: unknown = t.inputSchemaJson ? JSON.parse(t.inputSchemaJson) : undefined;
  return {
    name: t.name,
    ...(t.description ? { description: t.description } : {}),
    input_schema: isObject(schema) ? schema : { type: "object" },
    ...parseExtra(t.extraJson),
  };
}
