/**
 * Fail-open as one mechanism: where the host calls in (a run's start, the
 * keeper's close), where the library calls the host's code (its listener, its
 * comment sink), and where the library runs on its own (a timer, the process's
 * exit, the watchdog's loop), an error becomes what the caller makes of it (a
 * log line, a value to go on with), never a throw into the host.
 *
 * @module
 */

/**
 * What `body` returns; if it throws, what `fallback` makes of the error.
 * @internal
 *
 * @param body The work that may throw.
 * @param fallback Called with what `body` threw; its value is returned instead.
 * @returns `body`'s value, else `fallback`'s.
 *
 * @example
 * ```ts
 * import { failOpen } from "./_fail_open.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(failOpen(() => JSON.parse("{"), () => "not JSON"), "not JSON");
 * assert.equal(failOpen(() => 1, () => 2), 1);
 * ```
 */
export function failOpen<T>(body: () => T, fallback: (error: unknown) => T): T {
  try {
    return body();
  } catch (error) {
    return fallback(error);
  }
}

/**
 * What `body`'s promise resolves to; if `body` throws or its promise rejects,
 * what `fallback` makes of the error. Never rejects unless `fallback` throws.
 * @internal
 *
 * @param body The asynchronous work that may throw or reject.
 * @param fallback Called with the error; its value is resolved instead.
 * @returns `body`'s value, else `fallback`'s.
 *
 * @example
 * ```ts
 * import { failOpenAsync } from "./_fail_open.ts";
 * import assert from "node:assert/strict";
 *
 * const value = await failOpenAsync(() => Promise.reject(new Error("x")), () => "went on");
 * assert.equal(value, "went on");
 * ```
 */
export function failOpenAsync<T>(
  body: () => Promise<T>,
  fallback: (error: unknown) => T,
): Promise<T> {
  // The executor runs `body` at once, and a throw from it rejects like its promise would.
  return new Promise<T>((resolve) => resolve(body())).catch(fallback);
}
