/**
 * Workspace snapshots and rollback: before an agent's tool can harm the
 * working tree, its project is snapshotted into a shared shadow git store
 * (never the project's own `.git`), and a rollback restores only the files
 * whose content is still what the agent last wrote, keeping hand edits.
 *
 * Off unless the setting `workspace_snapshots` is true. Nothing here throws
 * into the host: a failure is a log line and the tool goes ahead.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import {
  blobId,
  diskHashUnder,
  DURING,
  emptyDirsOf,
  Git,
  GuardError,
  HOOK_LOCK_WAIT_MS,
  keptIds,
  type Ledger,
  ledgerKey,
  type LeftOut,
  leftOutOf,
  limitsOf,
  type Project,
  projectRootOf,
  showPath,
  type SnapshotInfo,
  type SnapshotKind,
  snapshotMessage,
  type SnapshotMeta,
  splitZ,
  Store,
  toolsOf,
  type WorkspaceSettings,
  writeAtomic,
} from "./_store.ts";
import {
  applyPlan,
  describe,
  emptyDirSteps,
  endJournal,
  finishJournal,
  type PlanEntry,
  planRollback,
  relativeToRoot,
  resultPatch,
  treeChanges,
} from "./_restore.ts";
import { commandOf, filePathsOf, isDestructiveCommand, namedPaths } from "./_shell_words.ts";
import { LockTimeout } from "./_lock.ts";
import { jsonIfThere, lstatSyncIfThere, readdirIfThere, realpathIfThere } from "../_file_ops.ts";
import { failOpen } from "../log.ts";
import { moveIn, STATE_DIR_NAME, stateDir } from "../_home.ts";

export type { SnapshotInfo, SnapshotKind, WorkspaceSettings };
export { isDestructiveCommand };

/** Writes a log line; never throws. */
export type WorkspaceLog = (
  level: "info" | "warn" | "error",
  message: string,
  runId?: string,
) => void;

/** How {@link Workspaces} is set up. */
export interface WorkspacesOptions {
  /** The home directory; the store is in `<home>/agent-checkpoint/`. */
  home: string;
  /** Where log lines go. */
  log: WorkspaceLog;
  /** The settings in force, read at each call. */
  settings: () => WorkspaceSettings;
  /** The environment whose `PATH` finds `git`. @default {process.env} */
  env?: Record<string, string | undefined>;
  /** The user's home directory, which is never snapshotted. @default {os.homedir()} */
  userHome?: string;
  /** Trees with more files than this are not snapshotted (wins over `max_tree_files`). */
  maxFiles?: number;
  /**
   * How long a hook's snapshot waits while another process snapshots the same project; past it
   * the snapshot is skipped, with a log line, and noted in the store. @default {1000}
   */
  lockWaitMs?: number;
}

/** A snapshot as a checkpoint record names it. */
export interface WorkspaceRef {
  /** The snapshot's commit id. */
  snapshot: string;
  /** The project root it is a snapshot of. */
  project: string;
}

interface Pending {
  root: string;
  base: string;
  /** The commit that keeps `base` from being pruned until the tool ends. */
  hold?: string;
  /** Where `base` was staged when the project's lock was held by another process. */
  view?: Project;
  paths: string[];
  shell: boolean;
  /** A shell tool's command, and when it started (ms since the epoch). */
  command?: string;
  start?: number;
}

/**
 * The workspace snapshots of one library instance: the hooks call it before
 * and after tools that write files. Every method is synchronous, never
 * throws, and does nothing unless `workspace_snapshots` is on.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { Workspaces } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-ws-doc-"));
 * const project = fs.mkdtempSync(path.join(os.tmpdir(), "ac-ws-proj-"));
 * fs.writeFileSync(path.join(project, "notes.txt"), "v1");
 * const ws = new Workspaces({
 *   home,
 *   log: () => {},
 *   settings: () => ({ workspace_snapshots: true }),
 * });
 * const id = ws.beforeTool(project, 1, "write_file", { path: "notes.txt" }, { callId: "c1" });
 * assert.match(id ?? "", /^[0-9a-f]{40}$/);
 * fs.writeFileSync(path.join(project, "notes.txt"), "v2");
 * ws.afterTool(project, "write_file", { ok: true, callId: "c1" });
 * // The same turn takes no second snapshot.
 * assert.equal(ws.beforeWrite(project, 1, ["notes.txt"]), undefined);
 * ```
 */
export class Workspaces {
  readonly #options: WorkspacesOptions;
  #git: Git | null | undefined;
  readonly #roots = new Map<string, string>();
  readonly #turns = new Map<string, number>();
  readonly #pending = new Map<string, Pending>();
  readonly #said = new Set<string>();
  readonly #skip = new Map<string, string>();
  readonly #unknownTools = new Set<string>();
  readonly #leftOutSaid = new Set<string>();

  /**
   * Set up the snapshots of one library instance; nothing is read or run yet.
   *
   * @param options Where the store lives, where log lines go, and the settings.
   */
  constructor(options: WorkspacesOptions) {
    this.#options = options;
  }

