/**
 * Freezes a value and everything it holds, so a conversion that mutates its input throws (strict
 * mode) instead of passing: conversions must never mutate their input, since retries re-run them.
 */
export function deepFreeze<T>(v: T): T {
  if (typeof v === "object" && v !== null && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const k of Reflect.ownKeys(v)) deepFreeze((v as Record<PropertyKey, unknown>)[k]);
  }
  return v;
}
