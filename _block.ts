/**
 * The plugin's block inside a checkpoint file, as bytes: its marker lines,
 * where it lies, and how a new block replaces it. Pure: no I/O.
 *
 * A marker counts only alone on its line (from the line's first byte, with
 * trailing spaces, tabs or a `\r` allowed), so agent text that quotes a
 * marker inline is never mistaken for the block, and a block counts only
 * with the library's data line as its last line, so markers the agent copied
 * without one are its own text. When the file holds more than one such block
 * (the agent copied an old one into its notes), the plugin's own is the one
 * whose data line is valid and newest; on a tie, or when no data line is
 * valid, the first.
 *
 * @module
 */
import { Buffer } from "node:buffer";

/**
 * The line that opens the plugin's block.
 *
 * @example
 * ```ts
 * import { BLOCK_BEGIN } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(BLOCK_BEGIN, "<!-- agent-checkpoint:begin -->");
 * ```
 */
export const BLOCK_BEGIN = "<!-- agent-checkpoint:begin -->";

/**
 * The line that closes the plugin's block.
 *
 * @example
 * ```ts
 * import { BLOCK_END } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(BLOCK_END, "<!-- agent-checkpoint:end -->");
 * ```
 */
export const BLOCK_END = "<!-- agent-checkpoint:end -->";

/**
 * The start of the machine-readable line, the last line before the end marker.
 *
 * @example
 * ```ts
 * import { DATA_PREFIX } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(DATA_PREFIX.startsWith("<!--"));
 * ```
 */
export const DATA_PREFIX = "<!-- agent-checkpoint:data ";

const BEGIN = Buffer.from(BLOCK_BEGIN);
const END = Buffer.from(BLOCK_END);
const DATA = Buffer.from(DATA_PREFIX);
const NL = 0x0a;

/** Where a block lies: `start` at its begin marker, `end` just after its end marker. */
export interface BlockSpan {
  /** Offset of the begin marker's first byte. */
  start: number;
  /** Offset just past the end marker's last byte (its line's newline is not part of it). */
  end: number;
}

const asBuffer = (bytes: Uint8Array) =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

/** Whether `marker` at `at` stands alone on its line; returns the offset past it, else -1. */
function markerLine(buf: Buffer, at: number, marker: Buffer): number {
  if (at > 0 && buf[at - 1] !== NL) return -1;
  let i = at + marker.length;
  while (i < buf.length && (buf[i] === 0x20 || buf[i] === 0x09 || buf[i] === 0x0d)) i++;
  return i === buf.length || buf[i] === NL ? at + marker.length : -1;
}

/** Offsets of every line that is `marker` alone, in order. */
function markerLines(buf: Buffer, marker: Buffer): number[] {
  const found: number[] = [];
  for (let at = buf.indexOf(marker); at !== -1; at = buf.indexOf(marker, at + 1)) {
    if (markerLine(buf, at, marker) !== -1) found.push(at);
  }
  return found;
}

/**
 * Every well-formed block in the bytes: a begin line, then an end line, with
 * no other begin line between them. In file order.
 *
 * @param bytes A checkpoint file's content.
 * @returns The spans, first to last; empty when there is none.
 *
 * @example
 * ```ts
 * import { BLOCK_BEGIN, BLOCK_END, findBlocks } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * const text = `quoted inline: ${BLOCK_BEGIN}\n${BLOCK_BEGIN}\nx\n${BLOCK_END}\n`;
 * const [span] = findBlocks(new TextEncoder().encode(text));
 * assert.equal(span?.start, text.indexOf(`\n${BLOCK_BEGIN}`) + 1);
 * ```
 */
export function findBlocks(bytes: Uint8Array): BlockSpan[] {
  const buf = asBuffer(bytes);
  const begins = markerLines(buf, BEGIN);
  if (begins.length === 0) return [];
  const ends = markerLines(buf, END);
  const spans: BlockSpan[] = [];
  let e = 0;
  for (let b = 0; b < begins.length; b++) {
    const start = begins[b]!;
    while (e < ends.length && ends[e]! < start) e++;
    if (e === ends.length) break;
    const end = ends[e]!;
    const next = begins[b + 1];
    if (next !== undefined && next < end) continue;
    spans.push({ start, end: end + END.length });
    e++;
  }
  return spans;
}

/**
 * The data line's JSON text inside a block (the last line before the end
 * marker), or undefined when that line is not a data line.
 *
 * @param bytes A checkpoint file's content.
 * @param span A block in it, from {@linkcode findBlocks}.
 * @returns The JSON text, unparsed.
 *
 * @example
 * ```ts
 * import { dataText, findBlock } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * const bytes = new TextEncoder().encode(
 *   "<!-- agent-checkpoint:begin -->\n<!-- agent-checkpoint:data {\"v\":1} -->\n" +
 *     "<!-- agent-checkpoint:end -->",
 * );
 * assert.equal(dataText(bytes, findBlock(bytes)!), '{"v":1}');
 * ```
 */
export function dataText(bytes: Uint8Array, span: BlockSpan): string | undefined {
  const buf = asBuffer(bytes);
  const endLine = span.end - END.length;
  let lineEnd = endLine - 1; // the newline before the end marker
  if (lineEnd <= span.start || buf[lineEnd] !== NL) return undefined;
  if (buf[lineEnd - 1] === 0x0d) lineEnd--;
  const lineStart = buf.lastIndexOf(NL, lineEnd - 1) + 1;
  if (lineStart <= span.start) return undefined;
  const line = buf.subarray(lineStart, lineEnd);
  if (!line.subarray(0, DATA.length).equals(DATA)) return undefined;
  const text = line.toString("utf8");
  return text.endsWith(" -->") ? text.slice(DATA_PREFIX.length, -4) : undefined;
}