  /**
   * Snapshot the project holding `dir` unless it was already snapshotted in
   * this turn (of this run); `paths` are the files about to be written.
   *
   * @returns The new snapshot's commit id, or undefined (none taken).
   */
  beforeWrite(dir: string, turn: number, paths?: string[], runId?: string): string | undefined {
    void paths;
    return this.#guarded(runId, () => {
      const root = this.#root(dir);
      return root === undefined
        ? undefined
        : this.#turnSnapshot(root, turn, runId, "before a write");
    });
  }

  /**
   * For a tool about to run: when it is a file tool (setting
   * `workspace_file_tools`) or a shell tool (`workspace_shell_tools`) whose
   * command is destructive, snapshot the project (once per turn) and
   * remember the call so {@link Workspaces.afterTool} can record what it
   * wrote. Any other tool gets one log line per name.
   *
   * @returns The new snapshot's commit id, or undefined (none taken).
   */
  beforeTool(
    dir: string,
    turn: number,
    tool: string,
    input: unknown,
    options: { callId?: string; runId?: string } = {},
  ): string | undefined {
    return this.#guarded(options.runId, () => {
      const tools = toolsOf(this.#options.settings());
      const file = tools.file.has(tool);
      let shell = false;
      let command: string | undefined;
      if (!file) {
        if (!tools.shell.has(tool)) {
          if (!this.#unknownTools.has(tool) && this.#unknownTools.size < 1000) {
            this.#unknownTools.add(tool);
            this.#say(
              "info",
              `workspace snapshots: tool ${
                JSON.stringify(tool)
              } is in neither workspace_file_tools nor workspace_shell_tools, so no snapshot is taken before it`,
              options.runId,
            );
          }
          return undefined;
        }
        command = commandOf(input, tools.commandKeys);
        if (command === undefined || !isDestructiveCommand(command)) return undefined;
        shell = true;
      }
      const root = this.#root(dir);
      if (root === undefined) return undefined;
      const key = pendingKey(tool, options.callId, options.runId);
      // Remembered before the snapshot: the tool runs whether or not the
      // snapshot could be taken, and what it writes is the agent's all the same.
      if (!shell) {
        const paths = filePathsOf(input, tools.pathKeys).map((p) => path.resolve(dir, p));
        this.#remember(key, { root, base: "", paths, shell });
      }
      let failure: unknown;
      let id: string | undefined;
      try {
        id = this.#turnSnapshot(root, turn, options.runId, `before ${tool}`, tool);
      } catch (error) {
        // kept, and thrown once the other steps ran
        failure = error;
      }
      if (shell) {
        try {
          // The tree before the command, to see afterwards what it changed.
          const store = this.#store() as Store;
          const project = store.project(root);
          let taken: { base: string; hold?: string; view?: Project };
          try {
            // After waiting out the lock once, the tool is not held up a second time.
            if (failure instanceof LockTimeout) throw failure;
            taken = project.locked(() =>
              store.writing(() => {
                const base = project.writeTree(this.#limits()).tree;
                return { base, hold: project.hold(base) };
              })
            );
          } catch (error) {
            if (!(error instanceof LockTimeout)) throw error;
            // Another process holds the project: the command's changes are still seen, on a
            // view of its own that needs no lock (the snapshot alone is skipped).
            const view = project.openView();
            try {
              taken = { base: view.writeTree(this.#limits()).tree, view };
            } catch (viewError) {
              view.closeView();
              throw viewError;
            }
          }
          this.#remember(key, {
            root,
            ...taken,
            paths: [],
            shell,
            ...(command === undefined ? {} : { command }),
            start: Date.now(),
          });
        } catch (error) {
          // kept, and thrown once the other steps ran
          failure ??= error;
        }
      }
      if (failure !== undefined) throw failure;
      return id;
    });
  }

  /**
   * For a tool that ended: a file tool that succeeded has its files' content
   * recorded as the agent's; a destructive shell command has every file it
   * changed or deleted recorded (whether it succeeded or not).
   */
  afterTool(
    dir: string,
    tool: string,
    options: { ok?: boolean; callId?: string; runId?: string } = {},
  ): void {
    this.#guarded(options.runId, () => {
      const key = pendingKey(tool, options.callId, options.runId);
      const pending = this.#pending.get(key);
      if (!pending) return;
      this.#pending.delete(key);
      if (!pending.shell) {
        if (options.ok !== false) this.afterWrite(dir, pending.paths, options.runId);
        return;
      }
      const end = Date.now();
      const store = this.#store() as Store;
      const project = store.project(pending.root);
      let changes: ReturnType<typeof treeChanges>;
      const view = pending.view;
      if (view !== undefined) {
        try {
          const after = view.writeTree(this.#limits()).tree;
          changes = after === pending.base ? [] : treeChanges(view, pending.base, after);
        } finally {
          view.closeView();
        }
        project.recordWrites(
          commandWrites(pending.root, changes, pending.command, pending.start ?? 0, end),
        );
        return;
      }
      try {
        changes = project.locked(() =>
          store.writing(() => {
            try {
              const after = project.writeTree(this.#limits()).tree;
              return after === pending.base ? [] : treeChanges(project, pending.base, after);
            } finally {
              if (pending.hold) project.release(pending.hold);
            }
          })
        );
      } catch (error) {
        if (!(error instanceof LockTimeout)) throw error;
        // Not a snapshot skipped but a command's changes unseen: a rollback leaves those files be.
        this.#say(
          "warn",
          `workspace: what ${tool} changed was not recorded: ${error.message} (a hook waits at most ${
            this.#lockWaitMs() / 1000
          } s); a rollback leaves those files as they are`,
          options.runId,
        );
        return;
      }
      project.recordWrites(
        commandWrites(pending.root, changes, pending.command, pending.start ?? 0, end),
      );
    });
  }

  /** Record each file's current content as what the agent last wrote (absent: deleted). */
  afterWrite(dir: string, paths: string[], runId?: string): void {
    this.#guarded(runId, () => {
      if (paths.length === 0) return;
      const root = this.#root(dir);
      if (root === undefined) return;
      const project = (this.#store() as Store).project(root);
      const entries: Ledger = {};
      for (const p of paths) {
        const rel = relativeToRoot(root, dir, p);
        if (rel === undefined || rel.length === 0) continue;
        const hash = diskHashUnder(root, rel);
        if (hash === undefined) continue;
        entries[ledgerKey(rel)] = hash;
      }
      project.recordWrites(entries);
    });
  }

  /**
   * Snapshot the project holding `dir` now, whatever the turn (a tier
   * persist); an unchanged tree gives the newest snapshot's id.
   *
   * @returns What a checkpoint record's `workspace` field holds, or undefined.
   */
  snapshot(dir: string, reason = "checkpoint", runId?: string): WorkspaceRef | undefined {
    return this.#guarded(runId, () => {
      const root = this.#root(dir);
      if (root === undefined) return undefined;
      const taken = this.#skipNoted(root, () =>
        takeSnapshot(
          this.#store() as Store,
          root,
          this.#limits(),
          reason,
          runId === undefined ? {} : { runId },
        ));
      this.#sayLeftOut(root, taken?.leftOut, runId);
      return taken ? { snapshot: taken.id, project: root } : undefined;
    });
  }

  #remember(key: string, pending: Pending): void {
    // A host that never reports a tool's end must not grow this without bound.
    if (this.#pending.size >= 1000) {
      const oldest = this.#pending.keys().next().value as string;
      this.#pending.get(oldest)?.view?.closeView();
      this.#pending.delete(oldest);
    }
    this.#pending.set(key, pending);
  }

  #guarded<T>(runId: string | undefined, body: () => T): T | undefined {
    try {
      const s = this.#options.settings();
      if (s.enabled === false || s.workspace_snapshots !== true) return undefined;
      if (!this.#store()) return undefined;
      return body();
    } catch (error) {
      if (error instanceof LockTimeout) {
        // Another process's snapshot of the project: the hook does not wait it out.
        this.#say(
          "info",
          `workspace snapshot skipped: ${error.message} (a hook waits at most ${
            this.#lockWaitMs() / 1000
          } s); the agent's writes are still recorded`,
          runId,
        );
        return undefined;
      }
      if (error instanceof GuardError) {
        // Not looked at again by this instance: a huge tree is costly to list.
        this.#skip.set(error.root, error.message);
        this.#say("info", `workspace snapshots skip ${error.root}: ${error.message}`, runId);
        // Kept for a rollback to say why there is nothing to roll back to.
        const store = this.#store();
        if (store?.movedIn) {
          failOpen(() =>
            writeAtomic(
              path.join(store.project(error.root).dir, "guarded.json"),
              JSON.stringify({ at: new Date().toISOString(), reason: error.message }) + "\n",
            ), () => {});
        }
        return undefined;
      }
      const message = error instanceof Error ? error.message : String(error);
      this.#say("warn", `workspace snapshot failed: ${message}`, runId);
      return undefined;
    }
  }

  /** One log line per file left out of the snapshots for its size (per instance). */
  #sayLeftOut(root: string, leftOut: LeftOut[] | undefined, runId?: string): void {
    const mb = this.#limits().maxFileBytes / 1024 / 1024;
    for (const f of leftOut ?? []) {
      const id = `${root}\0${f.key}`;
      if (this.#leftOutSaid.has(id) || this.#leftOutSaid.size >= 100_000) continue;
      this.#leftOutSaid.add(id);
      const name = f.key.startsWith("\0b64:")
        ? showPath(Buffer.from(f.key.slice(6), "base64"))
        : showPath(Buffer.from(f.key));
      this.#say(
        "info",
        `workspace snapshots leave out ${path.join(root, name)}: ${
          (f.size / 1024 / 1024).toFixed(1)
        } MB, over max_file_size_mb (${mb}); a rollback never restores nor removes it`,
        runId,
      );
    }
  }

  #say(level: "info" | "warn", message: string, runId?: string): void {
    // A logger that throws must not break the host.
    failOpen(() => this.#options.log(level, message, runId), () => {});
  }

  #store(): Store | undefined {
    if (this.#git === undefined) {
      // State an earlier version left in Hermes's folder is moved in first, said in this log.
      moveIn(
        this.#options.home,
        (level, message) => this.#say(level === "info" ? "info" : "warn", message),
      );
      const git = new Git("git", this.#options.env ?? process.env);
      const problem = git.probe();
      if (problem) {
        this.#git = null;
        this.#say("warn", `workspace snapshots are off: git was not found on PATH (${problem})`);
      } else this.#git = git;
    }
    return this.#git
      ? new Store(
        this.#options.home,
        this.#git,
        (m) => this.#say("info", m),
        this.#lockWaitMs(),
      )
      : undefined;
  }

  #lockWaitMs(): number {
    return this.#options.lockWaitMs ?? HOOK_LOCK_WAIT_MS;
  }

  #limits() {
    return limitsOf(this.#options.settings(), this.#options.maxFiles);
  }

  /** The project root for `dir`, or undefined (with one log line) when it is guarded. */
  #root(dir: string): string | undefined {
    let root = this.#roots.get(dir);
    if (root === undefined) {
      root = projectRootOf(dir);
      this.#roots.set(dir, root);
    }
    if (this.#skip.has(root)) return undefined;
    const why = guardOf(root, this.#options.userHome ?? os.homedir());
    if (why) {
      if (!this.#said.has(root)) {
        this.#said.add(root);
        this.#say("info", `workspace snapshots skip ${root}: ${why}`);
      }
      return undefined;
    }
    return root;
  }

  #turnSnapshot(
    root: string,
    turn: number,
    runId: string | undefined,
    reason: string,
    tool?: string,
  ) {
    const key = `${runId ?? ""}\0${root}`;
    if (this.#turns.get(key) === turn) return undefined;
    this.#turns.set(key, turn);
    const taken = this.#skipNoted(root, () =>
      takeSnapshot(
        this.#store() as Store,
        root,
        this.#limits(),
        `${reason} (turn ${turn})`,
        {
          turn,
          ...(runId === undefined ? {} : { runId }),
          ...(tool === undefined ? {} : { tool }),
        },
      ));
    this.#sayLeftOut(root, taken?.leftOut, runId);
    return taken?.created ? taken.id : undefined;
  }

  /** Run a snapshot; one skipped for another process's lock is noted in the store, then rethrown. */
  #skipNoted<T>(root: string, take: () => T): T {
    try {
      return take();
    } catch (error) {
      if (error instanceof LockTimeout) {
        failOpen(
          () => (this.#store() as Store).project(root).recordSkipped(error.message),
          () => {},
        );
      }
      throw error;
    }
  }
}

