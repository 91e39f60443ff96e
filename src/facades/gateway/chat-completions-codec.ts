import type { ClientCodec } from "./codec.js";
import { parseChatCompletionsRequest } from "./chat-completions-parse.js";
import { renderChatCompletion, renderPartialChatCompletion } from "./chat-completions-render.js";
import { createChatStreamRenderer } from "./chat-completions-stream.js";

/**
 * The chat-completions client style (`POST /v1/chat/completions`), wire-compatible with the official
 * `openai` SDK: parsing in chat-completions-parse.ts, rendering in chat-completions-render.ts and
 * chat-completions-stream.ts.
 */
export const chatCompletionsCodec: ClientCodec = {
  requestIdHeader: "x-request-id",
  parseRequest: parseChatCompletionsRequest,
  renderCompletion: renderChatCompletion,
  renderPartial: renderPartialChatCompletion,
  createStreamRenderer: createChatStreamRenderer,
};
