/**
 * Rollback planning and restore: which files a rollback may touch (those the
 * agent last wrote, unless told otherwise), and writing them back without ever
 * following a symbolic link or leaving the project root.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import { jsonIfThere, lstatSyncIfThere, realpathIfThere } from "../_file_ops.ts";
import {
  diskHashUnder,
  DURING,
  emptyDirsOf,
  joinZ,
  type Ledger,
  ledgerKey,
  type LeftOut,
  type Project,
  showPath,
  splitZ,
  writeAtomic,
} from "./_store.ts";

/** One path a rollback looked at. */
export interface PlanEntry {
  /** The path relative to the project root, as bytes. */
  rel: Buffer;
  /** What the rollback does: write the snapshot's content, remove the file, or skip it. */
  action: "restore" | "remove" | "skip";
  /** Why it is skipped. */
  reason?: string;
  /** The blob and mode: the snapshot's (restore), or the current tree's (remove). */
  blob?: string;
  mode?: string;
  /** What is there when planned: its content hash (null: nothing) and mode. */
  prior?: { hash: string | null; mode: string };
}

/** The changes from `from` to `to`: [status, path, modes and blobs]. */
export function treeChanges(project: Project, from: string, to: string, only?: Buffer) {
  const args = ["diff-tree", "-r", "-z", "--raw", "--no-renames", from, to];
  const parts = splitZ(project.git(args));
  const out: {
    status: string;
    rel: Buffer;
    srcMode: string;
    srcBlob: string;
    dstMode: string;
    dstBlob: string;
  }[] = [];
  for (let i = 0; i + 1 < parts.length; i += 2) {
    const meta = (parts[i] as Buffer).toString("latin1").split(" ");
    const rel = parts[i + 1] as Buffer;
    if (only && !underPath(rel, only)) continue;
    out.push({
      status: (meta[4] ?? "").charAt(0),
      rel,
      srcMode: (meta[0] ?? "").replace(":", ""),
      srcBlob: meta[2] ?? "",
      dstMode: meta[1] ?? "",
      dstBlob: meta[3] ?? "",
    });
  }
  return out;
}

function underPath(rel: Buffer, only: Buffer): boolean {
  if (only.length === 0) return true;
  if (rel.equals(only)) return true;
  return rel.length > only.length && rel[only.length] === 0x2f &&
    rel.subarray(0, only.length).equals(only);
}

/**
 * Why a path cannot be written safely, if it cannot. Paths in `removing` (as
 * latin1 keys) are about to be removed, so a file or link there is no
 * obstacle: the directory the snapshot has in its place is made after.
 */
export function pathProblem(
  root: string,
  rel: Buffer,
  removing?: Set<string>,
): string | undefined {
  const parts = splitSlash(rel);
  if (parts.some((p) => p.length === 0 || p.equals(DOT) || p.equals(DOTDOT))) {
    return "not a plain path";
  }
  let cur = Buffer.from(root);
  let prefix: Buffer = Buffer.alloc(0);
  for (const part of parts.slice(0, -1)) {
    cur = Buffer.concat([cur, SLASH, part]);
    prefix = prefix.length ? Buffer.concat([prefix, SLASH, part]) : part;
    const st = lstatSyncIfThere(cur);
    if (st === undefined) return undefined; // missing directories are created
    if (removing?.has(prefix.toString("latin1"))) return undefined;
    if (st.isSymbolicLink()) return "behind a symbolic link";
    if (!st.isDirectory()) return "a file is where its directory should be";
  }
  const last = lstatSyncIfThere(Buffer.concat([cur, SLASH, parts[parts.length - 1] as Buffer]));
  return last?.isDirectory() ? "a directory is in the way" : undefined;
}

const SLASH = Buffer.from("/");
const DOT = Buffer.from(".");
const DOTDOT = Buffer.from("..");

function splitSlash(rel: Buffer): Buffer[] {
  const parts: Buffer[] = [];
  let start = 0;
  for (let i = 0; i <= rel.length; i++) {
    if (i === rel.length || rel[i] === 0x2f) {
      parts.push(rel.subarray(start, i));
      start = i + 1;
    }
  }
  return parts;
}

