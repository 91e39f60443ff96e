import { randomBytes } from "node:crypto";

const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/**
 * `n` base62 characters from the CSPRNG. Bytes >= 248 are rejected so every character is equally
 * likely (248 = 4 x 62).
 */
export function randomBase62(n: number): string {
  let out = "";
  while (out.length < n) {
    const bytes = randomBytes(n + 8);
    for (let i = 0; i < bytes.length && out.length < n; i++) {
      const b = bytes[i]!;
      if (b < 248) out += ALPHABET[b % 62];
    }
  }
  return out;
}

/** A request id for `X-Svc-Request-Id`: `req_` and 24 base62 characters (~143 bits). */
export const newRequestId = (): string => `req_${randomBase62(24)}`;
