/**
 * Workspace snapshot benchmark: snapshot time on a generated tree of 10,000
 * files / 100 MB, cold and warm (nothing changed; one file changed), against
 * a plain `git add -A && git commit` of the same tree in the same run; and the
 * store's growth over 20 snapshots of a tree where 1% of the files change
 * each time.
 *
 *   deno run -A scripts/bench_workspace.ts [--files N] [--mb M] [--json]
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Workspaces } from "../workspace/mod.ts";

const args = process.argv.slice(2);
const opt = (name: string, d: number) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : d;
};
const FILES = opt("--files", 10_000);
const MB = opt("--mb", 100);
const json = args.includes("--json");

const base = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-ws-"));
const say = (s: string) => json || console.log(s);

function makeTree(dir: string, files: number, bytes: number): string[] {
  const per = Math.floor(bytes / files);
  const names: string[] = [];
  for (let i = 0; i < files; i++) {
    const sub = path.join(dir, `d${Math.floor(i / 100)}`, `e${Math.floor(i / 10) % 10}`);
    fs.mkdirSync(sub, { recursive: true });
    const f = path.join(sub, `f${i}.bin`);
    // Half random (incompressible), half text: realistic for source + assets.
    const content = Buffer.concat([
      randomBytes(Math.floor(per / 2)),
      Buffer.from(`line ${i}\n`.repeat(Math.ceil(per / 2 / 10))).subarray(
        0,
        per - Math.floor(per / 2),
      ),
    ]);
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

const time = (f: () => unknown) => {
  const t = performance.now();
  f();
  return performance.now() - t;
};
/** CPU time of this process and its waited-for children (git), in ms; Linux only. */
function cpuMs(): number | undefined {
  try {
    const stat = fs.readFileSync("/proc/self/stat", "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
    // Fields 14-17 (utime, stime, cutime, cstime), counted from after the name.
    return ((f[11] ?? 0) + (f[12] ?? 0) + (f[13] ?? 0) + (f[14] ?? 0)) * 10;
  } catch {
    return undefined;
  }
}
/** Mean CPU ms per call of `f` over `n` calls (wall time suffers from a loaded machine; CPU less). */
function cpuPer(n: number, f: (i: number) => void): number | undefined {
  const a = cpuMs();
  for (let i = 0; i < n; i++) f(i);
  const b = cpuMs();
  return a === undefined || b === undefined ? undefined : Math.round((b - a) / n);
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

// 1. Snapshot time against plain git.
const tree = path.join(base, "tree");
say(`generating ${FILES} files, ${MB} MB in ${tree} ...`);
const names = makeTree(tree, FILES, MB * 1024 * 1024);
const home = path.join(base, "home");
const logs: string[] = [];
let maxSnapshots = 100;
const ws = new Workspaces({
  home,
  log: (_l, m) => logs.push(m),
  settings: () => ({
    workspace_snapshots: true,
    max_snapshots: maxSnapshots,
    max_total_size_mb: 10_000,
  }),
});
let turn = 0;
const snap = () => ws.beforeWrite(tree, ++turn);

const cold = time(snap);
const warmSame: number[] = [];
for (let i = 0; i < 5; i++) warmSame.push(time(snap));
const warmOne: number[] = [];
for (let i = 0; i < 5; i++) {
  fs.appendFileSync(names[(i * 997) % names.length] as string, `change ${i}\n`);
  warmOne.push(time(snap));
}

const cpuOne = cpuPer(10, (i) => {
  fs.appendFileSync(names[(i * 389) % names.length] as string, `cpu ${i}\n`);
  snap();
});

// At the max_snapshots cap each snapshot also drops the oldest and prunes.
maxSnapshots = 10;
snap();
const atCap: number[] = [];
for (let i = 0; i < 5; i++) {
  fs.appendFileSync(names[(i * 503) % names.length] as string, `cap ${i}\n`);
  atCap.push(time(snap));
}

// Plain git on a copy of the same tree (its own .git, a real commit).
const plain = path.join(base, "plain");
fs.cpSync(tree, plain, { recursive: true });
const genv = {
  ...process.env,
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_CONFIG_GLOBAL: os.devNull,
  GIT_AUTHOR_NAME: "b",
  GIT_AUTHOR_EMAIL: "b@b",
  GIT_COMMITTER_NAME: "b",
  GIT_COMMITTER_EMAIL: "b@b",
};
const git = (...a: string[]) =>
  execFileSync("git", ["-c", "gc.auto=0", ...a], { cwd: plain, env: genv, stdio: "pipe" });
git("init", "-q");
const plainCold = time(() => {
  git("add", "-A");
  git("commit", "-q", "-m", "cold");
});
const plainSame: number[] = [];
for (let i = 0; i < 5; i++) {
  plainSame.push(time(() => {
    git("add", "-A");
    git("commit", "-q", "--allow-empty", "-m", "same");
  }));
}
const plainCpuOne = cpuPer(10, (i) => {
  const f = path.join(plain, path.relative(tree, names[(i * 383) % names.length] as string));
  fs.appendFileSync(f, `cpu ${i}\n`);
  git("add", "-A");
  git("commit", "-q", "-m", "cpu");
});
const plainOne: number[] = [];
for (let i = 0; i < 5; i++) {
  const f = path.join(plain, path.relative(tree, names[(i * 991) % names.length] as string));
  fs.appendFileSync(f, `change ${i}\n`);
  plainOne.push(time(() => {
    git("add", "-A");
    git("commit", "-q", "-m", "one");
  }));
}

// 2. Store growth: 20 snapshots, 1% of files changed each time.
const growthTree = path.join(base, "growth");
const gFiles = Math.floor(FILES / 5);
const gNames = makeTree(growthTree, gFiles, (MB / 5) * 1024 * 1024);
const gHome = path.join(base, "ghome");
const gws = new Workspaces({
  home: gHome,
  log: (_l, m) => logs.push(m),
  settings: () => ({ workspace_snapshots: true, max_snapshots: 100, max_total_size_mb: 10_000 }),
});
const storeDir = path.join(gHome, "checkpoints", "store");
let gturn = 0;
gws.beforeWrite(growthTree, ++gturn);
const growth: { snapshot: number; storeBytes: number; deltaBytes: number; changedBytes: number }[] =
  [];
let prev = du(storeDir);
const firstBytes = prev;
for (let s = 1; s <= 20; s++) {
  let changed = 0;
  for (let k = 0; k < Math.ceil(gFiles / 100); k++) {
    const f = gNames[(s * 131 + k * 97) % gNames.length] as string;
    const content = randomBytes(fs.statSync(f).size);
    fs.writeFileSync(f, content);
    changed += content.length;
  }
  gws.beforeWrite(growthTree, ++gturn);
  const now = du(storeDir);
  growth.push({ snapshot: s, storeBytes: now, deltaBytes: now - prev, changedBytes: changed });
  prev = now;
}

const result = {
  files: FILES,
  megabytes: MB,
  snapshotMs: {
    cold: Math.round(cold),
    warmUnchanged: Math.round(median(warmSame)),
    warmOneFileChanged: Math.round(median(warmOne)),
    atSnapshotCapOneFileChanged: Math.round(median(atCap)),
    cpuOneFileChanged: cpuOne,
  },
  plainGitMs: {
    cold: Math.round(plainCold),
    warmUnchanged: Math.round(median(plainSame)),
    warmOneFileChanged: Math.round(median(plainOne)),
    cpuOneFileChanged: plainCpuOne,
  },
  growth: {
    files: gFiles,
    firstSnapshotBytes: firstBytes,
    meanDeltaBytes: Math.round(growth.reduce((n, g) => n + g.deltaBytes, 0) / growth.length),
    meanChangedBytes: Math.round(growth.reduce((n, g) => n + g.changedBytes, 0) / growth.length),
    finalBytes: prev,
  },
  logLines: logs,
};
if (json) console.log(JSON.stringify(result, null, 2));
else {
  console.log(`\nsnapshot of ${FILES} files / ${MB} MB (median of 5 for warm):`);
  console.log(
    `  agent-checkpoint  cold ${result.snapshotMs.cold} ms, warm unchanged ${result.snapshotMs.warmUnchanged} ms, warm one file changed ${result.snapshotMs.warmOneFileChanged} ms, at the max_snapshots cap (drop + prune) ${result.snapshotMs.atSnapshotCapOneFileChanged} ms`,
  );
  console.log(
    `  git add+commit    cold ${result.plainGitMs.cold} ms, warm unchanged ${result.plainGitMs.warmUnchanged} ms, warm one file changed ${result.plainGitMs.warmOneFileChanged} ms`,
  );
  console.log(
    `  CPU time (this process + git) per one-file snapshot: agent-checkpoint ${cpuOne} ms, git add+commit ${plainCpuOne} ms`,
  );
  console.log(`\nstore growth over 20 snapshots of ${gFiles} files, 1% changed each time:`);
  console.log(
    `  first snapshot ${(firstBytes / 1048576).toFixed(1)} MB; each further snapshot adds ${
      (result.growth.meanDeltaBytes / 1024).toFixed(0)
    } KiB on average for ${
      (result.growth.meanChangedBytes / 1024).toFixed(0)
    } KiB of changed content; final ${(prev / 1048576).toFixed(1)} MB`,
  );
  console.log(
    `  target: warm one-file snapshot < 100 ms: ${
      result.snapshotMs.warmOneFileChanged < 100 ? "met" : "NOT met"
    }`,
  );
  if (logs.length) console.log(`log lines: ${logs.join(" | ")}`);
}
fs.rmSync(base, { recursive: true, force: true });
