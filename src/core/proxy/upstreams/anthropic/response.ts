import { ApiStyle, type Completion, type StreamChatRequest } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { apiError } from "../../../errors.js";
import { extraJson, isObject, withExtraField } from "../../../json.js";
import { completion, nowSeconds } from "../../canonical.js";
import { blockFromWire, usageFromWire } from "./blocks.js";
import { finishFromStopReason, unsaidStopReason } from "./stop-reason.js";

/** Top-level fields of a messages-style answer that the canonical Completion names (also message_start's message). */
export const MESSAGE_KEYS = new Set(["id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"]);

export const invalidResponse = (what: string) =>
  apiError(502, "api_error", "upstream_invalid_response", `The upstream provider sent an invalid response: ${what}.`);

/**
 * Converts a non-stream messages-style answer to a Completion. The model is the public id the
 * client asked for, never the upstream's name; fields the Completion does not name (container,
 * stop_details, cache counters) ride in extra_json for a messages-style client.
 */
/**
 * A message's extra_json with its `stop_reason` kept in it when the canonical reason does not say it
 * as sent (unsaidStopReason): a messages-style client gets that value back.
 */
export const withStopReason = (extra: string, stopReason: unknown): string => withExtraField(extra, "stop_reason", unsaidStopReason(stopReason));

export function parseMessagesCompletion(body: unknown, req: StreamChatRequest): Completion {
  if (!isObject(body)) throw invalidResponse("the body is not a JSON object");
  if (!Array.isArray(body.content)) throw invalidResponse("`content` is not an array");
  return completion({
    id: typeof body.id === "string" ? body.id : "",
    model: req.model,
    created: nowSeconds(),
    blocks: body.content.filter(isObject).map(blockFromWire),
    finishReason: finishFromStopReason(body.stop_reason),
    stopSequence: typeof body.stop_sequence === "string" ? body.stop_sequence : "",
    usage: usageFromWire(body.usage),
    upstreamStyle: ApiStyle.MESSAGES,
    extraJson: withStopReason(extraJson(body, MESSAGE_KEYS), body.stop_reason),
  });
}
