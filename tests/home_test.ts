// The library's own folder in a Hermes home. `<home>/checkpoints/` is Hermes's checkpoint
// manager's: its first snapshot moves every entry it does not know into `legacy-<timestamp>/`,
// and a store it did not make makes it skip its set-up. These tests replay that move against
// the old layout and the new one, and move state in from the old place under concurrency, a
// SIGKILL midway, a read-only home and a store shared with Hermes.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";
import { main } from "../cli/mod.ts";
import { memoryIo } from "../cli/_io.ts";
import { listSnapshots, rollback, Workspaces } from "../workspace/mod.ts";
import { storeFile } from "../store/mod.ts";
import { moveIn, stateDir } from "../_home.ts";
import { explain } from "../cli/_explain_report.ts";
import { fixture, runScript, scriptCommand, tempHome, underDeno, waitFor } from "./_helpers.ts";

const ENV = { PATH: process.env.PATH };
const RUNS = ["r1", "r2", "r3"];

/** A project with a file the user wrote. */
function project(): string {
  const dir = tempHome();
  fs.writeFileSync(path.join(dir, "a.txt"), "as the user left it\n");
  return dir;
}

/**
 * Three ended runs in `home`, each writing `a.txt` of `dir` through a file tool (with
 * snapshots on, a snapshot before each write), by a host in another process: once it has
 * exited, none of its threads touches the home.
 */
async function populate(home: string, dir: string, snapshots = true): Promise<void> {
  const r = await runScript(fixture("home_runs"), [home, dir, String(snapshots)], {
    timeoutMs: 120_000,
  });
  assert.equal(r.code, 0, r.stderr);
}

/** The layout of earlier versions: the library's state in `<home>/checkpoints/`. */
function oldLayout(home: string): void {
  const state = path.join(home, "agent-checkpoint");
  // (An earlier version wrote it there itself.)
  if (fs.existsSync(state)) fs.renameSync(state, path.join(home, "checkpoints"));
}

/** `agent-checkpoint ls --json`: the run ids, and what it said on stderr. */
async function ls(home: string): Promise<{ runs: string[]; stderr: string }> {
  const m = memoryIo({ env: {} });
  const code = await main(["ls", "--home", home, "--json"], m.io);
  assert.equal(code, 0, m.stderr());
  const runs = (JSON.parse(m.stdout()).runs ?? []) as { runId: string }[];
  return { runs: runs.map((r) => r.runId).sort(), stderr: m.stderr() };
}

const snapshotIds = (home: string, dir: string) =>
  listSnapshots({ home, project: dir, env: ENV }).snapshots.map((s) => s.id);

/** Roll back to the oldest snapshot: the user's `a.txt` is back. */
function rollsBack(home: string, dir: string): void {
  const oldest = snapshotIds(home, dir).length;
  const result = rollback({ home, project: dir, target: oldest, env: ENV });
  assert.deepEqual(result.restored, ["a.txt"]);
  assert.equal(fs.readFileSync(path.join(dir, "a.txt"), "utf8"), "as the user left it\n");
}

/** Git on a repository as a user would run it (no user or system configuration). */
function git(gitDir: string, args: string[], env: Record<string, string> = {}): string {
  return execFileSync("git", args, {
    env: {
      ...ENV,
      GIT_CONFIG_NOSYSTEM: "1",
      GIT_CONFIG_GLOBAL: os.devNull,
      HOME: os.devNull,
      GIT_DIR: gitDir,
      ...env,
    },
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    ...(env.GIT_WORK_TREE ? { cwd: env.GIT_WORK_TREE } : {}),
  }).trim();
}

const refsOf = (gitDir: string) =>
  git(gitDir, ["for-each-ref", "--format=%(refname)"]).split("\n").filter((l) => l !== "");

const hasObject = (gitDir: string, id: string) =>
  spawnSync("git", ["cat-file", "-e", id], { env: { ...ENV, GIT_DIR: gitDir } }).status === 0;

/** Hermes's default excludes (HERMES.md), as its set-up writes them. */
const HERMES_EXCLUDES = [
  "node_modules/",
  "dist/",
  "build/",
  "target/",
  "out/",
  ".next/",
  "__pycache__/",
  "*.pyc",
  ".venv/",
  "venv/",
  "env/",
  ".git/",
  ".worktrees/",
  "*.so",
  "*.zip",
  "*.tar.gz",
  ".env",
  ".env.*",
  "*.log",
  "",
].join("\n");

