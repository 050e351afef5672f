/**
 * The YAML parser, for `config.yaml`. Deno imports it with the library; the
 * npm build swaps in `_yaml_node.ts`, which loads it only when a
 * `config.yaml` is parsed.
 *
 * @module
 */
// deno-lint-ignore no-import-prefix -- a full npm: specifier lets Deno import this by URL
import { load } from "npm:js-yaml@^5.5.0";

/**
 * Parse one YAML document, with at most `maxAliases` aliases.
 *
 * @example
 * ```ts
 * import { parseYaml } from "./_yaml.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseYaml("a: [1, 2]", { maxAliases: 10 }), { a: [1, 2] });
 * ```
 */
export function parseYaml(text: string, options: { maxAliases: number }): unknown {
  return load(text, options);
}
