/**
 * Workspace snapshot benchmark, side by side with plain git in one run, on
 * generated trees: 10,000 files / 100 MB, 40,000 small files and 200,000
 * small files. For each:
 *
 * - a cold snapshot (empty store) against `git add -A && git commit` into an
 *   empty repository, and a warm one with one file changed against the same
 *   on the repository that already holds the tree;
 * - a one-file and a whole-tree rollback (1% of the files changed by the
 *   agent) against `git checkout <commit> -- <file>` and `-- .`; the
 *   one-file rollback also through the command line;
 * - on the 10,000-file tree, the store's growth per snapshot against the
 *   bytes changed (20 snapshots, 1% of the files rewritten each time).
 *
 * Plain git gets its own repository and index (`GIT_DIR`, `GIT_INDEX_FILE`)
 * over the same tree, so both see the same files. Wall time on a busy machine
 * swings, so each figure also comes with CPU time (this process and the git
 * processes it waited for), and cold runs are repeated (best of) where cheap.
 *
 *   deno run -A scripts/bench_workspace.ts [--sizes 10000:100,40000,200000] [--json]
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rollback, Workspaces } from "../workspace/mod.ts";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const json = args.includes("--json");
const sizesArg = args.includes("--sizes")
  ? args[args.indexOf("--sizes") + 1] ?? ""
  : "10000:100,40000,200000";
/** Files, and MB of content (0: small files of a line each). */
const SIZES = sizesArg.split(",").map((s) => {
  const [files, mb] = s.split(":");
  return { files: Number(files), mb: Number(mb ?? 0) };
});
const say = (s: string) => json || console.log(s);
const root = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-ws-"));

/** Write the tree: `files` files in directories of 10, 100 per parent. */
function makeTree(dir: string, files: number, mb: number): string[] {
  const per = mb > 0 ? Math.floor((mb * 1024 * 1024) / files) : 0;
  const names: string[] = [];
  for (let i = 0; i < files; i++) {
    const sub = path.join(dir, `d${Math.floor(i / 1000)}`, `e${Math.floor(i / 100) % 10}`);
    if (i % 100 === 0) fs.mkdirSync(sub, { recursive: true });
    const f = path.join(sub, `f${i}.txt`);
    // Big files: half random (incompressible), half text, as source plus assets.
    const content = per > 0
      ? Buffer.concat([
        randomBytes(Math.floor(per / 2)),
        Buffer.from(`line ${i}\n`.repeat(Math.ceil(per / 2 / 10))).subarray(
          0,
          per - Math.floor(per / 2),
        ),
      ])
      : `export const value${i} = ${i};\n`;
    fs.writeFileSync(f, content);
    names.push(f);
  }
  return names;
}

function du(dir: string): number {
  let total = 0;
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else total += fs.statSync(p).size;
    }
  };
  walk(dir);
  return total;
}

/** CPU time of this process and its waited-for children (git), in ms; Linux only. */
function cpuMs(): number {
  try {
    const stat = fs.readFileSync("/proc/self/stat", "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
    // utime, stime, cutime, cstime, counted from after the name; 100 ticks a second.
    return ((f[11] ?? 0) + (f[12] ?? 0) + (f[13] ?? 0) + (f[14] ?? 0)) * 10;
  } catch {
    return NaN;
  }
}

interface Cost {
  /** Wall time, ms. */
  ms: number;
  /** CPU time, ms. */
  cpu: number;
}

function measure(f: () => unknown): Cost {
  const c = cpuMs();
  const t = performance.now();
  f();
  return { ms: Math.round(performance.now() - t), cpu: cpuMs() - c };
}

const best = (xs: Cost[]): Cost => ({
  ms: Math.min(...xs.map((x) => x.ms)),
  cpu: Math.min(...xs.map((x) => x.cpu)),
});
const median = (xs: Cost[]): Cost => {
  const mid = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)] as number;
  return { ms: mid(xs.map((x) => x.ms)), cpu: mid(xs.map((x) => x.cpu)) };
};

