/**
 * Durations as people type them (`90s`, `30m`, `12h`, `7d`, `2w`), read by
 * the command line and the dashboard's queries. Private to the library.
 *
 * @module
 */

/**
 * Seconds in a DURATION such as `90s`, `30m`, `12h`, `7d`, `2w`; a bare
 * number is seconds only with `bareSeconds`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseDuration } from "./_duration.ts";
 *
 * assert.equal(parseDuration("30m"), 1800);
 * assert.equal(parseDuration("90"), undefined);
 * assert.equal(parseDuration("90", { bareSeconds: true }), 90);
 * ```
 */
export function parseDuration(
  text: string,
  options: { bareSeconds?: boolean } = {},
): number | undefined {
  const t = text.trim();
  if (options.bareSeconds && /^\d+(?:\.\d+)?$/.test(t)) return Number(t);
  const m = /^(\d+(?:\.\d+)?)([smhdw])$/.exec(t);
  if (!m) return undefined;
  const unit = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 }[m[2] as "s"];
  return Number(m[1]) * unit;
}
