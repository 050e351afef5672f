/**
 * The YAML parser for the npm build, which puts this file in place of
 * `_yaml.ts`: `js-yaml` is required on first use, so a host with no
 * `config.yaml` never loads it.
 *
 * @module
 */
import { createRequire } from "node:module";

type Load = (text: string, options: { maxAliases: number }) => unknown;
let load: Load | undefined;

/**
 * Parse one YAML document, with at most `maxAliases` aliases.
 *
 * @example
 * ```ts
 * import { parseYaml } from "./_yaml_node.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(typeof parseYaml, "function"); // Node: requires js-yaml on first call
 * ```
 */
export function parseYaml(text: string, options: { maxAliases: number }): unknown {
  load ??= (createRequire(import.meta.url)("js-yaml") as { load: Load }).load;
  return load(text, options);
}
