import { ApiStyle, BlockType, type Usage } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { type ChatRequestBody, localInputTokens, localTokens, usage } from "./canonical.js";
import { costPico, formatUsd, type Prices } from "./cost.js";
import type { ProviderConfig } from "../../config.js";
import { isObject } from "../json.js";
import { type ModelRoute, pricesOf, unlimitedOutputTokens, unservedModel } from "./models.js";

/** Prices and providers per public model id, and the worst case a request may cost (what a spend cap reserves). */
export interface Pricing {
  /**
   * The most the request can cost, in USD: its prompt estimated high (UTF-8 bytes / 2 tokens, about
   * twice what tokenizers count for English, plus 8 a message, plus the model's `imageTokens` for
   * each image, in a message or a tool result) at the highest of the model's input
   * prices (plain input, cache reads, cache writes: so never below the cost with nothing cached, nor
   * below one whose prompt the provider writes to its cache), plus `max_tokens` (the model's output
   * ceiling when the request sets none, or sets more than the model's known ceiling, which the
   * upstream refuses; for a messages-style upstream, which requires a limit, the one the request is
   * sent: see unlimitedOutputTokens) at the output price. "0" for a model without a price (it is refused later as
   * unknown).
   */
  worstCaseUsd(req: ChatRequestBody): string;
  /** The provider a public model id is routed to ("" for an unknown id). */
  providerOf(model: string): string;
  /** Throws ProxyService's own 400 for a model id not served on the `style` endpoint. */
  checkServed(model: string, style: ApiStyle): void;
  /**
   * What a streamed answer cut short (the client left, the upstream broke off) cost so far: the
   * upstream bills the prompt and every token it generated, whether or not the stream ended. Input
   * tokens are the upstream's count when its stream gave one at the start (`started`, the usage of
   * its first event, with its prompt-cache counts), else counted locally; output tokens are counted
   * locally from the `outChars` characters streamed.
   */
  partialAnswer(req: ChatRequestBody, started: Usage | undefined, outChars: number): { usage: Usage; costUsd: string };
}

/** `providers`: the configured providers, whose styles say what a request without `max_tokens` is sent (absent: chat-completions style). */
export function createPricing(models: Map<string, ModelRoute>, providers?: Map<string, ProviderConfig>): Pricing {
  const prices = new Map<string, Prices & { maxOutputTokens: number; unlimited: number; ceilingKnown: boolean; imageTokens: number }>();
  for (const m of models.values()) {
    const unlimited = unlimitedOutputTokens(m, providers?.get(m.provider)?.style ?? ApiStyle.CHAT_COMPLETIONS);
    prices.set(m.id, { ...pricesOf(m), maxOutputTokens: m.maxOutputTokens, unlimited, ceilingKnown: m.maxOutputTokensKnown !== false, imageTokens: m.imageTokens });
  }
  return {
    providerOf: (model) => models.get(model)?.provider ?? "",
    checkServed(model, style) {
      const unserved = unservedModel(models.get(model), model, style);
      if (unserved) throw unserved;
    },
    partialAnswer(req, started, outChars) {
      const outputTokens = localTokens(outChars);
      const u = started && started.inputTokens > 0
        ? usage({ inputTokens: started.inputTokens, cacheReadTokens: started.cacheReadTokens, cacheWriteTokens: started.cacheWriteTokens, cacheWrite1hTokens: started.cacheWrite1hTokens, outputTokens })
        : usage({ inputTokens: localInputTokens(req), outputTokens });
      const p = prices.get(req.model);
      return { usage: u, costUsd: p ? formatUsd(costPico(p, u)) : "0" };
    },
    worstCaseUsd(req) {
      const p = prices.get(req.model);
      if (!p) return "0";
      let bytes = (systemInExtra(req) ? 0 : Buffer.byteLength(req.system)) + Buffer.byteLength(req.extraJson);
      let images = 0;
      for (const m of req.messages) {
        bytes += 16;
        for (const b of m.blocks) {
          // A tool result's content array is kept whole: a chat-style one as its raw_json, a
          // messages-style one in its extra_json (images among them). Its text is then a copy of
          // the array's, counted there, not twice.
          const kept = b.type === BlockType.TOOL_RESULT && (b.rawJson !== "" || (b.extraJson !== "" && hasTopLevel(b.extraJson, "content")));
          bytes += (kept ? 0 : Buffer.byteLength(b.text)) + Buffer.byteLength(b.toolInputJson) + Buffer.byteLength(b.rawJson);
          if (b.type === BlockType.IMAGE) images++;
          else if (b.type === BlockType.TOOL_RESULT && b.extraJson !== "") {
            bytes += Buffer.byteLength(b.extraJson);
            images += countOf(b.extraJson, IMAGE_BLOCK);
          }
        }
      }
      for (const t of req.tools) bytes += Buffer.byteLength(t.name) + Buffer.byteLength(t.description) + Buffer.byteLength(t.inputSchemaJson);
      const output = req.maxTokens === undefined ? p.unlimited : p.ceilingKnown ? Math.min(req.maxTokens, p.maxOutputTokens) : req.maxTokens;
      const prompt = Math.ceil(bytes / 2) + images * p.imageTokens;
      // Priced as if the whole prompt went at the dearest input rate (for Anthropic, a cache write).
      const dearest = [p.cacheRead, p.cacheWrite, p.cacheWrite1h].reduce((a, b) => (b > a ? b : a), p.input);
      return formatUsd(costPico({ ...p, input: dearest }, { inputTokens: prompt, outputTokens: output }));
    },
  };
}

/**
 * Whether the system prompt rides in extra_json too, as a messages-style client's `system` blocks
 * (cache_control...) do: counted there, not twice. JSON.stringify writes no raw quote inside a
 * string, so the key text is only ever a key; the parse tells a top-level one from a nested one.
 */
function systemInExtra(req: ChatRequestBody): boolean {
  return req.system !== "" && hasTopLevel(req.extraJson, "system", true);
}

/** Whether an extra_json object has `key` at its top level (an array there, with `array`). */
function hasTopLevel(extraJson: string, key: string, array = false): boolean {
  if (!extraJson.includes(`"${key}":${array ? "[" : ""}`)) return false;
  try {
    const extra: unknown = JSON.parse(extraJson);
    return isObject(extra) && (array ? Array.isArray(extra[key]) : extra[key] !== undefined);
  } catch {
    return false; // not JSON: refused where extra_json is read, before any upstream call
  }
}

/** An image block in JSON as the gateway writes it back out (JSON.stringify: no spaces). */
const IMAGE_BLOCK = '"type":"image"';

/** How many times `needle` occurs in `text`. */
function countOf(text: string, needle: string): number {
  let n = 0;
  for (let i = text.indexOf(needle); i >= 0; i = text.indexOf(needle, i + needle.length)) n++;
  return n;
}
