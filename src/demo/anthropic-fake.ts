import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isObject, type JsonObject } from "../core/json.js";
import { countTokens, fakeReply, parseDirectives, retryHeaders, sleep, firstEvents, piecesOf, structuredReply, writeEvents } from "./fake-script.js";

/**
 * The demo provider's messages style (`POST /v1/messages`), shaped like
 * https://docs.anthropic.com/en/api/messages and .../messages-streaming, including the details
 * clients trip over: `ping` events, an empty first input_json_delta, cache counters in usage, and
 * error bodies of the form `{"type":"error","error":{"type","message"}}`. It writes a whole answer
 * in one go (it is also the benchmark's upstream), except where a directive asks otherwise.
 */

const errorTypeByStatus: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "api_error",
  529: "overloaded_error",
};

const errorType = (status: number): string =>
  errorTypeByStatus[status] ?? (status >= 500 ? "api_error" : "invalid_request_error");

const newId = (prefix: string): string => prefix + randomBytes(12).toString("base64url");

const event = (name: string, data: JsonObject): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;

export async function serveAnthropicFake(_req: IncomingMessage, res: ServerResponse, body: JsonObject): Promise<void> {
  const messages = Array.isArray(body.messages) ? body.messages : undefined;
  if (!messages?.length || typeof body.max_tokens !== "number") {
    const missing = !messages?.length ? "messages" : "max_tokens";
    return sendError(res, 400, `${missing}: Field required`);
  }
  const lastUser = lastUserText(messages);
  const d = parseDirectives(lastUser);
  if (d.delayMs) await sleep(d.delayMs);
  if (d.status && d.status >= 400) return sendError(res, d.status, `Scripted failure ${d.status}.`, retryHeaders(d));

  const structured = isObject(body.output_config) ? structuredReply(body.output_config.format, lastUser) : undefined;
  const reply = structured === undefined ? fakeReply(lastUser, body.max_tokens) : { text: structured, truncated: false };
  const tool = d.tool ? firstToolName(body.tools) : undefined;
  const answer: Answer = {
    id: newId("msg_01"),
    model: typeof body.model === "string" ? body.model : "",
    text: reply.text,
    tool: tool ? { id: newId("toolu_01"), name: tool, input: { query: reply.text } } : undefined,
    stopReason: tool ? "tool_use" : reply.truncated ? "max_tokens" : "end_turn",
    inputTokens: countTokens(textOf(body.system) + messages.map(messageText).join("")),
    outputTokens: countTokens(reply.text),
  };
  if (body.stream !== true) {
    res.writeHead(200, { "content-type": "application/json", "request-id": newId("req_01") });
    res.end(JSON.stringify(message(answer)));
    return;
  }
  const events = streamEvents(answer, d.chunks);
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", "request-id": newId("req_01") });
  if (d.stall || d.drop) {
    const first = firstEvents(events, 4); // message_start, block start, ping, first delta
    if (d.drop) {
      // Cut the connection once the first events are on the wire: a truncated chunked body.
      await new Promise<void>((resolve) => res.write(first, () => resolve()));
      res.destroy();
      return;
    }
    res.write(first);
    // An idle upstream: the socket stays open until the client gives up.
    if (!res.closed) await new Promise<void>((resolve) => res.once("close", resolve));
    return;
  }
  await writeEvents(res, events);
}

interface Answer {
  id: string;
  model: string;
  text: string;
  tool?: { id: string; name: string; input: JsonObject };
  stopReason: string;
  inputTokens: number;
  outputTokens: number;
}

function sendError(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { ...headers, "content-type": "application/json", "request-id": newId("req_01") });
  res.end(JSON.stringify({ type: "error", error: { type: errorType(status), message } }));
}

function message(a: Answer): JsonObject {
  const content = a.tool ? [{ type: "tool_use", ...a.tool }] : [{ type: "text", text: a.text }];
  return {
    id: a.id,
    type: "message",
    role: "assistant",
    model: a.model,
    content,
    stop_reason: a.stopReason,
    stop_sequence: null,
    usage: { input_tokens: a.inputTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: a.outputTokens },
  };
}

/** The stream's events, each made as it is written. */
function* streamEvents(a: Answer, chunks: number | undefined): Generator<string> {
  const start = { ...message(a), content: [], stop_reason: null, usage: { input_tokens: a.inputTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 } };
  yield event("message_start", { type: "message_start", message: start });
  if (a.tool) {
    // The real API opens a tool_use block with an empty input, then streams the JSON in fragments,
    // the first of them often empty.
    yield event("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: a.tool.id, name: a.tool.name, input: {} } });
    yield event("ping", { type: "ping" });
    for (const partial_json of ["", ...piecesOf(JSON.stringify(a.tool.input), Math.max(2, chunks ?? 3))]) {
      yield event("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json } });
    }
  } else {
    yield event("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });
    yield event("ping", { type: "ping" });
    for (const text of piecesOf(a.text, chunks)) {
      yield event("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } });
    }
  }
  yield event("content_block_stop", { type: "content_block_stop", index: 0 });
  yield event("message_delta", { type: "message_delta", delta: { stop_reason: a.stopReason, stop_sequence: null }, usage: { output_tokens: a.outputTokens } });
  yield event("message_stop", { type: "message_stop" });
}

/** The text of the last user turn (its text blocks, or its tool results' text when it has none). */
function lastUserText(messages: unknown[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (isObject(m) && m.role === "user") return messageText(m);
  }
  return "";
}

function messageText(m: unknown): string {
  if (!isObject(m)) return "";
  const plain = textOf(m.content);
  if (plain || !Array.isArray(m.content)) return plain;
  return m.content.filter((b) => isObject(b) && b.type === "tool_result").map((b) => textOf((b as JsonObject).content)).join("\n");
}

/** A string, or the joined text blocks of a block array (a system prompt, a content, a tool result's content). */
function textOf(v: unknown): string {
  if (typeof v === "string") return v;
  if (!Array.isArray(v)) return "";
  return v.filter((b) => isObject(b) && b.type === "text" && typeof b.text === "string").map((b) => (b as JsonObject).text).join("\n");
}

function firstToolName(tools: unknown): string | undefined {
  if (!Array.isArray(tools)) return undefined;
  const t = tools.find((x) => isObject(x) && typeof x.name === "string" && (x.type === undefined || x.type === "custom"));
  return isObject(t) ? String(t.name) : undefined;
}