/**
 * The parsed data line of a block when it is a version-1 object, else undefined.
 *
 * @param bytes A checkpoint file's content.
 * @param span A block in it.
 * @returns The data, `v` included, unchecked beyond its version.
 *
 * @example
 * ```ts
 * import { blockData, findBlock } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * const block = (data: string) =>
 *   new TextEncoder().encode(
 *     `<!-- agent-checkpoint:begin -->\n<!-- agent-checkpoint:data ${data} -->\n` +
 *       "<!-- agent-checkpoint:end -->",
 *   );
 * const ok = block('{"v":1,"kind":"stall"}');
 * assert.deepEqual(blockData(ok, findBlock(ok)!), { v: 1, kind: "stall" });
 * const future = block('{"v":2}');
 * assert.equal(blockData(future, findBlock(future)!), undefined);
 * ```
 */
export function blockData(bytes: Uint8Array, span: BlockSpan): Record<string, unknown> | undefined {
  const text = dataText(bytes, span);
  if (text === undefined) return undefined;
  try {
    const data = JSON.parse(text);
    return data !== null && typeof data === "object" && !Array.isArray(data) && data.v === 1
      ? data
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Where the plugin's own block lies in a file. Only a well-formed block whose
 * last line is the library's data line counts: markers the agent copied
 * without one are the agent's text. Among those, the one with a valid data
 * line and the latest `persistedAt`; on a tie, or when no data line is
 * valid, the first of them.
 *
 * @param bytes A checkpoint file's content, in any encoding.
 * @returns The block's span, or undefined when there is none.
 *
 * @example
 * ```ts
 * import { BLOCK_BEGIN, BLOCK_END, DATA_PREFIX, findBlock } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * const ours = `${BLOCK_BEGIN}\nx\n${DATA_PREFIX}{"v":1} -->\n${BLOCK_END}`;
 * const bytes = new TextEncoder().encode(`notes\n${ours}\n`);
 * assert.deepEqual(findBlock(bytes), { start: 6, end: bytes.length - 1 });
 * // Markers the agent copied into its notes, without a data line, are not the library's.
 * assert.equal(findBlock(new TextEncoder().encode(`${BLOCK_BEGIN}\nx\n${BLOCK_END}\n`)), undefined);
 * ```
 */
export function findBlock(bytes: Uint8Array): BlockSpan | undefined {
  let first: BlockSpan | undefined;
  let best: BlockSpan | undefined;
  let bestAt = -Infinity;
  for (const span of findBlocks(bytes)) {
    if (dataText(bytes, span) === undefined) continue;
    first ??= span;
    const data = blockData(bytes, span);
    if (!data) continue;
    const at = typeof data.persistedAt === "string" ? Date.parse(data.persistedAt) : NaN;
    const score = Number.isFinite(at) ? at : -Number.MAX_VALUE;
    if (score > bestAt) {
      best = span;
      bestAt = score;
    }
  }
  return best ?? first;
}

/**
 * Put `block` into a file's bytes: over the plugin's own block when there is
 * one, else appended after a blank line. Every other byte is kept as it was,
 * whatever its encoding.
 *
 * @param existing The file's current content, or undefined for a new file.
 * @param block The new block, markers included (see `renderBlock`).
 * @returns The new content.
 *
 * @example
 * ```ts
 * import { BLOCK_BEGIN, BLOCK_END, mergeBlock } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * const data = `<!-- agent-checkpoint:data {"v":1} -->`;
 * const block = `${BLOCK_BEGIN}\nnew\n${data}\n${BLOCK_END}`;
 * const old = new TextEncoder().encode(`mine\n${BLOCK_BEGIN}\nold\n${data}\n${BLOCK_END}\nmore`);
 * assert.equal(new TextDecoder().decode(mergeBlock(old, block)), `mine\n${block}\nmore`);
 * ```
 */
export function mergeBlock(existing: Uint8Array | undefined, block: string): Buffer {
  const fresh = Buffer.from(block);
  if (!existing || existing.byteLength === 0) return Buffer.concat([fresh, Buffer.from("\n")]);
  const old = asBuffer(existing);
  const at = findBlock(old);
  if (at) return Buffer.concat([old.subarray(0, at.start), fresh, old.subarray(at.end)]);
  const gap = old[old.length - 1] === NL ? "\n" : "\n\n";
  return Buffer.concat([old, Buffer.from(gap), fresh, Buffer.from("\n")]);
}

/**
 * Text made safe to render inside the block: an HTML comment opener becomes
 * `&lt;!--`, so no note, tool name, run id or command output can forge a
 * marker or data line, and the block's comment syntax stays closed.
 *
 * @param text Any text from the host, the agent or a command.
 * @returns The text with every `<!--` escaped.
 *
 * @example
 * ```ts
 * import { BLOCK_END, escapeText } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(escapeText(BLOCK_END), "&lt;!-- agent-checkpoint:end -->");
 * ```
 */
export function escapeText(text: string): string {
  return text.includes("<!--") ? text.replaceAll("<!--", "&lt;!--") : text;
}

/**
 * A value as JSON that cannot end an HTML comment or start one: `<` and `>`
 * are written as `\u003c` and `\u003e`.
 *
 * @example
 * ```ts
 * import { embedJson } from "./_block.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(embedJson({ a: "-->" }), '{"a":"--\\u003e"}');
 * assert.deepEqual(JSON.parse(embedJson({ a: "-->" })), { a: "-->" });
 * ```
 */
export function embedJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, "\\u003c").replace(/>/g, "\\u003e")
    .replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
}
