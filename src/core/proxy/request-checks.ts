import { isObject, type JsonObject } from "../json.js";
import { fail, optionalArray, optionalIntegerInRange, optionalNumberInRange, requireObject, requireString, wrongType } from "../validate.js";

/**
 * Checks of request fields the canonical model does not name (they ride in `extra_json`) that both
 * ways into ProxyService.StreamChat make alike: the HTTP facades' codecs on a client's body, and
 * the check of a canonical request that arrives over the network (wire-request.ts) on its
 * `extra_json`, so the core port refuses what the HTTP endpoints refuse, with the same errors.
 */

/** A messages-style request's sampling and choice fields. */
export function checkMessagesExtraFields(body: JsonObject): void {
  optionalArray(body, "stop_sequences")?.forEach((s, i) => {
    if (typeof s !== "string") wrongType(`stop_sequences[${i}]`, "a string", s);
  });
  optionalIntegerInRange(body, "top_k", 0);
  optionalNumberInRange(body, "top_p", 0, 1);
  if (body.metadata !== undefined && body.metadata !== null) requireObject(body.metadata, "metadata");
  if (body.tool_choice !== undefined && body.tool_choice !== null) {
    requireString(requireObject(body.tool_choice, "tool_choice"), "type", "tool_choice.type");
  }
}

/** A chat-completions request's `stream_options`: an object, only on a stream. */
export function checkStreamOptions(b: JsonObject, stream: boolean): void {
  const opts = b.stream_options;
  if (opts === undefined || opts === null) return;
  if (!isObject(opts)) return wrongType("stream_options", "an object", opts);
  if (!stream) fail("invalid_value", "`stream_options` is only allowed when `stream` is true.");
  // Read by the gateway itself (the upstream is always asked for usage): a value it would take as
  // false without a word (`"true"`, 1) is refused instead.
  const usage = opts.include_usage;
  if (usage !== undefined && usage !== null && typeof usage !== "boolean") wrongType("stream_options.include_usage", "a boolean", usage);
}
