import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isObject, type JsonObject } from "../core/json.js";
import { countTokens, fakeReply, parseDirectives, retryHeaders, sleep, firstEvents, piecesOf, structuredReply, writeEvents } from "./fake-script.js";

/**
 * The demo provider's chat-completions style (`POST /v1/chat/completions`), shaped like
 * https://platform.openai.com/docs/api-reference/chat (and .../chat-streaming), including what
 * clients trip over: a role chunk with empty content, `usage: null` on every chunk when usage was
 * asked for, then a usage chunk with empty choices, tool-call arguments in several fragments, and
 * error bodies of the form `{"error":{"message","type","param","code"}}`. It writes a whole answer in
 * one go (it is also the benchmark's upstream), except where a directive asks otherwise.
 */

const errorByStatus: Record<number, { type: string; code: string | null }> = {
  400: { type: "invalid_request_error", code: null },
  401: { type: "authentication_error", code: "invalid_api_key" },
  403: { type: "permission_error", code: null },
  404: { type: "not_found_error", code: "model_not_found" },
  429: { type: "rate_limit_error", code: "rate_limit_exceeded" },
};

const errorOf = (status: number) =>
  errorByStatus[status] ?? { type: status >= 500 ? "server_error" : "invalid_request_error", code: null };

const newId = (prefix: string): string => prefix + randomBytes(15).toString("base64url");
const fingerprint = "fp_demo0000001";

interface Answer {
  id: string;
  created: number;
  model: string;
  text: string;
  tool?: { id: string; name: string; custom: boolean; arguments: string };
  finishReason: "stop" | "length" | "tool_calls";
  promptTokens: number;
  completionTokens: number;
}

export async function serveOpenAiFake(_req: IncomingMessage, res: ServerResponse, body: JsonObject): Promise<void> {
  const messages = Array.isArray(body.messages) ? body.messages : undefined;
  if (!messages?.length) return sendError(res, 400, "Invalid 'messages': empty array. Expected an array with minimum length 1.");
  const lastUser = lastUserText(messages);
  const d = parseDirectives(lastUser);
  if (d.delayMs) await sleep(d.delayMs);
  if (d.status && d.status >= 400) return sendError(res, d.status, `Scripted failure ${d.status}.`, retryHeaders(d));

  const limit = typeof body.max_tokens === "number" ? body.max_tokens : typeof body.max_completion_tokens === "number" ? body.max_completion_tokens : undefined;
  const structured = body.response_format === undefined ? undefined : structuredReply(body.response_format, lastUser);
  const reply = structured === undefined ? fakeReply(lastUser, limit) : { text: structured, truncated: false };
  const tool = d.tool ? firstTool(body.tools) : undefined;
  const answer: Answer = {
    id: newId("chatcmpl-"),
    created: Math.floor(Date.now() / 1000),
    model: typeof body.model === "string" ? body.model : "",
    text: reply.text,
    tool: tool ? { id: newId("call_"), name: tool.name, custom: tool.custom, arguments: tool.custom ? reply.text : JSON.stringify({ query: reply.text }) } : undefined,
    finishReason: tool ? "tool_calls" : reply.truncated ? "length" : "stop",
    promptTokens: countTokens(messages.map(messageText).join("")),
    completionTokens: countTokens(reply.text),
  };
  if (body.stream !== true) {
    res.writeHead(200, { "content-type": "application/json", "x-request-id": newId("req_") });
    res.end(JSON.stringify(completion(answer)));
    return;
  }
  const opts = body.stream_options;
  const chunks = streamChunks(answer, d.chunks, isObject(opts) && opts.include_usage === true);
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", "x-request-id": newId("req_") });
  if (d.stall || d.drop) {
    const first = firstEvents(chunks, 2); // the role chunk and the first fragment
    if (d.drop) {
      // Cut the connection once the first chunks are on the wire: a truncated chunked body.
      await new Promise<void>((resolve) => res.write(first, () => resolve()));
      res.destroy();
      return;
    }
    res.write(first);
    // An idle upstream: the socket stays open until the client gives up.
    await new Promise<void>((resolve) => res.once("close", resolve));
    return;
  }
  await writeEvents(res, chunks);
}

