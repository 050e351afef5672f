/**
 * The README's code compiles, and so does the reference's (`docs/*.md`) it links to: every
 * ```ts / ```js block is type-checked with
 * `deno check` against this repository's own modules (the package's names,
 * `agent-checkpoint` and `agent-checkpoint/<adapter>`, and `./mod.ts` are
 * rewritten to the files they name).
 *
 * A block marked `ignore` is one that needs what only the reader has (a
 * framework's model, tools, agent, prompt): it is checked with exactly those
 * values declared, and with the `checkpoints` keeper of the README's first
 * snippet. Everything else it uses it must define itself.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { execFileSync } from "node:child_process";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { doc, markdownFiles, README, tempHome, underDeno } from "./_helpers.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** One fenced block: its language, whether it is marked `ignore`, its line and text. */
interface Snippet {
  lang: "ts" | "js";
  ignore: boolean;
  line: number;
  code: string;
}

/** Every ```ts / ```js block of a Markdown text. */
function snippets(markdown: string): Snippet[] {
  const out: Snippet[] = [];
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(ts|js|typescript|javascript)\b(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    out.push({
      lang: open[1]!.startsWith("t") ? "ts" : "js",
      ignore: /\bignore\b/.test(open[2]!),
      line: start + 1,
      code: body.join("\n") + "\n",
    });
  }
  return out;
}

/**
 * What a reader brings to an `ignore` block: the framework's own objects,
 * typed loosely. Nothing of this library is declared here: its names must
 * resolve to the real modules.
 */
const READER_HAS = [
  "model",
  "tools",
  "prompt",
  "sessionId",
  "agent",
  "messages",
  "llm",
  "createAgent",
];

/** The package's import names as files of this repository, from deno.json's exports. */
function specifierMap(fromDir: string): Map<string, string> {
  const exports = JSON.parse(fs.readFileSync(path.join(ROOT, "deno.json"), "utf8"))
    .exports as Record<string, string>;
  const map = new Map<string, string>();
  for (const [key, file] of Object.entries(exports)) {
    const rel = path.relative(fromDir, path.join(ROOT, file)).split(path.sep).join("/");
    const name = key === "." ? "agent-checkpoint" : `agent-checkpoint/${key.slice(2)}`;
    map.set(name, rel.startsWith(".") ? rel : `./${rel}`);
  }
  map.set("./mod.ts", map.get("agent-checkpoint")!);
  return map;
}

/** Whether a snippet declares or imports `name` itself. */
function defines(code: string, name: string): boolean {
  return new RegExp(`\\b(const|let|var|function|class)\\s+${name}\\b`).test(code) ||
    new RegExp(`import\\s*\\{[^}]*\\b${name}\\b[^}]*\\}`).test(code);
}

