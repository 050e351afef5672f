/**
 * Where this library keeps its state in a home: `<home>/agent-checkpoint/`
 * (the run ledger `runs.db`, the workspace store `store/`, its `projects/`,
 * `locks/` and `size.json`). Checkpoint files are elsewhere
 * (`checkpoint_dir`).
 *
 * Earlier versions kept that state in `<home>/checkpoints/`, which is
 * Hermes's: its checkpoint manager moves every entry it does not know into
 * `checkpoints/legacy-<timestamp>/` and later deletes it. The first start
 * that finds state there moves it in ({@linkcode moveIn}): once, under a
 * lock, with one log line, each entry by one rename (a move killed midway is
 * completed by the next start), taking back what Hermes moved into
 * `legacy-*`, and from a store shared with Hermes only this library's refs
 * and the objects they reach. In a read-only home the old place is read.
 *
 * This is the one module that names the old place.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import {
  builtin,
  codeOf,
  ensureDir,
  lstatSyncIfThere,
  readdirIfThere,
  readTextIfThere,
} from "./_file_ops.ts";
import { createLog, errorText, type Log } from "./log.ts";

/** The name of the library's folder in a home. */
export const STATE_DIR_NAME = "agent-checkpoint";

/** Where earlier versions kept their state: Hermes's checkpoint manager's folder. */
const OLD_DIR_NAME = "checkpoints";

/** The run ledger's files, the database last (a move killed midway leaves it to be moved). */
const LEDGER = ["runs.db-wal", "runs.db-shm", "runs.db-journal", "runs.db"];
/** The workspace store's entries beside its repository. */
const STORE_ENTRIES = ["size.json", "locks", "projects"];
/** This library's refs in a workspace store. */
const OUR_REFS = ["refs/agent-checkpoint/", "refs/agent-checkpoint-pending/"];

/** How long a start waits for another process's move, ms. */
export const MOVE_WAIT_MS = 30_000;

/** The place in use per home, once this process looked. */
const inUse = new Map<string, string>();

/** The home as an absolute path; as given when the working directory is gone (never throws). */
function absolute(home: string): string {
  if (path.isAbsolute(home)) return path.normalize(home);
  try {
    return path.resolve(home);
  } catch {
    // the working directory was deleted: the home as given, whose use then says why
    return home;
  }
}

/**
 * The library's folder in a home, `<home>/agent-checkpoint`; in a read-only
 * home whose state is still in the old place, the old place. The first call
 * for a home moves the state in ({@linkcode moveIn}); later calls cost
 * nothing.
 *
 * @param home The home directory.
 * @returns The folder holding the run ledger and the workspace store.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { stateDir } from "./_home.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-home-doc-"));
 * assert.equal(stateDir(home), path.join(home, "agent-checkpoint"));
 * ```
 */
export function stateDir(home: string): string {
  const key = absolute(home);
  return inUse.get(key) ?? moveIn(key);
}

/** What the old place holds of this library's state. */
interface Found {
  /** Folders holding ledger or store entries (the old place, then `legacy-*`, newest first). */
  sources: { dir: string; label: string; names: string[] }[];
  /** The old store, when it holds refs of this library. */
  store?: string;
  /** The old store, when it is ours to remove: not set up by Hermes, holding no ref. */
  leftover?: string;
}

/** A store's ref names, loose and packed, read without git (a start looks at it each time). */
function refNames(gitDir: string): string[] {
  const names: string[] = [];
  const walk = (rel: string) => {
    for (const e of fs.readdirSync(path.join(gitDir, rel), { withFileTypes: true })) {
      const name = `${rel}/${e.name}`;
      if (e.isDirectory()) walk(name);
      else names.push(name);
    }
  };
  if (fs.existsSync(path.join(gitDir, "refs"))) walk("refs");
  const packed = readTextIfThere(path.join(gitDir, "packed-refs")) ?? "";
  for (const line of packed.split("\n")) {
    const m = /^[0-9a-f]{40,64} (refs\/\S+)$/.exec(line);
    if (m) names.push(m[1]!);
  }
  return names;
}

/**
 * Whether Hermes set a store up (its committer identity in the store's config): then it is
 * Hermes's, never touched. One this library made has none: Hermes, finding it there, skipped
 * its set-up.
 */