/** How far before a command's start a file's time still counts as within it (coarse clocks). */
const MTIME_SLACK_MS = 2000;

/**
 * What a shell command wrote, file by file, for the ledger. A file deleted
 * while it ran is the command's (putting it back destroys nothing). A changed
 * file whose modification time is after the command ended was changed again
 * since: not recorded. One whose time is well before the command started came
 * with its time kept (`cp -p`, `mv`, `tar -x`): nobody's hand edit stamps an
 * old time, so it is the command's. One changed while the command ran is the
 * command's when the command names it (or cannot say what it changes: git,
 * patch, find, xargs...); otherwise it may be a hand edit made meanwhile, and
 * is recorded as "changed during the command" (a rollback keeps it unless
 * told `--all`), never as the agent's.
 */
function commandWrites(
  root: string,
  changes: ReturnType<typeof treeChanges>,
  command: string | undefined,
  start: number,
  end: number,
): Ledger {
  const named = command === undefined ? "all" : namedPaths(command);
  const entries: Ledger = {};
  for (const c of changes) {
    const key = ledgerKey(c.rel);
    if (c.status === "D") {
      const now = diskHashUnder(root, c.rel);
      if (now !== undefined) entries[key] = now;
      continue;
    }
    // Undefined: gone since, or a name this runtime cannot pass to the file system (Deno's
    // node:fs is lossy for non-UTF-8 bytes); the command's words decide alone.
    const mtime = lstatSyncIfThere(Buffer.concat([Buffer.from(root + "/"), c.rel]))?.mtimeMs;
    if (mtime !== undefined && mtime > end + 1) continue;
    const old = mtime !== undefined && mtime < start - MTIME_SLACK_MS;
    if (old || named === "all" || named(c.rel.toString("utf8"))) {
      entries[key] = c.dstBlob;
    } else entries[key] = DURING + c.dstBlob;
  }
  return entries;
}

