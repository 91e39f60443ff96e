/**
 * Tests freeze a conversion's input so that a conversion that mutates it throws instead of passing:
 * conversions must never mutate their input, since retries re-run them.
 */
export { deepFreeze } from "../../src/core/freeze.js";
