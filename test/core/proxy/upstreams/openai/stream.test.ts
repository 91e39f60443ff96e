import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import {
  ApiStyle,
  BlockType,
  FinishReason,
  StreamChatRequestSchema,
  type StreamChatResponse,
} from "../../../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { toErrorInfo } from "../../../../../src/core/errors.js";
import { SseParser } from "../../../../../src/core/sse.js";
import { createOpenAiAdapter } from "../../../../../src/core/proxy/upstreams/openai/adapter.js";
import { createOpenAiStreamConverter } from "../../../../../src/core/proxy/upstreams/openai/stream.js";
import { prng } from "../../../../support/prng.js";

const fixture = (name: string): string => readFileSync(new URL(`../../../../fixtures/openai/${name}`, import.meta.url), "utf8");
const req = create(StreamChatRequestSchema, { model: "chat-4o", style: ApiStyle.CHAT_COMPLETIONS, stream: true });

/** A compact, readable form of one canonical event. */
function brief(e: StreamChatResponse): unknown[] {
  const ev = e.event;
  switch (ev.case) {
    case "messageStart":
      return ["start", ev.value.id, ev.value.model, ev.value.created, ApiStyle[ev.value.upstreamStyle], ev.value.extraJson ? JSON.parse(ev.value.extraJson) : {}];
    case "blockStart":
      return ["blockStart", ev.value.index, BlockType[ev.value.block!.type], ev.value.block!.toolCallId, ev.value.block!.toolName];
    case "blockDelta":
      return ["delta", ev.value.index, ev.value.text || ev.value.partialJson];
    case "blockStop":
      return ["blockStop", ev.value.index];
    case "messageEnd": {
      const u = ev.value.usage;
      return ["end", FinishReason[ev.value.finishReason], u ? [u.inputTokens, u.outputTokens, u.extraJson ? JSON.parse(u.extraJson) : {}] : null];
    }
    default:
      return [ev.case];
  }
}

/** Feeds text pieces through the SSE parser and the converter, as the proxy does. */
function convert(pieces: string[], forReq = req) {
  const parser = new SseParser();
  const conv = createOpenAiAdapter().createStreamConverter(forReq);
  const events: StreamChatResponse[] = [];
  for (const p of pieces) for (const e of parser.push(p)) events.push(...conv.push(e));
  for (const e of parser.end()) events.push(...conv.push(e));
  events.push(...conv.end());
  return { events: events.map(brief), complete: conv.complete };
}

