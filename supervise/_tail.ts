/**
 * The bounded tail of a supervised command's output: the last lines of its
 * stdout and stderr, interleaved as they arrived, kept in memory while the
 * bytes stream through. Memory stays bounded whatever the command prints: at
 * most `maxLines` lines of at most `maxLineChars` characters, plus one partial
 * line per stream.
 *
 * @module
 */

// CSI and OSC escape sequences (colours, cursor moves, titles), then any other
// control character but a tab: a record is for reading, not for a terminal.
// deno-lint-ignore no-control-regex
const ESCAPES = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]/g;
// deno-lint-ignore no-control-regex
const CONTROLS = /[\x00-\x08\x0b-\x1f\x7f]/g;

/**
 * The last lines of a command's output, bounded in memory.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { OutputTail } from "./_tail.ts";
 *
 * const tail = new OutputTail(2);
 * tail.push("out", new TextEncoder().encode("one\ntwo\nthree\n"));
 * tail.push("err", new TextEncoder().encode("\x1b[31mfailed\x1b[0m"));
 * assert.deepEqual(tail.lines(), ["three", "failed"]);
 * ```
 */
export class OutputTail {
  readonly #lines: string[] = [];
  readonly #partial = new Map<string, string>();
  readonly #decoders = new Map<string, InstanceType<typeof TextDecoder>>();

  /**
   * @param maxLines How many complete lines to keep.
   * @param maxLineChars Longer lines keep their end, after a leading `…`.
   */
  constructor(readonly maxLines = 40, readonly maxLineChars = 1000) {}

  /** Take a chunk of one stream's bytes. */
  push(stream: string, chunk: Uint8Array): void {
    // Only a chunk's last maxLines lines can be kept: decode from the start of
    // those (a byte after a newline always starts a character), so that a
    // command printing fast costs the tail little more than its last lines.
    let at = chunk.length;
    let newlines = 0;
    while (newlines <= this.maxLines && at > 0) {
      at = chunk.lastIndexOf(0x0a, at - 1);
      if (at === -1) break;
      newlines++;
    }
    if (newlines > this.maxLines) {
      this.#lines.length = 0;
      this.#partial.delete(stream);
      this.#decoders.delete(stream);
      chunk = chunk.subarray(at + 1);
    }
    let decoder = this.#decoders.get(stream);
    if (!decoder) this.#decoders.set(stream, decoder = new TextDecoder());
    this.#take(stream, decoder.decode(chunk, { stream: true }));
  }

  /** The stream ended: its last partial line counts as a line. */
  end(stream: string): void {
    const decoder = this.#decoders.get(stream);
    if (decoder) this.#take(stream, decoder.decode());
    const rest = this.#partial.get(stream);
    this.#partial.delete(stream);
    if (rest !== undefined && clean(rest) !== "") this.#add(rest);
  }

  /** The kept lines, oldest first, with each stream's unfinished line last. */
  lines(): string[] {
    const open = [...this.#partial.values()].map(clean).filter((l) => l !== "");
    return [...this.#lines, ...open].slice(-this.maxLines);
  }

  #take(stream: string, text: string): void {
    if (text === "") return;
    const parts = ((this.#partial.get(stream) ?? "") + text).split("\n");
    const last = parts.pop() as string;
    // Only the last maxLines complete lines of a chunk can survive.
    for (const line of parts.slice(-this.maxLines)) this.#add(line);
    this.#partial.set(stream, this.#bound(last));
  }

  #add(line: string): void {
    this.#lines.push(this.#bound(clean(line)));
    if (this.#lines.length > this.maxLines) {
      this.#lines.splice(0, this.#lines.length - this.maxLines);
    }
  }

  #bound(line: string): string {
    if (line.length <= this.maxLineChars) return line;
    return "…" + line.slice(line.length - this.maxLineChars + 1);
  }
}

/** A line as it reads: after its last carriage return, escapes removed. */
function clean(line: string): string {
  const shown = line.replace(/\r+$/, "");
  const cr = shown.lastIndexOf("\r");
  return (cr === -1 ? shown : shown.slice(cr + 1)).replace(ESCAPES, "").replace(CONTROLS, "")
    .trimEnd();
}