function setUpByHermes(gitDir: string): boolean {
  const config = readTextIfThere(path.join(gitDir, "config")) ?? "";
  return /^\s*\[user\][^[]*^\s*email\s*=/m.test(config);
}

/**
 * A workspace store an earlier version of this library made in Hermes's place
 * (`<home>/checkpoints/store`) that Hermes has written snapshots into: Hermes
 * skipped its set-up there, so its snapshots have no committer identity (they
 * fail) or take the user's, and nothing leaves secrets out. The move-in keeps
 * it (the snapshots are the user's); `explain` reports it. Undefined when
 * there is none.
 *
 * @param home The home directory.
 * @returns The store's path and what to do, or undefined.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { oldStoreForHermes } from "./_home.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-old-store-doc-"));
 * assert.equal(oldStoreForHermes(home), undefined);
 * ```
 */
export function oldStoreForHermes(home: string): { store: string; fix: string } | undefined {
  const store = path.join(absolute(home), OLD_DIR_NAME, "store");
  try {
    if (!fs.existsSync(path.join(store, "HEAD")) || setUpByHermes(store)) return undefined;
    if (!refNames(store).some((r) => r.startsWith("refs/hermes/"))) return undefined;
  } catch {
    // unreadable: nothing to say about it
    return undefined;
  }
  return {
    store,
    fix:
      `${store} was made by an earlier version of this library and holds Hermes's snapshots, but Hermes skipped its set-up there: its snapshots have no committer identity (they fail) or take yours, and keep .env files and logs. Give it Hermes's identity (\`git --git-dir=${store} config user.name Hermes\`, and user.email) and add .env, .env.* and *.log to ${
        path.join(store, "info", "exclude")
      }; or move it aside so that Hermes makes its own (its snapshots then stay in the moved copy)`,
  };
}

/** The refs of this library a store has: loose, then packed (Hermes may pack its store). */
function ourRefs(gitDir: string): boolean {
  // Each read only where something is: a failed read costs a thrown error, 20 times a lookup.
  for (const prefix of OUR_REFS) {
    const dir = path.join(gitDir, prefix);
    if (fs.existsSync(dir) && (readdirIfThere(dir) ?? []).length > 0) return true;
  }
  const file = path.join(gitDir, "packed-refs");
  const packed = fs.existsSync(file) ? readTextIfThere(file) : undefined;
  return packed !== undefined && OUR_REFS.some((p) => packed.includes(` ${p}`));
}

/**
 * Whether an old store is one this library made (Hermes did not set it up) and no ref is left
 * in it: its snapshots moved in, Hermes's never there. Left, it would only keep Hermes from
 * setting up its own store.
 */
function emptyOfOurs(gitDir: string): boolean {
  try {
    return fs.existsSync(path.join(gitDir, "HEAD")) && !setUpByHermes(gitDir) &&
      refNames(gitDir).length === 0;
  } catch {
    // unreadable: left as it is
    return false;
  }
}

/** Look for state in the old place; undefined when there is none (one read when nothing is). */
function survey(home: string): Found | undefined {
  const old = path.join(home, OLD_DIR_NAME);
  if (!fs.existsSync(old)) return undefined; // the usual case: one stat
  const names = readdirIfThere(old);
  if (names === undefined) return undefined;
  const found: Found = { sources: [] };
  const mine = (list: string[]) =>
    list.filter((n) => LEDGER.includes(n) || STORE_ENTRIES.includes(n));
  const here = mine(names);
  if (here.length) found.sources.push({ dir: old, label: OLD_DIR_NAME, names: here });
  for (const name of names.filter((n) => n.startsWith("legacy-")).sort().reverse()) {
    const dir = path.join(old, name);
    const inside = mine(readdirIfThere(dir) ?? []);
    if (inside.length) found.sources.push({ dir, label: `${OLD_DIR_NAME}-${name}`, names: inside });
  }
  if (names.includes("store") && ourRefs(path.join(old, "store"))) {
    found.store = path.join(old, "store");
  } else if (names.includes("store") && emptyOfOurs(path.join(old, "store"))) {
    found.leftover = path.join(old, "store");
  }
  return found.sources.length || found.store || found.leftover ? found : undefined;
}

/**
 * Move this library's state from the old place into `<home>/agent-checkpoint/`
 * when some is there: once, under a lock other starts wait for, with one log
 * line; a read-only home leaves it where it is and it is read there (with a
 * warning). Never throws. Cheap when there is nothing to move: one read of a
 * directory.
 *
 * @param home The home directory.
 * @param log Where the line goes. @default {the home's log}
 * @returns The folder in use (see {@linkcode stateDir}).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { moveIn } from "./_home.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-move-doc-"));
 * fs.mkdirSync(path.join(home, "checkpoints"));
 * fs.writeFileSync(path.join(home, "checkpoints", "runs.db"), "");
 * const lines: string[] = [];
 * assert.equal(moveIn(home, (_level, line) => lines.push(line)), path.join(home, "agent-checkpoint"));
 * assert.ok(fs.existsSync(path.join(home, "agent-checkpoint", "runs.db")));
 * assert.equal(fs.existsSync(path.join(home, "checkpoints", "runs.db")), false);
 * assert.equal(lines.length, 1);
 * ```
 */
export function moveIn(home: string, log?: Log): string {
  const key = absolute(home);
  const target = path.join(key, STATE_DIR_NAME);
  let dir = target;
  try {
    if (survey(key) !== undefined) dir = moveLocked(key, target, log ?? createLog(key));
  } catch (error) {
    (log ?? createLog(key))(
      "warn",
      `moving this library's state into ${target} failed: ${errorText(error)}; ` +
        "the next start tries again",
    );
  }
  inUse.set(key, dir);
  return dir;
}

/** Whether an error says the file system will not be written. */
const readOnly = (error: unknown) => ["EROFS", "EACCES", "EPERM"].includes(codeOf(error) ?? "");

/** The move, under the lock; returns the folder in use. */
function moveLocked(home: string, target: string, log: Log): string {
  try {
    // Not mkdir's recursive form: Node's says ENOENT where the file system is read-only.
    ensureDir(target);
  } catch (error) {
    if (!readOnly(error)) throw error;
    return readOnlyHome(home, target, log, error);
  }
  const lock = path.join(target, "move-in.lock");
  const end = Date.now() + MOVE_WAIT_MS;
  for (let delay = 2;; delay = Math.min(delay * 2, 50)) {
    try {
      if (takeLock(lock)) break;
    } catch (error) {
      if (!readOnly(error)) throw error;
      return readOnlyHome(home, target, log, error);
    }
    if (Date.now() >= end) {
      log(
        "warn",
        `another process has been moving this library's state into ${target} for ${
          MOVE_WAIT_MS / 1000
        } s: going on without waiting`,
      );
      return target;
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, delay);
  }
  try {
    const found = survey(home); // again: another process may have moved it meanwhile
    if (found === undefined) return target;
    const moved: string[] = [];
    const aside: string[] = [];
    try {
      for (const source of found.sources) moveSource(source, target, moved, aside);
      if (found.store) moveStore(found.store, target, moved);
      const old = found.store ?? found.leftover;
      if (old !== undefined && emptyOfOurs(old)) {
        fs.rmSync(old, { recursive: true, force: true });
        moved.push(
          `removed ${old}, an empty store of this library's, so that Hermes sets up its own`,
        );
      }
    } catch (error) {
      if (!readOnly(error) || moved.length) throw error;
      return readOnlyHome(home, target, log, error);
    }
    log(
      "info",
      `moved this library's state into ${target} (Hermes's checkpoint manager owns ${
        path.join(home, OLD_DIR_NAME)
      }): ${moved.join(", ")}${
        aside.length ? `; kept beside it, not merged: ${aside.join(", ")}` : ""
      }`,
    );
    return target;
  } finally {
    fs.rmSync(lock, { force: true });
  }
}

/** A home that cannot be written: the old place is read, with a warning. */
function readOnlyHome(home: string, target: string, log: Log, error: unknown): string {
  const found = survey(home);
  const ledger = found?.sources.find((s) => s.names.includes("runs.db"));
  const dir = ledger?.dir ?? path.join(home, OLD_DIR_NAME);
  log(
    "warn",
    `this library's state is still in ${dir} and cannot be moved into ${target} ` +
      `(${codeOf(error) ?? errorText(error)}: the home is read-only): reading it there`,
  );
  return dir;
}

/** Take the move's lock file, clearing one whose process is gone; false while another holds it. */
function takeLock(file: string): boolean {
  const owner = JSON.stringify({ pid: process.pid, start: procStart(process.pid) });
  try {
    fs.writeFileSync(file, owner, { flag: "wx" });
    return true;
  } catch (error) {
    if (codeOf(error) !== "EEXIST") throw error;
  }
  const text = readTextIfThere(file);
  if (text === undefined) return false; // released meanwhile: try again
  let held: { pid?: unknown; start?: unknown } = {};
  try {
    held = JSON.parse(text);
  } catch { /* torn: being written */ }
  if (typeof held.pid === "number" ? alive(held.pid, held.start) : !tornLong(file)) return false;
  // Its process is gone (killed mid-move): take it over, unless another did first.
  const stale = `${file}.${process.pid}.stale`;
  try {
    fs.renameSync(file, stale);
  } catch {
    // another process took the stale lock over first: it does the move
    return false;
  }
  if (readTextIfThere(stale) !== text) {
    fs.renameSync(stale, file); // another's fresh lock: put it back
    return false;
  }
  fs.rmSync(stale, { force: true });
  return takeLock(file);
}

/** Whether a lock file with no owner in it was left so by a process killed as it made it. */
function tornLong(file: string): boolean {
  const at = lstatSyncIfThere(file)?.mtimeMs;
  return at !== undefined && Date.now() - at > 10_000;
}

/** A process's start time (Linux), so that a reused pid does not keep a lock alive. */
function procStart(pid: number): string | undefined {
  const stat = readTextIfThere(`/proc/${pid}/stat`);
  return stat?.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
}

function alive(pid: number, start: unknown): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if (codeOf(error) !== "EPERM") return false;
  }
  return typeof start !== "string" || (procStart(pid) ?? start) === start;
}