function completion(a: Answer): JsonObject {
  const message: JsonObject = { role: "assistant", content: a.tool ? null : a.text, refusal: null, annotations: [] };
  if (a.tool) {
    message.tool_calls = [
      a.tool.custom
        ? { id: a.tool.id, type: "custom", custom: { name: a.tool.name, input: a.tool.arguments } }
        : { id: a.tool.id, type: "function", function: { name: a.tool.name, arguments: a.tool.arguments } },
    ];
  }
  return {
    id: a.id,
    object: "chat.completion",
    created: a.created,
    model: a.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: a.finishReason }],
    usage: usage(a),
    service_tier: "default",
    system_fingerprint: fingerprint,
  };
}

const usage = (a: Answer): JsonObject => ({
  prompt_tokens: a.promptTokens,
  completion_tokens: a.completionTokens,
  total_tokens: a.promptTokens + a.completionTokens,
  prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
});

/** The SSE chunks of one answer, `data: [DONE]` included. */
/** The stream's chunks, each made as it is written. */
function* streamChunks(a: Answer, pieces: number | undefined, includeUsage: boolean): Generator<string> {
  const head = { id: a.id, object: "chat.completion.chunk", created: a.created, model: a.model, service_tier: "default", system_fingerprint: fingerprint };
  const tail = includeUsage ? { usage: null } : {};
  const chunk = (delta: JsonObject, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...tail })}\n\n`;
  if (a.tool) {
    const custom = a.tool.custom;
    const opening = custom ? { type: "custom", custom: { name: a.tool.name, input: "" } } : { type: "function", function: { name: a.tool.name, arguments: "" } };
    yield chunk({ role: "assistant", content: null, tool_calls: [{ index: 0, id: a.tool.id, ...opening }], refusal: null });
    // Arguments arrive in fragments that are not JSON on their own, as OpenAI sends them (a custom
    // tool's input, free text, the same way under `custom`).
    for (const part of piecesOf(a.tool.arguments, Math.max(2, pieces ?? 3))) {
      yield chunk({ tool_calls: [{ index: 0, ...(custom ? { custom: { input: part } } : { function: { arguments: part } }) }] });
    }
  } else {
    yield chunk({ role: "assistant", content: "", refusal: null });
    for (const part of piecesOf(a.text, pieces)) yield chunk({ content: part });
  }
  yield chunk({}, a.finishReason);
  if (includeUsage) yield `data: ${JSON.stringify({ ...head, choices: [], usage: usage(a) })}\n\n`;
  yield "data: [DONE]\n\n";
}

function sendError(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}): void {
  const { type, code } = errorOf(status);
  res.writeHead(status, { ...headers, "content-type": "application/json", "x-request-id": newId("req_") });
  res.end(JSON.stringify({ error: { message, type, param: null, code } }));
}

/** The text of a message's content: a string, or the text parts of an array. */
function messageText(m: unknown): string {
  if (!isObject(m)) return "";
  if (typeof m.content === "string") return m.content;
  if (!Array.isArray(m.content)) return "";
  let text = "";
  for (const p of m.content) if (isObject(p) && typeof p.text === "string") text += p.text;
  return text;
}

/**
 * What the reply answers: the last user message, or the tool results that end the conversation (as
 * the messages-style fake reads `tool_result` blocks): a tool loop then ends with a text answer,
 * rather than calling the tool again on the `[[fake:tool]]` of the user message before them.
 */
function lastUserText(messages: unknown[]): string {
  const results: string[] = [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (!isObject(m)) continue;
    if (m.role === "tool") results.unshift(messageText(m));
    else if (results.length > 0) return results.join("\n");
    else if (m.role === "user") return messageText(m);
  }
  return results.join("\n");
}

/** The first tool: a function, or a custom tool (free-text input). */
function firstTool(tools: unknown): { name: string; custom: boolean } | undefined {
  if (!Array.isArray(tools) || !isObject(tools[0])) return undefined;
  const custom = tools[0].type === "custom";
  const def = custom ? tools[0].custom : tools[0].function;
  return isObject(def) && typeof def.name === "string" ? { name: def.name, custom } : undefined;
}
