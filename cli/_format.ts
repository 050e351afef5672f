/**
 * What the command line prints: ages and sizes for people, text made safe
 * for a terminal, padded tables and colour.
 *
 * @module
 */
import type { CliIo } from "./_io.ts";

/**
 * "just now", "45s ago", "3m ago", "2h ago", "5d ago".
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ago } from "./_format.ts";
 *
 * assert.equal(ago(3 * 60_000), "3m ago");
 * ```
 */
export function ago(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/**
 * A byte count for people: `512 B`, `1.5 KiB`, `2.0 MiB`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { size } from "./_format.ts";
 *
 * assert.equal(size(1536), "1.5 KiB");
 * ```
 */
export function size(bytes: number): string {
  return bytes < 1024
    ? `${bytes} B`
    : bytes < 1048576
    ? `${(bytes / 1024).toFixed(1)} KiB`
    : bytes < 1073741824
    ? `${(bytes / 1048576).toFixed(1)} MiB`
    : `${(bytes / 1073741824).toFixed(1)} GiB`;
}

// C0 controls, DEL, C1 controls, and the Unicode line, paragraph and
// bidirectional-override characters that can make a line read other than it is.
// deno-lint-ignore no-control-regex
const UNSAFE = /[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
// deno-lint-ignore no-control-regex
const UNSAFE_BUT_LINES = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const NAMED: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };
const escaped = (c: string) =>
  NAMED[c] ??
    `\\${c.charCodeAt(0) < 0x100 ? "x" : "u"}${
      c.charCodeAt(0).toString(16).padStart(c.charCodeAt(0) < 0x100 ? 2 : 4, "0")
    }`;

/**
 * Text the command line did not write itself (a run id, a file name, a
 * summary, the agent's notes, an error) made safe to print on a terminal:
 * every control character is shown escaped (`ESC` as `\x1b`, `\n`, `\t`,
 * `\r`, others as `\xHH` or `\uHHHH`), so that no escape sequence in the data can clear the screen,
 * retitle the window or write the clipboard. One line by default (a newline
 * shows as `\n`); with `lines`, newlines and tabs stay and a `\r` before a
 * newline is dropped. Every command prints data through it; `--json` output
 * needs none, JSON escapes control characters itself.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { terminalSafe } from "./_format.ts";
 *
 * assert.equal(terminalSafe("run\x1b[2J-1"), "run\\x1b[2J-1");
 * assert.equal(terminalSafe("a\nb\x07"), "a\\nb\\x07");
 * assert.equal(terminalSafe("notes\r\n\tdone\n", { lines: true }), "notes\n\tdone\n");
 * assert.equal(terminalSafe("café ✓"), "café ✓");
 * ```
 */
export function terminalSafe(text: string, options: { lines?: boolean } = {}): string {
  const s = String(text);
  return options.lines
    ? s.replace(/\r\n/g, "\n").replace(UNSAFE_BUT_LINES, escaped)
    : s.replace(UNSAFE, escaped);
}

/**
 * Columns padded to their widest cell; `paint` styles the first row. Every
 * cell is printed through {@link terminalSafe}.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { table } from "./_format.ts";
 *
 * assert.equal(table([["a", "b"], ["long", "c"]]), "a     b\nlong  c");
 * ```
 */
export function table(rows: string[][], paint: (s: string) => string = (s) => s): string {
  if (rows.length === 0) return "";
  rows = rows.map((r) => r.map((cell) => terminalSafe(cell)));
  const columns = Math.max(...rows.map((r) => r.length));
  const widths = Array.from(
    { length: columns },
    (_, c) => Math.max(...rows.map((r) => (r[c] ?? "").length)),
  );
  return rows.map((r, i) => {
    const line = r.map((cell, c) => c === r.length - 1 ? cell : cell.padEnd(widths[c]!)).join(
      "  ",
    );
    return i === 0 ? paint(line) : line;
  }).join("\n");
}

/** Styles for terminal output; each is the identity when colour is off. */
export interface Paint {
  /** Bold. */
  bold: (s: string) => string;
  /** Red. */
  red: (s: string) => string;
  /** Green. */
  green: (s: string) => string;
  /** Yellow. */
  yellow: (s: string) => string;
  /** Dim. */
  dim: (s: string) => string;
}

/**
 * The styles for `io`: colour only on a terminal and never with `NO_COLOR` set
 * to a non-empty value (no-color.org).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { paint } from "./_format.ts";
 *
 * const p = paint({ isTTY: true, env: { NO_COLOR: "1" } });
 * assert.equal(p.red("x"), "x");
 * ```
 */
export function paint(io: Pick<CliIo, "isTTY" | "env">): Paint {
  const on = io.isTTY && !io.env.NO_COLOR;
  const wrap = (code: number, reset: number) => (s: string) =>
    on ? `\x1b[${code}m${s}\x1b[${reset}m` : s;
  return {
    bold: wrap(1, 22),
    red: wrap(31, 39),
    green: wrap(32, 39),
    yellow: wrap(33, 39),
    dim: wrap(2, 22),
  };
}