function pendingKey(tool: string, callId: string | undefined, runId: string | undefined): string {
  return `${runId ?? ""}\0${callId ?? ""}\0${callId === undefined ? tool : ""}`;
}

/** Why a root is never snapshotted, if it is not. */
function guardOf(root: string, userHome: string): string | undefined {
  if (path.parse(root).root === root) return "it is the filesystem root";
  const given = path.resolve(userHome);
  const home = realpathIfThere(given) ?? given;
  if (root === home) return "it is your home directory";
  return undefined;
}

/**
 * Snapshot `root` into the store unless its tree is unchanged since the
 * newest snapshot; holds the project's lock (waiting for another process's
 * snapshot of it) and marks the store as being written until the ref names
 * the new objects.
 */
function takeSnapshot(
  store: Store,
  root: string,
  limits: ReturnType<typeof limitsOf>,
  reason: string,
  meta: SnapshotMeta = {},
): { id: string; created: boolean; leftOut: LeftOut[] } | undefined {
  store.ensure();
  const project = store.project(root);
  return project.locked(() => {
    const finished = finishInterrupted(project);
    if (finished !== undefined) {
      store.log(
        `finished a rollback of ${root} that was interrupted: ${
          finished.filter((e) => e.action !== "skip").length
        } files restored or removed, ${
          finished.filter((e) => e.action === "skip").length
        } left as they are`,
      );
    }
    let dropped = false;
    let taken: { id: string; created: boolean; leftOut: LeftOut[] };
    const done = store.beginWrite();
    try {
      const { tree, leftOut } = project.writeTree(limits);
      const emptyDirs = project.emptyDirs();
      const empties = emptiesHash(emptyDirs);
      const head = project.refHead();
      const all = head ? project.snapshotKinds() : [];
      const state = project.state();
      const newest = all[0]?.id;
      let unchanged = false;
      if (newest !== undefined) {
        const known = newest === state.head && state.lastTree !== undefined;
        const newestTree = known ? state.lastTree : store.treeOf(newest);
        // An empty directory made or removed since is a change too: git's tree cannot show it.
        const newestEmpties = known && state.emptyDirs !== undefined
          ? state.emptyDirs
          : emptiesHash(emptyDirsOf(project.git(["cat-file", "commit", newest]).toString("utf8")));
        if (newestTree === tree && newestEmpties === empties) {
          if (newest !== state.head || state.emptyDirs !== empties) {
            project.saveState({ ...state, lastTree: tree, head: newest, emptyDirs: empties });
          }
          unchanged = true;
        }
      }
      if (unchanged) taken = { id: newest as string, created: false, leftOut };
      else {
        const message = snapshotMessage(reason, root, { ...meta, leftOut, emptyDirs });
        const id = store.writeCommit(tree, [], message);
        const next = [{ id, kind: meta.kind ?? "agent" as const }, ...all];
        const keep = keptIds(next, limits.maxSnapshots);
        const kinds = next.filter((s) => keep.includes(s.id)).map((s) => s.kind);
        project.setSnapshots(keep, tree, head, kinds);
        project.saveState({ ...project.state(), lastTree: tree, head: id, emptyDirs: empties });
        dropped = keep.length < next.length;
        taken = { id, created: true, leftOut };
      }
    } finally {
      done();
    }
    if (dropped) store.prune();
    const estimate = store.estimate();
    if (estimate === undefined || estimate > limits.maxTotalBytes) {
      const size = store.measure();
      if (size > limits.maxTotalBytes) {
        const dropped = store.enforce(limits, undefined);
        const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;
        store.log(
          `the snapshot store took ${mib(size)} on disk, over max_total_size_mb (${
            mib(limits.maxTotalBytes)
          }): repacked${dropped ? `, and dropped ${dropped} oldest snapshots` : ""}; now ${
            mib(store.size())
          }`,
        );
      }
    }
    project.compactLedger();
    return taken;
  });
}

