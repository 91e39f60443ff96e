import http from "node:http";

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  trailers: NodeJS.Dict<string>;
  text: string;
  json(): any;
}

/** One HTTP request with node:http, so tests see exactly what went over the wire, trailers included. */
export function rawRequest(url: string, opts: { method?: string; headers?: Record<string, string>; body?: string | Buffer } = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? "POST", headers: opts.headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () =>
        resolve({ status: res.statusCode!, headers: res.headers, trailers: res.trailers, text, json: () => JSON.parse(text) }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(opts.body);
  });
}

/** POSTs a JSON body with a service key. */
export const postJson = (url: string, key: string, body: unknown, headers: Record<string, string> = {}) =>
  rawRequest(url, { headers: { "content-type": "application/json", "x-svc-api-key": key, ...headers }, body: JSON.stringify(body) });

/** Splits an SSE text into its events (name and data), ignoring comments. */
export function sseEvents(text: string): Array<{ event?: string; data: string }> {
  return text
    .split(/\n\n/)
    .filter((b) => b.trim())
    .map((block) => {
      const ev: { event?: string; data: string } = { data: "" };
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) ev.event = line.slice(7);
        else if (line.startsWith("data: ")) ev.data += line.slice(6);
      }
      return ev;
    });
}

/** Waits until `cond` holds (a check that may itself wait), polling, or fails after `ms`. */
export async function eventually(cond: () => boolean | Promise<boolean>, ms = 3000, what = "condition"): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** POSTs `body` as JSON with `key` and leaves after `ms`, before any answer; resolves once the connection is closed. */
export const sendAndLeave = (url: string, key: string, body: object, ms: number) =>
  new Promise<void>((resolve) => {
    const req = http.request(url, { method: "POST", headers: { "content-type": "application/json", "x-svc-api-key": key } });
    req.on("error", () => {});
    req.once("close", resolve);
    req.end(JSON.stringify(body));
    setTimeout(() => req.destroy(), ms);
  });
