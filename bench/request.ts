import type { LoadSpec } from "./load.js";

/**
 * The overhead benchmarks' request: `POST /v1/chat/completions` for chat-4o with a short prompt
 * holding a number new to each request (so every one is a cache miss: the pass-through path), the
 * stream variant asking the fake for 10 pieces. The same bytes go to every target; only the
 * gateway reads the key.
 */
/**
 * A load of the bench request: open loop at `rate` requests/s, or closed loop over `concurrency`
 * connections when `rate` is 0; each request new (a cache miss) unless `hits` (the same prompt
 * every time: the cache-hit path after the first).
 */
export function benchLoad(origin: string, key: string, o: { stream: boolean; rate: number; concurrency: number; seconds: number; hits: boolean }): LoadSpec {
  return {
    ...benchChatRequest(origin, key, o.stream),
    mode: o.rate > 0 ? "rate" : "closed",
    rate: o.rate || undefined,
    concurrency: o.concurrency,
    seconds: o.seconds,
    unique: !o.hits,
  };
}

export function benchChatRequest(origin: string, key: string, stream: boolean): Pick<LoadSpec, "origin" | "path" | "headers" | "body" | "stream" | "unique"> {
  const prompt = "Hello from the svc overhead benchmark, please echo this short prompt back. {{n}}";
  return {
    origin,
    path: "/v1/chat/completions",
    headers: { "content-type": "application/json", "x-svc-api-key": key },
    body: JSON.stringify({
      model: "chat-4o",
      messages: [{ role: "user", content: stream ? `${prompt} [[fake:chunks=10]]` : prompt }],
      ...(stream ? { stream: true } : {}),
    }),
    stream,
    unique: true,
  };
}