/** A short hash of a list of empty directories, to see whether it changed. */
const emptiesHash = (dirs: { keys: string[]; complete: boolean }) =>
  blobId(Buffer.from(JSON.stringify(dirs))).slice(0, 16);

/**
 * Finish a rollback that was killed (see {@link finishJournal}), under the project's lock.
 *
 * @returns What it did, or undefined when no rollback was interrupted.
 */
function finishInterrupted(project: Project): PlanEntry[] | undefined {
  if (project.scratch !== undefined) return undefined;
  const ledger = project.ledger();
  const done = finishJournal(project, ledger);
  if (done === undefined) return undefined;
  project.saveLedger(ledger);
  endJournal(project);
  return done;
}

/** How {@link rollback} and {@link rollbackDiff} find the store and the project. */
export interface RollbackOptions {
  /** The home directory (the store is in `<home>/agent-checkpoint/`). */
  home: string;
  /** A directory inside the project. @default {process.cwd()} */
  project?: string;
  /** `N` (1 = newest) or a snapshot's commit id or unique prefix. @default {1} */
  target?: string | number;
  /** Restore only this file (or the files under this directory), relative to `cwd`. */
  path?: string;
  /** Restore every file, even those edited by hand or never touched by the agent. */
  all?: boolean;
  /** Only say what would be done. */
  dryRun?: boolean;
  /** Where `path` is relative to. @default {process.cwd()} */
  cwd?: string;
  /** The environment whose `PATH` finds `git`. @default {process.env} */
  env?: Record<string, string | undefined>;
  /** Limits for the safety snapshot taken before restoring. */
  settings?: WorkspaceSettings;
  /** Told about a stale lock cleared (left by a killed process). */
  log?: (message: string) => void;
}