/**
 * Hermes's first snapshot of `dir`, as HERMES.md says it is taken: when
 * `checkpoints/store` does not exist, every entry of `checkpoints/` but `store`,
 * `.last_prune` and `legacy-*` is moved into a new `legacy-<YYYYmmdd-HHMMSS>/`,
 * then the store is set up (committer identity, excludes) and the snapshot is
 * `refs/hermes/<key16>`. A store it did not make skips the set-up (the commit
 * then takes the user's own identity, here one the user has).
 */
function hermesSnapshot(home: string, dir: string) {
  const base = path.join(home, "checkpoints");
  const store = path.join(base, "store");
  fs.mkdirSync(base, { recursive: true });
  let legacy: string | undefined;
  const setUp = !fs.existsSync(store);
  if (setUp) {
    const moving = fs.readdirSync(base).filter((n) =>
      n !== "store" && n !== ".last_prune" && !n.startsWith("legacy-")
    );
    if (moving.length) {
      const d = new Date();
      const p = (n: number) => String(n).padStart(2, "0");
      const stamp = `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${
        p(d.getMinutes())
      }${p(d.getSeconds())}`;
      legacy = path.join(base, `legacy-${stamp}`);
      fs.mkdirSync(legacy);
      for (const n of moving) fs.renameSync(path.join(base, n), path.join(legacy, n));
    }
    git(store, ["init", "-q", "--bare", store]);
    git(store, ["config", "user.name", "Hermes"]);
    git(store, ["config", "user.email", "hermes@localhost"]);
    fs.writeFileSync(path.join(store, "info", "exclude"), HERMES_EXCLUDES);
  }
  const real = fs.realpathSync(dir);
  const key = createHash("sha256").update(real).digest("hex").slice(0, 16);
  for (const d of ["indexes", "projects", "ledgers"]) {
    fs.mkdirSync(path.join(store, d), { recursive: true });
  }
  const identity = setUp ? {} : {
    GIT_AUTHOR_NAME: "A User",
    GIT_AUTHOR_EMAIL: "user@example.com",
    GIT_COMMITTER_NAME: "A User",
    GIT_COMMITTER_EMAIL: "user@example.com",
  };
  const env = {
    GIT_WORK_TREE: real,
    GIT_INDEX_FILE: path.join(store, "indexes", key),
    ...identity,
  };
  git(store, ["add", "-A"], env);
  const tree = git(store, ["write-tree"], env);
  const commit = git(store, ["commit-tree", tree, "-m", "auto checkpoint"], env);
  git(store, ["update-ref", `refs/hermes/${key}`, commit], env);
  fs.writeFileSync(path.join(store, "projects", `${key}.json`), JSON.stringify({ path: real }));
  return { store, key, commit, legacy, setUp };
}

test("the run ledger and the workspace store live in <home>/agent-checkpoint/, never in checkpoints/", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  const state = path.join(home, "agent-checkpoint");
  assert.equal(storeFile(home), path.join(state, "runs.db"));
  assert.ok(fs.existsSync(path.join(state, "runs.db")));
  assert.ok(fs.existsSync(path.join(state, "store", "HEAD")));
  assert.ok(fs.existsSync(path.join(state, "projects")));
  assert.equal(fs.existsSync(path.join(home, "checkpoints")), false);
  assert.deepEqual((await ls(home)).runs, RUNS);
});

test("Hermes's first snapshot beside the new layout: its set-up runs; ledger, store and snapshots are intact", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  const before = snapshotIds(home, dir);
  assert.equal(before.length, RUNS.length);
  const hermes = hermesSnapshot(home, dir);
  assert.ok(hermes.setUp, "no store of ours was in Hermes's way: its set-up ran");
  assert.equal(hermes.legacy, undefined, "nothing of ours was in checkpoints/ to be moved");
  const { runs, stderr } = await ls(home);
  assert.deepEqual(runs, RUNS);
  assert.equal(stderr, "");
  assert.deepEqual(snapshotIds(home, dir), before);
  // A later run snapshots into our own store, never into Hermes's.
  const ws = new Workspaces({
    home,
    env: ENV,
    log: () => {},
    settings: () => ({ workspace_snapshots: true }),
  });
  fs.writeFileSync(path.join(dir, "b.txt"), "b\n");
  assert.match(ws.beforeWrite(dir, 9, ["b.txt"]) ?? "", /^[0-9a-f]{40}$/);
  assert.deepEqual(refsOf(hermes.store), [`refs/hermes/${hermes.key}`]);
  assert.equal(snapshotIds(home, dir).length, RUNS.length + 1);
  fs.rmSync(path.join(dir, "b.txt"));
  rollsBack(home, dir);
});

