/**
 * The backends a `store` setting can name beside the embedded store: the
 * store's `mod.ts` opens them, and the supervisor's end records too, from here.
 *
 * @module
 */
import type { Backend } from "./types.ts";
import { backend as postgres } from "./postgres.ts";

/**
 * The backends a `store` setting's URL can name, beside the embedded store (a
 * path): each carried to the host's thread by the store's bridge. A new
 * backend is its module, and its line here.
 */
export const BACKENDS: readonly Backend[] = [postgres];

/**
 * The backend a `store` setting names, or undefined for the embedded store.
 *
 * @example
 * ```ts
 * import { backendOf } from "./_backends.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(backendOf("postgres://db.internal/fleet")?.engine, "postgres");
 * assert.equal(backendOf(undefined), undefined);
 * ```
 */
export function backendOf(store: unknown): Backend | undefined {
  if (typeof store !== "string") return undefined;
  return BACKENDS.find((b) => b.accepts(store));
}