/** What a rollback did (or, with `dryRun`, would do). */
export interface RollbackResult {
  /** The project root. */
  project: string;
  /** The snapshot rolled back to. */
  snapshot: SnapshotInfo;
  /** The snapshot of the tree taken just before restoring (so it can be undone). */
  before?: string;
  /** Whether nothing was changed. */
  dryRun: boolean;
  /** Files given the snapshot's content. */
  restored: string[];
  /** Files the agent created after the snapshot, removed. */
  removed: string[];
  /** Files left as they are, and why. */
  skipped: { path: string; reason: string }[];
}

/**
 * Roll a project back to one of its snapshots: only files whose content is
 * what the agent last wrote (or that it deleted) are restored, unless `all`;
 * the tree is snapshotted first so the rollback itself can be undone.
 *
 * @throws {RangeError} When the project has no such snapshot.
 * @throws {Error} When git is missing or the store cannot be read.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { rollback, Workspaces } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-rb-doc-"));
 * const project = fs.mkdtempSync(path.join(os.tmpdir(), "ac-rb-proj-"));
 * const file = path.join(project, "a.txt");
 * fs.writeFileSync(file, "mine");
 * const ws = new Workspaces({ home, log: () => {}, settings: () => ({ workspace_snapshots: true }) });
 * ws.beforeWrite(project, 1, ["a.txt"]);
 * fs.writeFileSync(file, "the agent's");
 * ws.afterWrite(project, ["a.txt"]);
 * const result = rollback({ home, project, target: 1 });
 * assert.deepEqual(result.restored, ["a.txt"]);
 * assert.equal(fs.readFileSync(file, "utf8"), "mine");
 * ```
 */
export function rollback(options: RollbackOptions): RollbackResult {
  if (options.dryRun) return preview(options, false);
  const { project, target } = openProject(options);
  const limits = limitsOf(options.settings ?? {});
  const only = onlyPath(project.root, options);
  const { before, done } = project.locked(() => {
    // A rollback killed before is finished first, and what that did is said with this one.
    const finished = finishInterrupted(project) ?? [];
    const taken = takeSnapshot(
      project.store,
      project.root,
      limits,
      `before rollback to ${target.id.slice(0, 12)}`,
      { kind: "rollback" },
    );
    const current = project.state().lastTree ?? project.writeTree(limits).tree;
    const ledger = project.ledger();
    const message = project.git(["cat-file", "commit", target.id]).toString("utf8");
    const plan = planRollback(project, current, target.tree, ledger, {
      all: options.all === true,
      ...(only === undefined ? {} : { only }),
      leftOut: leftOutOf(message),
    });
    const dirTarget = { id: target.id, tree: target.tree, only };
    const done = applyPlan(project, plan, ledger, dirTarget);
    // Git keeps no directories: the snapshot's message names its empty ones.
    done.push(...emptyDirSteps(project, done, dirTarget));
    project.saveLedger(ledger);
    endJournal(project);
    // Unchanged since the target: the snapshot "taken first" is the target itself, not news.
    const before = taken?.id === target.id ? undefined : taken?.id;
    const seen = new Set(done.map((e) => e.rel.toString("latin1")));
    return {
      before,
      done: [...finished.filter((e) => !seen.has(e.rel.toString("latin1"))), ...done],
    };
  });
  return {
    project: project.root,
    snapshot: target,
    ...(before === undefined ? {} : { before }),
    dryRun: false,
    ...summarize(done),
  };
}

/** What {@link rollbackDiff} returns: the plan, and the patch the rollback would apply. */
export interface RollbackDiff extends RollbackResult {
  /** The unified diff the rollback would apply to the current files. */
  patch: string;
}

/**
 * What rolling back to a snapshot would change, without changing anything:
 * the rollback's plan (under the same options), and the unified diff it
 * would apply to the current files.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { rollbackDiff, Workspaces } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-diff-doc-"));
 * const project = fs.mkdtempSync(path.join(os.tmpdir(), "ac-diff-proj-"));
 * fs.writeFileSync(path.join(project, "a.txt"), "one\n");
 * const ws = new Workspaces({ home, log: () => {}, settings: () => ({ workspace_snapshots: true }) });
 * ws.beforeWrite(project, 1);
 * fs.writeFileSync(path.join(project, "a.txt"), "two\n");
 * ws.afterWrite(project, ["a.txt"]);
 * fs.writeFileSync(path.join(project, "mine.txt"), "by hand\n");
 * const diff = rollbackDiff({ home, project, target: 1 });
 * assert.match(diff.patch, /-two\n\+one/);
 * assert.deepEqual(diff.skipped, [{ path: "mine.txt", reason: "not changed by the agent" }]);
 * assert.equal(fs.readFileSync(path.join(project, "a.txt"), "utf8"), "two\n");
 * ```
 */
export function rollbackDiff(options: RollbackOptions): RollbackDiff {
  return preview(options, true) as RollbackDiff;
}

