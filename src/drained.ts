import type { ServerResponse } from "node:http";

/**
 * Resolves once `res` can take more (`drain`), or its client is gone (`close`); both listeners are
 * removed either way, so a long answer written under back-pressure does not pile them up.
 */
export function drainedOrClosed(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
  });
}
