/**
 * Which tool calls can harm a working tree: the known file tools, and shell
 * commands found destructive by tokenizing them with a real shell tokenizer
 * (pipelines, `&&`/`||`/`;` chains, subshells, `$(...)`, `sh -c` and
 * redirects included).
 *
 * @module
 */
import { shellParse } from "./_shell_quote.ts";

/** The paths a file tool's input names under `keys` (a string, or a list of strings), if any. */
export function filePathsOf(input: unknown, keys: readonly string[]): string[] {
  if (typeof input !== "object" || input === null) return [];
  const record = input as Record<string, unknown>;
  const out: string[] = [];
  for (const key of keys) {
    const value = record[key];
    if (typeof value === "string" && value !== "") out.push(value);
    else if (Array.isArray(value)) {
      for (const p of value) if (typeof p === "string" && p !== "") out.push(p);
    }
  }
  return out;
}

/** The command string of a shell tool's input (the input itself, or under one of `keys`), if any. */
export function commandOf(input: unknown, keys: readonly string[]): string | undefined {
  if (typeof input === "string") return input;
  if (typeof input !== "object" || input === null) return undefined;
  const record = input as Record<string, unknown>;
  const command = keys.map((k) => record[k]).find((v) => v !== undefined && v !== null);
  if (typeof command === "string") return command;
  if (Array.isArray(command) && command.every((c) => typeof c === "string")) {
    return command.map((c) => `'${String(c).replaceAll("'", `'\\''`)}'`).join(" ");
  }
  return undefined;
}

const ALWAYS = new Set([
  "rm",
  "rmdir",
  "unlink",
  "cp",
  "mv",
  "install",
  "truncate",
  "dd",
  "shred",
  "patch",
  "rsync",
  "ln",
  "chmod",
  "chown",
  "chgrp",
  "touch",
  "mkdir",
]);
const GIT_DESTRUCTIVE = new Set([
  "reset",
  "clean",
  "checkout",
  "restore",
  "switch",
  "stash",
  "rm",
  "mv",
  "apply",
  "am",
  "pull",
  "merge",
  "rebase",
  "cherry-pick",
  "revert",
]);
/** Words that run the command after them (their own options skipped). */
const WRAPPERS = new Set([
  "sudo",
  "doas",
  "env",
  "nice",
  "nohup",
  "time",
  "command",
  "builtin",
  "exec",
  "xargs",
  "timeout",
  "stdbuf",
  "ionice",
  "chronic",
]);
const SHELLS = new Set(["sh", "bash", "zsh", "dash", "ksh", "fish"]);
// Older tokenizers give `&>` as `&` then `>`, and `>|` as `>` then `|`.
const OUTPUT_REDIRECTS = new Set([">", ">>", ">&", "&>", "&>>", ">|", ">>&"]);
const HARMLESS_TARGETS = /^\/dev\/(null|stdout|stderr|tty|fd\/\d+)$/;

type Token = string | { op: string; pattern?: string } | { comment: string };

/**
 * Whether a shell command can change files: one of the destructive commands
 * (`rm`, `rmdir`, `cp`, `mv`, `install`, `sed -i`, `truncate`, `dd`, `shred`,
 * `tee FILE`, `find -delete`, `git reset|clean|checkout|restore|switch|...`)
 * anywhere in it, or an output redirect to a file (`>`, `>>`, `&>`, `>|`).
 * Redirects to `/dev/null` or to another descriptor (`2>&1`) are harmless.
 * A command that cannot be tokenized counts as destructive.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isDestructiveCommand } from "./mod.ts";
 *
 * assert.equal(isDestructiveCommand("cd src && sed -i 's/a/b/' x.ts"), true);
 * assert.equal(isDestructiveCommand("npm test 2>&1 | tee /dev/null"), false);
 * ```
 */
export function isDestructiveCommand(command: string, depth = 0): boolean {
  if (depth > 4) return true;
  let tokens: Token[];
  try {
    // Newlines separate commands; the tokenizer would take them as spaces.
    tokens = shellParse(command.replace(/\r?\n/g, " ; "), (key: string) => `$${key}`) as Token[];
  } catch {
    // a command the tokenizer cannot read is taken as destructive: snapshot first
    return true;
  }
  // Backquoted and $(...) commands: shell-quote leaves backquotes in words.
  for (const t of tokens) {
    if (typeof t === "string" && t.includes("`")) {
      const inner = t.split("`").filter((_, i) => i % 2 === 1).join(" ; ");
      if (inner && isDestructiveCommand(inner, depth + 1)) return true;
    }
  }
  let words: string[] = [];
  const flush = (): boolean => {
    const hit = commandIsDestructive(words, depth);
    words = [];
    return hit;
  };
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i] as Token;
    if (typeof t === "string") {
      words.push(t);
      continue;
    }
    if ("comment" in t) continue;
    if (t.op === "glob") {
      words.push(t.pattern ?? "*");
      continue;
    }
    if (OUTPUT_REDIRECTS.has(t.op)) {
      let j = i + 1;
      const next0 = tokens[j];
      if (typeof next0 === "object" && "op" in next0 && next0.op === "|") j++;
      const target = tokens[j];
      i = j;
      if (typeof target !== "string") {
        if (target === undefined) continue;
        return true;
      }
      if (t.op === ">&" && /^(\d+|-)$/.test(target)) continue;
      if (HARMLESS_TARGETS.test(target)) continue;
      return true;
    }
    if (t.op === "<" || t.op === "<(" || t.op === "<<") {
      // An input redirect's word is a file name, not a command word.
      const target = tokens[i + 1];
      if (t.op === "<" && typeof target === "object" && "op" in target && target.op === "<") i++;
      if (typeof tokens[i + 1] === "string") i++;
      continue;
    }
    if (t.op === "&") {
      const next = tokens[i + 1];
      if (typeof next === "object" && "op" in next && next.op === ">") continue;
    }
    // `&&`, `||`, `;`, `|`, `&`, `(`, `)`, `;;`, `|&`: a new command starts.
    if (flush()) return true;
  }
  return flush();
}

function commandIsDestructive(input: string[], depth: number): boolean {
  let words = input.filter((w) => w !== "$");
  // Leading assignments and wrappers (with their options) are not the command.
  for (;;) {
    while (words.length && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0] as string)) {
      words = words.slice(1);
    }
    const head = baseName(words[0]);
    if (head === undefined || !WRAPPERS.has(head)) break;
    words = words.slice(1);
    while (words.length && (words[0]?.startsWith("-") || /^\d+[smhd]?$/.test(words[0] ?? ""))) {
      const opt = words[0] as string;
      words = words.slice(1);
      if (/^-(u|g|n|c|s|k|I|L|d|P|C|E|i|o|e)$/.test(opt) && head !== "env" && words.length > 1) {
        if (head === "sudo" || head === "doas" || head === "xargs" || head === "timeout") {
          words = words.slice(1);
        }
      }
    }
  }
  const name = baseName(words[0]);
  if (name === undefined) return false;
  const args = words.slice(1);
  if (ALWAYS.has(name)) return true;
  if (name === "sed" || name === "gsed" || name === "perl" || name === "ruby") {
    return args.some((a) =>
      a === "--in-place" || a.startsWith("--in-place=") || /^-[A-Za-z]*i/.test(a)
    );
  }
  if (name === "tar" || name === "bsdtar" || name === "gtar") {
    // Extracting writes files; creating or appending writes the archive (`-f FILE`); listing
    // (`-t`) writes nothing. Letters come bundled (`xzf`, `-xzf`) or as long options.
    let letters = "";
    for (const [i, a] of args.entries()) {
      if (a.startsWith("--")) {
        letters += { "--extract": "x", "--get": "x", "--create": "c", "--append": "r" }[a] ?? "";
        if (a === "--file" || a.startsWith("--file=")) letters += "f";
      } else if (a.startsWith("-") || (i === 0 && /^[A-Za-z]+$/.test(a))) letters += a;
    }
    return letters.includes("x") || (/[cruA]/.test(letters) && letters.includes("f"));
  }
  if (name === "unzip") return !args.some((a) => /^-[A-Za-z]*[lvtZ]/.test(a));
  if (name === "awk" || name === "gawk") {
    return args.some((a, i) =>
      /^-i ?inplace$/.test(a) || a === "--include=inplace" ||
      ((a === "-i" || a === "--include") && args[i + 1] === "inplace")
    );
  }
  if (name === "tee") return args.some((a) => !a.startsWith("-") && !HARMLESS_TARGETS.test(a));
  if (name === "find") {
    return args.some((a) => a === "-delete" || a === "-exec" || a === "-execdir");
  }
  if (name === "git") {
    let k = 0;
    while (k < args.length && (args[k] as string).startsWith("-")) {
      const opt = args[k] as string;
      k += opt === "-C" || opt === "-c" || opt === "--git-dir" || opt === "--work-tree" ? 2 : 1;
    }
    const sub = args[k];
    return sub !== undefined && GIT_DESTRUCTIVE.has(sub);
  }
  if (SHELLS.has(name) || name === "eval") {
    const c = name === "eval" ? args.join(" ") : args[args.indexOf("-c") + 1];
    if (name !== "eval" && !args.includes("-c")) return false;
    return c === undefined ? false : isDestructiveCommand(c, depth + 1);
  }
  return false;
}