/** Plain git with its own repository and index over `tree`. */
function plainGit(tree: string, dir: string) {
  const env = {
    ...process.env,
    GIT_DIR: path.join(dir, "plain.git"),
    GIT_INDEX_FILE: path.join(dir, "plain.index"),
    GIT_WORK_TREE: tree,
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: os.devNull,
    GIT_AUTHOR_NAME: "b",
    GIT_AUTHOR_EMAIL: "b@b",
    GIT_COMMITTER_NAME: "b",
    GIT_COMMITTER_EMAIL: "b@b",
  };
  execFileSync("git", ["init", "-q", "--bare", env.GIT_DIR], { env: { ...process.env } });
  const git = (...a: string[]) =>
    execFileSync("git", ["-c", "gc.auto=0", ...a], {
      cwd: tree,
      env,
      stdio: ["ignore", "pipe", "pipe"],
      maxBuffer: 1 << 30,
    }).toString();
  const snapshot = () => {
    git("add", "-A");
    git("commit", "-q", "--allow-empty", "-m", "snapshot");
  };
  return { git, snapshot };
}

const SETTINGS = {
  workspace_snapshots: true,
  max_snapshots: 100,
  max_total_size_mb: 100_000,
  max_tree_files: 1_000_000,
};

function workspaces(home: string, logs: string[]) {
  fs.mkdirSync(home, { recursive: true });
  // The same settings for the command line.
  fs.writeFileSync(
    path.join(home, "config.yaml"),
    `agent_checkpoint:\n${Object.entries(SETTINGS).map(([k, v]) => `  ${k}: ${v}\n`).join("")}`,
  );
  return new Workspaces({ home, log: (_l, m) => logs.push(m), settings: () => SETTINGS });
}

const CLI = fileURLToPath(new URL("./cli.ts", import.meta.url));

