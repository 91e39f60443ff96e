import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { create, toJson, type JsonObject } from "@bufbuild/protobuf";
import {
  ApiStyle,
  type StreamChatResponse,
  StreamChatRequestSchema,
  StreamChatResponseSchema,
} from "../../../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { toErrorInfo } from "../../../../../src/core/errors.js";
import { SseParser } from "../../../../../src/core/sse.js";
import { createAnthropicAdapter } from "../../../../../src/core/proxy/upstreams/anthropic/adapter.js";

const fixture = (name: string): Buffer => readFileSync(new URL(`../../../../fixtures/anthropic/${name}`, import.meta.url));

const req = create(StreamChatRequestSchema, { model: "assistant-3-5-sonnet-20241022", style: ApiStyle.MESSAGES, stream: true });

/** Canonical events as JSON, without the wall-clock `created`. */
function summary(e: StreamChatResponse): JsonObject {
  const json = toJson(StreamChatResponseSchema, e) as JsonObject;
  if (json.messageStart) delete (json.messageStart as JsonObject).created;
  return json;
}

interface Run {
  events: JsonObject[];
  complete: boolean;
  error?: unknown;
}

/** Feeds a transcript's bytes through a UTF-8 decoder, the SSE parser and a converter, `size` bytes at a time. */
function run(bytes: Buffer, size = bytes.length): Run {
  const parser = new SseParser();
  const decoder = new TextDecoder();
  const conv = createAnthropicAdapter().createStreamConverter(req);
  const events: JsonObject[] = [];
  try {
    for (let i = 0; i < bytes.length; i += size) {
      for (const sse of parser.push(decoder.decode(bytes.subarray(i, i + size), { stream: true }))) {
        events.push(...conv.push(sse).map(summary));
      }
    }
    for (const sse of parser.push(decoder.decode()).concat(parser.end())) events.push(...conv.push(sse).map(summary));
    if (conv.complete) events.push(...conv.end().map(summary));
  } catch (error) {
    return { events, complete: conv.complete, error };
  }
  return { events, complete: conv.complete };
}

const MESSAGES = "API_STYLE_MESSAGES";
const cache0 = JSON.stringify({ cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });

const cases: { name: string; events: JsonObject[] }[] = [
  {
    name: "text.sse",
    events: [
      { messageStart: { id: "msg_01XFDUDYJgAACzvnptvVoYEL", model: req.model, usage: { inputTokens: 25, outputTokens: 1, extraJson: cache0 }, upstreamStyle: MESSAGES } },
      { blockStart: { block: { type: "BLOCK_TYPE_TEXT", style: MESSAGES } } },
      { blockDelta: { text: "Bonjour — ça" } },
      { blockDelta: { text: " va? 👋 世界" } },
      { blockStop: {} },
      { messageEnd: { finishReason: "FINISH_REASON_END_TURN", usage: { inputTokens: 25, outputTokens: 12, extraJson: cache0 } } },
    ],
  },
  {
    name: "tool-use.sse",
    events: [
      { messageStart: { id: "msg_014p7gG3wDgGV9EUtLvnow3U", model: req.model, usage: { inputTokens: 472, outputTokens: 2 }, upstreamStyle: MESSAGES } },
      { blockStart: { block: { type: "BLOCK_TYPE_TEXT", style: MESSAGES } } },
      { blockDelta: { text: "Okay, let me check the weather." } },
      { blockStop: {} },
      {
        blockStart: {
          index: 1,
          block: { type: "BLOCK_TYPE_TOOL_USE", toolCallId: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", toolName: "get_weather", style: MESSAGES },
        },
      },
      { blockDelta: { index: 1 } }, // the API's empty first fragment
      { blockDelta: { index: 1, partialJson: '{"location":' } },
      { blockDelta: { index: 1, partialJson: ' "San Francisco, CA"}' } },
      { blockStop: { index: 1 } },
      { messageEnd: { finishReason: "FINISH_REASON_TOOL_USE", usage: { inputTokens: 472, outputTokens: 89 } } },
    ],
  },
  {
    name: "thinking.sse",
    events: [
      {
        messageStart: {
          id: "msg_01Dq2EUUvWjY3Vz5rsJvxvW8",
          model: req.model,
          usage: { inputTokens: 44, outputTokens: 4, extraJson: JSON.stringify({ cache_creation_input_tokens: 0, cache_read_input_tokens: 0, service_tier: "standard" }) },
          upstreamStyle: MESSAGES,
        },
      },
      { blockStart: { block: { type: "BLOCK_TYPE_OTHER", rawJson: '{"type":"thinking","thinking":"","signature":""}', style: MESSAGES } } },
      { blockDelta: { rawJson: '{"type":"thinking_delta","thinking":"27 * 453 = 27 * 400 + 27 * 53 = 10800 + 1431 = 12231"}' } },
      { blockDelta: { rawJson: '{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}' } },
      { blockStop: {} },
      { blockStart: { index: 1, block: { type: "BLOCK_TYPE_TEXT", style: MESSAGES } } },
      { blockDelta: { index: 1, text: "27 * 453 = 12,231" } },
      { blockStop: { index: 1 } },
      {
        messageEnd: {
          finishReason: "FINISH_REASON_END_TURN",
          usage: { inputTokens: 44, outputTokens: 97, extraJson: JSON.stringify({ cache_creation_input_tokens: 0, cache_read_input_tokens: 0, service_tier: "standard" }) },
        },
      },
    ],
  },
  {
    name: "web-search.sse",
    events: [
      { messageStart: { id: "msg_01G8vXzWbq4mTnHc3sK9pLrE", model: req.model, usage: { inputTokens: 2679, outputTokens: 3, extraJson: cache0 }, upstreamStyle: MESSAGES } },
      {
        blockStart: {
          block: { type: "BLOCK_TYPE_OTHER", rawJson: '{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{}}', style: MESSAGES },
        },
      },
      { blockDelta: { partialJson: '{"query": "weather NYC today"}' } },
      { blockStop: {} },
      {
        blockStart: {
          index: 1,
          block: {
            type: "BLOCK_TYPE_OTHER",
            rawJson: JSON.stringify({
              type: "web_search_tool_result",
              tool_use_id: "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
              content: [{ type: "web_search_result", title: "Weather in New York City", url: "https://weather.example/nyc", encrypted_content: "Ev0DCioIAxgCIiQ3NmU4ZmI4OC1k", page_age: null }],
            }),
            style: MESSAGES,
          },
        },
      },
      { blockStop: { index: 1 } },
      { blockStart: { index: 2, block: { type: "BLOCK_TYPE_TEXT", extraJson: '{"citations":[]}', style: MESSAGES } } },
      {
        blockDelta: {
          index: 2,
          rawJson: JSON.stringify({
            type: "citations_delta",
            citation: { type: "web_search_result_location", cited_text: "Sunny, 24°C", url: "https://weather.example/nyc", title: "Weather in New York City", encrypted_index: "EpMBCioIAxgCIiQ4ODk4" },
          }),
        },
      },
      { blockDelta: { index: 2, text: "It is sunny, 24°C." } },
      { blockStop: { index: 2 } },
      {
        messageEnd: {
          finishReason: "FINISH_REASON_END_TURN",
          usage: { inputTokens: 2679, outputTokens: 510, extraJson: JSON.stringify({ cache_creation_input_tokens: 0, cache_read_input_tokens: 0, server_tool_use: { web_search_requests: 1 } }) },
        },
      },
    ],
  },
];

describe("anthropic stream converter", () => {
  for (const c of cases) {
    it(`converts ${c.name} into canonical events`, () => {
      const r = run(fixture(c.name));
      assert.equal(r.error, undefined);
      assert.deepEqual(r.events, c.events);
    });

    it(`marks ${c.name} complete at message_stop`, () => {
      assert.equal(run(fixture(c.name)).complete, true);
    });

    it(`gives the same events for ${c.name} fed in awkward byte chunks`, () => {
      // 1..13-byte chunks split multi-byte characters (—, 👋, 世) and the event boundaries.
      for (const size of [1, 2, 3, 5, 7, 13]) assert.deepEqual(run(fixture(c.name), size).events, c.events, `chunk size ${size}`);
    });
  }

  it("gives the same events for a transcript with CRLF line endings", () => {
    const crlf = Buffer.from(fixture("text.sse").toString("utf8").replace(/\n/g, "\r\n"));
    assert.deepEqual(run(crlf, 3).events, cases[0]!.events);
  });

  it("emits the events before an error event, then throws the upstream's error", () => {
    const r = run(fixture("error-mid-stream.sse"));
    assert.deepEqual(r.events.map((e) => Object.keys(e)[0]), ["messageStart", "blockStart", "blockDelta"]);
    assert.deepEqual(toErrorInfo(r.error), { status: 502, type: "api_error", code: "upstream_overloaded", message: "Upstream error: Overloaded" });
  });

  it("maps a client-error event mid-stream to its own status", () => {
    const conv = createAnthropicAdapter().createStreamConverter(req);
    const data = JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "prompt is too long" } });
    assert.throws(() => conv.push({ event: "error", data }), (e) => {
      assert.deepEqual(toErrorInfo(e), { status: 400, type: "invalid_request_error", code: "upstream_invalid_request_error", message: "Upstream error: prompt is too long" });
      return true;
    });
  });

  it("treats an error event whose data is not JSON as an upstream failure", () => {
    const conv = createAnthropicAdapter().createStreamConverter(req);
    assert.throws(() => conv.push({ event: "error", data: "Internal Server Error" }), (e) => {
      const info = toErrorInfo(e);
      assert.deepEqual([info.status, info.type, info.code], [502, "api_error", "upstream_error"]);
      return true;
    });
  });

  it("leaves a stream that ends without message_stop incomplete, owing nothing", () => {
    const conv = createAnthropicAdapter().createStreamConverter(req);
    const parser = new SseParser();
    const events = [...parser.push(fixture("truncated.sse").toString("utf8")), ...parser.end()].flatMap((e) => conv.push(e));
    assert.deepEqual(events.map((e) => e.event.case), ["messageStart", "blockStart", "blockDelta"]);
    assert.equal(conv.complete, false);
    assert.deepEqual(conv.end(), []);
  });

  it("throws a 502 upstream_invalid_response for an answer's event before its message_start (a stream of message_stop alone)", () => {
    for (const type of ["message_stop", "message_delta", "content_block_start", "content_block_delta", "content_block_stop"]) {
      const conv = createAnthropicAdapter().createStreamConverter(req);
      assert.deepEqual(conv.push({ event: "ping", data: '{"type": "ping"}' }), []);
      assert.throws(() => conv.push({ event: type, data: JSON.stringify({ type, index: 0, delta: { type: "text_delta", text: "x" }, content_block: { type: "text", text: "" } }) }), (e) => {
        const info = toErrorInfo(e);
        assert.deepEqual([info.status, info.code], [502, "upstream_invalid_response"], type);
        assert.match(info.message, new RegExp(`\`${type}\` event came before \`message_start\``));
        return true;
      });
    }
  });

  it("ignores ping events", () => {
    const conv = createAnthropicAdapter().createStreamConverter(req);
    assert.deepEqual(conv.push({ event: "ping", data: '{"type": "ping"}' }), []);
  });

  it("ignores event types it does not know", () => {
    const conv = createAnthropicAdapter().createStreamConverter(req);
    assert.deepEqual(conv.push({ event: "future_event", data: '{"type":"future_event","x":1}' }), []);
  });

  it("throws a 502 upstream_invalid_response for data that is not JSON", () => {
    const conv = createAnthropicAdapter().createStreamConverter(req);
    assert.throws(() => conv.push({ event: "content_block_delta", data: '{"type":"content_block_delta",' }), (e) => {
      const info = toErrorInfo(e);
      assert.deepEqual([info.status, info.type, info.code], [502, "api_error", "upstream_invalid_response"]);
      return true;
    });
  });

  it("sends on a tool call's input given whole in its content_block_start (a compatible server's way) as one fragment at the block's stop, unless fragments came", () => {
    const events = (input: unknown, fragments: string[]) => {
      const conv = createAnthropicAdapter().createStreamConverter(req);
      const push = (type: string, rest: object) => conv.push({ event: type, data: JSON.stringify({ type, index: 1, ...rest }) }).map(summary);
      conv.push({ event: "message_start", data: JSON.stringify({ type: "message_start", message: { id: "msg_s", type: "message", role: "assistant", content: [], usage: { input_tokens: 1, output_tokens: 1 } } }) });
      return [
        ...push("content_block_start", { content_block: { type: "tool_use", id: "toolu_s", name: "get", input } }),
        ...fragments.flatMap((partial_json) => push("content_block_delta", { delta: { type: "input_json_delta", partial_json } })),
        ...push("content_block_stop", {}),
      ];
    };
    const start = { blockStart: { index: 1, block: { type: "BLOCK_TYPE_TOOL_USE", toolCallId: "toolu_s", toolName: "get", style: "API_STYLE_MESSAGES" } } };
    assert.deepEqual(events({ q: 1 }, []), [start, { blockDelta: { index: 1, partialJson: '{"q":1}' } }, { blockStop: { index: 1 } }]);
    // Fragments after it are the input (the API's own start is {}): the start's is not sent as well.
    assert.deepEqual(events({ q: 1 }, ['{"x"', ":1}"]), [start, { blockDelta: { index: 1, partialJson: '{"x"' } }, { blockDelta: { index: 1, partialJson: ":1}" } }, { blockStop: { index: 1 } }]);
    assert.deepEqual(events({}, []), [start, { blockStop: { index: 1 } }]);
  });

  it("reports the public model id, never the upstream's", () => {
    const [start] = run(fixture("tool-use.sse")).events;
    assert.equal((start!.messageStart as JsonObject).model, "assistant-3-5-sonnet-20241022");
  });
});