test("Hermes's first snapshot over the old layout moves our ledger into legacy-*: it is moved back", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir, false);
  oldLayout(home);
  const hermes = hermesSnapshot(home, dir);
  assert.ok(hermes.legacy && fs.existsSync(path.join(hermes.legacy, "runs.db")), "the replay");
  const { runs, stderr } = await ls(home);
  assert.deepEqual(runs, RUNS, "ls lists every run");
  assert.equal(stderr.match(/moved this library's state/g)?.length, 1, stderr);
  assert.ok(fs.existsSync(path.join(home, "agent-checkpoint", "runs.db")));
  assert.equal(fs.existsSync(hermes.legacy), false, "the legacy folder held only ours");
  // Hermes's store is as Hermes left it.
  assert.deepEqual(refsOf(hermes.store), [`refs/hermes/${hermes.key}`]);
  assert.equal(git(hermes.store, ["rev-parse", `refs/hermes/${hermes.key}`]), hermes.commit);
  // Once moved, a start finds nothing to move.
  const again = await ls(home);
  assert.deepEqual(again, { runs: RUNS, stderr: "" });
});

test("over the old layout with our store, Hermes writes into it: only our refs and what they reach are taken", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  const before = snapshotIds(home, dir);
  oldLayout(home);
  const hermes = hermesSnapshot(home, dir);
  assert.equal(hermes.setUp, false, "the store was there: Hermes skipped its set-up");
  const objects = git(hermes.store, ["count-objects", "-v"]);
  const { runs, stderr } = await ls(home);
  assert.deepEqual(runs, RUNS);
  assert.equal(stderr.match(/moved this library's state/g)?.length, 1, stderr);
  assert.deepEqual(snapshotIds(home, dir), before, "every snapshot is in our own store");
  const ours = path.join(home, "agent-checkpoint", "store");
  assert.equal(hasObject(ours, hermes.commit), false, "Hermes's snapshot is not copied");
  // Hermes's store keeps its refs and every object; ours are gone from its refs.
  assert.deepEqual(refsOf(hermes.store), [`refs/hermes/${hermes.key}`]);
  assert.equal(git(hermes.store, ["count-objects", "-v"]), objects);
  git(hermes.store, ["fsck", "--connectivity-only", "--no-dangling"]);
  rollsBack(home, dir);
});

test("an old store of ours where Hermes's snapshots failed (no identity, no ref of its own): the move-in removes it, and Hermes sets up its own", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  const before = snapshotIds(home, dir);
  oldLayout(home);
  const old = path.join(home, "checkpoints", "store");
  // Hermes found the store there, skipped its set-up, and its snapshot failed: its folders
  // are made, its commit is not ("Author identity unknown").
  for (const d of ["indexes", "projects", "ledgers"]) fs.mkdirSync(path.join(old, d));
  const lines: string[] = [];
  moveIn(home, (_l, m) => lines.push(m));
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.equal(fs.existsSync(old), false, `${old} is left: ${lines.join("\n")}`);
  assert.deepEqual(snapshotIds(home, dir), before, "every snapshot is in our own store");
  const hermes = hermesSnapshot(home, dir);
  assert.ok(hermes.setUp, "nothing of ours in Hermes's way: its set-up runs");
  assert.equal(git(hermes.store, ["config", "user.email"]), "hermes@localhost");
  assert.deepEqual(explain({ home, env: {} }).problems, []);
  rollsBack(home, dir);
});