const results: Record<string, unknown>[] = [];
const logs: string[] = [];
for (const { files, mb } of SIZES) {
  const label = mb > 0 ? `${files} files / ${mb} MB` : `${files} small files`;
  const base = fs.mkdtempSync(path.join(root, "s-"));
  const tree = path.join(base, "tree");
  say(`\n${label}: generating ...`);
  const names = makeTree(tree, files, mb);
  const repeats = files <= 40_000 ? 2 : 1;

  // Cold: an empty store against an empty repository, alternating who goes first.
  const coldOurs: Cost[] = [];
  const coldGit: Cost[] = [];
  for (let r = 0; r < repeats; r++) {
    const dir = fs.mkdtempSync(path.join(base, "cold-"));
    const ours = () =>
      coldOurs.push(measure(() => workspaces(path.join(dir, "home"), logs).beforeWrite(tree, 1)));
    const git = () => coldGit.push(measure(plainGit(tree, dir).snapshot));
    if (r % 2 === 0) {
      git();
      ours();
    } else {
      ours();
      git();
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
  say(
    `  cold: agent-checkpoint ${JSON.stringify(best(coldOurs))}, git ${
      JSON.stringify(best(coldGit))
    }`,
  );

  // Warm, one file changed, on a store and a repository that hold the tree.
  const home = path.join(base, "home");
  const ws = workspaces(home, logs);
  let turn = 0;
  ws.beforeWrite(tree, ++turn);
  const plain = plainGit(tree, base);
  plain.snapshot();
  const warmOurs: Cost[] = [];
  const warmGit: Cost[] = [];
  for (let i = 0; i < 5; i++) {
    fs.appendFileSync(names[(i * 997) % names.length] as string, `change ${i}\n`);
    warmOurs.push(measure(() => ws.beforeWrite(tree, ++turn)));
    fs.appendFileSync(names[(i * 991 + 7) % names.length] as string, `change ${i}\n`);
    warmGit.push(measure(plain.snapshot));
  }
  say(
    `  warm, one file changed: agent-checkpoint ${JSON.stringify(median(warmOurs))}, git ${
      JSON.stringify(median(warmGit))
    }`,
  );

  // Rollback: one file, then 1% of the files, against git checkout.
  ws.beforeWrite(tree, ++turn);
  plain.snapshot();
  const commit = plain.git("rev-parse", "HEAD").trim();
  const one = names[names.length >> 1] as string;
  const rel = path.relative(tree, one);
  const agentWrites = (list: string[]) => {
    for (const f of list) fs.writeFileSync(f, "the agent's\n");
    ws.afterWrite(tree, list);
  };
  agentWrites([one]);
  const rbOne = measure(() =>
    rollback({ home, project: tree, target: 1, path: one, settings: SETTINGS })
  );
  agentWrites([one]);
  const rbOneCli = measure(() =>
    execFileSync(process.execPath, [
      "run",
      "-A",
      "--quiet",
      CLI,
      "rollback",
      "1",
      rel,
      "--home",
      home,
    ], {
      cwd: tree,
      stdio: "ignore",
    })
  );
  fs.writeFileSync(one, "changed\n");
  const gitOne = measure(() => plain.git("checkout", commit, "--", rel));
  const some = names.filter((_, i) => i % 100 === 50);
  agentWrites(some);
  const rbAll = measure(() => rollback({ home, project: tree, target: 1, settings: SETTINGS }));
  for (const f of some) fs.writeFileSync(f, "changed\n");
  const gitAll = measure(() => plain.git("checkout", "-f", commit, "--", "."));
  say(
    `  rollback one file: library ${JSON.stringify(rbOne)}, command line ${
      JSON.stringify(rbOneCli)
    }, git checkout ${JSON.stringify(gitOne)}`,
  );
  say(
    `  rollback ${some.length} files: library ${JSON.stringify(rbAll)}, git checkout ${
      JSON.stringify(gitAll)
    }`,
  );

  // Store growth per snapshot against the bytes changed (incompressible content).
  let growth: Record<string, number> | undefined;
  if (mb > 0) {
    const storeDir = path.join(home, "agent-checkpoint", "store");
    const plainDir = path.join(base, "plain.git");
    ws.beforeWrite(tree, ++turn);
    plain.snapshot();
    let prev = du(storeDir);
    let plainPrev = du(plainDir);
    let stored = 0;
    let plainStored = 0;
    let changed = 0;
    for (let s = 1; s <= 20; s++) {
      for (let k = 0; k < Math.ceil(files / 100); k++) {
        const f = names[(s * 131 + k * 97) % names.length] as string;
        const content = randomBytes(fs.statSync(f).size);
        fs.writeFileSync(f, content);
        changed += content.length;
      }
      ws.beforeWrite(tree, ++turn);
      plain.snapshot();
      const now = du(storeDir);
      stored += now - prev;
      prev = now;
      const plainNow = du(plainDir);
      plainStored += plainNow - plainPrev;
      plainPrev = plainNow;
    }
    growth = {
      snapshots: 20,
      meanChangedBytes: Math.round(changed / 20),
      meanStoredBytes: Math.round(stored / 20),
      ratio: Number((stored / changed).toFixed(3)),
      gitMeanStoredBytes: Math.round(plainStored / 20),
      gitRatio: Number((plainStored / changed).toFixed(3)),
    };
    const kib = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
    say(
      `  store growth per snapshot for ${kib(growth.meanChangedBytes!)} changed: agent-checkpoint ${
        kib(growth.meanStoredBytes!)
      } (${growth.ratio}x), git ${kib(growth.gitMeanStoredBytes!)} (${growth.gitRatio}x)`,
    );
  }

  const ratio = (a: Cost, b: Cost) => ({
    wall: Number((a.ms / Math.max(1, b.ms)).toFixed(2)),
    cpu: Number((a.cpu / Math.max(1, b.cpu)).toFixed(2)),
  });
  const result = {
    size: label,
    files,
    megabytes: mb,
    cold: {
      agentCheckpoint: best(coldOurs),
      git: best(coldGit),
      ratio: ratio(best(coldOurs), best(coldGit)),
    },
    warmOneFileChanged: {
      agentCheckpoint: median(warmOurs),
      git: median(warmGit),
      ratio: ratio(median(warmOurs), median(warmGit)),
    },
    rollbackOneFile: { library: rbOne, commandLine: rbOneCli, gitCheckout: gitOne },
    rollbackFiles: { files: some.length, library: rbAll, gitCheckout: gitAll },
    ...(growth ? { storeGrowth: growth } : {}),
  };
  say(
    `  ratios (agent-checkpoint / git): cold ${JSON.stringify(result.cold.ratio)}, warm ${
      JSON.stringify(result.warmOneFileChanged.ratio)
    }`,
  );
  results.push(result);
  fs.rmSync(base, { recursive: true, force: true });
}
if (json) console.log(JSON.stringify({ results, logLines: logs }, null, 2));
else if (logs.length) console.log(`log lines: ${logs.join(" | ")}`);
fs.rmSync(root, { recursive: true, force: true });
