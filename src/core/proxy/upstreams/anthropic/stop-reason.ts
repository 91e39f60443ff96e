import { FinishReason } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import { finishFromWord } from "../../canonical.js";

/** Messages-style `stop_reason` values (https://docs.anthropic.com/en/api/handling-stop-reasons) as canonical reasons. */
const finishByStopReason: Record<string, FinishReason> = {
  end_turn: FinishReason.END_TURN,
  max_tokens: FinishReason.MAX_TOKENS,
  // The context window filled up before max_tokens: the same "cut short" outcome for a client.
  model_context_window_exceeded: FinishReason.MAX_TOKENS,
  stop_sequence: FinishReason.STOP_SEQUENCE,
  tool_use: FinishReason.TOOL_USE,
  pause_turn: FinishReason.PAUSE_TURN,
  refusal: FinishReason.CONTENT_FILTER,
};

/** A `stop_reason` as a canonical reason (finishFromWord); an unknown one is kept as sent for a messages client: unsaidStopReason. */
export const finishFromStopReason = (v: unknown): FinishReason => finishFromWord(finishByStopReason, v);

/**
 * The upstream's `stop_reason` when the canonical reason does not say it as sent (a value that maps
 * onto another, `model_context_window_exceeded`, or one this build does not know), kept for a
 * messages-style client, which gets it as sent; undefined otherwise.
 */
export const unsaidStopReason = (v: unknown): string | undefined =>
  typeof v === "string" && v !== "" && stopReasonFromFinish(finishFromStopReason(v)) !== v ? v : undefined;

/**
 * A canonical reason as a messages-style `stop_reason`; null for none (UNSPECIFIED: the upstream
 * said none), as Anthropic writes a message that has not stopped.
 */
export function stopReasonFromFinish(f: FinishReason): string | null {
  switch (f) {
    case FinishReason.MAX_TOKENS:
      return "max_tokens";
    case FinishReason.STOP_SEQUENCE:
      return "stop_sequence";
    case FinishReason.TOOL_USE:
      return "tool_use";
    case FinishReason.PAUSE_TURN:
      return "pause_turn";
    case FinishReason.CONTENT_FILTER:
      return "refusal";
    case FinishReason.UNSPECIFIED:
      return null;
    default:
      return "end_turn";
  }
}