/** Move one folder's ledger and store entries into `target`, each by one rename. */
function moveSource(
  source: { dir: string; label: string; names: string[] },
  target: string,
  moved: string[],
  aside: string[],
): void {
  const ledger = source.names.filter((n) => LEDGER.includes(n));
  if (ledger.length) {
    // A ledger is there already: this one (and its log) is kept beside it, whole.
    const to = fs.existsSync(path.join(target, "runs.db"))
      ? asideDir(target, source.label)
      : target;
    fs.mkdirSync(to, { recursive: true });
    for (const name of LEDGER.filter((n) => ledger.includes(n))) {
      fs.renameSync(path.join(source.dir, name), path.join(to, name));
    }
    (to === target ? moved : aside).push(
      path.relative(path.dirname(target), path.join(to, "runs.db")),
    );
  }
  for (const name of STORE_ENTRIES.filter((n) => source.names.includes(n))) {
    const otherwise = path.join(asideDir(target, source.label), name);
    merge(path.join(source.dir, name), path.join(target, name), otherwise, aside);
    moved.push(path.relative(path.dirname(target), path.join(source.dir, name)));
  }
  if (source.label !== OLD_DIR_NAME && (readdirIfThere(source.dir) ?? [""]).length === 0) {
    fs.rmdirSync(source.dir); // a legacy-* folder that held only this library's state
  }
}

