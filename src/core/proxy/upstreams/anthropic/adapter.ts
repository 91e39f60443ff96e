import { ApiStyle } from "../../../../gen/svc/proxy/v1/proxy_service_pb.js";
import type { UpstreamAdapter } from "../adapter.js";
import { convertMessagesError } from "./error.js";
import { buildMessagesBody } from "./request.js";
import { parseMessagesCompletion } from "./response.js";
import { MessagesStreamConverter } from "./stream.js";

/** The API version the conversions are written against (https://docs.anthropic.com/en/api/versioning). */
export const ANTHROPIC_VERSION = "2023-06-01";

/** Creates the adapter for messages-style upstreams (`POST {baseUrl}/v1/messages`). */
export function createAnthropicAdapter(): UpstreamAdapter {
  return {
    style: ApiStyle.MESSAGES,
    buildRequest(req, target) {
      const headers: Record<string, string> = { "content-type": "application/json", "accept-encoding": "identity", "anthropic-version": ANTHROPIC_VERSION };
      if (target.apiKey) headers["x-api-key"] = target.apiKey;
      // Betas are named by a messages-style client for a messages-style API; a translated request has none.
      if (req.style === ApiStyle.MESSAGES && req.betas.length) headers["anthropic-beta"] = req.betas.join(",");
      return {
        url: `${target.baseUrl.replace(/\/+$/, "")}/v1/messages`,
        headers,
        body: JSON.stringify(buildMessagesBody(req, target.upstreamModel, target.defaultMaxTokens)),
      };
    },
    parseCompletion: parseMessagesCompletion,
    createStreamConverter: (req) => new MessagesStreamConverter(req),
    convertError: convertMessagesError,
  };
}
