import type { Context } from "koa";
import type { StreamChatResponse } from "../../gen/svc/proxy/v1/proxy_service_pb.js";
import { toErrorInfo } from "../../core/errors.js";
import { isCanceled } from "../../core/proxy/proxy-service.js";
import { log } from "../../logger.js";
import type { ClientCodec, ParsedChatRequest } from "./codec.js";

/** Writes a whole answer as JSON, with its cost in `X-Svc-Cost`. */
export function writeCompletion(ctx: Context, codec: ClientCodec, ev: StreamChatResponse): void {
  if (ev.event.case !== "completion") throw new Error(`expected a completion, got ${ev.event.case}`);
  ctx.set("X-Svc-Cost", ev.event.value.costUsd || "0");
  ctx.type = "application/json";
  ctx.body = JSON.stringify(codec.renderCompletion(ev.event.value));
}

/**
 * Writes a streamed answer as SSE. The cost is only known at the end, so it is sent as the HTTP
 * trailer `X-Svc-Cost`, declared up front in `Trailer:` (DESIGN.md). An error after the stream has
 * begun is written as the style's SSE error event.
 */
export async function writeStream(
  ctx: Context,
  codec: ClientCodec,
  req: ParsedChatRequest,
  first: StreamChatResponse,
  rest: AsyncIterator<StreamChatResponse>,
): Promise<void> {
  const res = ctx.res;
  ctx.respond = false;
  res.statusCode = 200;
  res.setHeader("Content-Type", "text/event-stream; charset=utf-8");
  res.setHeader("Cache-Control", "no-cache");
  res.setHeader("X-Accel-Buffering", "no");
  res.setHeader("Trailer", "X-Svc-Cost");
  for (const [k, v] of Object.entries(ctx.response.headers)) {
    if (k.startsWith("x-svc-") && typeof v === "string") res.setHeader(k, v);
  }
  const renderer = codec.createStreamRenderer(req);
  let cost = "0";
  // Events that arrive together (one upstream chunk) leave in one write: corked until the
  // current tick's promise jobs have run, instead of a syscall per event.
  let corked = false;
  const uncork = () => {
    corked = false;
    res.uncork();
  };
  const emit = (ev: StreamChatResponse) => {
    if (ev.event.case === "messageEnd") cost = ev.event.value.costUsd || "0";
    else if (ev.event.case === "completion") cost = ev.event.value.costUsd || "0";
    const text = renderer.render(ev);
    if (!text) return;
    if (!corked) {
      corked = true;
      res.cork();
      process.nextTick(uncork);
    }
    res.write(text);
  };
  try {
    emit(first);
    for (let r = await rest.next(); !r.done; r = await rest.next()) {
      if (res.destroyed) break;
      emit(r.value);
    }
  } catch (err) {
    if (res.destroyed || isCanceled(err)) return;
    const info = toErrorInfo(err);
    if (info.code === "internal_error") log.error("stream failed", { requestId: ctx.state.requestId, err: String((err as Error)?.stack ?? err) });
    res.write(renderer.error(info));
  } finally {
    // Ends the core's stream early when the client left, so it releases the upstream connection.
    await rest.return?.();
  }
  if (!res.destroyed) {
    res.addTrailers({ "X-Svc-Cost": cost });
    res.end();
  }
}
