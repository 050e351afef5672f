/**
 * The shell tokenizer (`shell-quote`'s `parse`). Deno imports it with the
 * library; the npm build swaps in `_shell_quote_node.ts`, which loads it only
 * when a shell command is first tokenized.
 *
 * @module
 */
// @ts-types="npm:@types/shell-quote@1.7.5"
// deno-lint-ignore no-import-prefix -- a full npm: specifier lets Deno import this by URL
import { parse } from "npm:shell-quote@1.8.3";

/**
 * Tokenize a shell command; `env` gives each `$NAME` its value.
 *
 * @example
 * ```ts
 * import { shellParse } from "./_shell_quote.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(shellParse("rm -f a && ls", (k) => `$${k}`), ["rm", "-f", "a", { op: "&&" }, "ls"]);
 * ```
 */
export function shellParse(command: string, env: (key: string) => string): unknown[] {
  return parse(command, env);
}
