import type { ContentBlock } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { JsonObject } from "../../../json.js";

/**
 * A tool-use block as an OpenAI `tool_calls` item. `extra` holds the call's own unnamed fields, only
 * when the block came from a chat-style client. An empty input becomes "{}": OpenAI rejects "".
 */
export const toolCall = (b: ContentBlock, extra: JsonObject = {}): JsonObject => ({
  ...extra,
  id: b.toolCallId,
  type: "function",
  function: { name: b.toolName, arguments: b.toolInputJson || "{}" },
});
