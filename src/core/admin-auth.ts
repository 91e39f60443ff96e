import { createHash, timingSafeEqual } from "node:crypto";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/**
 * The core's gRPC port serves internal services and the admin CLI; every call must carry the admin
 * credential as `authorization: Bearer <token>`. Tokens are compared through their hashes so the
 * comparison takes the same time whatever the guess.
 */
export function adminAuthInterceptor(token: string): Interceptor {
  const expected = createHash("sha256").update(token).digest();
  return (next) => async (req) => {
    const m = /^Bearer\s+(\S+)$/i.exec(req.header.get("authorization") ?? "");
    const given = createHash("sha256").update(m?.[1] ?? "").digest();
    if (!m || !timingSafeEqual(given, expected)) {
      throw new ConnectError("missing or invalid admin token", Code.Unauthenticated);
    }
    return next(req);
  };
}
