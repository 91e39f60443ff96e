import { create, type DescMessage, type DescMethod, type DescService, type MessageShape } from "@bufbuild/protobuf";
import {
  type CallOptions,
  type Client,
  type ContextValues,
  createContextValues,
  createHandlerContext,
  type HandlerContext,
  type ServiceImpl,
} from "@connectrpc/connect";

/**
 * A typed client that calls a service implementation in this process, with no serialisation and no
 * transport: a facade makes several core calls per request, and a loopback hop costs ~0.2 ms each.
 * It has the same `Client<typeof Service>` interface as a network client, so callers cannot tell
 * the two apart (test/core/grpc.test.ts proves both paths answer alike).
 */
export function createDirectClient<S extends DescService>(service: S, impl: Partial<ServiceImpl<S>>): Client<S> {
  const client: Record<string, unknown> = {};
  for (const method of service.methods) {
    const fn = (impl as Record<string, unknown>)[method.localName] as
      | ((req: unknown, ctx: HandlerContext) => unknown)
      | undefined;
    const input = (req: object) => asMessage(method.input, req);
    if (!fn) {
      client[method.localName] = () => {
        throw new Error(`${service.typeName}.${method.name} is not implemented in this process`);
      };
    } else if (method.methodKind === "unary") {
      client[method.localName] = async (req: object, opts?: CallOptions) =>
        asMessage(method.output, (await fn.call(impl, input(req), contextFor(service, method, opts))) as object);
    } else if (method.methodKind === "server_streaming") {
      client[method.localName] = (req: object, opts?: CallOptions) =>
        mapStream(method.output, fn.call(impl, input(req), contextFor(service, method, opts)) as AsyncIterable<object>);
    } else {
      throw new Error(`${method.methodKind} methods are not supported in-process`);
    }
  }
  return client as Client<S>;
}

const never = new AbortController().signal;

/**
 * The handler context of an in-process call. The common case (no timeout, headers never read) is
 * kept cheap: no abort controllers, and header objects only made when something touches them;
 * a call with a timeout gets Connect's full context.
 */
function contextFor(service: DescService, method: DescMethod, opts: CallOptions | undefined): HandlerContext {
  if (opts?.timeoutMs !== undefined) {
    return createHandlerContext({
      service,
      method,
      protocolName: "in-process",
      requestMethod: "POST",
      url: `in-process:/${service.typeName}/${method.name}`,
      requestSignal: opts.signal,
      timeoutMs: opts.timeoutMs,
      requestHeader: opts.headers,
      contextValues: opts.contextValues,
    });
  }
  return new InProcessContext(service, method, opts);
}

/**
 * A class rather than an object literal with getters: a literal makes new accessor closures on
 * every call, and this is made on every in-process call.
 */
class InProcessContext implements HandlerContext {
  readonly protocolName = "in-process";
  readonly requestMethod = "POST";
  readonly signal: AbortSignal;
  #requestHeader: Headers | undefined;
  #responseHeader: Headers | undefined;
  #responseTrailer: Headers | undefined;
  #values: ContextValues | undefined;

  constructor(
    readonly service: DescService,
    readonly method: DescMethod,
    readonly opts: CallOptions | undefined,
  ) {
    this.signal = opts?.signal ?? never;
    this.#values = opts?.contextValues;
  }

  get url(): string {
    return `in-process:/${this.service.typeName}/${this.method.name}`;
  }

  timeoutMs(): number | undefined {
    return undefined;
  }

  get requestHeader(): Headers {
    return (this.#requestHeader ??= new Headers(this.opts?.headers));
  }

  get responseHeader(): Headers {
    return (this.#responseHeader ??= new Headers());
  }

  get responseTrailer(): Headers {
    return (this.#responseTrailer ??= new Headers());
  }

  get values(): ContextValues {
    return (this.#values ??= createContextValues());
  }
}

/** Passes messages through untouched; builds one from an init object otherwise. */
function asMessage<D extends DescMessage>(desc: D, v: object): MessageShape<D> {
  return ("$typeName" in v ? v : create(desc, v as never)) as MessageShape<D>;
}

/** The implementation's stream as client messages, without an extra async-generator hop per event. */
function mapStream<D extends DescMessage>(desc: D, source: AsyncIterable<object>): AsyncIterable<MessageShape<D>> {
  return {
    [Symbol.asyncIterator]() {
      const it = source[Symbol.asyncIterator]();
      return {
        next: () => it.next().then((r) => (r.done ? r : { done: false, value: asMessage(desc, r.value) })),
        return: (v?: unknown) => (it.return ? it.return(v).then((r) => (r.done ? r : { done: false, value: asMessage(desc, r.value) })) : Promise.resolve({ done: true as const, value: undefined })),
      } as AsyncIterator<MessageShape<D>>;
    },
  };
}