/**
 * Where a source's entries go that something is in the way of:
 * `moved-aside/<label>`, or `<label>-2`, … when an earlier move left a whole
 * ledger there (one that a killed move left without its database is this
 * move's, resumed).
 */
function asideDir(target: string, label: string): string {
  for (let n = 1;; n++) {
    const dir = path.join(target, "moved-aside", n === 1 ? label : `${label}-${n}`);
    if (!fs.existsSync(path.join(dir, "runs.db"))) return dir;
  }
}

/** Move `from` to `to`; when both are folders, entry by entry; what is in the way goes aside. */
function merge(from: string, to: string, otherwise: string, aside: string[]): void {
  const there = lstatSyncIfThere(to);
  if (there === undefined) {
    fs.renameSync(from, to);
    return;
  }
  if (there.isDirectory() && fs.lstatSync(from).isDirectory()) {
    for (const name of fs.readdirSync(from)) {
      merge(path.join(from, name), path.join(to, name), path.join(otherwise, name), aside);
    }
    fs.rmdirSync(from);
    return;
  }
  fs.mkdirSync(path.dirname(otherwise), { recursive: true });
  fs.renameSync(from, otherwise);
  aside.push(otherwise);
}

/** Whether a store is this library's alone: only its refs, none of Hermes's set-up. */
function oursAlone(gitDir: string): boolean {
  if (["indexes", "ledgers", "projects"].some((n) => fs.existsSync(path.join(gitDir, n)))) {
    return false;
  }
  const refs = gitLines(["for-each-ref", "--format=%(refname)"], gitDir);
  return refs.every((r) => OUR_REFS.some((p) => r.startsWith(p)));
}

/**
 * Move the old store: renamed whole when it is this library's alone; else
 * (shared with Hermes, or a store is there already) only this library's refs
 * and the objects they reach are fetched, and then those refs are removed
 * from the old store, which is otherwise left as it is when Hermes's (and
 * removed when it is this library's alone).
 */