test("an old store of ours holding Hermes's snapshots is kept, and explain says how to fix it for Hermes", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  oldLayout(home);
  const hermes = hermesSnapshot(home, dir);
  assert.equal(hermes.setUp, false);
  await ls(home); // the move-in
  assert.deepEqual(refsOf(hermes.store), [`refs/hermes/${hermes.key}`], "Hermes's snapshot kept");
  const problems = explain({ home, env: {} }).problems;
  const said = problems.filter((p) => p.includes(hermes.store));
  assert.equal(said.length, 1, problems.join("\n"));
  assert.match(said[0]!, /user\.name/);
  assert.match(said[0]!, /\.env/);
  // The same home after the user moved it aside: nothing to say.
  fs.renameSync(hermes.store, `${hermes.store}.aside`);
  assert.deepEqual(explain({ home, env: {} }).problems, []);
});

test("snapshots leave out secrets, logs, build output, archives and shared objects; settings change it", () => {
  const home = tempHome();
  const dir = tempHome();
  const files = [
    "src.ts",
    ".env",
    ".env.local",
    ".env.example",
    "x.log",
    "dist/out.js",
    "build/o.js",
    "target/t",
    "out/o",
    ".next/n",
    "env/bin/python",
    "a.zip",
    "a.tar.gz",
    "a.tgz",
    "a.7z",
    "lib.so",
    "lib.dylib",
    "lib.dll",
    "notes.md",
  ];
  for (const f of files) {
    fs.mkdirSync(path.dirname(path.join(dir, f)), { recursive: true });
    fs.writeFileSync(path.join(dir, f), f);
  }
  // Hermes made its store first: ours is another, with our excludes.
  const hermes = hermesSnapshot(home, dir);
  let settings: Record<string, unknown> = { workspace_snapshots: true };
  const ws = new Workspaces({ home, env: ENV, log: () => {}, settings: () => settings });
  const stored = (turn: number) => {
    fs.appendFileSync(path.join(dir, "src.ts"), `${turn}`);
    assert.ok(ws.beforeWrite(dir, turn));
    return listSnapshots({ home, project: dir, env: ENV }).snapshots[0]!;
  };
  const all = (turn: number) => {
    const s = stored(turn);
    const project = path.join(home, "agent-checkpoint", "store");
    return git(project, ["ls-tree", "-r", "--name-only", s.tree]).split("\n").sort();
  };
  assert.deepEqual(all(1), ["notes.md", "src.ts"]);
  assert.deepEqual(refsOf(hermes.store), [`refs/hermes/${hermes.key}`]);
  settings = { workspace_snapshots: true, workspace_include: [".env.example"] };
  assert.deepEqual(all(2), [".env.example", "notes.md", "src.ts"]);
  // workspace_exclude replaces the added list; the secrets stay out.
  settings = { workspace_snapshots: true, workspace_exclude: ["notes.md", "*.zip"] };
  const third = all(3);
  for (const f of [".env", ".env.local", ".env.example", "a.zip", "notes.md"]) {
    assert.ok(!third.includes(f), `${f} is left out`);
  }
  for (const f of ["x.log", "dist/out.js", "lib.so", "a.tar.gz", "src.ts"]) {
    assert.ok(third.includes(f), `${f} is stored`);
  }
  // What an index staged with other excludes holds leaves with them.
  settings = { workspace_snapshots: true, workspace_include: [".env"] };
  assert.ok(all(4).includes(".env"));
  settings = { workspace_snapshots: true };
  assert.deepEqual(all(5), ["notes.md", "src.ts"]);
});

test("several processes starting at once move the state in once, with one log line", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  const before = snapshotIds(home, dir);
  oldLayout(home);
  const go = path.join(home, "go");
  const starts = Array.from(
    { length: 6 },
    () => runScript(fixture("move_in"), [home, go], { timeoutMs: 120_000 }),
  );
  fs.writeFileSync(go, "");
  const results = await Promise.all(starts);
  const lines = results.flatMap((r) => {
    assert.equal(r.code, 0, r.stderr);
    return r.stdout.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
  });
  const state = path.join(home, "agent-checkpoint");
  assert.deepEqual(lines.filter((l) => l.dir).map((l) => l.dir), results.map(() => state));
  const said = lines.filter((l) => l.message);
  assert.equal(said.length, 1, JSON.stringify(said));
  assert.equal(said[0].level, "info");
  assert.deepEqual(fs.readdirSync(path.join(home, "checkpoints")), []);
  assert.equal(fs.existsSync(path.join(state, "move-in.lock")), false);
  assert.deepEqual((await ls(home)).runs, RUNS);
  assert.deepEqual(snapshotIds(home, dir), before);
  rollsBack(home, dir);
});

