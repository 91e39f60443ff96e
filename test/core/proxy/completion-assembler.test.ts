import assert from "node:assert/strict";
import { ApiStyle, BlockType, FinishReason, type StreamChatResponse } from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";
import { streamEvent, type StreamEventInit } from "../../../src/core/proxy/canonical.js";
import { CompletionAssembler } from "../../../src/core/proxy/completion-assembler.js";

/** A text stream of a chat-completions upstream; `fields` puts an upstream chunk's unnamed fields on one of its events. */
function textStream(fields: { on?: "start" | "delta" | "end" | "own"; choiceExtraJson?: string; deltaExtraJson?: string } = {}): StreamChatResponse[] {
  const { on, ...extra } = fields;
  const events: StreamEventInit[] = [
    { case: "messageStart", value: { id: "chatcmpl-1", model: "chat-4o", created: 1, upstreamStyle: ApiStyle.CHAT_COMPLETIONS, ...(on === "start" ? extra : {}) } },
    ...(on === "own" ? [{ case: "blockDelta" as const, value: { index: -1, ...extra } }] : []),
    { case: "blockStart", value: { index: 0, block: { type: BlockType.TEXT } } },
    { case: "blockDelta", value: { index: 0, text: "Hi", ...(on === "delta" ? extra : {}) } },
    { case: "blockStop", value: { index: 0 } },
    { case: "messageEnd", value: { finishReason: FinishReason.END_TURN, usage: { inputTokens: 3, outputTokens: 1 }, ...(on === "end" ? extra : {}) } },
  ];
  return events.map(streamEvent);
}

const assemble = (events: StreamChatResponse[]) => {
  const a = new CompletionAssembler();
  for (const e of events) a.push(e);
  return a;
};

