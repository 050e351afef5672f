/**
 * What looking for state to move in costs a start when there is none to
 * move ({@linkcode moveIn}, run by every keeper, store open and command):
 * in a home without `checkpoints/`, and in a Hermes home whose
 * `checkpoints/` holds Hermes's store, `.last_prune` and two `legacy-*`
 * folders of its own. Then one real move: a ledger and a store of 200
 * snapshots' worth of objects, renamed in, and the same store shared with
 * Hermes, whose refs are copied out.
 *
 * `deno run -A scripts/bench_home.ts [iterations]` (default 20000).
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { execFileSync } from "node:child_process";
import { moveIn } from "../_home.ts";

const n = Number(process.argv[2] ?? 20000);
const quiet = () => {};

function time(label: string, home: string): void {
  for (let i = 0; i < 200; i++) moveIn(home, quiet); // warm
  const t0 = performance.now();
  for (let i = 0; i < n; i++) moveIn(home, quiet);
  const us = (performance.now() - t0) * 1000 / n;
  console.log(`${label}: ${us.toFixed(1)} µs a start`);
}

const tmp = (p: string) => fs.mkdtempSync(path.join(os.tmpdir(), p));

// Nothing there at all.
time("no checkpoints/ folder", tmp("ac-bench-home-"));

// A Hermes home: its store, its prune stamp and two legacy folders of its own.
const hermes = tmp("ac-bench-home-");
const cp = path.join(hermes, "checkpoints");
const git = (dir: string, args: string[]) =>
  execFileSync("git", args, {
    env: { PATH: process.env.PATH, GIT_DIR: dir, HOME: os.devNull, GIT_CONFIG_NOSYSTEM: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
git(path.join(cp, "store"), ["init", "-q", "--bare", path.join(cp, "store")]);
fs.mkdirSync(path.join(cp, "store", "refs", "hermes"), { recursive: true });
fs.writeFileSync(path.join(cp, ".last_prune"), "0");
for (const l of ["legacy-20260101-000000", "legacy-20260201-000000"]) {
  fs.mkdirSync(path.join(cp, l, "notes"), { recursive: true });
}
time("a Hermes home, nothing of ours in it", hermes);

// One real move of a store: 200 commits of 20 files each, alone and shared with Hermes.
function oldStore(shared: boolean): string {
  const home = tmp("ac-bench-home-");
  const base = path.join(home, "checkpoints");
  const store = path.join(base, "store");
  git(store, ["init", "-q", "--bare", store]);
  fs.writeFileSync(path.join(base, "runs.db"), "");
  const work = tmp("ac-bench-home-tree-");
  const env = {
    PATH: process.env.PATH,
    GIT_DIR: store,
    GIT_WORK_TREE: work,
    GIT_INDEX_FILE: path.join(base, "index"),
    GIT_AUTHOR_NAME: "b",
    GIT_AUTHOR_EMAIL: "b@b",
    GIT_COMMITTER_NAME: "b",
    GIT_COMMITTER_EMAIL: "b@b",
    HOME: os.devNull,
  };
  let parents: string[] = [];
  for (let c = 0; c < 200; c++) {
    for (let f = 0; f < 20; f++) fs.writeFileSync(path.join(work, `f${f}`), `${c}-${f}\n`);
    execFileSync("git", ["add", "-A"], { env, cwd: work });
    const tree = execFileSync("git", ["write-tree"], { env, cwd: work }).toString().trim();
    const id = execFileSync("git", ["commit-tree", tree, "-m", "s"], { env, cwd: work })
      .toString().trim();
    parents = [id, ...parents].slice(0, 20);
  }
  const list = execFileSync(
    "git",
    [
      "commit-tree",
      execFileSync("git", ["write-tree"], { env, cwd: work }).toString().trim(),
      ...parents.flatMap((p) => ["-p", p]),
      "-m",
      "l",
    ],
    { env, cwd: work },
  ).toString().trim();
  execFileSync("git", ["update-ref", "refs/agent-checkpoint/0123456789abcdef", list], { env });
  if (shared) {
    execFileSync("git", ["update-ref", "refs/hermes/0123456789abcdef", parents[0]!], { env });
  }
  return home;
}
for (const shared of [false, true]) {
  const home = oldStore(shared);
  const t0 = performance.now();
  moveIn(home, quiet);
  console.log(
    `moving a ledger and a store of 200 commits in${shared ? ", shared with Hermes" : ""}: ${
      (performance.now() - t0).toFixed(1)
    } ms`,
  );
}
