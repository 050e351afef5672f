/**
 * A checkpoint file's content as a store keeps it: bounded, read by the
 * store's thread for any backend that keeps files.
 *
 * @module
 */
import * as fs from "node:fs";

/**
 * Cut a checkpoint file's content to at most `maxKb` KiB (UTF-8), at a line
 * end, with a last line saying so.
 *
 * @example
 * ```ts
 * import { boundContent } from "./_content.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(boundContent("short\n", 1), "short\n");
 * const cut = boundContent("line\n".repeat(1000), 1);
 * assert.ok(new TextEncoder().encode(cut).length <= 1024);
 * assert.match(cut, /cut at 1 KiB/);
 * ```
 */
export function boundContent(content: string, maxKb: number): string {
  const max = Math.max(1, Math.floor(maxKb)) * 1024;
  const bytes = new TextEncoder().encode(content);
  if (bytes.length <= max) return content;
  const tail = `\n[the rest of this file was cut at ${Math.floor(max / 1024)} KiB by the store]\n`;
  let text = new TextDecoder().decode(bytes.slice(0, Math.max(0, max - tail.length * 3)));
  text = text.replace(/\uFFFD$/, "");
  const nl = text.lastIndexOf("\n");
  if (nl > 0) text = text.slice(0, nl);
  return text + tail;
}

/**
 * Read a checkpoint file for the store: its content up to `maxKb` KiB, or
 * undefined when it cannot be read.
 *
 * @example
 * ```ts
 * import { readForStore } from "./_content.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(readForStore("/nonexistent/file.md", 256), undefined);
 * ```
 */
export function readForStore(file: string, maxKb: number): string | undefined {
  try {
    return boundContent(fs.readFileSync(file, "utf8"), maxKb);
  } catch {
    // the file is gone or unreadable: the record is written without its content
    return undefined;
  }
}
