/**
 * The shell tokenizer for the npm build, which puts this file in place of
 * `_shell_quote.ts`: `shell-quote` is required on first use, so a host that
 * never has a shell command checked never loads it.
 *
 * @module
 */
import { createRequire } from "node:module";

type Parse = (command: string, env: (key: string) => string) => unknown[];
let parse: Parse | undefined;

/**
 * Tokenize a shell command; `env` gives each `$NAME` its value.
 *
 * @example
 * ```ts
 * import { shellParse } from "./_shell_quote_node.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(typeof shellParse, "function"); // Node: requires shell-quote on first call
 * ```
 */
export function shellParse(command: string, env: (key: string) => string): unknown[] {
  parse ??= (createRequire(import.meta.url)("shell-quote") as { parse: Parse }).parse;
  return parse(command, env);
}
