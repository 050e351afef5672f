/**
 * The shadow store behind workspace snapshots: one bare git repository shared
 * by every project, a ref, an index file and a ledger per project root, and
 * the `git` binary driven with its own environment so that neither the
 * project's `.git` nor the user's git configuration is ever used.
 *
 * Functions here throw on failure; the public entry points catch and log.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import {
  builtin,
  jsonIfThere,
  lstatSyncIfThere,
  nodeCrypto,
  parseJsonIfValid,
  readdirIfThere,
  readIfThere,
  readlinkIfThere,
  readTextIfThere,
  statSyncIfThere,
} from "../_file_ops.ts";
import { writeFileAtomicSync } from "../persist.ts";
import { STATE_DIR_NAME, stateDir } from "../_home.ts";
import { SETTINGS, type Settings, WORKSPACE_SECRETS } from "../settings.ts";
import { FileLock, isHeld, LockTimeout, me, ownerAlive, readOwner } from "./_lock.ts";

// `node:child_process` and `node:zlib` cost a Node host about 4 ms to load, and only a
// snapshot uses them: they are required (synchronously) the first time one is taken.
let childProcessModule: typeof import("node:child_process") | undefined;
let zlibModule: typeof import("node:zlib") | undefined;
const childProcess = () =>
  childProcessModule ??= builtin<typeof import("node:child_process")>("node:child_process");
const zlib = () => zlibModule ??= builtin<typeof import("node:zlib")>("node:zlib");

/** The keys of the plain settings the workspace snapshots read. */
type WorkspaceKey =
  | "enabled"
  | "workspace_snapshots"
  | "max_file_size_mb"
  | "max_total_size_mb"
  | "max_snapshots"
  | "max_tree_files"
  | "workspace_exclude"
  | "workspace_include";

/**
 * Settings the workspace snapshots read, all optional until read (a missing
 * or invalid one takes its default from `SETTINGS`); a tool set may give
 * only some of its parts.
 */
export type WorkspaceSettings = Partial<Pick<Settings, WorkspaceKey>> & {
  /** File tools: their names, and the input keys naming the files they write. */
  workspace_file_tools?: Partial<Settings["workspace_file_tools"]>;
  /** Shell tools: their names, and the input keys holding the command. */
  workspace_shell_tools?: Partial<Settings["workspace_shell_tools"]>;
};

/** The limits in force, resolved from settings and options. */
export interface Limits {
  maxFileBytes: number;
  maxTotalBytes: number;
  maxSnapshots: number;
  maxFiles: number;
  /** What is left out beside the fixed list: gitignore lines (see {@link excludesOf}). */
  excludes: string;
}

/**
 * The gitignore lines snapshots leave out beside the fixed list:
 * `workspace_exclude` (else its default), the secrets, then what
 * `workspace_include` puts back (later lines win).
 */
export function excludesOf(settings: WorkspaceSettings): string {
  const patterns = (v: unknown, d: readonly string[]) =>
    Array.isArray(v) && v.every((p) => typeof p === "string" && !/[\r\n]/.test(p)) ? v : d;
  const exclude = patterns(settings.workspace_exclude, SETTINGS.workspace_exclude.default);
  const include = patterns(settings.workspace_include, []);
  return [
    "# agent-checkpoint: left out (workspace_exclude, secrets), then put back (workspace_include)",
    ...exclude,
    ...WORKSPACE_SECRETS,
    ...include.map((p) => `!${p.replace(/^!/, "")}`),
    "",
  ].join("\n");
}

/** From this many files to add, staging lets `git add -A` walk the tree itself. */
const BULK = 2000;

/** The most files a tree may hold to be snapshotted, unless `max_tree_files` says otherwise. */
export const MAX_TREE_FILES: number = SETTINGS.max_tree_files.default;

/**
 * Resolve the limits, taking each setting's default when missing or invalid;
 * `maxFiles`, when given, wins over `max_tree_files`.
 */
export function limitsOf(settings: WorkspaceSettings, maxFiles?: number): Limits {
  const positive = (v: unknown, d: number) =>
    typeof v === "number" && Number.isFinite(v) && v > 0 ? v : d;
  return {
    maxFileBytes: positive(settings.max_file_size_mb, SETTINGS.max_file_size_mb.default) * 1024 *
      1024,
    maxTotalBytes: positive(settings.max_total_size_mb, SETTINGS.max_total_size_mb.default) *
      1024 * 1024,
    maxSnapshots: Math.max(
      1,
      Math.floor(positive(settings.max_snapshots, SETTINGS.max_snapshots.default)),
    ),
    maxFiles: Math.max(
      1,
      Math.floor(maxFiles ?? positive(settings.max_tree_files, MAX_TREE_FILES)),
    ),
    excludes: excludesOf(settings),
  };
}

/** The tool names and input keys in force: the settings', each part defaulting. */
export function toolsOf(settings: WorkspaceSettings): {
  file: ReadonlySet<string>;
  pathKeys: readonly string[];
  shell: ReadonlySet<string>;
  commandKeys: readonly string[];
} {
  const file = { ...SETTINGS.workspace_file_tools.default, ...settings.workspace_file_tools };
  const shell = { ...SETTINGS.workspace_shell_tools.default, ...settings.workspace_shell_tools };
  return {
    file: new Set(file.names),
    pathKeys: file.path_keys,
    shell: new Set(shell.names),
    commandKeys: shell.command_keys,
  };
}

/** A git command that failed. */
export class GitError extends Error {}

/** Why a tree is not snapshotted (a guard, not a fault). */
export class GuardError extends Error {
  /** @param root The project root. @param message Why, in plain words. */
  constructor(readonly root: string, message: string) {
    super(message);
  }
}

const EXCLUDES = [
  "# agent-checkpoint: never stored",
  ".git",
  "node_modules/",
  ".venv/",
  "venv/",
  "__pycache__/",
  ".mypy_cache/",
  ".pytest_cache/",
  ".ruff_cache/",
  ".tox/",
  ".nox/",
  ".gradle/",
  ".terraform/",
  ".hg/",
  ".svn/",
  ".jj/",
  ".DS_Store",
  "# a rollback's file, written beside its place and renamed into it",
  ".*.ac-rollback",
  "",
].join("\n");