/**
 * Decide, for each change from the current tree back to the snapshot's, what
 * a rollback does: only files whose content is what the agent last wrote (or
 * that it deleted) are touched, unless `all`.
 */
export function planRollback(
  project: Project,
  current: string,
  target: string,
  ledger: Ledger,
  options: { all: boolean; only?: Buffer; leftOut?: Map<string, LeftOut> },
): PlanEntry[] {
  const leftOut = options.leftOut ?? new Map<string, LeftOut>();
  const changes = treeChanges(project, current, target, options.only).map((c) => {
    // The current tree was just staged from the disk, so its blob is the
    // file's content hash; only a file missing from it is looked at on disk
    // (it may be there, left out of snapshots for its size).
    const now = c.srcMode !== "000000" ? c.srcBlob : diskHashUnder(project.root, c.rel);
    const key = ledgerKey(c.rel);
    const wrote = ledger[key];
    let reason: string | undefined;
    // Not in the snapshot for its size, so not made after it: never removed, even with --all.
    if (leftOut.has(key) && c.status === "D") reason = LEFT_OUT;
    else if (now === undefined) reason = "unreadable";
    else if (!options.all) {
      if (!(key in ledger)) reason = "not changed by the agent";
      else if (typeof wrote === "string" && wrote.startsWith(DURING)) {
        reason = wrote.slice(DURING.length) === now
          ? "changed during the command, kept"
          : now === null
          ? "deleted since"
          : "edited since";
      } else if (wrote !== now) {
        reason = now === null
          ? "deleted since the agent wrote it"
          : "edited since the agent wrote it";
      }
    }
    return { c, reason, now };
  });
  // What the agent put where the snapshot has a directory (a file, a link)
  // is removed first, so the directory and its files can be restored.
  const removing = new Set<string>();
  for (const { c, reason } of changes) {
    if (c.status === "D" && reason === undefined) removing.add(c.rel.toString("latin1"));
  }
  const plan: PlanEntry[] = [];
  for (const { c, reason: why, now } of changes) {
    let reason = why;
    const prior = { hash: now ?? null, mode: c.srcMode };
    if (reason === undefined) {
      reason = pathProblem(project.root, c.rel, removing);
      if (reason === "a directory is in the way" && c.status !== "D") {
        // A directory the agent made where the snapshot has a file: fine once
        // everything the agent put in it is removed.
        const dir = Buffer.concat([c.rel, SLASH]).toString("latin1");
        const inside = changes.filter((x) => x.c.rel.toString("latin1").startsWith(dir));
        if (inside.length && inside.every((x) => removing.has(x.c.rel.toString("latin1")))) {
          reason = undefined;
        }
      }
    }
    if (reason) plan.push({ rel: c.rel, action: "skip", reason });
    else if (c.status === "D") {
      plan.push({ rel: c.rel, action: "remove", blob: c.srcBlob, mode: c.srcMode, prior });
    } else plan.push({ rel: c.rel, action: "restore", blob: c.dstBlob, mode: c.dstMode, prior });
  }
  // The snapshot's left-out files changed since (or gone): listed, as it cannot restore them.
  const seen = new Set(changes.map(({ c }) => ledgerKey(c.rel)));
  for (const f of leftOut.values()) {
    if (seen.has(f.key)) continue;
    const rel = f.key.startsWith("\0b64:")
      ? Buffer.from(f.key.slice(6), "base64")
      : Buffer.from(f.key, "utf8");
    if (options.only && !underPath(rel, options.only)) continue;
    const st = lstatSyncIfThere(Buffer.concat([Buffer.from(project.root), SLASH, rel]));
    if (st?.isFile() && st.size === f.size && st.mtimeMs === f.mtime) continue;
    const reason = st ? LEFT_OUT : "deleted, not in the snapshot (over max_file_size_mb)";
    plan.push({ rel, action: "skip", reason });
  }
  return plan;
}

