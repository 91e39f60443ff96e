/**
 * Freezes a value and everything it holds, so that code which mutates it throws (strict mode)
 * instead of changing what others read. Typed arrays are left as they are (they cannot be frozen).
 */
export function deepFreeze<T>(v: T): T {
  if (typeof v !== "object" || v === null || Object.isFrozen(v) || ArrayBuffer.isView(v)) return v;
  Object.freeze(v);
  for (const k of Reflect.ownKeys(v)) deepFreeze((v as Record<PropertyKey, unknown>)[k]);
  return v;
}
