/**
 * A timeout for any duration. `setTimeout` in Node and Deno fires at once
 * (after 1 ms) when asked to wait more than 2^31−1 ms, about 24.8 days; a
 * time cap or a grace a user gives can be longer. This waits in steps of at
 * most that long and re-arms until the real due time, measured on the
 * monotonic clock.
 *
 * @module
 */
import { clearTimeout, setTimeout } from "node:timers";

/** The longest wait one `setTimeout` honours (2^31−1 ms, about 24.8 days). */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** A timer from {@linkcode longTimeout}. */
export interface LongTimer {
  /** Cancel it; safe to call twice, or after it fired. */
  clear(): void;
}

/**
 * Call `fn` once, `ms` milliseconds from now, however long that is. A wait
 * that is not a number or below 0 counts as 0, as `setTimeout` has it;
 * `Infinity` never fires (and holds no timer).
 *
 * @param fn What to call at the due time.
 * @param ms How long to wait.
 * @param options `unref`: the timer does not keep the process alive.
 * @returns A handle whose `clear()` cancels it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { longTimeout } from "./_timer.ts";
 *
 * const thirtyDays = 30 * 24 * 3600 * 1000;
 * let fired = false;
 * const long = longTimeout(() => (fired = true), thirtyDays, { unref: true });
 * await new Promise((resolve) => longTimeout(() => resolve(undefined), 20));
 * assert.equal(fired, false); // a plain setTimeout would have fired by now
 * long.clear();
 * ```
 */
export function longTimeout(
  fn: () => void,
  ms: number,
  options: { unref?: boolean } = {},
): LongTimer {
  const wait = typeof ms === "number" && ms > 0 ? ms : 0;
  let handle: ReturnType<typeof setTimeout> | undefined;
  let cleared = false;
  if (wait === Infinity) return { clear: () => {} };
  const due = performance.now() + wait;
  const arm = () => {
    handle = undefined;
    if (cleared) return;
    const left = due - performance.now();
    if (left <= 0) {
      cleared = true;
      fn();
      return;
    }
    handle = setTimeout(arm, Math.min(Math.ceil(left), MAX_TIMEOUT_MS));
    if (options.unref) handle.unref?.();
  };
  handle = setTimeout(arm, Math.min(wait, MAX_TIMEOUT_MS));
  if (options.unref) handle.unref?.();
  return {
    clear() {
      cleared = true;
      if (handle !== undefined) clearTimeout(handle);
      handle = undefined;
    },
  };
}
