import { randomBytes } from "node:crypto";

export const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/**
 * CSPRNG bytes are drawn 4 KiB at a time: one `randomBytes` call per request id costs more than
 * the rest of id making, and request ids are made on every request.
 */
const POOL_SIZE = 4096;
let pool = randomBytes(POOL_SIZE);
let offset = 0;

function nextByte(): number {
  if (offset === POOL_SIZE) {
    pool = randomBytes(POOL_SIZE);
    offset = 0;
  }
  return pool[offset++]!;
}

/**
 * `n` base62 characters from the CSPRNG. Bytes >= 248 are rejected so every character is equally
 * likely (248 = 4 x 62).
 */
export function randomBase62(n: number): string {
  let out = "";
  while (out.length < n) {
    const b = nextByte();
    if (b < 248) out += ALPHABET[b % 62];
  }
  return out;
}

/** A request id for `X-Svc-Request-Id`: `req_` and 24 base62 characters (~143 bits). */
export const newRequestId = (): string => `req_${randomBase62(24)}`;

/** What `newRequestId` makes: what a request id given over the network must look like. */
export const REQUEST_ID = /^req_[0-9A-Za-z]{24}$/;