/** Why a file left out of the snapshot for its size is left as it is. */
const LEFT_OUT = "not in the snapshot (over max_file_size_mb), kept";

/**
 * Carry out a plan; returns the entries done (a write that fails becomes a
 * skip with the error as its reason). The plan is written to the project's
 * rollback journal first, and each file is replaced in one step (written
 * beside it, then renamed over it) or removed, so a rollback killed at any
 * moment leaves every file either as it was or as restored, and
 * {@link finishJournal} completes it. Paths that are not UTF-8 (which this
 * runtime cannot pass to the file system byte for byte) are written by git,
 * from a temporary index holding just them. A rollback never writes through a
 * symbolic link. Updates the ledger: what a rollback writes counts as the
 * agent's, so the rollback itself can be rolled back. The caller saves the
 * ledger, then removes the journal ({@link endJournal}).
 */
export function applyPlan(
  project: Project,
  plan: PlanEntry[],
  ledger: Ledger,
  target?: DirTarget,
): PlanEntry[] {
  const done: PlanEntry[] = [];
  for (const e of plan) if (e.action === "skip") done.push(e);
  // Removals first: a file or link the agent put where the snapshot has a
  // directory must be gone before the directory's files are written.
  const removes: PlanEntry[] = [];
  for (const e of plan) {
    if (e.action !== "remove") continue;
    const problem = pathProblem(project.root, e.rel);
    if (problem) done.push({ rel: e.rel, action: "skip", reason: problem });
    else removes.push(e);
  }
  const restores = plan.filter((e) => e.action === "restore");
  if (removes.length + restores.length === 0) return done;
  const entries = [...removes, ...restores].map(toJournal);
  const dirs = target === undefined ? {} : {
    target: {
      id: target.id,
      tree: target.tree,
      ...(target.only === undefined ? {} : { only: target.only.toString("base64") }),
    },
  };
  writeAtomic(journalFile(project), JSON.stringify({ v: 1, entries, ...dirs }));
  carryOut(project, removes, restores, ledger, done);
  return done;
}

/** Remove, then restore, each path in one step; non-UTF-8 names through git. */
function carryOut(
  project: Project,
  removes: PlanEntry[],
  restores: PlanEntry[],
  ledger: Ledger,
  done: PlanEntry[],
): void {
  const ok = (e: PlanEntry) => {
    ledger[ledgerKey(e.rel)] = e.action === "restore" ? e.blob as string : null;
    done.push(e);
  };
  const fail = (e: PlanEntry, error: unknown) => {
    const reason = error instanceof Error ? error.message : String(error);
    done.push({ rel: e.rel, action: "skip", reason });
  };
  const plain = (e: PlanEntry) => isUtf8(e.rel);
  for (const e of removes.filter(plain)) {
    try {
      const abs = absOf(project, e.rel);
      const st = lstatSyncIfThere(abs);
      if (st !== undefined && !st.isDirectory()) fs.unlinkSync(abs);
      ok(e);
    } catch (error) {
      fail(e, error);
    }
  }
  withGit(
    project,
    removes.filter((e) => !plain(e)),
    [
      "rm",
      "-q",
      "-f",
      "--ignore-unmatch",
      "--pathspec-from-file=-",
      "--pathspec-file-nul",
    ],
    ok,
    fail,
    { GIT_LITERAL_PATHSPECS: "1" },
  );
  // Checked once the removals are done: what the agent put in a restored file's way is gone.
  const writable = restores.filter((e) => {
    let problem = pathProblem(project.root, e.rel);
    // The directory the agent made there, emptied by the removals, is taken away.
    if (problem === "a directory is in the way" && plain(e) && emptyTree(absOf(project, e.rel))) {
      problem = undefined;
    }
    if (problem) done.push({ rel: e.rel, action: "skip", reason: problem });
    return problem === undefined;
  });
  const mine = writable.filter(plain);
  const contents = readBlobs(project, [...new Set(mine.map((e) => e.blob as string))]);
  for (const e of mine) {
    try {
      writeInPlace(project, e, contents.get(e.blob as string) as Buffer);
      ok(e);
    } catch (error) {
      fail(e, error);
    }
  }
  withGit(
    project,
    writable.filter((e) => !plain(e)),
    ["checkout-index", "-f", "-q", "-z", "--stdin"],
    ok,
    fail,
  );
}

