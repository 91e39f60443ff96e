import { BlockType, type ContentBlock } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { parseExtra, type JsonObject } from "../../../json.js";

/**
 * The extra_json of a tool-use block that is a call of an OpenAI custom tool
 * (`{"type":"custom","custom":{"name","input"}}`): its name is the tool's, and its input, free text
 * rather than JSON arguments, is the block's tool_input_json.
 */
export const CUSTOM_CALL_EXTRA = '{"type":"custom"}';

/** Whether a tool-use block is a custom tool's call (CUSTOM_CALL_EXTRA, with any unnamed fields of the call). */
export const isCustomCall = (b: { type: BlockType; extraJson: string }): boolean =>
  b.type === BlockType.TOOL_USE && b.extraJson !== "" && parseExtra(b.extraJson).type === "custom";

/**
 * A tool-use block as an OpenAI `tool_calls` item, in a request or an answer. `extra` holds the
 * call's own unnamed fields (a custom tool's call's `type` among them), only when the block came
 * from a chat-style client. An empty input becomes "{}": OpenAI rejects "". A custom tool's call
 * keeps its shape and its free-text input as it is.
 */
export const toolCall = (b: ContentBlock, extra: JsonObject = {}): JsonObject =>
  extra.type === "custom" || isCustomCall(b)
    ? { ...extra, id: b.toolCallId, type: "custom", custom: { name: b.toolName, input: b.toolInputJson } }
    : { ...extra, id: b.toolCallId, type: "function", function: { name: b.toolName, arguments: b.toolInputJson || "{}" } };