/** A rollback's plan, and with `withPatch` its diff, worked out on a view that writes nothing. */
function preview(
  options: RollbackOptions,
  withPatch: boolean,
): RollbackResult & { patch?: string } {
  const { project, target } = openProject(options);
  const limits = limitsOf(options.settings ?? {});
  const only = onlyPath(project.root, options);
  return project.readOnlyView((view) => {
    const current = view.writeTree(limits).tree;
    const plan = planRollback(view, current, target.tree, view.ledger(), {
      all: options.all === true,
      ...(only === undefined ? {} : { only }),
      leftOut: leftOutOf(view.git(["cat-file", "commit", target.id]).toString("utf8")),
    });
    const dirs = emptyDirSteps(view, plan, { id: target.id, tree: target.tree, only }, true);
    const result: RollbackResult & { patch?: string } = {
      project: project.root,
      snapshot: target,
      dryRun: true,
      ...summarize([...plan, ...dirs]),
    };
    if (withPatch) {
      result.patch = resultPatch(view, current, plan);
    }
    return result;
  });
}

function onlyPath(root: string, options: RollbackOptions): Buffer | undefined {
  if (options.path === undefined) return undefined;
  const rel = relativeToRoot(root, options.cwd ?? process.cwd(), options.path);
  if (rel === undefined) {
    throw new RangeError(`Path "${options.path}" is outside the project ${root}`);
  }
  return rel;
}

function summarize(done: PlanEntry[]) {
  return {
    restored: done.filter((e) => e.action === "restore").map((e) => describe(e).path),
    removed: done.filter((e) => e.action === "remove").map((e) => describe(e).path),
    skipped: done.filter((e) => e.action === "skip").map((e) => ({
      path: describe(e).path,
      reason: e.reason ?? "",
    })),
  };
}

function openStore(
  home: string,
  env?: Record<string, string | undefined>,
  log?: (message: string) => void,
): Store {
  const git = new Git("git", env ?? process.env);
  const problem = git.probe();
  if (problem) throw new Error(`git was not found on PATH (${problem})`);
  return new Store(home, git, log);
}

function openProject(options: RollbackOptions): { project: Project; target: SnapshotInfo } {
  const store = openStore(options.home, options.env, options.log);
  const root = projectRootOf(options.project ?? process.cwd());
  const project = store.project(root);
  const snapshots = store.exists() ? project.snapshots() : [];
  if (snapshots.length === 0) throw new RangeError(noSnapshots(project));
  return { project, target: findSnapshot(root, snapshots, String(options.target ?? 1)) };
}

/** "No snapshots", and why when a guard kept the tree out. */
function noSnapshots(project: Project): string {
  const note = jsonIfThere(path.join(project.dir, "guarded.json")) as { reason?: unknown } | null;
  const why = typeof note?.reason === "string" ? `: it was not snapshotted, ${note.reason}` : "";
  return `No snapshots of ${project.root}${why}`;
}

/**
 * A snapshot by number (counting the agent's snapshots only, 1 = newest) or
 * by id or unique id prefix (any snapshot, a rollback's included).
 */
function findSnapshot(root: string, snapshots: SnapshotInfo[], wanted: string): SnapshotInfo {
  if (/^\d{1,3}$/.test(wanted) && !/^0[0-9]/.test(wanted)) {
    const numbered = snapshots.filter((s) => s.kind === "agent");
    const target = numbered[Number(wanted) - 1];
    if (target === undefined || Number(wanted) < 1) {
      throw new RangeError(
        `No snapshot ${wanted} of ${root}: it has ${numbered.length} (1 is the newest)`,
      );
    }
    return target;
  }
  const matches = snapshots.filter((s) => s.id.startsWith(wanted.toLowerCase()));
  if (matches.length !== 1 || wanted.length < 4) {
    throw new RangeError(
      matches.length > 1
        ? `Snapshot id "${wanted}" is ambiguous`
        : `No snapshot "${wanted}" of ${root}`,
    );
  }
  return matches[0] as SnapshotInfo;
}

/** One snapshot as `snapshots list` shows it. */
export interface SnapshotEntry extends SnapshotInfo {
  /** Its number for `rollback N` (the agent's snapshots only; a rollback's has none). */
  number?: number;
  /** The first 12 hex digits of its id. */
  short: string;
  /** The files it differs in from the next older snapshot (all of its files for the oldest). */
  files: string[];
}

/**
 * A project's snapshots, newest first: number, id, time, reason, and the
 * files each differs in from the one before it. A rollback's snapshots are
 * listed with `kind: "rollback"` and no number.
 *
 * @throws {RangeError} When the project has no snapshots.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { listSnapshots, Workspaces } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-list-doc-"));
 * const project = fs.mkdtempSync(path.join(os.tmpdir(), "ac-list-proj-"));
 * fs.writeFileSync(path.join(project, "a.txt"), "one");
 * const ws = new Workspaces({ home, log: () => {}, settings: () => ({ workspace_snapshots: true }) });
 * ws.beforeTool(project, 1, "write_file", { path: "a.txt" }, { runId: "r1" });
 * const [newest] = listSnapshots({ home, project }).snapshots;
 * assert.equal(newest?.number, 1);
 * assert.equal(newest?.tool, "write_file");
 * assert.deepEqual(newest?.files, ["a.txt"]);
 * ```
 */