/** Splits bytes every `size` bytes and decodes them as a network reader would (multi-byte chars cut in two). */
function splitBytes(text: string, size: number): string[] {
  const bytes = new TextEncoder().encode(text);
  const dec = new TextDecoder("utf-8");
  const out: string[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(dec.decode(bytes.subarray(i, i + size), { stream: true }));
  out.push(dec.decode());
  return out;
}

const usageDetails = {
  prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
};

const cases: { name: string; file: string; complete: boolean; events: unknown[][] }[] = [
  {
    name: "plain text with a usage chunk",
    file: "text-with-usage.sse",
    complete: true,
    events: [
      ["start", "chatcmpl-BkXy3nQ8rJ2mVwL0pT5sA9cD1eF7g", "chat-4o", 1750431221, "CHAT_COMPLETIONS", { service_tier: "default", system_fingerprint: "fp_07871e2ad8" }],
      ["blockStart", 0, "TEXT", "", ""],
      ...["Hello", "!", " How", " can", " I", " help", " you", " today", "?"].map((t) => ["delta", 0, t]),
      ["blockStop", 0],
      ["end", "END_TURN", [19, 10, usageDetails]],
    ],
  },
  {
    // A call's block stays open until the answer ends: only the finish says a call has all its arguments.
    name: "two parallel tool calls",
    file: "parallel-tool-calls.sse",
    complete: true,
    events: [
      ["start", "chatcmpl-BkY0aT4uVc8nR1pQ6sW2xZ3yB5dE9", "chat-4o", 1750431388, "CHAT_COMPLETIONS", { service_tier: "default", system_fingerprint: "fp_a288987b44" }],
      ["blockStart", 0, "TOOL_USE", "call_8Jq2mX4kR7tV1nB3cD5eF6gH", "get_weather"],
      ["delta", 0, '{"lo'], ["delta", 0, "cation"], ["delta", 0, '": "Par'], ["delta", 0, 'is, France"}'],
      ["blockStart", 1, "TOOL_USE", "call_Zy9xW8vU7tS6rQ5pO4nM3lK2", "get_weather"],
      ["delta", 1, '{"lo'], ["delta", 1, "cation"], ["delta", 1, '": "Tok'], ["delta", 1, 'yo, Japan"}'],
      ["blockStop", 0],
      ["blockStop", 1],
      ["end", "TOOL_USE", null],
    ],
  },
  {
    // tool_calls indexes 0, 1, 0, 2, 1, 0, 2 (valid OpenAI): no call's block stops before the end.
    name: "three parallel tool calls that interleave",
    file: "parallel-tool-calls-interleaved.sse",
    complete: true,
    events: [
      ["start", "chatcmpl-BkY1iNt3rL3aV3dP4rA1lLeL0t9Xy", "chat-4o", 1750431400, "CHAT_COMPLETIONS", { service_tier: "default", system_fingerprint: "fp_a288987b44" }],
      ["blockStart", 0, "TOOL_USE", "call_Q0aB1cD2eF3gH4iJ5kL6mN7o", "get_weather"],
      ["blockStart", 1, "TOOL_USE", "call_Q1pQ2rS3tU4vW5xY6zA7bC8d", "get_time"],
      ["delta", 0, '{"city":'],
      ["blockStart", 2, "TOOL_USE", "call_Q2eF3gH4iJ5kL6mN7oP8qR9s", "get_weather"],
      ["delta", 2, '{"ci'],
      ["delta", 1, '{"tz":"Europe/Berlin"}'],
      ["delta", 0, '"Paris"}'],
      ["delta", 2, 'ty":"Oslo"}'],
      ["blockStop", 0],
      ["blockStop", 1],
      ["blockStop", 2],
      ["end", "TOOL_USE", [31, 42, usageDetails]],
    ],
  },
  {
    name: "content filter finish behind an Azure prompt-filter chunk",
    file: "content-filter.sse",
    complete: true,
    events: [
      ["start", "chatcmpl-AzF1lt3r9qP0oN8mL7kJ6iH5gF4eD", "chat-4o", 1750431502, "CHAT_COMPLETIONS", { system_fingerprint: "fp_ee1d74bde0" }],
      ["blockStart", 0, "TEXT", "", ""],
      ["delta", 0, "Here is"],
      ["delta", 0, " the story"],
      ["blockStop", 0],
      ["end", "CONTENT_FILTER", null],
    ],
  },
  {
    name: "multi-byte text cut at max tokens",
    file: "multibyte-text.sse",
    complete: true,
    events: [
      ["start", "chatcmpl-BkY2mUlT1bYt3Xt8qW9eR0tY1uI2o", "chat-4o", 1750431640, "CHAT_COMPLETIONS", { service_tier: "default", system_fingerprint: "fp_34a54ae93c" }],
      ["blockStart", 0, "TEXT", "", ""],
      ...["こんにちは", "、世界", "！ 👋🏽", " Ça va", "? ", "Grüße 🇫🇷"].map((t) => ["delta", 0, t]),
      ["blockStop", 0],
      ["end", "MAX_TOKENS", [12, 16, usageDetails]],
    ],
  },
  {
    name: "text then a tool call, cut before [DONE]",
    file: "text-then-tool-truncated.sse",
    complete: false,
    events: [
      ["start", "chatcmpl-BkY3pLkM2nB4vC6xZ8aS0dF2gH4jK", "chat-4o", 1750431777, "CHAT_COMPLETIONS", { system_fingerprint: "fp_07871e2ad8" }],
      ["blockStart", 0, "TEXT", "", ""],
      ["delta", 0, "Let me check."],
      ["blockStop", 0],
      ["blockStart", 1, "TOOL_USE", "call_Ab12Cd34Ef56Gh78Ij90Kl12", "lookup"],
      ["delta", 1, '{"q":'],
      ["blockStop", 1],
      ["end", "UNSPECIFIED", null],
    ],
  },
];

describe("openai stream converter: a tool call forced by tool_choice", () => {
  // OpenAI ends an answer whose call tool_choice forced ("required", or a named function) with
  // finish_reason "stop"; a messages client runs tools on stop_reason "tool_use" only.
  const head = { id: "chatcmpl-F", object: "chat.completion.chunk", created: 1, model: "gpt-4o" };
  const chunk = (delta: object, finish: string | null = null) => `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const forced = (finish: string) => [
    chunk({ role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_F", type: "function", function: { name: "get_time", arguments: "" } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"tz":"UTC"}' } }] }),
    chunk({}, finish),
    "data: [DONE]\n\n",
  ].join("");
  const messagesReq = create(StreamChatRequestSchema, { model: "assistant-x", style: ApiStyle.MESSAGES, stream: true });
  const finish = (text: string, r = req) => convert([text], r).events.at(-1)![1];

  it("ends with TOOL_USE for a messages client", () => {
    assert.equal(finish(forced("stop"), messagesReq), "TOOL_USE");
  });

  it("ends with END_TURN, as sent, for a chat client", () => {
    assert.equal(finish(forced("stop")), "END_TURN");
  });

  it("keeps MAX_TOKENS for a call cut off, and END_TURN for a text answer, for a messages client", () => {
    assert.equal(finish(forced("length"), messagesReq), "MAX_TOKENS");
    assert.equal(finish(chunk({ role: "assistant", content: "Hi" }) + chunk({}, "stop") + "data: [DONE]\n\n", messagesReq), "END_TURN");
  });
});

describe("openai stream converter", () => {
  for (const c of cases) {
    it(`converts ${c.name}`, () => {
      const got = convert([fixture(c.file)]);
      assert.deepEqual(got.events, c.events);
    });

    it(`reports complete=${c.complete} for ${c.name}`, () => {
      assert.equal(convert([fixture(c.file)]).complete, c.complete);
    });

    it(`gives the same events for ${c.name} split at every byte size from 1 to 64`, () => {
      const text = fixture(c.file);
      for (let size = 1; size <= 64; size++) assert.deepEqual(convert(splitBytes(text, size)).events, c.events, `split every ${size} bytes`);
    });
  }

  it("emits nothing more after [DONE], even from end()", () => {
    const conv = createOpenAiAdapter().createStreamConverter(req);
    const events = new SseParser().push(fixture("text-with-usage.sse"));
    for (const e of events) conv.push(e);
    assert.deepEqual(conv.end(), []);
  });

  it("closes a text block when a tool call begins, and keeps the calls open while text follows them", () => {
    const conv = createOpenAiAdapter().createStreamConverter(req);
    const chunk = (delta: object, finish: string | null = null) => ({ event: undefined, data: JSON.stringify({ id: "chatcmpl-t", created: 1, choices: [{ index: 0, delta, finish_reason: finish }] }) });
    const out = [
      chunk({ content: "Let me" }),
      chunk({ tool_calls: [{ index: 0, id: "call_1", function: { name: "f", arguments: '{"a":' } }] }),
      chunk({ content: "Also" }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: "1}" } }] }),
      chunk({ content: " this" }),
      chunk({}, "tool_calls"),
      { event: undefined, data: "[DONE]" },
    ].flatMap((e) => conv.push(e).map(brief));
    assert.deepEqual(out.slice(1), [
      ["blockStart", 0, "TEXT", "", ""],
      ["delta", 0, "Let me"],
      ["blockStop", 0],
      ["blockStart", 1, "TOOL_USE", "call_1", "f"],
      ["delta", 1, '{"a":'],
      ["blockStart", 2, "TEXT", "", ""],
      ["delta", 2, "Also"],
      ["delta", 1, "1}"],
      ["delta", 2, " this"],
      ["blockStop", 1],
      ["blockStop", 2],
      ["end", "TOOL_USE", null],
    ]);
  });

  it("throws a 502 upstream_invalid_response on a chunk that is not JSON", () => {
    const conv = createOpenAiAdapter().createStreamConverter(req);
    assert.throws(() => conv.push({ event: undefined, data: '{"id":"chatcmpl-1","choices":[' }), (err) => {
      const info = toErrorInfo(err);
      return info.status === 502 && info.type === "api_error" && info.code === "upstream_invalid_response";
    });
  });

  it("throws a 502 upstream_error carrying the message of an error object sent mid-stream", () => {
    const conv = createOpenAiAdapter().createStreamConverter(req);
    const [first, second] = new SseParser().push(fixture("midstream-error.sse"));
    assert.equal(conv.push(first!).length, 1);
    assert.throws(() => conv.push(second!), (err) => {
      const info = toErrorInfo(err);
      return info.status === 502 && info.code === "upstream_error" && info.message.includes("The server had an error");
    });
  });

  it("answers a rate limit, an account out of quota or refused credentials sent as a stream's error object as the same refusal made with a 429, 401 or 403", () => {
    const refused = (error: object) => {
      const conv = createOpenAiAdapter().createStreamConverter(req);
      try {
        conv.push({ event: undefined, data: JSON.stringify({ error }) });
      } catch (e) {
        const info = toErrorInfo(e);
        return [info.status, info.code];
      }
      return assert.fail("not refused");
    };
    assert.deepEqual(refused({ message: "Rate limit reached", type: "rate_limit_error", code: 429 }), [429, "upstream_rate_limited"]);
    assert.deepEqual(refused({ message: "Slow down", type: "requests", code: "rate_limit_exceeded" }), [429, "upstream_rate_limited"]);
    assert.deepEqual(refused({ message: "No quota", type: "insufficient_quota", code: "insufficient_quota" }), [502, "upstream_quota_exhausted"]);
    assert.deepEqual(refused({ message: "boom", type: "server_error", code: null }), [502, "upstream_error"]);
    // A refusal of the gateway's own credentials: the operator's, a 502 as for an HTTP 401 or 403.
    assert.deepEqual(refused({ message: "Incorrect API key provided", type: "invalid_request_error", code: "invalid_api_key" }), [502, "upstream_authentication_failed"]);
    assert.deepEqual(refused({ message: "Forbidden", type: "permission_error", code: 403 }), [502, "upstream_authentication_failed"]);
  });

  it("keeps calls streamed without an index apart by their ids (Gemini's OpenAI-compatible endpoint), a fragment without an id continuing the last", () => {
    const conv = createOpenAiAdapter().createStreamConverter(req);
    const call = (c: object) => ({ id: "chatcmpl-g", created: 1, choices: [{ index: 0, delta: { role: "assistant", tool_calls: [c] } }] });
    const out = [
      call({ id: "function-call-1", type: "function", function: { name: "get_weather", arguments: '{"location":' } }),
      call({ function: { arguments: '"Sydney"}' } }),
      call({ id: "function-call-2", type: "function", function: { name: "get_time", arguments: '{"tz":"UTC"}' } }),
      { id: "chatcmpl-g", created: 1, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
    ].flatMap((c) => conv.push({ event: undefined, data: JSON.stringify(c) }).map(brief));
    assert.deepEqual(out.slice(1), [
      ["blockStart", 0, "TOOL_USE", "function-call-1", "get_weather"],
      ["delta", 0, '{"location":'],
      ["delta", 0, '"Sydney"}'],
      ["blockStart", 1, "TOOL_USE", "function-call-2", "get_time"],
      ["delta", 1, '{"tz":"UTC"}'],
    ]);
  });

  it("ignores choices other than index 0", () => {
    const conv = createOpenAiAdapter().createStreamConverter(req);
    const chunk = { id: "chatcmpl-n", created: 1, choices: [{ index: 1, delta: { content: "other" } }, { index: 0, delta: { content: "mine" } }] };
    const out = conv.push({ event: undefined, data: JSON.stringify(chunk) }).map(brief);
    assert.deepEqual(out.slice(1), [["blockStart", 0, "TEXT", "", ""], ["delta", 0, "mine"]]);
  });

  it("carries each chunk's unnamed choice and delta fields on the event that renders as that chunk", () => {
    /** Each event's case, index and the fields it carries. */
    const fields = (events: StreamChatResponse[]) =>
      events.flatMap((e) => {
        const v = e.event.value as { index?: number; choiceExtraJson?: string; deltaExtraJson?: string };
        return v.choiceExtraJson || v.deltaExtraJson ? [[e.event.case, v.index, v.choiceExtraJson || null, v.deltaExtraJson || null]] : [];
      });
    const azure = (parts: string[]) => {
      const conv = createOpenAiAdapter().createStreamConverter(req);
      const events: StreamChatResponse[] = [];
      for (const e of new SseParser().push(parts.join(""))) events.push(...conv.push(e));
      return [...events, ...conv.end()];
    };
    const safe = '{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}}';
    // Azure: the role chunk's (empty) results with message_start, each text chunk's with its text,
    // the finish chunk's with message_end.
    assert.deepEqual(fields(azure([fixture("content-filter.sse")])), [
      ["messageStart", undefined, '{"content_filter_results":{}}', null],
      ["blockDelta", 0, safe, null],
      ["blockDelta", 0, safe, null],
      ["messageEnd", undefined, '{"content_filter_results":{"violence":{"filtered":true,"severity":"medium"}}}', null],
    ]);
    // Reasoning before any text (DeepSeek's reasoning_content): deltas of their own, on no block (-1).
    const c = (delta: object, more: object = {}) => `data: ${JSON.stringify({ id: "c", created: 1, choices: [{ index: 0, delta, logprobs: null, finish_reason: null, ...more }] })}\n\n`;
    const events = azure([c({ role: "assistant", content: null, reasoning_content: null }), c({ content: null, reasoning_content: "Hm" }), c({ content: "Hi", reasoning_content: null }), c({}, { x_tag: 1 }), "data: [DONE]\n\n"]);
    assert.deepEqual(fields(events), [
      ["messageStart", undefined, null, '{"reasoning_content":null}'],
      ["blockDelta", -1, null, '{"reasoning_content":"Hm"}'],
      ["blockDelta", 0, null, '{"reasoning_content":null}'],
      ["blockDelta", 0, '{"x_tag":1}', null],
    ]);
    assert.deepEqual(events.map(brief).filter((b) => b[0] !== "delta"), [["start", "c", "chat-4o", 1, "CHAT_COMPLETIONS", {}], ["blockStart", 0, "TEXT", "", ""], ["blockStop", 0], ["end", "UNSPECIFIED", null]]);
  });

  it("closes an empty body with message_start and message_end so the answer is well-formed", () => {
    const conv = createOpenAiAdapter().createStreamConverter(req);
    assert.deepEqual(conv.end().map(brief), [["start", "", "chat-4o", 0, "CHAT_COMPLETIONS", {}], ["end", "UNSPECIFIED", null]]);
  });
});

describe("openai stream converter: text chunk templates", () => {
  /** Whole-chunk JSON.parse calls made while `fn` runs (strings that look like a chunk object). */
  function chunkParses(fn: () => void): number {
    const parse = JSON.parse;
    let n = 0;
    JSON.parse = ((text: string, reviver?: Parameters<typeof parse>[1]) => {
      if (typeof text === "string" && text.startsWith("{") && text.includes('"choices"')) n++;
      return parse(text, reviver);
    }) as typeof JSON.parse;
    try {
      fn();
    } finally {
      JSON.parse = parse;
    }
    return n;
  }

  const run = (templates: boolean, data: string[]) => {
    const conv = createOpenAiStreamConverter(req, { templates });
    const events: StreamChatResponse[] = [];
    let error: unknown;
    try {
      for (const d of data) events.push(...conv.push({ event: undefined, data: d }));
      events.push(...conv.end());
    } catch (e) {
      error = toErrorInfo(e);
    }
    return { events, error, complete: conv.complete };
  };

  it("reads the text chunks after the first without parsing them whole", () => {
    const data = new SseParser().push(fixture("text-with-usage.sse")).map((e) => e.data);
    const full = chunkParses(() => run(false, data));
    const fast = chunkParses(() => run(true, data));
    // 9 text chunks: the first is parsed and teaches the frame (one more parse, of the probe), the
    // other 8 are read from it.
    assert.equal(full - fast, 7, `full ${full}, templated ${fast}`);
    assert.deepEqual(run(true, data), run(false, data));
  });

  it("lets OpenAI's per-chunk obfuscation value differ", () => {
    const head = '{"id":"chatcmpl-o","object":"chat.completion.chunk","created":5,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":';
    const data = ["Hi", " there", " you", "\"q\\"].map((t, i) => `${head}${JSON.stringify(t)}},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"${"abcXYZ0123".slice(0, i + 2)}"}`);
    data.push("[DONE]");
    assert.equal(chunkParses(() => run(true, data)), 2); // the first chunk and the probe
    assert.deepEqual(run(true, data), run(false, data));
    // An obfuscation value that is not a plain string makes the chunk something else: the full parse answers.
    for (const bad of ['"a""', '"a"]', '"ab\\}', '"a\u0001"}', '"a"x}', '"a" }', '1}', '"a"', '"a"}}']) {
      const broken = [data[0]!, `${head}"B"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":${bad}`, "[DONE]"];
      assert.deepEqual(run(true, broken), run(false, broken), bad);
    }
  });

  it("learns no frame from a chunk whose text also appears after its content", () => {
    // The later `"content":"A"` is not the answer's text: a frame cut there would read "B" below.
    const c = (text: string, meta: string) => JSON.stringify({ id: "c", choices: [{ index: 0, delta: { content: text } }], x_meta: { content: meta } });
    const data = [c("A", "A"), c("A", "B"), c("A", "C"), "[DONE]"];
    assert.deepEqual(run(true, data), run(false, data));
    assert.deepEqual(run(true, data).events.filter((e) => e.event.case === "blockDelta").map((e) => (e.event.value as { text: string }).text), ["A", "A", "A"]);
  });

  it("takes the full parse for a chunk that differs from the frame only after its text", () => {
    const head = '{"id":"c","choices":[{"index":0,"delta":{"content":';
    const learn = `${head}"A"},"logprobs":null,"finish_reason":null}]}`;
    // Each variant keeps the frame's length, so only a check of the suffix tells them apart.
    for (const tail of ['},"logprobs":[],"finish_reason":"stop"}]}', '}}],"usage":{"prompt_tokens":1234567890}}', `,"refusal":"${"n".repeat(24)}"}}]}`]) {
      assert.equal(tail.length, learn.length - head.length - 3);
      const data = [learn, `${head}"B"${tail}`, "[DONE]"];
      assert.deepEqual(run(true, data), run(false, data), tail);
    }
  });

  it("answers exactly as the full parse does, for random streams with chunks that fit the frame and chunks that do not", () => {
    const rand = prng(20261123);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const texts = ["a", "Hello", " wörld", "\"quoted\"", "back\\slash", "tab\tnew\nline", "\u0000\u001f", "\ud83d\ude00", "\ud800", '"content":"x"', '},"finish_reason":"stop"}]}', "</script>", "é"];
    const escapeAll = (t: string) => `"${[...t].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("")}"`;
    let saved = 0;
    for (let round = 0; round < 400; round++) {
      const id = `chatcmpl-${round}`;
      const head = { id, object: "chat.completion.chunk", created: 1750000000 + round, model: "gpt-4o", ...(rand() < 0.5 ? { system_fingerprint: "fp_1" } : {}) };
      const tail = rand() < 0.5 ? { usage: null } : {};
      const obf = rand() < 0.3;
      // Fields of the choice on every chunk: Azure's content_filter_results (carried, so no frame may
      // be learnt from such a chunk) or a null one (left out, so the frame still serves).
      const choiceFields = rand() < 0.8 ? {} : pick([{ content_filter_results: {} }, { content_filter_results: { hate: { filtered: false } } }, { x_null: null }]);
      const chunk = (delta: object, finish: string | null = null, extra: object = {}) =>
        JSON.stringify({ ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish, ...choiceFields }], ...tail, ...extra, ...(obf ? { obfuscation: pick(["a", "b1", "XyZ9"]) } : {}) });
      const text = (t: string) => chunk({ content: t });
      const frame = text("\u0001").split('"\\u0001"');
      const data: string[] = [chunk({ role: "assistant", content: "", refusal: null })];
      const n = 2 + Math.floor(rand() * 12);
      for (let i = 0; i < n; i++) {
        const t = pick(texts);
        const r = rand();
        if (r < 0.45) data.push(text(t));
        else if (r < 0.5) data.push(`${frame[0]}${escapeAll(t)}${frame[1]}`); // other escapes: the literal is still one string
        else if (r < 0.53) data.push(JSON.stringify(JSON.parse(text(t)), null, 1)); // other spacing
        else if (r < 0.56) data.push(`${frame[0]}${JSON.stringify(t)},"content":"dup"${frame[1]}`); // a later duplicate key wins
        else if (r < 0.59) data.push(`${frame[0]}${pick(["1", "null", 'x"', '1"', '"', "", '"a\\x"', '"a" "b"', '"unterminated', "\"raw\u0001ctl\""])}${frame[1]}`);
        else if (r < 0.62) data.push(chunk({ content: t }, null, { id: `${id}-other` }));
        else if (r < 0.65) data.push(chunk({ refusal: t }));
        else if (r < 0.68) data.push(chunk({ tool_calls: [{ index: 0, id: "call_1", function: { name: "f", arguments: t } }] }));
        else if (r < 0.7) data.push(chunk({ content: t }, "length"));
        else if (r < 0.72) data.push(chunk({ content: t }, null, { usage: { prompt_tokens: 3, completion_tokens: 4 } }));
        else if (r < 0.73) data.push(chunk({ content: t }, null, { error: { message: "boom", type: "server_error" } }));
        else if (r < 0.75) data.push(`${text(t)} `);
        else if (r < 0.79) data.push(chunk({ content: t, ...pick([{ reasoning_content: t }, { annotations: [] }, { reasoning_content: null }]) }));
        else if (r < 0.81) data.push(chunk({ reasoning_content: t }));
        else data.push(text(t));
      }
      data.push(chunk({}, "stop"));
      if (rand() < 0.8) data.push("[DONE]");
      assert.deepEqual(run(true, data), run(false, data), `round ${round}: ${JSON.stringify(data)}`);
      saved += chunkParses(() => run(false, data)) - chunkParses(() => run(true, data));
    }
    // The frame was learnt and used, not skipped every time (the rounds above would then pass trivially).
    assert.ok(saved > 800, `whole-chunk parses saved: ${saved}`);
  });
});
