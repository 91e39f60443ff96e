import { log, atMostEvery } from "../../logger.js";

/**
 * The bytes of request bodies the gateway holds while they come in, all requests together
 * (SVC_MAX_BODY_BYTES_IN_FLIGHT). Each body is capped (SVC_MAX_REQUEST_BYTES) and each request
 * timed (300 s), but nothing else bounded their sum: a client with a good key could hold a body of
 * nearly the cap on each of its connections for the whole request timeout by withholding its last
 * bytes. When a body's next bytes would take the sum past the budget, the largest body still coming
 * in is dropped (its own, or another's), as Envoy's overload manager resets the streams holding
 * the most buffered bytes: a body that comes in at a network's pace is done long before it is the
 * largest for long, and one that is held back is the one to go. The dropped request is answered
 * 503 `gateway_overloaded` with `Retry-After: 1`, the rest of its body read and dropped. A body
 * leaves the account as soon as it is whole: what a request holds after that is bounded by the
 * requests being served, not by what clients withhold.
 */
export class BodyBudget {
  readonly limit: number;
  #used = 0;
  readonly #reads = new Set<BodyRead>();
  readonly #logged = atMostEvery(60_000);

  constructor(limit: number) {
    this.limit = limit;
  }

  /** Bytes of bodies being read now. */
  get used(): number {
    return this.#used;
  }

  /** Opens a body's account; `drop` is called (once) if the body is chosen to be dropped. */
  open(drop: () => void): BodyRead {
    const read = new BodyRead(this, drop);
    this.#reads.add(read);
    return read;
  }

  /** @internal BodyRead.take */
  took(n: number): void {
    this.#used += n;
    if (this.#used <= this.limit) return;
    if (this.#logged()) {
      log.warn("request bodies coming in passed SVC_MAX_BODY_BYTES_IN_FLIGHT: the largest dropped, answered 503 gateway_overloaded (logged at most once a minute)", { limit: this.limit, bodies: this.#reads.size });
    }
    while (this.#used > this.limit) {
      let largest: BodyRead | undefined;
      for (const r of this.#reads) if (!largest || r.size > largest.size) largest = r;
      if (!largest) return;
      largest.drop();
    }
  }

  /** @internal BodyRead.close */
  closed(read: BodyRead): void {
    if (this.#reads.delete(read)) this.#used -= read.size;
  }
}

/** One body's account in a BodyBudget. */
export class BodyRead {
  #size = 0;
  #open = true;
  #dropped = false;
  readonly #budget: BodyBudget;
  readonly #onDrop: () => void;

  constructor(budget: BodyBudget, onDrop: () => void) {
    this.#budget = budget;
    this.#onDrop = onDrop;
  }

  get size(): number {
    return this.#size;
  }

  /** Whether the budget dropped this body. */
  get dropped(): boolean {
    return this.#dropped;
  }

  /** Counts `n` more bytes of the body (nothing once it is closed). */
  take(n: number): void {
    if (!this.#open) return;
    this.#size += n;
    this.#budget.took(n);
  }

  /** Leaves the account: the body is whole, refused or gone. */
  close(): void {
    if (!this.#open) return;
    this.#budget.closed(this);
    this.#open = false;
  }

  /** @internal BodyBudget: drops the body. */
  drop(): void {
    if (!this.#open) return;
    this.close();
    this.#dropped = true;
    this.#onDrop();
  }
}
