/**
 * A short, bounded, never-throwing description of any value, for warnings and
 * log lines. Private to the library.
 *
 * @module
 */

/** How many characters a shown value takes at most, "…" included. */
export const SHOW_LIMIT = 200;

/**
 * Describe a value as JSON would, but bounded in length and work, and with
 * `NaN`, `Infinity`, `-0` and bigints printed as themselves. Never throws.
 *
 * @example
 * ```ts
 * import { show } from "./_show.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(show([NaN, -Infinity, 10n, "a"]), '[NaN,-Infinity,10n,"a"]');
 * assert.equal(show("x".repeat(1000), 10).length, 10);
 * ```
 */
export function show(value: unknown, limit = SHOW_LIMIT): string {
  const out: string[] = [];
  let length = 0;
  let steps = 0;
  const push = (text: string) => {
    out.push(text);
    length += text.length;
  };
  const full = () => length > limit || ++steps > 1000;
  const walk = (v: unknown, depth: number): void => {
    if (full()) return;
    switch (typeof v) {
      case "string":
        push(JSON.stringify(v.length > limit ? v.slice(0, limit) : v));
        return;
      case "number":
        push(Object.is(v, -0) ? "-0" : String(v));
        return;
      case "bigint":
        push(`${v}n`);
        return;
      case "boolean":
        push(String(v));
        return;
      case "undefined":
        push("undefined");
        return;
      case "symbol":
        push("a symbol");
        return;
      case "function":
        push("a function");
        return;
    }
    if (v === null) return push("null");
    if (depth > 4) return push("…");
    try {
      if (Array.isArray(v)) {
        push("[");
        for (let i = 0; i < v.length; i++) {
          if (full()) break;
          if (i > 0) push(",");
          walk(v[i], depth + 1);
        }
        push("]");
        return;
      }
      push("{");
      let first = true;
      for (const key of Object.keys(v as object)) {
        if (full()) break;
        if (!first) push(",");
        first = false;
        push(`${JSON.stringify(key.length > limit ? key.slice(0, limit) : key)}:`);
        walk((v as Record<string, unknown>)[key], depth + 1);
      }
      push("}");
    } catch {
      push("(unreadable)");
    }
  };
  walk(value, 0);
  const text = out.join("");
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

/**
 * Cut a line to at most `limit` characters, saying how much was cut.
 *
 * @example
 * ```ts
 * import { clip } from "./_show.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(clip("short", 100), "short");
 * assert.match(clip("x".repeat(500), 100), /^x{60}… \(440 more characters\)$/);
 * ```
 */
export function clip(line: string, limit: number): string {
  if (line.length <= limit) return line;
  const kept = Math.max(0, limit - 40); // room for the note, whose number has at most 16 digits
  return `${line.slice(0, kept)}… (${line.length - kept} more characters)`;
}

/**
 * A short, safe description of anything thrown, at most 1,000 characters.
 *
 * @example
 * ```ts
 * import { errorText } from "./_show.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(errorText(new Error("disk full")), "disk full");
 * assert.equal(errorText({ toString() { throw 1; } }), "an unprintable error");
 * ```
 */
export function errorText(error: unknown): string {
  let text: string;
  try {
    text = String(error instanceof Error ? error.message : error);
  } catch {
    // the error's own message throws: a fixed text stands in
    text = "an unprintable error";
  }
  return clip(text, 1000);
}

/**
 * Whether a value is a mapping: an object, not null, not an array.
 *
 * @example
 * ```ts
 * import { isMapping } from "./_show.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isMapping({ a: 1 }), true);
 * assert.equal(isMapping([1]), false);
 * assert.equal(isMapping(null), false);
 * ```
 */
export const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * A value that is a non-empty string, else undefined: how an option or an
 * environment variable counts as given.
 *
 * @example
 * ```ts
 * import { nonEmptyText } from "./_show.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(nonEmptyText("/srv"), "/srv");
 * assert.equal(nonEmptyText(""), undefined);
 * assert.equal(nonEmptyText(42), undefined);
 * ```
 */
export const nonEmptyText = (v: unknown): string | undefined =>
  typeof v === "string" && v !== "" ? v : undefined;
