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
import { lstatSyncIfThere, realpathIfThere } from "../_file_ops.ts";
import {
  diskHash,
  joinZ,
  type Ledger,
  ledgerKey,
  type Project,
  showPath,
  splitZ,
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
  options: { all: boolean; only?: Buffer },
): PlanEntry[] {
  const changes = treeChanges(project, current, target, options.only).map((c) => {
    // The current tree was just staged from the disk, so its blob is the
    // file's content hash; only a file missing from it is looked at on disk
    // (it may be there, left out of snapshots for its size).
    const now = c.srcMode !== "000000"
      ? c.srcBlob
      : diskHash(Buffer.concat([Buffer.from(project.root), SLASH, c.rel]));
    const key = ledgerKey(c.rel);
    let reason: string | undefined;
    if (now === undefined) reason = "unreadable";
    else if (!options.all) {
      if (!(key in ledger)) reason = "not changed by the agent";
      else if (ledger[key] !== now) reason = "edited since the agent wrote it";
    }
    return { c, reason };
  });
  // What the agent put where the snapshot has a directory (a file, a link)
  // is removed first, so the directory and its files can be restored.
  const removing = new Set<string>();
  for (const { c, reason } of changes) {
    if (c.status === "D" && reason === undefined) removing.add(c.rel.toString("latin1"));
  }
  const plan: PlanEntry[] = [];
  for (const { c, reason: why } of changes) {
    let reason = why;
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
      plan.push({ rel: c.rel, action: "remove", blob: c.srcBlob, mode: c.srcMode });
    } else plan.push({ rel: c.rel, action: "restore", blob: c.dstBlob, mode: c.dstMode });
  }
  return plan;
}

/**
 * Carry out a plan; returns the entries done (a write that fails becomes a
 * skip with the error as its reason). Files are written and removed by git
 * itself, from a temporary index holding just the paths concerned (so the
 * cost follows the files restored, not the size of the tree); any path git
 * can store (non-UTF-8 bytes included) is restored byte for byte, and git
 * replaces a symbolic link in the way and never writes through one. Updates
 * the ledger: what a rollback writes counts as the agent's, so the rollback
 * itself can be rolled back.
 */
export function applyPlan(project: Project, plan: PlanEntry[], ledger: Ledger): PlanEntry[] {
  const done: PlanEntry[] = [];
  for (const e of plan) if (e.action === "skip") done.push(e);
  // Removals first: a file or link the agent put where the snapshot has a
  // directory must be gone before the directory's files are written.
  const checked = (action: PlanEntry["action"]) => {
    const list: PlanEntry[] = [];
    for (const e of plan) {
      if (e.action !== action) continue;
      const problem = pathProblem(project.root, e.rel);
      if (problem) done.push({ rel: e.rel, action: "skip", reason: problem });
      else list.push(e);
    }
    return list;
  };
  const tmp = path.join(project.dir, `rollback-index-${process.pid}`);
  const withIndex = (list: PlanEntry[], args: string[], extraEnv = {}) => {
    if (list.length === 0) return;
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
      for (const e of list) {
        ledger[ledgerKey(e.rel)] = e.action === "restore" ? e.blob as string : null;
        done.push(e);
      }
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      for (const e of list) done.push({ rel: e.rel, action: "skip", reason });
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  };
  withIndex(
    checked("remove"),
    ["rm", "-q", "-f", "--ignore-unmatch", "--pathspec-from-file=-", "--pathspec-file-nul"],
    { GIT_LITERAL_PATHSPECS: "1" },
  );
  withIndex(checked("restore"), ["checkout-index", "-f", "-q", "-z", "--stdin"]);
  return done;
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
  const abs = path.resolve(cwd, p);
  // A parent is missing: the path as given.
  const parent = realpathIfThere(path.dirname(abs));
  const real = parent === undefined ? abs : path.join(parent, path.basename(abs));
  const rel = path.relative(root, real);
  if (rel === "") return Buffer.alloc(0);
  if (rel.startsWith("..") || path.isAbsolute(rel)) return undefined;
  return Buffer.from(rel.split(path.sep).join("/"));
}