function rewrite(code: string, map: Map<string, string>): string {
  return code.replace(
    /(from\s+|import\s*\(\s*)(["'])([^"']+)\2/g,
    (all, lead: string, quote: string, spec: string) =>
      map.has(spec) ? `${lead}${quote}${map.get(spec)}${quote}` : all,
  );
}

/** A page's name in a snippet's file name: `README`, or `docs-settings` for `docs/settings.md`. */
function pageTag(file: string): string {
  const base = path.basename(file, ".md");
  return file === README ? base : `docs-${base}`;
}

/** The page a snippet's file name tags, as a reader would look for it. */
function pageName(tag: string): string {
  return tag.startsWith("docs-") ? `docs/${tag.slice(5)}.md` : `${tag}.md`;
}

test("README and docs/: every ts/js snippet type-checks against this repository", (t) => {
  if (!underDeno) return t.skip("deno check runs under Deno");
  const pages = markdownFiles();
  assert.ok(pages.length > 1, "the README links to pages of docs/");
  const readme = snippets(fs.readFileSync(README, "utf8"));
  assert.ok(readme.filter((s) => !s.ignore && s.lang === "ts").length >= 1, "a snippet to paste");
  const found = pages.flatMap((page) =>
    snippets(fs.readFileSync(page, "utf8")).map((s) => ({ ...s, tag: pageTag(page) }))
  );
  assert.ok(
    found.some((s) => s.tag !== "README" && !s.ignore && s.lang === "ts"),
    "docs/ has snippets of its own, checked as the README's are",
  );
  const dir = fs.mkdtempSync(path.join(ROOT, "tests", ".readme-"));
  try {
    const map = specifierMap(dir);
    const core = readme.find((s) => !s.ignore && /createAgentCheckpoint\(/.test(s.code));
    assert.ok(core, "the README shows how to create the keeper");
    const files: string[] = [];
    for (const s of found) {
      const name = path.join(dir, `${s.tag}_line_${s.line}.${s.lang}`);
      let code = rewrite(s.code, map);
      if (s.ignore && s.lang === "ts") {
        // The keeper as the README's first snippet makes it, and what the reader brings.
        code +=
          `\nimport type { createAgentCheckpoint as __create } from "${
            map.get("agent-checkpoint")
          }";\ndeclare const checkpoints: ReturnType<typeof __create>;\n` +
          READER_HAS.filter((n) => !defines(s.code, n)).map((n) =>
            `// deno-lint-ignore no-explicit-any\ndeclare const ${n}: any;\n`
          ).join("");
      }
      // Each block is its own module.
      fs.writeFileSync(name, `${code}\nexport {};\n`);
      files.push(name);
    }
    let output = "";
    try {
      execFileSync(
        process.execPath,
        ["check", "--quiet", "--config", path.join(ROOT, "deno.json"), ...files],
        {
          cwd: ROOT,
          encoding: "utf8",
          stdio: ["ignore", "pipe", "pipe"],
          env: { ...process.env, NO_COLOR: "1" },
        },
      );
    } catch (error) {
      const e = error as { stdout?: string; stderr?: string };
      output = `${e.stdout ?? ""}${e.stderr ?? ""}`;
    }
    // deno check names the file; the file names the page and its line.
    const where = output.replace(
      /file:\/\/\S*\/([A-Za-z-]+)_line_(\d+)\.(ts|js)/g,
      (_all, tag: string, line: string) => `${pageName(tag)} line ${line}`,
    );
    assert.equal(where, "", `README and docs/ snippets that do not compile:\n${where}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/** Packages the library loads only when a setting asks for them. */
const OPTIONAL = new Set(["postgres", "@opentelemetry/api"]);

test("README: the npm packages the library names are the ones the README lists", (t) => {
  if (!underDeno) return t.skip("the sources are read under Deno");
  const named = new Set<string>();
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) {
        // The adapters name their frameworks (a sentence of their own); tests and scripts are
        // not the library.
        if (dir === ROOT && !["adapters", "tests", "scripts", "npm", "docs"].includes(e.name)) {
          if (!e.name.startsWith(".")) walk(p);
        }
      } else if (e.name.endsWith(".ts")) {
        const code = fs.readFileSync(p, "utf8").split("\n").filter((l) => !/^\s*(\*|\/\/)/.test(l))
          .join("\n");
        for (const m of code.matchAll(/["']npm:((?:@[\w.-]+\/)?[\w.-]+)@/g)) named.add(m[1]!);
      }
    }
  };
  walk(ROOT);
  assert.ok(named.has("js-yaml"), [...named].join(", "));
  const readme = fs.readFileSync(README, "utf8");
  const section = readme.split(/^### By URL, in Deno$/m)[1]?.split(/^#/m)[0] ?? "";
  const listed = new Set([...section.matchAll(/`([^`]+)`/g)].map((m) => m[1]!));
  assert.deepEqual([...named].filter((n) => !listed.has(n)).sort(), [], section);
  const count = /names its (\w+) dependencies/.exec(section)?.[1];
  const required = [...named].filter((n) => !OPTIONAL.has(n));
  assert.equal(count, ["zero", "one", "two", "three", "four"][required.length], section);
});

test("README: the snippet scanner finds blocks, their language and the ignore mark", () => {
  const md = "text\n```ts\nconst a = 1;\n```\n```js ignore\nx\n```\n```sh\nls\n```\n";
  assert.deepEqual(snippets(md), [
    { lang: "ts", ignore: false, line: 2, code: "const a = 1;\n" },
    { lang: "js", ignore: true, line: 5, code: "x\n" },
  ]);
});

test("docs/resume.md: a resumed attempt gets a fresh budget, as it says", async () => {
  const readme = fs.readFileSync(doc("resume.md"), "utf8");
  assert.match(readme, /Each attempt gets a fresh budget/);
  const { createAgentCheckpoint } = await import("../mod.ts");
  const { readCheckpoint } = await import("../persist.ts");
  const home = tempHome();
  const first = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  const cut = first.startRun({ sessionId: "job", caps: { turns: 12 } });
  for (let i = 0; i < 11; i++) cut.preLlmCall(); // cut off one turn before its cap
  await first.close();
  // The cut-off attempt's process is this one, still running: only warn lets the retry go on.
  const again = createAgentCheckpoint({
    home,
    env: {},
    settings: { watchdog: false, on_duplicate: "warn" },
  });
  const resumed = again.startRun({ sessionId: "job", caps: { turns: 12 } });
  const fresh = again.startRun({ sessionId: "fresh", caps: { turns: 12 } });
  assert.equal(resumed.attempt, 2);
  // The first tier of each: at the same model call, with the turns counted from zero.
  const firstTier = (run: typeof fresh) => {
    for (let call = 1; call <= 12; call++) {
      run.preLlmCall();
      const r = readCheckpoint(run.checkpointFile).record;
      if (r?.kind === "tier" && (r.attempt ?? 1) === run.attempt) {
        return { call, turnsUsed: r.turnsUsed, tier: r.tier, cap: r.caps.turns?.value };
      }
    }
    return undefined;
  };
  const a = firstTier(fresh);
  assert.ok(a, "a fresh 12-turn run reaches a tier");
  assert.deepEqual(firstTier(resumed), a);
  await again.close();
});