/** Write a blob at its path in one step: beside it first, then renamed over what is there. */
function writeInPlace(project: Project, e: PlanEntry, content: Buffer): void {
  const abs = absOf(project, e.rel);
  const dir = path.dirname(abs);
  fs.mkdirSync(dir, { recursive: true });
  const st = lstatSyncIfThere(abs);
  // A directory the agent made where the snapshot has a file, emptied by the removals.
  if (st?.isDirectory()) removeEmptyTree(abs);
  const tmp = tempOf(abs);
  fs.rmSync(tmp, { force: true });
  if (e.mode === "120000") fs.symlinkSync(content.toString("utf8"), tmp);
  else fs.writeFileSync(tmp, content, { mode: e.mode === "100755" ? 0o755 : 0o644 });
  if (e.mode !== "120000") fs.chmodSync(tmp, e.mode === "100755" ? 0o755 : 0o644);
  fs.renameSync(tmp, abs);
}

/** Whether a directory holds nothing but empty directories. */
function emptyTree(dir: string): boolean {
  try {
    return fs.readdirSync(dir, { withFileTypes: true }).every((e) =>
      e.isDirectory() && emptyTree(path.join(dir, e.name))
    );
  } catch {
    // unreadable: not known to be empty
    return false;
  }
}

/** Remove a directory holding nothing but empty directories (a file in it: an error). */
function removeEmptyTree(dir: string): void {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (!e.isDirectory()) throw new Error(`${path.join(dir, e.name)} is in the way`);
    removeEmptyTree(path.join(dir, e.name));
  }
  fs.rmdirSync(dir);
}

/** Where a file is written before it is renamed into place (a name snapshots leave out). */
const tempOf = (abs: string) => path.join(path.dirname(abs), `.${path.basename(abs)}.ac-rollback`);

function absOf(project: Project, rel: Buffer): string {
  return project.root + "/" + rel.toString("utf8");
}

function isUtf8(rel: Buffer): boolean {
  const text = rel.toString("utf8");
  return !text.includes("\uFFFD") && Buffer.from(text, "utf8").equals(rel);
}

/**
 * The contents of blobs, read from the store by `git cat-file --batch`, asked a thousand at a
 * time: the whole request must fit in the pipe, as the runtime may write all of it before it
 * reads any of the answer.
 */
function readBlobs(project: Project, ids: string[]): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (let i = 0; i < ids.length; i += 1000) {
    const chunk = ids.slice(i, i + 1000);
    const raw = project.store.git.run(["cat-file", "--batch"], {
      gitDir: project.store.gitDir,
      input: chunk.join("\n") + "\n",
    });
    let at = 0;
    for (const id of chunk) {
      const nl = raw.indexOf(0x0a, at);
      const head = raw.subarray(at, nl).toString("latin1").split(" ");
      if (head[1] !== "blob") {
        throw new Error(`the snapshot's object ${id} is missing from the store`);
      }
      const size = Number(head[2]);
      out.set(id, raw.subarray(nl + 1, nl + 1 + size));
      at = nl + 1 + size + 1;
    }
  }
  return out;
}

