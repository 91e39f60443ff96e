import type { IncomingMessage } from "node:http";

/**
 * Requests pipelined behind an answer not yet out wait for their turn (server.ts serves them one
 * after another): when each such request arrived, so that its log counts its latency from there,
 * as its client saw it.
 */
const arrivals = new WeakMap<IncomingMessage, number>();

export const noteWaitingForTurn = (req: IncomingMessage): void => {
  arrivals.set(req, performance.now());
};

/** How long `req` waited for its turn, in ms: 0 for one served as it came. */
export const waitedForTurnMs = (req: IncomingMessage): number => {
  const at = arrivals.get(req);
  return at === undefined ? 0 : performance.now() - at;
};