/** The directory names {@link EXCLUDES} leaves out wherever they are. */
const NEVER_STORED_DIRS = new Set(
  EXCLUDES.split("\n").filter((l) => l !== "" && !/[#*]/.test(l) && l !== ".DS_Store")
    .map((l) => l.replace(/\/$/, "")),
);

// Store blobs exactly as on disk, whatever the project's .gitattributes say,
// so a blob's id is the content hash the ledger records.
const ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding\n";

const CONFIG = [
  "core.hooksPath=" + os.devNull,
  "core.excludesFile=" + os.devNull,
  "core.attributesFile=" + os.devNull,
  "core.autocrlf=false",
  "core.safecrlf=false",
  "core.fsmonitor=false",
  "core.splitIndex=false",
  "core.untrackedCache=false",
  "core.quotePath=false",
  "core.symlinks=true",
  "core.precomposeUnicode=false",
  "core.logAllRefUpdates=false",
  "gc.auto=0",
  "maintenance.auto=false",
  "commit.gpgSign=false",
  "advice.detachedHead=false",
].flatMap((c) => ["-c", c]);

/** What a project's git call may set beyond the project's own repository, index and tree. */
type GitCallOptions = { input?: Buffer | string; cwd?: string; maxBuffer?: number };

/** Runs `git` against the store. */
export class Git {
  readonly #env: Record<string, string>;
  constructor(readonly bin: string, env: Record<string, string | undefined>) {
    const keep: Record<string, string> = {};
    for (const key of ["PATH", "SystemRoot", "TMPDIR", "TEMP", "TMP"]) {
      const value = env[key];
      if (value !== undefined) keep[key] = value;
    }
    this.#env = {
      ...keep,
      LC_ALL: "C",
      GIT_CONFIG_NOSYSTEM: "1",
      GIT_CONFIG_GLOBAL: os.devNull,
      GIT_TERMINAL_PROMPT: "0",
      GIT_AUTHOR_NAME: "agent-checkpoint",
      GIT_AUTHOR_EMAIL: "agent-checkpoint@localhost",
      GIT_COMMITTER_NAME: "agent-checkpoint",
      GIT_COMMITTER_EMAIL: "agent-checkpoint@localhost",
      HOME: os.devNull,
      XDG_CONFIG_HOME: os.devNull,
    };
  }

  /** Whether the binary runs; the error text when it does not. */
  probe(): string | undefined {
    const r = childProcess().spawnSync(this.bin, ["--version"], {
      env: this.#env,
      encoding: "utf8",
    });
    if (r.error) return r.error.message;
    if (r.status !== 0) return `git --version exited ${r.status}`;
    return undefined;
  }

  /** Run git; its stdout, or undefined when it fails (a question whose "no" is an exit status). */
  attempt(args: string[], o: Parameters<Git["run"]>[1]): Buffer | undefined {
    try {
      return this.run(args, o);
    } catch {
      // a git question whose no is its exit status: undefined is the answer
      return undefined;
    }
  }

  /** Run git; returns stdout, throws GitError on failure. */
  run(
    args: string[],
    o: {
      gitDir: string;
      index?: string;
      workTree?: string;
      cwd?: string;
      input?: Buffer | string;
      maxBuffer?: number;
      env?: Record<string, string>;
      /** A file of gitignore lines read after the store's `info/exclude`. */
      excludesFile?: string;
    },
  ): Buffer {
    const env: Record<string, string> = { ...this.#env, GIT_DIR: o.gitDir, ...o.env };
    if (o.index) env.GIT_INDEX_FILE = o.index;
    if (o.workTree) env.GIT_WORK_TREE = o.workTree;
    const config = o.excludesFile ? ["-c", `core.excludesFile=${o.excludesFile}`] : [];
    const spawn = () =>
      childProcess().spawnSync(this.bin, [...CONFIG, ...config, ...args], {
        cwd: o.cwd ?? o.gitDir,
        env,
        input: o.input,
        maxBuffer: o.maxBuffer ?? 256 * 1024 * 1024,
        stdio: ["pipe", "pipe", "pipe"],
      });
    let r = spawn();
    // Another process's `git prune` removes an object directory once it is empty: one this
    // command had just made for the object it writes. Writing objects is idempotent: again.
    for (let again = 0; again < 3 && r.status !== 0 && lostObjectDir(r.stderr); again++) {
      r = spawn();
    }
    if (r.error) {
      const code = (r.error as NodeJS.ErrnoException).code;
      if (code === "ENOBUFS" && o.workTree) {
        throw new GuardError(o.workTree, "the tree has too many files");
      }
      throw new GitError(`git ${args[0]}: ${r.error.message}`);
    }
    if (r.status !== 0) {
      const err = Buffer.from(r.stderr ?? "").toString("utf8").trim().split("\n")[0] ?? "";
      throw new GitError(`git ${args[0]} failed (${r.status ?? r.signal}): ${err}`);
    }
    return r.stdout as Buffer;
  }
}

/** Whether git's error says the directory it made for a new object was gone at once. */
const lostObjectDir = (stderr: Buffer | string | null | undefined): boolean =>
  /unable to create temporary file: No such file or directory/.test(String(stderr ?? ""));

/** The git blob id of some bytes: the ledger's content hash. */
export function blobId(content: Buffer): string {
  return nodeCrypto().createHash("sha1").update(`blob ${content.length}\0`).update(content).digest(
    "hex",
  );
}

/**
 * The content hash of what is at `file` now (a symlink: its target text), or
 * null when no file is there (nothing, or a directory); undefined when unreadable.
 */
export function diskHash(file: string | Buffer): string | null | undefined {
  const st = lstatSyncIfThere(file);
  if (st === undefined || st.isDirectory()) return null;
  const content = st.isSymbolicLink()
    ? readlinkIfThere(file)
    : st.isFile()
    ? readIfThere(file)
    : undefined;
  return content === undefined ? undefined : blobId(content);
}

/**
 * {@link diskHash} of a root-relative path, never read through a symbolic
 * link among its parents: a path under a linked directory is not in the
 * project any more, so it counts as deleted (null).
 */
export function diskHashUnder(root: string, rel: Buffer): string | null | undefined {
  const base = Buffer.from(root + "/");
  for (let i = rel.indexOf(0x2f); i > 0; i = rel.indexOf(0x2f, i + 1)) {
    const st = lstatSyncIfThere(Buffer.concat([base, rel.subarray(0, i)]));
    if (st === undefined || !st.isDirectory()) return null;
  }
  return diskHash(Buffer.concat([base, rel]));
}

/**
 * The ledger's mark of a file a shell command's run saw changed without naming it: possibly a
 * hand edit made meanwhile, so never taken as the agent's (`"?" + content hash`).
 */
export const DURING = "?";

/** The ledger's key for a root-relative path given as bytes. */
export function ledgerKey(rel: Buffer): string {
  const text = rel.toString("utf8");
  return Buffer.from(text, "utf8").equals(rel) ? text : `\0b64:${rel.toString("base64")}`;
}

/** A path's bytes for display: lossless when UTF-8, else escaped like git does. */
export function showPath(rel: Buffer): string {
  const text = rel.toString("utf8");
  // deno-lint-ignore no-control-regex
  if (Buffer.from(text, "utf8").equals(rel) && !/[\n\t\\"\x00-\x1f]/.test(text)) return text;
  let out = '"';
  for (const byte of rel) {
    if (byte === 0x0a) out += "\\n";
    else if (byte === 0x09) out += "\\t";
    else if (byte === 0x22) out += '\\"';
    else if (byte === 0x5c) out += "\\\\";
    else if (byte < 0x20 || byte >= 0x80) out += "\\" + byte.toString(8).padStart(3, "0");
    else out += String.fromCharCode(byte);
  }
  return out + '"';
}

/** Split NUL-separated output into its non-empty records. */
export function splitZ(out: Buffer): Buffer[] {
  const parts: Buffer[] = [];
  let start = 0;
  for (let i = 0; i < out.length; i++) {
    if (out[i] === 0) {
      if (i > start) parts.push(out.subarray(start, i));
      start = i + 1;
    }
  }
  if (start < out.length) parts.push(out.subarray(start));
  return parts;
}

/** Join root-relative path bytes with NUL terminators, for `-z --stdin`. */
export function joinZ(paths: Buffer[]): Buffer {
  const chunks: Buffer[] = [];
  const zero = Buffer.from([0]);
  for (const p of paths) chunks.push(p, zero);
  return Buffer.concat(chunks);
}

/** The project root holding `dir`: the top of its git work tree, else `dir`. */
export function projectRootOf(dir: string): string {
  const start = fs.realpathSync(path.resolve(dir));
  for (let d = start;;) {
    if (fs.existsSync(path.join(d, ".git"))) return d;
    const parent = path.dirname(d);
    if (parent === d) return start;
    d = parent;
  }
}

/** The first 16 hex digits of sha256 of the root's real path. */
export function projectKey(root: string): string {
  return nodeCrypto().createHash("sha256").update(root).digest("hex").slice(0, 16);
}

/** What a project's state file holds. */
export interface ProjectState {
  root: string;
  /** The tree of the newest snapshot. */
  lastTree?: string;
  /** The newest snapshot's commit. */
  head?: string;
  /** The tree the index held when last written. */
  indexTree?: string;
  /** The content hash of the newest snapshot's empty directories, as {@link emptyDirsOf} lists them. */
  emptyDirs?: string;
  /** The hash of the excludes the index was staged with (others: it is staged anew). */
  excludes?: string;
  /** The ref's value when `ids` was read, the snapshot ids it lists, and their kinds. */
  list?: string;
  ids?: string[];
  kinds?: SnapshotKind[];
}

/** Whose snapshot: taken for the agent, or by a rollback just before it restored files. */
export type SnapshotKind = "agent" | "rollback";

/** One snapshot of a project. */
export interface SnapshotInfo {
  /** The snapshot's commit id. */
  id: string;
  /** When it was taken, ISO 8601. */
  at: string;
  /** Why it was taken. */
  reason: string;
  /** Its tree's id. */
  tree: string;
  /** Taken for the agent (numbered), or by a rollback (reached by id). */
  kind: SnapshotKind;
  /** The tool it was taken before, if one. */
  tool?: string;
  /** The run's turn, if known. */
  turn?: number;
  /** The run's id, if known. */
  runId?: string;
}

/** What a snapshot's commit message says besides its reason. */
export interface SnapshotMeta {
  kind?: SnapshotKind;
  tool?: string;
  turn?: number;
  runId?: string;
  /** The files over `max_file_size_mb`, left out of it. */
  leftOut?: LeftOut[];
  /** The empty directories of its tree (git stores none), as ledger keys; and whether all. */
  emptyDirs?: { keys: string[]; complete: boolean };
}

/** A file over `max_file_size_mb`, left out of a snapshot: its ledger key, size and time then. */
export interface LeftOut {
  key: string;
  size: number;
  mtime: number;
}

/** At most this many left-out files are named in a snapshot's message. */
const LEFT_OUT_MAX = 10_000;

/** The files a snapshot left out for their size, as its commit message names them. */
export function leftOutOf(message: string): Map<string, LeftOut> {
  const out = new Map<string, LeftOut>();
  for (const line of message.split("\n")) {
    const m = /^left out: max_file_size_mb (\d+) ([\d.]+) (".*")$/.exec(line);
    const key = m ? parseJsonIfValid(m[3] as string) : undefined;
    if (m && typeof key === "string") {
      out.set(key, { key, size: Number(m[1]), mtime: Number(m[2]) });
    }
  }
  return out;
}

/** At most this many empty directories are named in a snapshot's message. */
const EMPTY_DIRS_MAX = 10_000;

/**
 * The empty directories a snapshot's commit message names (ledger keys, sorted), and whether
 * they are all of them (not so for a snapshot taken before they were recorded).
 */
export function emptyDirsOf(message: string): { keys: string[]; complete: boolean } {
  const keys: string[] = [];
  let count: string | undefined;
  for (const line of message.split("\n")) {
    if (line.startsWith("empty dirs: ")) count = line.slice("empty dirs: ".length);
    if (!line.startsWith("empty dir: ")) continue;
    const key = parseJsonIfValid(line.slice("empty dir: ".length));
    if (typeof key === "string") keys.push(key);
  }
  return { keys, complete: count === String(keys.length) };
}

/** A snapshot's commit message: the reason, then one `key: value` line per fact. */
export function snapshotMessage(reason: string, root: string, meta: SnapshotMeta = {}): string {
  const lines = [`project: ${root}`, `kind: ${meta.kind ?? "agent"}`];
  if (meta.tool !== undefined) lines.push(`tool: ${oneLine(meta.tool)}`);
  if (meta.turn !== undefined) lines.push(`turn: ${meta.turn}`);
  if (meta.runId !== undefined) lines.push(`run: ${oneLine(meta.runId)}`);
  for (const f of (meta.leftOut ?? []).slice(0, LEFT_OUT_MAX)) {
    lines.push(`left out: max_file_size_mb ${f.size} ${f.mtime} ${JSON.stringify(f.key)}`);
  }
  if (meta.emptyDirs !== undefined) {
    const { keys, complete } = meta.emptyDirs;
    lines.push(`empty dirs: ${complete ? keys.length : "not all listed"}`);
    for (const key of keys.slice(0, EMPTY_DIRS_MAX)) {
      lines.push(`empty dir: ${JSON.stringify(key)}`);
    }
  }
  return `${oneLine(reason)}\n\n${lines.join("\n")}\n`;
}

const oneLine = (s: string) => s.replace(/[\r\n]+/g, " ");

/** Read a snapshot's commit message back. */
export function parseMessage(body: string): { reason: string } & SnapshotMeta {
  const [reason = "", ...rest] = body.split("\n");
  const out: { reason: string } & SnapshotMeta = { reason };
  for (const line of rest) {
    const i = line.indexOf(": ");
    if (i < 0) continue;
    const key = line.slice(0, i);
    const value = line.slice(i + 2);
    if (key === "kind" && (value === "agent" || value === "rollback")) out.kind = value;
    else if (key === "tool") out.tool = value;
    else if (key === "turn" && /^\d+$/.test(value)) out.turn = Number(value);
    else if (key === "run") out.runId = value;
  }
  // Snapshots from before kinds were written: a rollback's says so in its reason.
  out.kind ??= reason.startsWith("before rollback") ? "rollback" : "agent";
  return out;
}

/**
 * The snapshots kept under `max`: the newest `max` of the agent's, and the
 * newest `max` taken by rollbacks (which never push out the agent's, so a
 * snapshot's number does not move when a rollback is made).
 */
export function keptIds(snapshots: { id: string; kind: SnapshotKind }[], max: number): string[] {
  const seen = { agent: 0, rollback: 0 };
  return snapshots.filter((s) => ++seen[s.kind] <= max).map((s) => s.id);
}

/**
 * The ledger: what the agent last wrote to each path (null: deleted it; {@link DURING} and a
 * hash: changed while a command ran, not known to be the agent's).
 */
export type Ledger = Record<string, string | null>;

/** The project locks this process holds (taking one again is a no-op). */
const HELD = new Set<string>();

/** One project in the store. */
export class Project {
  readonly key: string;
  readonly dir: string;
  readonly ref: string;
  readonly index: string;
  /**
   * @param store The store.
   * @param root The project root.
   * @param scratch For a read-only view: a directory outside the store that
   *   holds its index and the objects it writes (the store's are read as
   *   alternates), so that dry runs and diffs leave the store as it was.
   */
  constructor(readonly store: Store, readonly root: string, readonly scratch?: string) {
    this.key = projectKey(root);
    this.dir = path.join(store.projectsDir, this.key);
    this.ref = `refs/agent-checkpoint/${this.key}`;
    this.index = path.join(scratch ?? this.dir, "index");
  }

  /** Where temporary indexes go: the project's directory, or a view's scratch directory. */
  get workDir(): string {
    return this.scratch ?? this.dir;
  }

  /** What git's environment needs for this view (objects written to the scratch directory). */
  gitEnv(): Record<string, string> {
    if (this.scratch === undefined) return {};
    return {
      GIT_OBJECT_DIRECTORY: path.join(this.scratch, "objects"),
      GIT_ALTERNATE_OBJECT_DIRECTORIES: path.join(this.store.gitDir, "objects"),
    };
  }

  /** Run `body` on a view of this project that writes nothing to the store. */
  readOnlyView<T>(body: (view: Project) => T): T {
    const view = this.openView();
    try {
      return body(view);
    } finally {
      view.closeView();
    }
  }

  /**
   * A view of this project that writes nothing to the store, needing no lock: its own index
   * (a copy of the project's) and objects in a scratch directory; {@link Project.closeView}
   * removes it.
   */
  openView(): Project {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ac-ws-view-"));
    fs.mkdirSync(path.join(dir, "objects"));
    try {
      const copy = path.join(dir, "index");
      fs.copyFileSync(this.index, copy);
      // Git tells a file changed within the index's own second by the index's
      // time ("racily clean"): the copy must keep it.
      const st = fs.statSync(this.index);
      fs.utimesSync(copy, st.atime, st.mtime);
    } catch { /* no index yet: staged from scratch */ }
    return new Project(this.store, this.root, dir);
  }

  /** Remove a view's scratch directory. */
  closeView(): void {
    if (this.scratch !== undefined) fs.rmSync(this.scratch, { recursive: true, force: true });
  }

  git(args: string[], o: GitCallOptions = {}): Buffer {
    return this.store.git.run(args, this.#gitOptions(o));
  }

  /** {@link Project.git}'s stdout, or undefined when git fails. */
  gitAttempt(args: string[]): Buffer | undefined {
    return this.store.git.attempt(args, this.#gitOptions({}));
  }

  /** The excludes file of the staging in progress (see {@link Project.stage}). */
  #excludesFile: string | undefined;

  #gitOptions(o: GitCallOptions): Parameters<Git["run"]>[1] {
    return {
      ...(this.#excludesFile === undefined ? {} : { excludesFile: this.#excludesFile }),
      gitDir: this.store.gitDir,
      index: this.index,
      workTree: this.root,
      cwd: o.cwd ?? this.root,
      env: this.gitEnv(),
      ...(o.input === undefined ? {} : { input: o.input }),
      ...(o.maxBuffer === undefined ? {} : { maxBuffer: o.maxBuffer }),
    };
  }

  state(): ProjectState {
    const s = jsonIfThere(path.join(this.dir, "project.json")) as Partial<ProjectState> | null;
    if (s && typeof s === "object" && s.root === this.root) return s as ProjectState;
    return { root: this.root };
  }

  saveState(s: ProjectState): void {
    if (this.scratch !== undefined) return;
    writeAtomic(path.join(this.dir, "project.json"), JSON.stringify(s) + "\n");
  }

  /** How many bytes of `ledger.jsonl` the last {@link Project.ledger} read. */
  #journalRead = 0;

  /**
   * The ledger: `ledger.json`, then the writes appended to `ledger.jsonl`
   * since (appends need no lock, so a write is recorded even when its
   * snapshot could not be taken), and any journal a killed compaction left.
   */
  ledger(): Ledger {
    let files: Ledger = {};
    const l = jsonIfThere(path.join(this.dir, "ledger.json")) as { files?: unknown } | null;
    if (l && typeof l === "object" && l.files && typeof l.files === "object") {
      files = l.files as Ledger;
    }
    // No directory: no project yet.
    const names = (readdirIfThere(this.dir) ?? []).filter((n) =>
      /^ledger\.jsonl\.\d+-\w+\.old$/.test(n)
    );
    for (const name of names) applyJournal(files, readText(path.join(this.dir, name)));
    const journal = readText(path.join(this.dir, "ledger.jsonl"));
    this.#journalRead = Buffer.byteLength(journal);
    applyJournal(files, journal);
    return files;
  }

  /** Record writes of the agent (content hash, or null: deleted) by appending one line. */
  /**
   * Note a snapshot a hook skipped because another process held the project's lock for longer
   * than a hook waits: one line appended to `skipped.jsonl` (no lock needed), kept under 64 KiB.
   */
  recordSkipped(reason: string): void {
    fs.mkdirSync(this.dir, { recursive: true });
    const file = path.join(this.dir, "skipped.jsonl");
    if ((statSyncIfThere(file)?.size ?? 0) > SKIPPED_MAX_BYTES) return;
    const line = JSON.stringify({ at: new Date().toISOString(), pid: process.pid, reason });
    fs.appendFileSync(file, line.slice(0, 2000) + "\n");
  }

  /** How many snapshots hooks skipped (see {@link Project.recordSkipped}). */
  skippedCount(): number {
    const text = readIfThere(path.join(this.dir, "skipped.jsonl"))?.toString("utf8") ?? "";
    return text.split("\n").filter((l) => l.startsWith("{")).length;
  }

  recordWrites(entries: Ledger): void {
    if (Object.keys(entries).length === 0) return;
    fs.mkdirSync(this.dir, { recursive: true });
    // One write(2) to a file opened for appending: lines from several processes never interleave.
    fs.appendFileSync(path.join(this.dir, "ledger.jsonl"), JSON.stringify(entries) + "\n");
  }

  /**
   * Replace the ledger as a whole with `files` (read by {@link Project.ledger}
   * and changed since), under the project's lock. Writes appended by other
   * processes since that read are kept: the journal is moved aside first (new
   * appends start a new one) and what it gained since the read is applied.
   */
  saveLedger(files: Ledger): void {
    const journal = path.join(this.dir, "ledger.jsonl");
    const aside = `${journal}.${process.pid}-${Math.random().toString(36).slice(2)}.old`;
    let moved = false;
    try {
      fs.renameSync(journal, aside);
      moved = true;
    } catch { /* no journal */ }
    const merged = { ...files };
    if (moved) {
      const since = readIfThere(aside)?.subarray(this.#journalRead).toString("utf8") ?? "";
      applyJournal(merged, since);
    }
    writeAtomic(path.join(this.dir, "ledger.json"), JSON.stringify({ v: 1, files: merged }) + "\n");
    for (const name of fs.readdirSync(this.dir)) {
      if (/^ledger\.jsonl\.\d+-\w+\.old$/.test(name)) {
        fs.rmSync(path.join(this.dir, name), { force: true });
      }
    }
    this.#journalRead = 0;
  }

  /** Fold the appended writes into `ledger.json` once they grow (under the project's lock). */
  compactLedger(): void {
    const journal = statSyncIfThere(path.join(this.dir, "ledger.jsonl"));
    if (journal === undefined || journal.size < 256 * 1024) return;
    this.saveLedger(this.ledger());
  }

  /**
   * Run `body` holding the project's lock (waiting up to `waitMs` while
   * another process snapshots this project). Git's own lock files of this
   * project can only be left over from a process killed while holding the
   * project's lock, so they are cleared first, with a log line.
   */
  locked<T>(body: () => T, waitMs = this.store.lockWaitMs): T {
    const file = path.join(this.dir, "lock");
    if (HELD.has(file)) return body();
    fs.mkdirSync(this.dir, { recursive: true });
    const lock = new FileLock(file, this.store.log);
    lock.acquire(waitMs);
    HELD.add(file);
    try {
      this.clearGitLocks();
      return body();
    } finally {
      HELD.delete(file);
      lock.release();
    }
  }

  /** Remove git lock files of this project left by a killed process (the project lock is held). */
  clearGitLocks(): void {
    const locks = [
      `${this.index}.lock`,
      path.join(this.dir, "nested-index.lock"),
      path.join(this.store.gitDir, `${this.ref}.lock`),
      path.join(this.store.gitDir, `${this.pendingRef}.lock`),
    ];
    for (const name of fs.readdirSync(this.dir)) {
      if (/^(rollback|diff)-index-\d+(\.lock)?$/.test(name)) locks.push(path.join(this.dir, name));
    }
    for (const file of locks) {
      if (!fs.existsSync(file)) continue;
      fs.rmSync(file, { force: true });
      this.store.log(
        `cleared ${file}, left by a snapshot that was interrupted (its process is gone)`,
      );
    }
  }

  /** The snapshot ids, newest first. */
  snapshotIds(): string[] {
    const head = this.refHead();
    if (head === undefined) return [];
    const state = this.state();
    if (state.list === head && Array.isArray(state.ids)) return state.ids;
    const body = this.git(["cat-file", "commit", head]).toString("utf8");
    const ids: string[] = [];
    for (const line of body.split("\n")) {
      if (line === "") break;
      if (line.startsWith("parent ")) ids.push(line.slice(7));
    }
    return ids;
  }

  /** The snapshots, newest first. */
  snapshots(): SnapshotInfo[] {
    const ids = this.snapshotIds();
    if (ids.length === 0) return [];
    const out = this.git([
      "log",
      "--no-walk=unsorted",
      "-z",
      "--format=%H%x01%T%x01%cI%x01%B",
      ...ids,
    ])
      .toString("utf8");
    return out.split("\0").filter((s) => s !== "").map((rec) => {
      const [id = "", tree = "", at = "", body = ""] = rec.split("\x01");
      return { id, tree, at, ...parseMessage(body) } as SnapshotInfo;
    });
  }

  /** The snapshot ids with their kinds, newest first (from the state file when it is current). */
  snapshotKinds(): { id: string; kind: SnapshotKind }[] {
    const head = this.refHead();
    if (head === undefined) return [];
    const state = this.state();
    if (
      state.list === head && Array.isArray(state.ids) && Array.isArray(state.kinds) &&
      state.kinds.length === state.ids.length
    ) {
      return state.ids.map((id, i) => ({ id, kind: (state.kinds as SnapshotKind[])[i]! }));
    }
    return this.snapshots().map((s) => ({ id: s.id, kind: s.kind }));
  }

  /** Point the ref at a list commit whose parents are `ids` (newest first). */
  setSnapshots(
    ids: string[],
    tree: string,
    old: string | undefined,
    kinds?: SnapshotKind[],
  ): void {
    if (ids.length === 0) {
      this.git(["update-ref", "-d", this.ref]);
      return;
    }
    const list = this.store.writeCommit(tree, ids, "agent-checkpoint snapshot list\n");
    this.store.updateRef(this.ref, list, old);
    const { kinds: _, ...state } = this.state();
    this.saveState({ ...state, list, ids, ...(kinds ? { kinds } : {}) });
  }

  refHead(): string | undefined {
    // Refs stay loose (the store never packs them): read the file directly.
    return this.readRef(this.ref) ??
      (this.gitAttempt(["rev-parse", "-q", "--verify", this.ref])?.toString().trim() || undefined);
  }

  /** The ref that keeps the tree before a shell tool's command until the tool ends. */
  get pendingRef(): string {
    return `refs/agent-checkpoint-pending/${this.key}`;
  }

  /**
   * Keep `tree` reachable (so no prune takes it) while a tool runs; returns
   * the commit that holds it, for {@link Project.release}.
   */
  hold(tree: string): string {
    const id = this.store.writeCommit(tree, [], "agent-checkpoint: the tree before a command\n");
    this.store.updateRef(this.pendingRef, id, this.readRef(this.pendingRef));
    return id;
  }

  /** Let a tree kept by {@link Project.hold} go, unless a later hold replaced it. */
  release(id: string): void {
    if (this.readRef(this.pendingRef) === id) {
      fs.rmSync(path.join(this.store.gitDir, this.pendingRef), { force: true });
    }
  }

  readRef(ref: string): string | undefined {
    const id = readTextIfThere(path.join(this.store.gitDir, ref))?.trim();
    return id !== undefined && /^[0-9a-f]{40,64}$/.test(id) ? id : undefined;
  }

  /** The number of entries in the index file (from its header). */
  indexEntries(): number {
    try {
      const fd = fs.openSync(this.index, "r");
      try {
        const head = Buffer.alloc(12);
        if (fs.readSync(fd, head, 0, 12, 0) === 12 && head.toString("latin1", 0, 4) === "DIRC") {
          return head.readUInt32BE(8);
        }
      } finally {
        fs.closeSync(fd);
      }
    } catch { /* no index yet */ }
    return 0;
  }

  /**
   * Bring the index up to date with the tree (honouring .gitignore, the
   * store's excludes and the size limits); returns whether anything changed.
   */
  stage(limits: Limits): { changed: boolean; tooBig: Buffer[]; leftOut: LeftOut[]; bytes: number } {
    fs.mkdirSync(this.workDir, { recursive: true });
    const hash = nodeCrypto().createHash("sha1").update(limits.excludes).digest("hex").slice(0, 16);
    this.#excludesFile = this.excludesFile(hash, limits.excludes);
    const state = this.state();
    if (state.excludes !== hash) {
      // Staged with other excludes (or before they were kept): what they now leave out must
      // leave the index too, so it is staged anew.
      fs.rmSync(this.index, { force: true });
      const { indexTree: _, ...rest } = state;
      this.saveState({ ...rest, excludes: hash });
    }
    // Nested repositories are listed as "dir/" until their files are in the
    // index; list their files with their own work tree and an empty index.
    const budget = limits.maxFiles * 512;
    // Each path comes tagged: "? " not in the index, "C " changed, "R " deleted.
    const listed = splitZ(
      this.git(
        ["ls-files", "-z", "-t", "-o", "-m", "-d", "--exclude-standard", ...this.excludeStore()],
        { maxBuffer: budget },
      ),
    );
    const candidates: Buffer[] = [];
    const nested: Buffer[] = [];
    const others = new Set<string>();
    const deleted = new Set<string>();
    for (const rec of listed) {
      const p = rec.subarray(2);
      if (p[p.length - 1] === 0x2f) nested.push(p);
      else {
        candidates.push(p);
        if (rec[0] === 0x3f) others.add(p.toString("latin1"));
        else if (rec[0] === 0x52) deleted.add(p.toString("latin1"));
      }
    }
    const hadNested = nested.length > 0;
    while (nested.length) {
      const sub = nested.pop() as Buffer;
      if (others.size > limits.maxFiles) break;
      for (const p of this.listNested(sub, budget)) {
        if (p[p.length - 1] === 0x2f) nested.push(p);
        else {
          candidates.push(p);
          others.add(p.toString("latin1"));
        }
      }
    }
    // The tree's files: the index's, plus those not in it, less those deleted.
    const total = this.indexEntries() + others.size - deleted.size;
    if (total > limits.maxFiles) {
      throw new GuardError(
        this.root,
        `the tree has more than ${limits.maxFiles} files (max_tree_files)`,
      );
    }
    const unique = dedupe(candidates);
    if (unique.length === 0) return { changed: false, tooBig: [], leftOut: [], bytes: 0 };
    const rootBuf = Buffer.from(this.root + path.sep);
    const rootText = this.root + path.sep;
    // One lstat per changed path (all of them on the first snapshot): by its
    // name as text where the bytes are UTF-8, which is quicker than a Buffer.
    const stats = unique.map((p) => {
      const text = p.toString("utf8");
      const name = Buffer.byteLength(text) === p.length && !text.includes("\uFFFD")
        ? rootText + text
        : Buffer.concat([rootBuf, p]);
      return lstatSyncIfThere(name);
    });
    const add: Buffer[] = [];
    const drop: Buffer[] = [];
    const tooBig: Buffer[] = [];
    const leftOut: LeftOut[] = [];
    const linked = symlinkedParent(rootBuf);
    let bytes = 0;
    for (const [i, p] of unique.entries()) {
      // git refuses paths beyond a symbolic link: they are gone from the tree.
      if (linked(p)) {
        drop.push(p);
        continue;
      }
      const st = stats[i];
      if (st === undefined) {
        // Deleted (update-index --remove drops it), or a name this runtime
        // cannot pass to the file system (Deno's node:fs is lossy for
        // non-UTF-8 bytes): git, given the bytes, knows which.
        add.push(p);
        continue;
      }
      if (st.isDirectory()) {
        // A directory where the index has a file: its files are listed on their own.
        drop.push(p);
        continue;
      }
      if (st.isFile() && st.size > limits.maxFileBytes) {
        tooBig.push(p);
        leftOut.push({ key: ledgerKey(p), size: st.size, mtime: st.mtimeMs });
        drop.push(p);
        continue;
      }
      // On disk, not content: a loose object takes whole blocks (4 KiB at least).
      if (st.isFile()) bytes += Math.ceil((st.size + 1) / 4096) * 4096;
      add.push(p);
    }
    if (drop.length) {
      this.git(["update-index", "--force-remove", "-z", "--stdin"], { input: joinZ(drop) });
    }
    const excluded = [...tooBig, ...this.storeInside()];
    if (
      add.length >= BULK && nested.length === 0 && !hadNested &&
      excluded.every((p) => Buffer.from(p.toString("utf8")).equals(p))
    ) {
      // Many files (a first snapshot): git's own walk and add cost less than
      // feeding it every path. What the walk above left out stays out.
      const pathspecs = excluded.map((p) => `:(exclude,literal,top)${p.toString("utf8")}`);
      this.git(["add", "-A", "--", ":/", ...pathspecs]);
    } else if (add.length) {
      this.git(["update-index", "--add", "--remove", "--replace", "-z", "--stdin"], {
        input: joinZ(add),
      });
    }
    if (this.scratch === undefined) this.store.grew(bytes);
    return { changed: true, tooBig, leftOut, bytes };
  }

  /**
   * The file holding `text`, named by its hash, in the store's `info/` (in a
   * read-only view's scratch directory when the store does not have it yet).
   */
  excludesFile(hash: string, text: string): string {
    const name = `exclude-${hash}`;
    const inStore = path.join(this.store.gitDir, "info", name);
    if (fs.existsSync(inStore)) return inStore;
    const file = this.scratch === undefined ? inStore : path.join(this.scratch, name);
    writeAtomic(file, text);
    return file;
  }

  /** A store kept inside the project's tree must not be snapshotted into itself. */
  excludeStore(): string[] {
    return this.storeInside().map((rel) => `--exclude=/${rel.toString("utf8")}/`);
  }

  /** The store's directory relative to the root, when it is inside the project's tree. */
  storeInside(): Buffer[] {
    const rel = path.relative(this.root, this.store.base);
    if (rel === "" || rel.startsWith("..") || path.isAbsolute(rel)) return [];
    return [Buffer.from(rel.split(path.sep).join("/"))];
  }

  listNested(sub: Buffer, budget: number): Buffer[] {
    const dir = Buffer.concat([Buffer.from(this.root + path.sep), sub]).toString("utf8");
    const tmpIndex = path.join(this.workDir, "nested-index");
    fs.rmSync(tmpIndex, { force: true });
    const out = this.store.git.run(["ls-files", "-z", "-o", "--exclude-standard"], {
      ...(this.#excludesFile === undefined ? {} : { excludesFile: this.#excludesFile }),
      gitDir: this.store.gitDir,
      index: tmpIndex,
      workTree: dir,
      cwd: dir,
      env: this.gitEnv(),
      maxBuffer: budget,
    });
    return splitZ(out).map((p) => Buffer.concat([sub, p]));
  }

  /**
   * The tree's empty directories (those holding nothing), as sorted ledger keys, and whether all:
   * git keeps no directories, so a snapshot names them in its message. Called once the index is
   * staged, so a directory git lists as untracked holds no file a snapshot keeps; only those are
   * walked.
   */
  emptyDirs(): { keys: string[]; complete: boolean } {
    const listed = splitZ(
      this.git([
        "ls-files",
        "-z",
        "-o",
        "--directory",
        "--exclude-standard",
        ...this.excludeStore(),
      ]),
    ).filter((p) => p[p.length - 1] === 0x2f);
    const out: string[] = [];
    let visits = 0;
    const walk = (rel: Buffer): void => {
      if (out.length >= EMPTY_DIRS_MAX || ++visits > EMPTY_DIRS_MAX * 10) return;
      let entries: fs.Dirent<Buffer>[];
      try {
        entries = fs.readdirSync(Buffer.concat([Buffer.from(this.root + "/"), rel]), {
          withFileTypes: true,
          encoding: "buffer",
        });
      } catch {
        return; // gone or unreadable meanwhile: not known to be empty
      }
      if (entries.length === 0) out.push(ledgerKey(rel));
      for (const e of entries) {
        // A nested repository's own `.git`, or what snapshots never store, is not the tree's.
        if (e.isDirectory() && !NEVER_STORED_DIRS.has(e.name.toString("latin1"))) {
          walk(Buffer.concat([rel, Buffer.from("/"), e.name]));
        }
      }
    };
    for (const p of listed) walk(p.subarray(0, p.length - 1));
    const complete = out.length < EMPTY_DIRS_MAX && visits <= EMPTY_DIRS_MAX * 10;
    return { keys: out.sort(), complete };
  }

  /** Stage and write the index as a tree; returns the tree id, and the files too big for it. */
  writeTree(limits: Limits): { tree: string; changed: boolean; leftOut: LeftOut[] } {
    const state = this.state();
    const staged = this.stage(limits);
    const leftOut = staged.leftOut;
    // A view's index may be a copy taken while another process rewrote the project's.
    if (
      this.scratch === undefined && !staged.changed && state.indexTree &&
      fs.existsSync(this.index) &&
      this.store.hasObject(state.indexTree)
    ) {
      return { tree: state.indexTree, changed: false, leftOut };
    }
    let tree = this.gitAttempt(["write-tree"])?.toString().trim();
    if (tree === undefined) {
      // Objects the index names may have been pruned: rebuild it from scratch.
      fs.rmSync(this.index, { force: true });
      this.stage(limits);
      tree = this.git(["write-tree"]).toString().trim();
    }
    this.saveState({ ...this.state(), indexTree: tree });
    return { tree, changed: true, leftOut };
  }
}

/** A file's text; empty when it cannot be read. */
const readText = (file: string): string => readTextIfThere(file) ?? "";

/** Apply the lines of a ledger journal (a line torn by a kill is skipped). */
function applyJournal(files: Ledger, text: string): void {
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const entries = parseJsonIfValid(line); // undefined: torn
    if (entries && typeof entries === "object") Object.assign(files, entries);
  }
}

/** A test of whether a root-relative path has a symbolic link among its parents. */
function symlinkedParent(rootBuf: Buffer): (rel: Buffer) => boolean {
  const known = new Map<string, boolean>();
  const isLink = (dir: Buffer): boolean => {
    const k = dir.toString("latin1");
    let v = known.get(k);
    if (v === undefined) {
      v = lstatSyncIfThere(Buffer.concat([rootBuf, dir]))?.isSymbolicLink() ?? false;
      known.set(k, v);
    }
    return v;
  };
  return (rel) => {
    for (let i = rel.indexOf(0x2f); i > 0; i = rel.indexOf(0x2f, i + 1)) {
      if (isLink(rel.subarray(0, i))) return true;
    }
    return false;
  };
}

function dedupe(list: Buffer[]): Buffer[] {
  const seen = new Set<string>();
  const out: Buffer[] = [];
  for (const p of list) {
    const k = p.toString("latin1");
    if (!seen.has(k)) {
      seen.add(k);
      out.push(p);
    }
  }
  return out;
}

/** Write a file atomically, with the library's one atomic write; its directory is made. */
export function writeAtomic(file: string, text: string): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  writeFileAtomicSync(file, text);
}

/** How long a snapshot waits for another process's snapshot of the same project. */
export const LOCK_WAIT_MS = 30_000;

/**
 * How long a hook's snapshot waits for another process's snapshot of the same project: past it
 * the snapshot is skipped (a log line, a line in the project's `skipped.jsonl`), never the tool.
 */
export const HOOK_LOCK_WAIT_MS = 1000;

/** `skipped.jsonl` grows no further past this (the log still says each skip). */
const SKIPPED_MAX_BYTES = 64 * 1024;

/**
 * How old an unreachable object must be before a prune that runs while other
 * processes are writing may delete it: far longer than any snapshot takes,
 * and git refreshes the time of an object it is asked to write again.
 */
export const PRUNE_GRACE = "1.hour.ago";

/** The shared store in the library's folder, `<home>/agent-checkpoint/`. */
export class Store {
  readonly base: string;
  readonly gitDir: string;
  readonly projectsDir: string;
  readonly locksDir: string;
  /** False in a read-only home whose state is still in the old place: no store is made there. */
  readonly movedIn: boolean;
  /**
   * @param home The home directory.
   * @param git The git runner.
   * @param log Told about stale locks cleared.
   * @param lockWaitMs How long to wait for a project another process snapshots.
   */
  constructor(
    home: string,
    readonly git: Git,
    readonly log: (message: string) => void = () => {},
    readonly lockWaitMs = LOCK_WAIT_MS,
  ) {
    this.base = stateDir(home);
    this.movedIn = this.base === path.join(path.resolve(home), STATE_DIR_NAME);
    this.gitDir = path.join(this.base, "store");
    this.projectsDir = path.join(this.base, "projects");
    this.locksDir = path.join(this.base, "locks");
  }

  /**
   * Mark this process as writing objects until the returned function is
   * called; waits (bounded) while a prune runs. Together with {@link prune}
   * this is Dekker's handshake on files: a writer marks itself then looks for
   * a pruner, a pruner locks then looks for writers, so at least one of them
   * sees the other.
   */
  beginWrite(): () => void {
    const dir = path.join(this.locksDir, "writers");
    fs.mkdirSync(dir, { recursive: true });
    const mark = path.join(dir, `${process.pid}-${Math.random().toString(36).slice(2)}`);
    const pruneLock = path.join(this.locksDir, "prune.lock");
    const end = Date.now() + this.lockWaitMs;
    for (let delay = 2;; delay = Math.min(delay * 2, 50)) {
      fs.writeFileSync(mark, JSON.stringify(me()));
      if (!isHeld(pruneLock) || Date.now() >= end) break;
      fs.rmSync(mark, { force: true });
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, delay);
    }
    return () => fs.rmSync(mark, { force: true });
  }

  /** Run `body` marked as writing objects (see {@link beginWrite}). */
  writing<T>(body: () => T): T {
    const done = this.beginWrite();
    try {
      return body();
    } finally {
      done();
    }
  }

  /** Whether a live process other than the caller's own marks is writing objects. */
  #othersWriting(): boolean {
    const dir = path.join(this.locksDir, "writers");
    let busy = false;
    for (const name of readdirIfThere(dir) ?? []) {
      const file = path.join(dir, name);
      const owner = readOwner(file);
      if (owner === null) continue;
      if (owner !== undefined && !ownerAlive(owner)) {
        fs.rmSync(file, { force: true });
        continue;
      }
      busy = true;
    }
    return busy;
  }

  exists(): boolean {
    return fs.existsSync(path.join(this.gitDir, "HEAD"));
  }

  /**
   * Create the bare repository (no templates, so no hooks) if missing: made
   * beside it and renamed into place, so processes that start together never
   * see it half made.
   */
  ensure(): void {
    if (this.exists()) return;
    if (!this.movedIn) {
      throw new GitError(`no store is made in ${this.base}: the home is read-only`);
    }
    fs.mkdirSync(this.base, { recursive: true });
    const tmp = path.join(this.base, `store.${process.pid}.${Math.random().toString(36).slice(2)}`);
    try {
      this.git.run(["init", "-q", "--bare", "--template=", tmp], { gitDir: tmp, cwd: this.base });
      const info = path.join(tmp, "info");
      fs.mkdirSync(info, { recursive: true });
      fs.writeFileSync(path.join(info, "exclude"), EXCLUDES);
      fs.writeFileSync(path.join(info, "attributes"), ATTRIBUTES);
      try {
        fs.renameSync(tmp, this.gitDir);
        // Empty: the estimate grows by the bytes staged, and nothing is measured until it is large.
        writeAtomic(path.join(this.base, "size.json"), JSON.stringify({ bytes: 0 }));
      } catch (error) {
        // Another process made it first, or a directory left without a repository.
        if (!this.exists()) {
          if (!fs.existsSync(this.gitDir)) throw error;
          this.git.run(["init", "-q", "--bare", "--template=", this.gitDir], {
            gitDir: this.gitDir,
            cwd: this.base,
          });
          fs.cpSync(path.join(tmp, "info"), path.join(this.gitDir, "info"), { recursive: true });
        }
      }
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  }

  /**
   * Whether the store has an object (a tree written but never committed may
   * have been pruned since).
   */
  hasObject(id: string): boolean {
    if (fs.existsSync(path.join(this.gitDir, "objects", id.slice(0, 2), id.slice(2)))) return true;
    return this.git.attempt(["cat-file", "-e", id], { gitDir: this.gitDir }) !== undefined;
  }

  /** Those of `ids` the store has, asking git once for any that are not loose. */
  present(ids: string[]): string[] {
    const loose = (id: string) =>
      fs.existsSync(path.join(this.gitDir, "objects", id.slice(0, 2), id.slice(2)));
    const rest = ids.filter((id) => !loose(id));
    if (rest.length === 0) return ids;
    const out = this.git.run(["cat-file", "--batch-check=%(objectname)"], {
      gitDir: this.gitDir,
      input: rest.join("\n") + "\n",
    }).toString();
    const found = new Set(out.split("\n").filter((l) => /^[0-9a-f]+$/.test(l)));
    return ids.filter((id) => !rest.includes(id) || found.has(id));
  }

  /**
   * Write a commit object directly as a loose object (what `git commit-tree`
   * does, without a process: a snapshot must be quick).
   */
  writeCommit(tree: string, parents: string[], message: string): string {
    const stamp = `${Math.floor(Date.now() / 1000)} +0000`;
    const who = "agent-checkpoint <agent-checkpoint@localhost>";
    const body = Buffer.from(
      `tree ${tree}\n${parents.map((p) => `parent ${p}\n`).join("")}` +
        `author ${who} ${stamp}\ncommitter ${who} ${stamp}\n\n${message}`,
      "utf8",
    );
    const raw = Buffer.concat([Buffer.from(`commit ${body.length}\0`), body]);
    const id = nodeCrypto().createHash("sha1").update(raw).digest("hex");
    const dir = path.join(this.gitDir, "objects", id.slice(0, 2));
    const file = path.join(dir, id.slice(2));
    if (fs.existsSync(file)) {
      // As git does: a fresh time keeps a concurrent prune's grace window off it.
      try {
        const now = new Date();
        fs.utimesSync(file, now, now);
      } catch { /* not ours to touch: it is reachable, or will be written again */ }
    } else {
      const data = zlib().deflateSync(raw);
      // A prune removes empty fan-out directories, also between our mkdir and write: retry.
      for (let attempt = 0;; attempt++) {
        fs.mkdirSync(dir, { recursive: true });
        const tmp = path.join(dir, `tmp_obj_${process.pid}_${Math.random().toString(36).slice(2)}`);
        try {
          fs.writeFileSync(tmp, data, { mode: 0o444 });
          fs.renameSync(tmp, file);
          break;
        } catch (error) {
          fs.rmSync(tmp, { force: true });
          if ((error as NodeJS.ErrnoException).code !== "ENOENT" || attempt >= 5) throw error;
        }
      }
    }
    return id;
  }

  /**
   * Point `ref` at `id` if it still holds `old`, under git's lock-file
   * protocol (so a concurrent git sees a consistent ref).
   */
  updateRef(ref: string, id: string, old: string | undefined): void {
    const file = path.join(this.gitDir, ref);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const lock = `${file}.lock`;
    let fd: number;
    try {
      fd = fs.openSync(lock, "wx");
    } catch {
      throw new GitError(`${ref} is locked by another process`);
    }
    try {
      // Unreadable: a new ref, or one `git pack-refs` moved into packed-refs.
      const current = readTextIfThere(file)?.trim() ??
        readTextIfThere(path.join(this.gitDir, "packed-refs"))?.split("\n")
          .find((l) => l.endsWith(` ${ref}`))?.split(" ")[0];
      if ((current || undefined) !== old) {
        throw new GitError(`${ref} changed while a snapshot was taken`);
      }
      fs.writeSync(fd, `${id}\n`);
      fs.closeSync(fd);
      fs.renameSync(lock, file);
    } catch (error) {
      try {
        fs.closeSync(fd);
      } catch { /* closed */ }
      fs.rmSync(lock, { force: true });
      throw error;
    }
  }

  project(root: string): Project {
    return new Project(this, root);
  }

  /** Every project with a ref or a state file. */
  projects(): Project[] {
    const roots = new Set<string>();
    for (const key of readdirIfThere(this.projectsDir) ?? []) {
      // Not JSON, or no root: not a project.
      const s = jsonIfThere(path.join(this.projectsDir, key, "project.json")) as
        | { root?: unknown }
        | null
        | undefined;
      if (typeof s?.root === "string") roots.add(s.root);
    }
    return [...roots].sort().map((r) => this.project(r));
  }

  /**
   * An upper bound of the store's size without measuring it: the last
   * measurement plus the bytes staged since (objects are stored compressed).
   */
  estimate(): number | undefined {
    const size = jsonIfThere(path.join(this.base, "size.json")) as { bytes?: unknown } | null;
    const n = size?.bytes;
    return typeof n === "number" ? n : undefined;
  }

  /** Add staged bytes to the size estimate. */
  grew(bytes: number): void {
    const now = this.estimate();
    if (now !== undefined) {
      writeAtomic(path.join(this.base, "size.json"), JSON.stringify({ bytes: now + bytes }));
    }
  }

  /** Measure the store's size and reset the estimate to it. */
  measure(): number {
    const bytes = this.size();
    writeAtomic(path.join(this.base, "size.json"), JSON.stringify({ bytes }));
    return bytes;
  }

  /** Bytes the store's objects take (loose and packed). */
  size(): number {
    if (!this.exists()) return 0;
    const out = this.git.run(["count-objects", "-v"], { gitDir: this.gitDir }).toString();
    let kib = 0;
    for (const line of out.split("\n")) {
      const [k, v] = line.split(": ");
      if (k === "size" || k === "size-pack" || k === "size-garbage") kib += Number(v) || 0;
    }
    return kib * 1024;
  }

  /**
   * Drop objects no snapshot reaches. When no other process is writing, at
   * once; while one is, only objects older than {@link PRUNE_GRACE}, so an
   * object written for a snapshot whose ref is not yet updated is never lost
   * (and a repack waits for a quiet moment). One prune at a time.
   *
   * @returns Whether the prune ran at once (false: deferred in part).
   */
  prune(repack = false): boolean {
    if (!this.movedIn) return false; // the old place, read only: it may be shared with Hermes
    const lock = new FileLock(path.join(this.locksDir, "prune.lock"), this.log);
    if (!lock.tryAcquire()) return false;
    try {
      const quiet = !this.#othersWriting();
      if (quiet && repack) this.git.run(["repack", "-a", "-d", "-q"], { gitDir: this.gitDir });
      // What each project's index holds is kept too (named by the tree it was
      // last written as), so the next snapshot need not hash the tree anew.
      const indexes = this.present(
        this.projects().map((p) => p.state().indexTree).filter((t) => typeof t === "string"),
      );
      this.git.run(["prune", `--expire=${quiet ? "now" : PRUNE_GRACE}`, ...indexes], {
        gitDir: this.gitDir,
      });
      return quiet;
    } finally {
      lock.release();
    }
  }

  /**
   * Keep each project at `maxSnapshots` and the store under `maxTotalBytes`,
   * dropping each project's oldest snapshot in turn; returns how many dropped.
   */
  enforce(limits: Limits, only?: Project): number {
    let dropped = 0;
    // Another project's ref is rewritten only under its lock, and not at all
    // while another process snapshots it (its next snapshot enforces the limit).
    const each = (p: Project, body: () => void) => {
      try {
        p.locked(body, p === only ? undefined : 0);
      } catch (error) {
        if (!(error instanceof LockTimeout)) throw error;
      }
    };
    for (const p of only ? [only] : this.projects()) {
      each(p, () => {
        const all = p.snapshotKinds();
        const keep = keptIds(all, limits.maxSnapshots);
        if (keep.length < all.length) {
          const kinds = all.filter((s) => keep.includes(s.id)).map((s) => s.kind);
          p.setSnapshots(keep, this.treeOf(keep[0] as string), p.refHead(), kinds);
          dropped += all.length - keep.length;
        }
      });
    }
    if (dropped) this.prune();
    let size = this.measure();
    if (size <= limits.maxTotalBytes) return dropped;
    // Loose objects take whole blocks: packed, the same snapshots may well fit.
    this.prune(true);
    size = this.measure();
    if (size <= limits.maxTotalBytes) return dropped;
    for (;;) {
      let progress = false;
      for (const p of this.projects()) {
        each(p, () => {
          const ids = p.snapshotIds();
          if (ids.length <= 1) return;
          p.setSnapshots(ids.slice(0, -1), this.treeOf(ids[0] as string), p.refHead());
          dropped++;
          progress = true;
        });
      }
      // What the dropped snapshots alone held is in the pack now: only a repack frees it.
      this.prune(true);
      size = this.measure();
      if (size <= limits.maxTotalBytes || !progress) return dropped;
    }
  }

  treeOf(commit: string): string {
    return this.git.run(["rev-parse", `${commit}^{tree}`], { gitDir: this.gitDir }).toString()
      .trim();
  }
}