/**
 * A start SIGKILLed while it moves the state in: `git` is a wrapper that, at
 * the subcommand `blockOn`, says so and hangs; the start and the hanging
 * command are then killed.
 */
async function killedMidway(home: string, blockOn: string): Promise<void> {
  const bin = fs.mkdtempSync(path.join(os.tmpdir(), "ac-git-"));
  const real = execFileSync("sh", ["-c", "command -v git"], { encoding: "utf8" }).trim();
  const ready = path.join(bin, "ready");
  fs.writeFileSync(
    path.join(bin, "git"),
    `#!/bin/sh\nfor a in "$@"; do\n  if [ "$a" = "${blockOn}" ]; then echo $$ > "${ready}.tmp"; ` +
      `mv "${ready}.tmp" "${ready}"; exec sleep 600; fi\ndone\nexec "${real}" "$@"\n`,
    { mode: 0o755 },
  );
  const [cmd, argv] = scriptCommand(fixture("move_in"), [home]);
  const child = spawn(cmd, argv, {
    env: { ...process.env, PATH: `${bin}${path.delimiter}${process.env.PATH}` },
    stdio: "ignore",
  });
  const exited = new Promise((r) => child.on("exit", r));
  assert.ok(await waitFor(() => fs.existsSync(ready), 60_000), "the move reached git");
  child.kill("SIGKILL");
  await exited;
  process.kill(Number(fs.readFileSync(ready, "utf8")), "SIGKILL");
}

test("a start SIGKILLed midway leaves a move the next start completes", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  const before = snapshotIds(home, dir);
  oldLayout(home);
  await killedMidway(home, "for-each-ref");
  const state = path.join(home, "agent-checkpoint");
  // Killed in the middle: the ledger is moved, the store not yet; the lock is left.
  assert.ok(fs.existsSync(path.join(state, "runs.db")));
  assert.ok(fs.existsSync(path.join(home, "checkpoints", "store")));
  assert.ok(fs.existsSync(path.join(state, "move-in.lock")));
  const { runs, stderr } = await ls(home);
  assert.deepEqual(runs, RUNS);
  assert.equal(stderr.match(/moved this library's state/g)?.length, 1, stderr);
  assert.deepEqual(fs.readdirSync(path.join(home, "checkpoints")), []);
  assert.equal(fs.existsSync(path.join(state, "move-in.lock")), false);
  assert.deepEqual(snapshotIds(home, dir), before);
  rollsBack(home, dir);
});

test("a move-in lock left empty by a process killed as it made it does not hold starts up", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir, false);
  oldLayout(home);
  const lock = path.join(home, "agent-checkpoint", "move-in.lock");
  fs.mkdirSync(path.dirname(lock));
  fs.writeFileSync(lock, "");
  const minuteAgo = new Date(Date.now() - 60_000);
  fs.utimesSync(lock, minuteAgo, minuteAgo);
  const lines: string[] = [];
  assert.equal(moveIn(home, (_l, m) => lines.push(m)), path.dirname(lock));
  assert.match(lines.join("\n"), /moved this library's state/);
  assert.equal(fs.existsSync(lock), false);
  assert.deepEqual((await ls(home)).runs, RUNS);
});

test("a start SIGKILLed while it copies our refs from a store shared with Hermes", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  const before = snapshotIds(home, dir);
  oldLayout(home);
  const hermes = hermesSnapshot(home, dir);
  await killedMidway(home, "fetch");
  const state = path.join(home, "agent-checkpoint");
  assert.ok(fs.readdirSync(state).some((n) => /^store\.\d+\./.test(n)), "a half-made store");
  assert.ok(refsOf(hermes.store).some((r) => r.startsWith("refs/agent-checkpoint/")));
  assert.deepEqual((await ls(home)).runs, RUNS);
  assert.deepEqual(fs.readdirSync(state).filter((n) => n.startsWith("store")), ["store"]);
  assert.deepEqual(refsOf(hermes.store), [`refs/hermes/${hermes.key}`]);
  assert.deepEqual(snapshotIds(home, dir), before);
  rollsBack(home, dir);
});