/** Files git writes or removes for us, from a temporary index holding just them. */
function withGit(
  project: Project,
  list: PlanEntry[],
  args: string[],
  ok: (e: PlanEntry) => void,
  fail: (e: PlanEntry, error: unknown) => void,
  extraEnv = {},
): void {
  if (list.length === 0) return;
  const tmp = path.join(project.dir, `rollback-index-${process.pid}`);
  fs.rmSync(tmp, { force: true });
  const o = { gitDir: project.store.gitDir, index: tmp };
  try {
    project.store.git.run(["update-index", "-z", "--index-info"], {
      ...o,
      input: Buffer.concat(
        list.flatMap((e) => [Buffer.from(`${e.mode} ${e.blob}\t`), e.rel, Buffer.from([0])]),
      ),
    });
    project.store.git.run(args, {
      ...o,
      workTree: project.root,
      cwd: project.root,
      input: joinZ(list.map((e) => e.rel)),
      env: extraEnv,
    });
    for (const e of list) ok(e);
  } catch (error) {
    for (const e of list) fail(e, error);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/** The project's rollback journal: the plan of a rollback under way. */
const journalFile = (project: Project) => path.join(project.dir, "rollback-journal.json");

type JournalEntry = {
  rel: string;
  action: "restore" | "remove";
  blob: string;
  mode: string;
  prior: { hash: string | null; mode: string } | null;
};

function toJournal(e: PlanEntry): JournalEntry {
  return {
    rel: e.rel.toString("base64"),
    action: e.action as "restore" | "remove",
    blob: e.blob as string,
    mode: e.mode as string,
    prior: e.prior ?? null,
  };
}

/** A rollback finished: its journal goes (the ledger is saved first). */
export function endJournal(project: Project): void {
  fs.rmSync(journalFile(project), { force: true });
}

/** The mode git would give what is on disk. */
function modeOf(st: fs.Stats): string {
  return st.isSymbolicLink() ? "120000" : (st.mode & 0o111) !== 0 ? "100755" : "100644";
}

/**
 * Finish a rollback that was killed (its journal is there), under the
 * project's lock: a file already as restored is counted done; one still as it
 * was when planned is restored or removed now; one changed since is left and
 * said why. Temporary files it left are removed. Updates the ledger; the
 * caller saves it, then calls {@link endJournal}.
 *
 * @returns What was done, or undefined when no rollback was interrupted.
 */
export function finishJournal(project: Project, ledger: Ledger): PlanEntry[] | undefined {
  const journal = jsonIfThere(journalFile(project)) as
    | { entries?: unknown; target?: { id?: unknown; tree?: unknown; only?: unknown } }
    | null
    | undefined;
  if (journal === undefined) return undefined;
  const entries = Array.isArray(journal?.entries) ? journal.entries as JournalEntry[] : [];
  const done: PlanEntry[] = [];
  const removes: PlanEntry[] = [];
  const restores: PlanEntry[] = [];
  for (const j of entries) {
    const e: PlanEntry = {
      rel: Buffer.from(j.rel, "base64"),
      action: j.action,
      blob: j.blob,
      mode: j.mode,
      ...(j.prior ? { prior: j.prior } : {}),
    };
    if (isUtf8(e.rel)) fs.rmSync(tempOf(absOf(project, e.rel)), { force: true });
    const abs = Buffer.concat([Buffer.from(project.root), SLASH, e.rel]);
    const st = lstatSyncIfThere(abs);
    const now = diskHashUnder(project.root, e.rel);
    const mode = st && !st.isDirectory() ? modeOf(st) : "000000";
    const finished = e.action === "remove" ? now === null : now === e.blob && mode === e.mode;
    const untouched = e.prior !== undefined && now === e.prior.hash &&
      (now === null || mode === e.prior.mode);
    if (finished) {
      ledger[ledgerKey(e.rel)] = e.action === "restore" ? e.blob as string : null;
      done.push(e);
    } else if (untouched && pathProblem(project.root, e.rel) === undefined) {
      (e.action === "remove" ? removes : restores).push(e);
    } else {
      const reason = pathProblem(project.root, e.rel) ??
        (now === null ? "deleted since the rollback began" : "edited since the rollback began");
      done.push({ rel: e.rel, action: "skip", reason });
    }
  }
  carryOut(project, removes, restores, ledger, done);
  const t = journal?.target;
  if (typeof t?.id === "string" && typeof t.tree === "string") {
    const only = typeof t.only === "string" ? Buffer.from(t.only, "base64") : undefined;
    try {
      done.push(...emptyDirSteps(project, done, { id: t.id, tree: t.tree, only }));
    } catch { /* the snapshot is gone from the store since: its directories are not known */ }
  }
  return done;
}

/** The snapshot a rollback restores, for its empty directories, and the path it is limited to. */
export interface DirTarget {
  id: string;
  tree: string;
  only?: Buffer | undefined;
}

/**
 * A rollback's steps for directories, once its files are done: the directories the agent made
 * that it emptied are removed, then the snapshot's empty directories that are gone are made again.
 * Without the snapshot's list (one taken before it was kept) no directory is removed, as any may
 * have been there. Each step is safe to do twice, so a rollback killed midway redoes them.
 */
export function emptyDirSteps(
  project: Project,
  done: PlanEntry[],
  target: DirTarget,
  dryRun = false,
): PlanEntry[] {
  const message = project.git(["cat-file", "commit", target.id]).toString("utf8");
  const empty = emptyDirsOf(message);
  return [
    ...(empty.complete ? removeEmptiedDirs(project, done, target.tree, empty.keys, dryRun) : []),
    ...restoreEmptyDirs(project.root, empty.keys, {
      ...(target.only ? { only: target.only } : {}),
      dryRun,
    }),
  ];
}

/**
 * The unified diff a plan would apply to the current tree: the current tree with the plan
 * applied in an index of its own, compared with the current tree. No tree is written, so no
 * object of the store is written or touched (git refreshes the time of an object it is asked to
 * write again, also where it is only an alternate's), and a preview writes nothing to the store.
 */
export function resultPatch(project: Project, current: string, plan: PlanEntry[]): string {
  const tmp = path.join(project.workDir, `diff-index-${process.pid}`);
  const gitDir = project.store.gitDir;
  const env = project.gitEnv();
  fs.rmSync(tmp, { force: true });
  try {
    project.store.git.run(["read-tree", current], { gitDir, index: tmp, env });
    const lines: Buffer[] = [];
    for (const e of plan) {
      if (e.action === "skip") continue;
      const head = e.action === "restore" ? `${e.mode} ${e.blob}\t` : `0 ${"0".repeat(40)}\t`;
      lines.push(Buffer.from(head), e.rel, Buffer.from([0]));
    }
    if (lines.length) {
      project.store.git.run(["update-index", "-z", "--index-info"], {
        gitDir,
        index: tmp,
        env,
        input: Buffer.concat(lines),
      });
    }
    const diff = ["diff-index", "--cached", "-p", "-r", "--no-renames", "--no-color", current];
    return project.store.git.run(diff, { gitDir, index: tmp, env }).toString("utf8");
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/** A plan entry for output. */
export function describe(e: PlanEntry): { path: string; reason?: string } {
  return e.reason === undefined ? { path: showPath(e.rel) } : {
    path: showPath(e.rel),
    reason: e.reason,
  };
}

/** A user path (relative to `cwd`) as bytes relative to the project root, or undefined outside it. */
export function relativeToRoot(root: string, cwd: string, p: string): Buffer | undefined {
  // Inside the root as written (from the real cwd): taken as is, a symbolic link on the way
  // included (a rollback replaces the link, never follows it).
  const base = realpathIfThere(path.resolve(cwd)) ?? path.resolve(cwd);
  const direct = path.relative(root, path.resolve(base, p));
  if (!direct.startsWith("..") && !path.isAbsolute(direct)) {
    return Buffer.from(direct.split(path.sep).join("/"));
  }
  const abs = path.resolve(cwd, p);
  // A parent is missing: the path as given.
  const parent = realpathIfThere(path.dirname(abs));
  const real = parent === undefined ? abs : path.join(parent, path.basename(abs));
  const rel = path.relative(root, real);
  if (rel === "") return Buffer.alloc(0);
  if (rel.startsWith("..") || path.isAbsolute(rel)) return undefined;
  return Buffer.from(rel.split(path.sep).join("/"));
}

/** A directory's plan entry: its path shown with a trailing slash. */
const dirEntry = (rel: Buffer, action: PlanEntry["action"], reason?: string): PlanEntry => ({
  rel: Buffer.concat([rel, SLASH]),
  action,
  ...(reason === undefined ? {} : { reason }),
});

const keyToRel = (key: string) =>
  key.startsWith("\0b64:") ? Buffer.from(key.slice(6), "base64") : Buffer.from(key, "utf8");

/**
 * Make again the snapshot's empty directories that are gone (git keeps no directories, so the
 * snapshot names them): an empty directory destroys nothing, so it is made whoever removed it.
 * With `dryRun`, only says which.
 */
export function restoreEmptyDirs(
  root: string,
  keys: string[],
  options: { only?: Buffer; dryRun?: boolean },
): PlanEntry[] {
  const done: PlanEntry[] = [];
  for (const key of keys) {
    const rel = keyToRel(key);
    if (options.only && !underPath(rel, options.only)) continue;
    if (!isUtf8(rel)) continue; // this runtime cannot name it byte for byte
    const abs = root + "/" + rel.toString("utf8");
    const st = lstatSyncIfThere(abs);
    if (st?.isDirectory()) continue;
    const problem = st ? "a file is where the empty directory was" : pathProblem(root, rel);
    if (problem) {
      done.push(dirEntry(rel, "skip", problem));
      continue;
    }
    try {
      if (!options.dryRun) fs.mkdirSync(abs, { recursive: true });
      done.push(dirEntry(rel, "restore"));
    } catch (error) {
      done.push(dirEntry(rel, "skip", error instanceof Error ? error.message : String(error)));
    }
  }
  return done;
}

/**
 * Remove the directories a rollback emptied by removing the agent's files in them, walking up
 * from each removed file: only a directory that is empty now (so never one holding a user's
 * file), and never one the snapshot has (`tree` holds it, or it is or holds one of `emptyDirs`).
 */
export function removeEmptiedDirs(
  project: Project,
  done: PlanEntry[],
  tree: string,
  emptyDirs: string[],
  dryRun = false,
): PlanEntry[] {
  // With `dryRun`, what would be gone: the files removed, then each directory found emptied.
  const gone = new Set<string>();
  const parents = new Set<string>();
  for (const e of done) {
    if (e.action !== "remove" || !isUtf8(e.rel)) continue;
    const rel = e.rel.toString("utf8");
    gone.add(rel);
    const i = rel.lastIndexOf("/");
    if (i > 0) parents.add(rel.slice(0, i));
  }
  if (parents.size === 0) return [];
  const inSnapshot = new Set(
    splitZ(project.git(["ls-tree", "-r", "-d", "-z", "--name-only", tree])).map((p) =>
      p.toString("utf8")
    ),
  );
  for (const key of emptyDirs) {
    const parts = keyToRel(key).toString("utf8").split("/");
    for (let n = 1; n <= parts.length; n++) inSnapshot.add(parts.slice(0, n).join("/"));
  }
  const out: PlanEntry[] = [];
  // Deepest first, so a directory emptied of emptied directories goes too.
  const deepestFirst = (a: string, b: string) => b.split("/").length - a.split("/").length;
  const queue = [...parents].sort(deepestFirst);
  const seen = new Set<string>();
  while (queue.length) {
    const dir = queue.shift() as string;
    if (seen.has(dir) || inSnapshot.has(dir)) continue;
    seen.add(dir);
    const abs = project.root + "/" + dir;
    const st = lstatSyncIfThere(abs);
    // Its own parents checked as a file's in it would be: no symbolic link on the way.
    const behindLink = pathProblem(project.root, Buffer.from(`${dir}/x`)) !== undefined;
    if (!st?.isDirectory() || behindLink) continue;
    try {
      if (!dryRun) fs.rmdirSync(abs); // fails unless empty: a file put there meanwhile keeps it
      else if (!fs.readdirSync(abs).every((name) => gone.has(`${dir}/${name}`))) continue;
    } catch {
      continue; // not empty (or not ours to remove): kept
    }
    gone.add(dir);
    out.push(dirEntry(Buffer.from(dir), "remove"));
    const i = dir.lastIndexOf("/");
    if (i > 0) {
      queue.push(dir.slice(0, i));
      queue.sort(deepestFirst);
    }
  }
  return out;
}