function moveStore(old: string, target: string, moved: string[]): void {
  const dest = path.join(target, "store");
  // A store a move killed midway left half made (its process is gone).
  for (const name of readdirIfThere(target) ?? []) {
    const pid = /^store\.(\d+)\.\w+$/.exec(name)?.[1];
    if (pid !== undefined && !alive(Number(pid), undefined)) {
      fs.rmSync(path.join(target, name), { recursive: true, force: true });
    }
  }
  const alone = oursAlone(old);
  if (!fs.existsSync(dest) && alone) {
    fs.renameSync(old, dest);
    moved.push("store");
    return;
  }
  const refs = gitLines(
    ["for-each-ref", "--format=%(objectname) %(refname)", ...OUR_REFS],
    old,
  ).map((l) => l.split(" ") as [string, string]);
  let into = dest;
  let tmp: string | undefined;
  if (!fs.existsSync(path.join(dest, "HEAD"))) {
    tmp = path.join(target, `store.${process.pid}.${Math.random().toString(36).slice(2)}`);
    gitLines(["init", "-q", "--bare", "--template=", tmp], tmp, target);
    into = tmp;
  }
  try {
    const have = new Map(
      gitLines(["for-each-ref", "--format=%(refname) %(objectname)"], into).map((l) =>
        l.split(" ") as [string, string]
      ),
    );
    const specs: string[] = [];
    const want = new Map<string, string>();
    for (const [id, ref] of refs) {
      const now = have.get(ref);
      if (now === id) continue;
      // The same project's ref here already differs: the old one is kept under another name.
      const name = now === undefined ? ref : ref.replace(/^refs\//, "refs/agent-checkpoint-moved/");
      specs.push(`+${ref}:${name}`);
      want.set(name, id);
    }
    if (specs.length) {
      gitLines(["fetch", "-q", "--no-tags", "--no-write-fetch-head", old, ...specs], into);
      const got = new Map(
        gitLines(["for-each-ref", "--format=%(refname) %(objectname)"], into).map((l) =>
          l.split(" ") as [string, string]
        ),
      );
      for (const [name, id] of want) {
        if (got.get(name) !== id) throw new Error(`${name} was not copied from ${old}`);
      }
    }
    if (tmp !== undefined) {
      fs.renameSync(tmp, dest);
      tmp = undefined;
    }
  } finally {
    if (tmp !== undefined) fs.rmSync(tmp, { recursive: true, force: true });
  }
  // Copied: this library's refs leave the old store; its objects are Hermes's to prune.
  if (refs.length) {
    gitLines(
      ["update-ref", "--stdin"],
      old,
      old,
      refs.map(([id, ref]) => `delete ${ref} ${id}\n`).join(""),
    );
  }
  if (alone) {
    // Ours alone, and a store was here already: emptied of its refs, it would only be in the way
    // of Hermes's set-up.
    fs.rmSync(old, { recursive: true, force: true });
    moved.push(`the ${refs.length} snapshot refs of ${old}`);
  } else moved.push(`${refs.length} snapshot refs of a store shared with Hermes`);
}

/** Run git on a repository with no user or system configuration and no hooks; its output lines. */
function gitLines(args: string[], gitDir: string, cwd = gitDir, input?: string): string[] {
  const env: Record<string, string> = {
    LC_ALL: "C",
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: os.devNull,
    GIT_TERMINAL_PROMPT: "0",
    HOME: os.devNull,
    XDG_CONFIG_HOME: os.devNull,
    GIT_DIR: gitDir,
  };
  for (const k of ["PATH", "SystemRoot", "TMPDIR", "TEMP", "TMP"]) {
    const v = process.env[k];
    if (v !== undefined) env[k] = v;
  }
  const cp = builtin<typeof import("node:child_process")>("node:child_process");
  const r = cp.spawnSync(
    "git",
    [
      "-c",
      `core.hooksPath=${os.devNull}`,
      "-c",
      "gc.auto=0",
      "-c",
      "maintenance.auto=false",
      ...args,
    ],
    { cwd, env, encoding: "utf8", ...(input === undefined ? {} : { input }) },
  );
  if (r.error) throw new Error(`git ${args[0]}: ${r.error.message}`);
  if (r.status !== 0) {
    throw new Error(
      `git ${args[0]} failed (${r.status}): ${(r.stderr ?? "").trim().split("\n")[0]}`,
    );
  }
  return r.stdout.split("\n").filter((l) => l !== "");
}
