import assert from "node:assert/strict";
import { create, type DescMessage } from "@bufbuild/protobuf";
import { cacheKeyOf } from "../../../src/core/cache/cache-key.js";
import { KeyMode } from "../../../src/gen/svc/common/v1/key_mode_pb.js";
import {
  ApiStyle,
  BlockType,
  ChatMessageSchema,
  ContentBlockSchema,
  type StreamChatRequest,
  StreamChatRequestSchema,
  ToolDefinitionSchema,
} from "../../../src/gen/svc/proxy/v1/proxy_service_pb.js";

/**
 * Guards the key against drift of the canonical model: every field of the request, its messages,
 * blocks and tools is listed here as part of the key or not, and a field added to the proto fails
 * this test until someone decides which it is (and cacheKeyOf follows).
 */
const base = (): StreamChatRequest =>
  create(StreamChatRequestSchema, {
    requestId: "req_1",
    projectId: "proj_1",
    keyId: "key_1",
    keyMode: KeyMode.LIVE,
    style: ApiStyle.MESSAGES,
    model: "m",
    system: "s",
    messages: [
      {
        role: "assistant",
        contentIsString: false,
        extraJson: '{"x":1}',
        blocks: [
          {
            type: BlockType.TOOL_USE,
            text: "t",
            toolCallId: "c",
            toolName: "n",
            toolInputJson: '{"a":1}',
            isError: false,
            rawJson: '{"r":1}',
            extraJson: '{"e":1}',
            style: ApiStyle.MESSAGES,
          },
        ],
      },
    ],
    temperature: 0.5,
    maxTokens: 10,
    stream: false,
    tools: [{ name: "n", description: "d", inputSchemaJson: '{"type":"object"}', extraJson: '{"k":1}' }],
    extraJson: '{"top_k":3}',
    userId: "u",
    metadata: { a: "b" },
  });

type Change = (r: StreamChatRequest) => void;
const msg = (r: StreamChatRequest) => r.messages[0]!;
const block = (r: StreamChatRequest) => r.messages[0]!.blocks[0]!;
const tool = (r: StreamChatRequest) => r.tools[0]!;

const fields: Array<{ schema: DescMessage; inKey: Record<string, Change>; notInKey: Record<string, Change> }> = [
  {
    schema: StreamChatRequestSchema,
    inKey: {
      style: (r) => (r.style = ApiStyle.CHAT_COMPLETIONS),
      model: (r) => (r.model = "m2"),
      system: (r) => (r.system = "s2"),
      messages: (r) => r.messages.push(create(ChatMessageSchema, { role: "user" })),
      temperature: (r) => (r.temperature = 0.6),
      maxTokens: (r) => (r.maxTokens = 11),
      tools: (r) => r.tools.push(create(ToolDefinitionSchema, { name: "other" })),
      extraJson: (r) => (r.extraJson = '{"top_k":4}'),
      betas: (r) => (r.betas = ["prompt-caching-2024-07-31"]),
    },
    notInKey: {
      requestId: (r) => (r.requestId = "req_2"),
      projectId: (r) => (r.projectId = "proj_2"),
      keyId: (r) => (r.keyId = "key_2"),
      keyMode: (r) => (r.keyMode = KeyMode.TEST),
      stream: (r) => (r.stream = true),
      userId: (r) => (r.userId = "u2"),
      metadata: (r) => (r.metadata = { c: "d" }),
    },
  },
  {
    schema: ChatMessageSchema,
    inKey: {
      role: (r) => (msg(r).role = "user"),
      blocks: (r) => msg(r).blocks.push(create(ContentBlockSchema, { type: BlockType.TEXT, text: "more" })),
      extraJson: (r) => (msg(r).extraJson = '{"x":2}'),
    },
    notInKey: { contentIsString: (r) => (msg(r).contentIsString = true) },
  },
  {
    schema: ContentBlockSchema,
    inKey: {
      type: (r) => (block(r).type = BlockType.TEXT),
      text: (r) => (block(r).text = "t2"),
      toolCallId: (r) => (block(r).toolCallId = "c2"),
      toolName: (r) => (block(r).toolName = "n2"),
      toolInputJson: (r) => (block(r).toolInputJson = '{"a":2}'),
      isError: (r) => (block(r).isError = true),
      rawJson: (r) => (block(r).rawJson = '{"r":2}'),
      extraJson: (r) => (block(r).extraJson = '{"e":2}'),
      style: (r) => (block(r).style = ApiStyle.CHAT_COMPLETIONS),
    },
    notInKey: {},
  },
  {
    schema: ToolDefinitionSchema,
    inKey: {
      name: (r) => (tool(r).name = "n2"),
      description: (r) => (tool(r).description = "d2"),
      inputSchemaJson: (r) => (tool(r).inputSchemaJson = '{"type":"string"}'),
      extraJson: (r) => (tool(r).extraJson = '{"k":2}'),
    },
    notInKey: {},
  },
];

describe("cacheKeyOf covers the canonical model", () => {
  const key = cacheKeyOf(base());
  for (const { schema, inKey, notInKey } of fields) {
    it(`classifies every field of ${schema.typeName}`, () => {
      const listed = [...Object.keys(inKey), ...Object.keys(notInKey)].sort();
      assert.deepEqual(listed, schema.fields.map((f) => f.localName).sort());
    });
    for (const [name, change] of Object.entries(inKey)) {
      it(`${schema.name}.${name} changes the key`, () => {
        const r = base();
        change(r);
        assert.notEqual(cacheKeyOf(r), key);
      });
    }
    for (const [name, change] of Object.entries(notInKey)) {
      it(`${schema.name}.${name} leaves the key alone`, () => {
        const r = base();
        change(r);
        assert.equal(cacheKeyOf(r), key);
      });
    }
  }
});
