import { ApiStyle } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { UpstreamAdapter } from "../adapter.js";
import { convertOpenAiError } from "./error.js";
import { buildOpenAiRequest } from "./request.js";
import { parseOpenAiCompletion } from "./response.js";
import { createOpenAiStreamConverter } from "./stream.js";

/** The chat-completions upstream style (OpenAI and the many providers compatible with it). */
export function createOpenAiAdapter(): UpstreamAdapter {
  return {
    style: ApiStyle.CHAT_COMPLETIONS,
    buildRequest: buildOpenAiRequest,
    parseCompletion: parseOpenAiCompletion,
    createStreamConverter: createOpenAiStreamConverter,
    convertError: convertOpenAiError,
  };
}