test("state Hermes moved into legacy-* beside a newer ledger: both are kept, nothing is lost", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir, false);
  oldLayout(home);
  hermesSnapshot(home, dir); // the ledger goes to legacy-*
  // An earlier version then made a new ledger in checkpoints/.
  const other = tempHome();
  await populate(other, project(), false);
  fs.renameSync(
    path.join(other, "agent-checkpoint", "runs.db"),
    path.join(home, "checkpoints", "runs.db"),
  );
  const lines: string[] = [];
  const state = moveIn(home, (_l, m) => lines.push(m));
  assert.equal(state, path.join(home, "agent-checkpoint"));
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /kept beside it, not merged: .*moved-aside/);
  const aside = fs.readdirSync(path.join(state, "moved-aside"));
  assert.equal(aside.length, 1);
  assert.ok(fs.existsSync(path.join(state, "moved-aside", aside[0]!, "runs.db")));
  assert.ok(fs.existsSync(path.join(state, "runs.db")));
});

test("an old store of ours beside a new one: its snapshots join the new store, and it goes", async () => {
  const home = tempHome();
  const dir = project();
  await populate(home, dir);
  // An earlier version, meanwhile, kept another project's snapshots in checkpoints/.
  const other = tempHome();
  const otherDir = project();
  await populate(other, otherDir);
  const before = snapshotIds(other, otherDir);
  fs.mkdirSync(path.join(home, "checkpoints"));
  for (const name of ["store", "projects"]) {
    fs.renameSync(path.join(other, "agent-checkpoint", name), path.join(home, "checkpoints", name));
  }
  const lines: string[] = [];
  moveIn(home, (_l, m) => lines.push(m));
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.deepEqual(fs.readdirSync(path.join(home, "checkpoints")), []);
  assert.deepEqual(snapshotIds(home, otherDir), before);
  assert.equal(snapshotIds(home, dir).length, RUNS.length);
  rollsBack(home, otherDir);
  rollsBack(home, dir);
});

/** A tmpfs this test mounts (we may be root), or undefined when it cannot. */
function tmpfs(): string | undefined {
  if (process.platform !== "linux" || process.getuid?.() !== 0) return undefined;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ac-ro-"));
  const r = spawnSync("mount", ["-t", "tmpfs", "-o", "size=64m", "tmpfs", dir]);
  return r.status === 0 ? dir : undefined;
}

test("a read-only home: the old place is read, with a warning", async (t) => {
  const mount = tmpfs();
  if (mount === undefined) {
    t.skip("needs root to mount a tmpfs (chmod does not stop root)");
    return;
  }
  try {
    const home = path.join(mount, "home");
    fs.mkdirSync(home);
    const dir = project();
    await populate(home, dir);
    oldLayout(home);
    execFileSync("mount", ["-o", "remount,ro", mount]);
    const { runs, stderr } = await ls(home);
    assert.match(stderr, /still in .*checkpoints.*read-only.*reading it there/);
    assert.deepEqual(runs, RUNS, `ls reads the old place: ${stderr}`);
    assert.equal(stateDir(home), path.join(home, "checkpoints"));
    assert.equal(snapshotIds(home, dir).length, RUNS.length);
  } finally {
    spawnSync("umount", ["-l", mount]);
  }
});

test("library code names the old folder only where state is moved in from it", {
  skip: !underDeno && "reads the sources",
}, () => {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const sources = (dir: string): string[] =>
    fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((e) => {
      const rel = path.posix.join(dir, e.name);
      if (e.isDirectory()) {
        return e.name.startsWith(".") || ["npm", "node_modules", "tests", "scripts", "docs"]
            .includes(rel)
          ? []
          : sources(rel);
      }
      return e.name.endsWith(".ts") ? [rel] : [];
    });
  // A "checkpoints" literal (a folder name), or the folder in a path, a comment or a message.
  const old = /["'`]checkpoints["'`/]|<home>\/checkpoints\b|\bcheckpoints\/(runs\.db|store)/;
  const offenders = sources("").filter((f) =>
    f !== "_home.ts" && old.test(fs.readFileSync(path.join(root, f), "utf8"))
  );
  assert.deepEqual(offenders, []);
});