export function listSnapshots(
  options: { home: string; project?: string; env?: Record<string, string | undefined> },
): { project: string; snapshots: SnapshotEntry[] } {
  const store = openStore(options.home, options.env);
  const root = projectRootOf(options.project ?? process.cwd());
  const project = store.project(root);
  const snapshots = store.exists() ? project.snapshots() : [];
  if (snapshots.length === 0) throw new RangeError(noSnapshots(project));
  let n = 0;
  const entries = snapshots.map((s, i) => {
    const older = snapshots[i + 1];
    const args = older
      ? ["diff-tree", "-r", "-z", "--name-only", "--no-renames", older.tree, s.tree]
      : ["ls-tree", "-r", "-z", "--name-only", s.tree];
    const files = splitZ(project.git(args)).map((p) => showPath(p));
    const entry: SnapshotEntry = { ...s, short: s.id.slice(0, 12), files };
    if (s.kind === "agent") entry.number = ++n;
    return entry;
  });
  return { project: root, snapshots: entries };
}

/** One project in the store, for `snapshots`. */
export interface ProjectSummary {
  /** The project root. */
  project: string;
  /** Its key: the ref is `refs/agent-checkpoint/<key>`. */
  key: string;
  /** How many snapshots it has. */
  snapshots: number;
  /** When the newest was taken (ISO), if any. */
  newest?: string;
  /** Whether the project root still exists. */
  exists: boolean;
  /** Files in its ledger (written by the agent). */
  ledgerFiles: number;
  /** Snapshots hooks skipped because another process held the project's lock too long. */
  skippedSnapshots: number;
}

/** The store's projects and size, for `snapshots`. */
export interface StoreSummary {
  /** The store's directory. */
  store: string;
  /** Bytes the store's objects take. */
  bytes: number;
  /** Its projects. */
  projects: ProjectSummary[];
}

/**
 * The projects in the store, their snapshot counts, and the store's size.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { listProjects } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-ls-doc-"));
 * assert.deepEqual(listProjects({ home }).projects, []);
 * ```
 */
export function listProjects(
  options: { home: string; env?: Record<string, string | undefined> },
): StoreSummary {
  const store = openStore(options.home, options.env);
  const projects = store.exists() ? store.projects() : [];
  return {
    store: store.gitDir,
    bytes: store.size(),
    projects: projects.map((p) => {
      const snaps = p.snapshots();
      return {
        project: p.root,
        key: p.key,
        snapshots: snaps.length,
        ...(snaps[0] ? { newest: snaps[0].at } : {}),
        exists: fs.existsSync(p.root),
        ledgerFiles: Object.keys(p.ledger()).length,
        skippedSnapshots: p.skippedCount(),
      };
    }),
  };
}

/**
 * Enforce `max_snapshots` and `max_total_size_mb`, forget projects whose root
 * is gone, and repack the store dropping every unreachable object.
 *
 * @returns How many snapshots were dropped, and the store's size before and after.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { pruneStore } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-prune-doc-"));
 * assert.equal(pruneStore({ home }).dropped, 0);
 * ```
 */
export function pruneStore(
  options: {
    home: string;
    settings?: WorkspaceSettings;
    env?: Record<string, string | undefined>;
  },
): { dropped: number; forgotten: string[]; bytesBefore: number; bytesAfter: number } {
  const store = openStore(options.home, options.env);
  if (!store.exists()) return { dropped: 0, forgotten: [], bytesBefore: 0, bytesAfter: 0 };
  const bytesBefore = store.size();
  const forgotten: string[] = [];
  let dropped = 0;
  for (const p of store.projects()) {
    if (fs.existsSync(p.root)) continue;
    dropped += p.snapshotIds().length;
    p.setSnapshots([], "", p.refHead());
    fs.rmSync(path.join(store.gitDir, p.pendingRef), { force: true });
    fs.rmSync(p.dir, { recursive: true, force: true });
    forgotten.push(p.root);
  }
  dropped += store.enforce(limitsOf(options.settings ?? {}));
  store.prune(true);
  return { dropped, forgotten, bytesBefore, bytesAfter: store.size() };
}

/**
 * Delete the whole store: every snapshot of every project, and the ledgers of
 * agent writes. The run ledger beside it (`runs.db`) and anything else in the
 * library's folder is kept.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { clearStore } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-clear-doc-"));
 * fs.mkdirSync(path.join(home, "agent-checkpoint", "store"), { recursive: true });
 * clearStore({ home });
 * assert.equal(fs.existsSync(path.join(home, "agent-checkpoint")), false);
 * ```
 */
export function clearStore(options: { home: string }): void {
  const base = stateDir(options.home);
  if (base !== path.join(path.resolve(options.home), STATE_DIR_NAME)) {
    throw new Error(`${base} is read here, not cleared: the home is read-only`);
  }
  const names = readdirIfThere(base);
  if (names === undefined) return; // no store
  // The store, its projects, locks, size record, and stores a killed process left half made;
  // the run ledger (runs.db) shares the folder and is not the snapshots'.
  const ours = (name: string) => /^(store(\.\d+\.\w+)?|projects|locks|size\.json)$/.test(name);
  for (const name of names.filter(ours)) {
    fs.rmSync(path.join(base, name), { recursive: true, force: true });
  }
  if (names.every(ours)) fs.rmSync(base, { recursive: true, force: true });
}