function baseName(word: string | undefined): string | undefined {
  if (word === undefined) return undefined;
  const slash = word.lastIndexOf("/");
  return (slash >= 0 ? word.slice(slash + 1) : word).replace(/^\\/, "");
}

/** Commands whose words do not name the files they change (they change a tree, or many files). */
const WHOLE_TREE = new Set(["git", "patch", "find", "xargs"]);

/**
 * What a shell command names: a test of whether a root-relative path is one
 * of the command's words (or under one, or matched by one of its globs), or
 * `"all"` when the command's words cannot say which files it changes (git,
 * patch, find, xargs, `eval`, `$(…)`, or a command that cannot be tokenized).
 * An archive's files (`tar -x`, `unzip`) keep their times, and are told by them. Relative words are matched as a path's tail, so a command run
 * after a `cd` still names its files.
 */
export function namedPaths(command: string): "all" | ((rel: string) => boolean) {
  // A name made by a command substitution cannot be read off the words.
  if (command.includes("$(") || command.includes("`")) return "all";
  let tokens: Token[];
  try {
    tokens = shellParse(command.replace(/\r?\n/g, " ; "), (key: string) => `$${key}`) as Token[];
  } catch {
    // unreadable: any file may be its
    return "all";
  }
  const words: string[] = [];
  const patterns: RegExp[] = [];
  for (const t of tokens) {
    if (typeof t === "string") {
      if (t.includes("`")) return "all";
      for (const w of t.split("=")) words.push(w);
      const head = baseName(t);
      if (head !== undefined && (WHOLE_TREE.has(head) || head === "eval")) return "all";
    } else if ("op" in t && t.op === "glob") {
      patterns.push(globRegExp(t.pattern ?? "*"));
    }
  }
  const names = words
    .filter((w) => w !== "" && !w.startsWith("-") && !w.startsWith("$"))
    .map((w) => w.replace(/\/+$/, "").replace(/^(\.\/)+/, ""))
    .filter((w) => w !== "" && w !== ".." && !w.includes("\0"));
  if (names.includes(".") || names.includes("*")) return "all";
  return (rel) => {
    const parts = rel.split("/");
    for (let k = 1; k <= parts.length; k++) {
      // the file itself, or a directory it is under: by its tail, as a relative word may
      // be relative to a directory the command changed to
      const prefix = "/" + parts.slice(0, k).join("/");
      for (const n of names) {
        const word = "/" + n.replace(/^\/+/, "");
        if (prefix.endsWith(word) || (n.startsWith("/") && word.endsWith(prefix))) return true;
      }
    }
    return patterns.some((p) => p.test(rel));
  };
}

function globRegExp(glob: string): RegExp {
  let out = "";
  for (const ch of glob.replace(/^(\.\/)+/, "")) {
    if (ch === "*") out += "[^/]*";
    else if (ch === "?") out += "[^/]";
    else out += ch.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`(^|/)${out}$`);
}