describe("CompletionAssembler", () => {
  it("assembles a text stream into the whole answer", () => {
    const c = assemble(textStream()).result();
    assert.deepEqual([c?.blocks.map((b) => b.text), c?.finishReason], [["Hi"], FinishReason.END_TURN]);
  });

  it("does not assemble a stream whose chunks carried unnamed choice or delta fields, wherever they came, and keeps its text for partial()", () => {
    for (const on of ["start", "delta", "end", "own"] as const) {
      for (const extra of [{ choiceExtraJson: '{"content_filter_results":{}}' }, { deltaExtraJson: '{"reasoning_content":"r"}' }]) {
        const a = assemble(textStream({ on, ...extra }));
        assert.equal(a.result(), undefined, `${on} ${JSON.stringify(extra)}`);
        assert.deepEqual(a.partial()?.blocks.map((b) => b.text), ["Hi"]);
      }
    }
  });

  it("does not assemble an answer longer than its limit, keeps only the limit's worth of it for partial() (the delta crossing it cut there) and counts the rest", () => {
    const a = new CompletionAssembler(3);
    for (const e of textStream()) a.push(e); // "Hi": within
    assert.deepEqual(a.result()?.blocks.map((b) => b.text), ["Hi"]);
    assert.equal(a.droppedChars, 0);
    const over = new CompletionAssembler(3);
    const events = textStream();
    events.splice(4, 0, streamEvent({ case: "blockDelta", value: { index: 0, text: "there" } }), streamEvent({ case: "blockDelta", value: { index: 0, text: "!!" } }));
    for (const e of events) over.push(e);
    assert.equal(over.result(), undefined);
    assert.deepEqual(over.partial()?.blocks.map((b) => b.text), ["Hit"]);
    assert.equal(over.droppedChars, 4 + 2);
    // One delta larger than the limit on its own (a stream of one huge piece) keeps its start, not nothing.
    const huge = new CompletionAssembler(5);
    const one = textStream();
    one.splice(2, 1, streamEvent({ case: "blockDelta", value: { index: 0, text: "abcd😀xyz" } }));
    for (const e of one) huge.push(e);
    // Never half an emoji: "abcd" and the emoji's first half would be 5 code units.
    assert.deepEqual(huge.partial()?.blocks.map((b) => b.text), ["abcd"]);
    assert.equal(huge.droppedChars, 5);
    // A tool call's input is cut the same way, after the text that fits.
    const tool = new CompletionAssembler(4);
    tool.push(streamEvent({ case: "messageStart", value: { id: "m", model: "chat-4o", upstreamStyle: ApiStyle.CHAT_COMPLETIONS } }));
    tool.push(streamEvent({ case: "blockStart", value: { index: 0, block: { type: BlockType.TOOL_USE, toolCallId: "c", toolName: "f" } } }));
    tool.push(streamEvent({ case: "blockDelta", value: { index: 0, partialJson: '{"a":1}' } }));
    assert.deepEqual(tool.partial()?.blocks.map((b) => b.toolInputJson), ['{"a"']);
    assert.equal(tool.droppedChars, 3);
  });

  it("assembles a stream whose end carried only the upstream's own finish word, kept where a whole answer keeps it", () => {
    const c = assemble(textStream({ on: "end", choiceExtraJson: '{"finish_reason":"some_future_reason"}' })).result();
    assert.equal(c?.choiceExtraJson, '{"finish_reason":"some_future_reason"}');
    // With another unnamed field beside it, as before: not assembled.
    assert.equal(assemble(textStream({ on: "end", choiceExtraJson: '{"finish_reason":"x","content_filter_results":{}}' })).result(), undefined);
    assert.equal(assemble(textStream({ on: "end", choiceExtraJson: '{"finish_reason":"x"}', deltaExtraJson: '{"audio":{}}' })).result(), undefined);
    // A messages-style upstream's stop_reason rides in the end's delta; the whole answer keeps it in its own extra_json.
    const messages = textStream({ on: "end", deltaExtraJson: '{"stop_reason":"model_context_window_exceeded"}' });
    const start = messages[0]!.event;
    if (start.case === "messageStart") start.value.upstreamStyle = ApiStyle.MESSAGES;
    assert.equal(assemble(messages).result()?.extraJson, '{"stop_reason":"model_context_window_exceeded"}');
  });

  it("assembles a messages-style stream whose end carried stop_details and a null container, keeping both; not one with a container", () => {
    const ofMessages = (deltaExtraJson: string) => {
      const events = textStream({ on: "end", deltaExtraJson });
      const start = events[0]!.event;
      if (start.case === "messageStart") start.value.upstreamStyle = ApiStyle.MESSAGES;
      return assemble(events).result();
    };
    // Both kept: a hit served as a stream gives them in its message_delta, as the live stream did.
    assert.equal(ofMessages('{"stop_details":null,"container":null}')?.extraJson, '{"stop_details":null,"container":null}');
    assert.equal(ofMessages('{"stop_reason":"refusal","stop_details":{"type":"refusal"}}')?.extraJson, '{"stop_reason":"refusal","stop_details":{"type":"refusal"}}');
    assert.equal(ofMessages('{"stop_details":null,"container":{"id":"c","expires_at":"x"}}'), undefined, "a container expires: not for the cache");
    assert.equal(ofMessages('{"stop_details":null,"other":1}'), undefined);
  });

  it("keeps a tool call's own fields as its start gave them (a messages-style `caller`, a chat-style `extra_content`)", () => {
    for (const [style, extraJson] of [[ApiStyle.MESSAGES, '{"caller":{"type":"direct"}}'], [ApiStyle.CHAT_COMPLETIONS, '{"extra_content":{"google":{"thought_signature":"s"}}}']] as const) {
      const events: StreamEventInit[] = [
        { case: "messageStart", value: { id: "m", model: "x", upstreamStyle: style } },
        { case: "blockStart", value: { index: 0, block: { type: BlockType.TOOL_USE, toolCallId: "t", toolName: "f", extraJson, style } } },
        { case: "blockDelta", value: { index: 0, partialJson: '{"a":1}' } },
        { case: "blockStop", value: { index: 0 } },
        { case: "messageEnd", value: { finishReason: FinishReason.TOOL_USE } },
      ];
      const b = assemble(events.map(streamEvent)).result()?.blocks[0];
      assert.deepEqual([b?.toolInputJson, b?.extraJson, b?.style], ['{"a":1}', extraJson, style]);
    }
  });
});
