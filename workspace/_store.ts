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
import { createHash } from "node:crypto";
import { spawnSync } from "node:child_process";
import { deflateSync } from "node:zlib";
import { writeFileAtomicSync } from "../persist.ts";

/** Settings the workspace snapshots read (all optional until read). */
export interface WorkspaceSettings {
  /** Master switch of the library. @default {true} */
  enabled?: boolean;
  /** Take workspace snapshots at all. @default {false} */
  workspace_snapshots?: boolean;
  /** Files larger than this many MB are not stored. @default {10} */
  max_file_size_mb?: number;
  /** The store is kept under this many MB. @default {500} */
  max_total_size_mb?: number;
  /** Snapshots kept per project. @default {20} */
  max_snapshots?: number;
}

/** The limits in force, resolved from settings and options. */
export interface Limits {
  maxFileBytes: number;
  maxTotalBytes: number;
  maxSnapshots: number;
  maxFiles: number;
}

/** The most files a tree may hold to be snapshotted. */
export const MAX_TREE_FILES = 50_000;

/** Resolve the limits, taking each setting's default when missing or invalid. */
export function limitsOf(settings: WorkspaceSettings, maxFiles = MAX_TREE_FILES): Limits {
  const positive = (v: unknown, d: number) =>
    typeof v === "number" && Number.isFinite(v) && v > 0 ? v : d;
  return {
    maxFileBytes: positive(settings.max_file_size_mb, 10) * 1024 * 1024,
    maxTotalBytes: positive(settings.max_total_size_mb, 500) * 1024 * 1024,
    maxSnapshots: Math.max(1, Math.floor(positive(settings.max_snapshots, 20))),
    maxFiles,
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
  "",
].join("\n");

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
  "index.threads=1",
  "advice.detachedHead=false",
].flatMap((c) => ["-c", c]);

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
    const r = spawnSync(this.bin, ["--version"], { env: this.#env, encoding: "utf8" });
    if (r.error) return r.error.message;
    if (r.status !== 0) return `git --version exited ${r.status}`;
    return undefined;
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
    },
  ): Buffer {
    const env: Record<string, string> = { ...this.#env, GIT_DIR: o.gitDir, ...o.env };
    if (o.index) env.GIT_INDEX_FILE = o.index;
    if (o.workTree) env.GIT_WORK_TREE = o.workTree;
    const r = spawnSync(this.bin, [...CONFIG, ...args], {
      cwd: o.cwd ?? o.gitDir,
      env,
      input: o.input,
      maxBuffer: o.maxBuffer ?? 256 * 1024 * 1024,
      stdio: ["pipe", "pipe", "pipe"],
    });
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

/** The git blob id of some bytes: the ledger's content hash. */
export function blobId(content: Buffer): string {
  return createHash("sha1").update(`blob ${content.length}\0`).update(content).digest("hex");
}

/**
 * The content hash of what is at `file` now (a symlink: its target text), or
 * null when nothing is there; undefined for a directory or something unreadable.
 */
export function diskHash(file: string | Buffer): string | null | undefined {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(file);
  } catch {
    return null;
  }
  try {
    if (st.isSymbolicLink()) return blobId(fs.readlinkSync(file, { encoding: "buffer" }));
    if (st.isFile()) return blobId(fs.readFileSync(file));
  } catch { /* unreadable */ }
  return undefined;
}

/** The ledger's key for a root-relative path given as bytes. */
export function ledgerKey(rel: Buffer): string {
  const text = rel.toString("utf8");
  return Buffer.from(text, "utf8").equals(rel) ? text : `\0b64:${rel.toString("base64")}`;
}

/** The bytes of a ledger key. */
export function keyBytes(key: string): Buffer {
  return key.startsWith("\0b64:") ? Buffer.from(key.slice(5), "base64") : Buffer.from(key, "utf8");
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
  return createHash("sha256").update(root).digest("hex").slice(0, 16);
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
  /** The ref's value when `ids` was read, and the snapshot ids it lists. */
  list?: string;
  ids?: string[];
}

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
}

/** The ledger: what the agent last wrote to each path (null: deleted it). */
export type Ledger = Record<string, string | null>;

/** One project in the store. */
export class Project {
  readonly key: string;
  readonly dir: string;
  readonly ref: string;
  readonly index: string;
  constructor(readonly store: Store, readonly root: string) {
    this.key = projectKey(root);
    this.dir = path.join(store.projectsDir, this.key);
    this.ref = `refs/agent-checkpoint/${this.key}`;
    this.index = path.join(this.dir, "index");
  }

  git(args: string[], o: { input?: Buffer | string; cwd?: string; maxBuffer?: number } = {}) {
    return this.store.git.run(args, {
      gitDir: this.store.gitDir,
      index: this.index,
      workTree: this.root,
      cwd: o.cwd ?? this.root,
      ...(o.input === undefined ? {} : { input: o.input }),
      ...(o.maxBuffer === undefined ? {} : { maxBuffer: o.maxBuffer }),
    });
  }

  state(): ProjectState {
    try {
      const s = JSON.parse(fs.readFileSync(path.join(this.dir, "project.json"), "utf8"));
      if (s && typeof s === "object" && s.root === this.root) return s as ProjectState;
    } catch { /* none yet */ }
    return { root: this.root };
  }

  saveState(s: ProjectState): void {
    writeAtomic(path.join(this.dir, "project.json"), JSON.stringify(s) + "\n");
  }

  ledger(): Ledger {
    try {
      const l = JSON.parse(fs.readFileSync(path.join(this.dir, "ledger.json"), "utf8"));
      if (l && typeof l === "object" && l.files && typeof l.files === "object") {
        return l.files as Ledger;
      }
    } catch { /* none yet */ }
    return {};
  }

  saveLedger(files: Ledger): void {
    writeAtomic(path.join(this.dir, "ledger.json"), JSON.stringify({ v: 1, files }) + "\n");
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
      return { id, tree, at, reason: body.split("\n")[0] ?? "" };
    });
  }

  /** Point the ref at a list commit whose parents are `ids` (newest first). */
  setSnapshots(ids: string[], tree: string, old: string | undefined): void {
    if (ids.length === 0) {
      this.git(["update-ref", "-d", this.ref]);
      return;
    }
    const list = this.store.writeCommit(tree, ids, "agent-checkpoint snapshot list\n");
    this.store.updateRef(this.ref, list, old);
    this.saveState({ ...this.state(), list, ids });
  }

  refHead(): string | undefined {
    try {
      // Refs stay loose (the store never packs them): read the file directly.
      const id = fs.readFileSync(path.join(this.store.gitDir, this.ref), "utf8").trim();
      if (/^[0-9a-f]{40,64}$/.test(id)) return id;
    } catch { /* not loose */ }
    try {
      return this.git(["rev-parse", "-q", "--verify", this.ref]).toString().trim() || undefined;
    } catch {
      return undefined;
    }
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
  stage(limits: Limits): { changed: boolean; tooBig: Buffer[]; bytes: number } {
    fs.mkdirSync(this.dir, { recursive: true });
    // Nested repositories are listed as "dir/" until their files are in the
    // index; list their files with their own work tree and an empty index.
    const budget = limits.maxFiles * 512;
    const listed = splitZ(
      this.git(["ls-files", "-z", "-o", "-m", "-d", "--exclude-standard", ...this.excludeStore()], {
        maxBuffer: budget,
      }),
    );
    const candidates: Buffer[] = [];
    const nested: Buffer[] = [];
    for (const p of listed) (p[p.length - 1] === 0x2f ? nested : candidates).push(p);
    while (nested.length) {
      const sub = nested.pop() as Buffer;
      if (candidates.length > limits.maxFiles) break;
      for (const p of this.listNested(sub, budget)) {
        (p[p.length - 1] === 0x2f ? nested : candidates).push(p);
      }
    }
    const unique = dedupe(candidates);
    if (unique.length + this.indexEntries() > limits.maxFiles) {
      // Count only what is really there: deleted entries are in both.
      let present = 0;
      const rootBuf = Buffer.from(this.root + path.sep);
      for (const p of unique) {
        try {
          fs.lstatSync(Buffer.concat([rootBuf, p]));
          present++;
        } catch { /* deleted */ }
      }
      if (present + this.indexEntries() > limits.maxFiles) {
        throw new GuardError(this.root, `the tree has more than ${limits.maxFiles} files`);
      }
    }
    if (unique.length === 0) return { changed: false, tooBig: [], bytes: 0 };
    const rootBuf = Buffer.from(this.root + path.sep);
    const add: Buffer[] = [];
    const drop: Buffer[] = [];
    const tooBig: Buffer[] = [];
    const linked = symlinkedParent(rootBuf);
    let bytes = 0;
    for (const p of unique) {
      // git refuses paths beyond a symbolic link: they are gone from the tree.
      if (linked(p)) {
        drop.push(p);
        continue;
      }
      let st: fs.Stats;
      try {
        st = fs.lstatSync(Buffer.concat([rootBuf, p]));
      } catch {
        // Deleted (update-index --remove drops it), or a name this runtime
        // cannot pass to the file system (Deno's node:fs is lossy for
        // non-UTF-8 bytes): git, given the bytes, knows which.
        add.push(p);
        continue;
      }
      if (st.isFile() && st.size > limits.maxFileBytes) {
        tooBig.push(p);
        drop.push(p);
        continue;
      }
      if (st.isFile()) bytes += st.size;
      add.push(p);
    }
    if (drop.length) {
      this.git(["update-index", "--force-remove", "-z", "--stdin"], { input: joinZ(drop) });
    }
    if (add.length) {
      this.git(["update-index", "--add", "--remove", "--replace", "-z", "--stdin"], {
        input: joinZ(add),
      });
    }
    this.store.grew(bytes);
    return { changed: true, tooBig, bytes };
  }

  /** A store kept inside the project's tree must not be snapshotted into itself. */
  excludeStore(): string[] {
    const rel = path.relative(this.root, this.store.base);
    if (rel === "" || rel.startsWith("..") || path.isAbsolute(rel)) return [];
    return [`--exclude=/${rel.split(path.sep).join("/")}/`];
  }

  listNested(sub: Buffer, budget: number): Buffer[] {
    const dir = Buffer.concat([Buffer.from(this.root + path.sep), sub]).toString("utf8");
    const tmpIndex = path.join(this.dir, "nested-index");
    fs.rmSync(tmpIndex, { force: true });
    const out = this.store.git.run(["ls-files", "-z", "-o", "--exclude-standard"], {
      gitDir: this.store.gitDir,
      index: tmpIndex,
      workTree: dir,
      cwd: dir,
      maxBuffer: budget,
    });
    return splitZ(out).map((p) => Buffer.concat([sub, p]));
  }

  /** Stage and write the index as a tree; returns the tree id. */
  writeTree(limits: Limits): { tree: string; changed: boolean } {
    const state = this.state();
    const staged = this.stage(limits);
    if (
      !staged.changed && state.indexTree && fs.existsSync(this.index) &&
      this.store.hasObject(state.indexTree)
    ) {
      return { tree: state.indexTree, changed: false };
    }
    let tree: string;
    try {
      tree = this.git(["write-tree"]).toString().trim();
    } catch {
      // Objects the index names may have been pruned: rebuild it from scratch.
      fs.rmSync(this.index, { force: true });
      this.stage(limits);
      tree = this.git(["write-tree"]).toString().trim();
    }
    this.saveState({ ...this.state(), indexTree: tree });
    return { tree, changed: true };
  }
}

/** A test of whether a root-relative path has a symbolic link among its parents. */
function symlinkedParent(rootBuf: Buffer): (rel: Buffer) => boolean {
  const known = new Map<string, boolean>();
  const isLink = (dir: Buffer): boolean => {
    const k = dir.toString("latin1");
    let v = known.get(k);
    if (v === undefined) {
      try {
        v = fs.lstatSync(Buffer.concat([rootBuf, dir])).isSymbolicLink();
      } catch {
        v = false;
      }
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

/** The shared store under `<home>/checkpoints/`. */
export class Store {
  readonly base: string;
  readonly gitDir: string;
  readonly projectsDir: string;
  constructor(home: string, readonly git: Git) {
    this.base = path.join(home, "checkpoints");
    this.gitDir = path.join(this.base, "store");
    this.projectsDir = path.join(this.base, "projects");
  }

  exists(): boolean {
    return fs.existsSync(path.join(this.gitDir, "HEAD"));
  }

  /** Create the bare repository (no templates, so no hooks) if missing. */
  ensure(): void {
    if (!this.exists()) {
      fs.mkdirSync(this.gitDir, { recursive: true });
      this.git.run(["init", "-q", "--bare", "--template=", this.gitDir], {
        gitDir: this.gitDir,
        cwd: this.base,
      });
    }
    const info = path.join(this.gitDir, "info");
    if (!fs.existsSync(path.join(info, "attributes"))) {
      fs.mkdirSync(info, { recursive: true });
      fs.writeFileSync(path.join(info, "exclude"), EXCLUDES);
      fs.writeFileSync(path.join(info, "attributes"), ATTRIBUTES);
    }
  }

  /**
   * Whether the store has an object (a tree written but never committed may
   * have been pruned since).
   */
  hasObject(id: string): boolean {
    if (fs.existsSync(path.join(this.gitDir, "objects", id.slice(0, 2), id.slice(2)))) return true;
    try {
      this.git.run(["cat-file", "-e", id], { gitDir: this.gitDir });
      return true;
    } catch {
      return false;
    }
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
    const id = createHash("sha1").update(raw).digest("hex");
    const dir = path.join(this.gitDir, "objects", id.slice(0, 2));
    const file = path.join(dir, id.slice(2));
    if (!fs.existsSync(file)) {
      fs.mkdirSync(dir, { recursive: true });
      const tmp = path.join(dir, `tmp_obj_${process.pid}_${Math.random().toString(36).slice(2)}`);
      fs.writeFileSync(tmp, deflateSync(raw), { mode: 0o444 });
      fs.renameSync(tmp, file);
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
      let current: string | undefined;
      try {
        current = fs.readFileSync(file, "utf8").trim();
      } catch {
        // A new ref, or one `git pack-refs` moved into packed-refs.
        try {
          const packed = fs.readFileSync(path.join(this.gitDir, "packed-refs"), "utf8");
          current = packed.split("\n").find((l) => l.endsWith(` ${ref}`))?.split(" ")[0];
        } catch { /* no packed refs */ }
      }
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
    try {
      for (const key of fs.readdirSync(this.projectsDir)) {
        try {
          const s = JSON.parse(
            fs.readFileSync(path.join(this.projectsDir, key, "project.json"), "utf8"),
          );
          if (typeof s?.root === "string") roots.add(s.root);
        } catch { /* not a project */ }
      }
    } catch { /* no projects */ }
    return [...roots].sort().map((r) => this.project(r));
  }

  /**
   * An upper bound of the store's size without measuring it: the last
   * measurement plus the bytes staged since (objects are stored compressed).
   */
  estimate(): number | undefined {
    try {
      const n = JSON.parse(fs.readFileSync(path.join(this.base, "size.json"), "utf8")).bytes;
      return typeof n === "number" ? n : undefined;
    } catch {
      return undefined;
    }
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

  /** Drop objects no snapshot reaches. */
  prune(repack = false): void {
    if (repack) {
      this.git.run(["repack", "-a", "-d", "-q"], { gitDir: this.gitDir });
    }
    this.git.run(["prune", "--expire=now"], { gitDir: this.gitDir });
  }

  /**
   * Keep each project at `maxSnapshots` and the store under `maxTotalBytes`,
   * dropping each project's oldest snapshot in turn; returns how many dropped.
   */
  enforce(limits: Limits, only?: Project): number {
    let dropped = 0;
    for (const p of only ? [only] : this.projects()) {
      const ids = p.snapshotIds();
      if (ids.length > limits.maxSnapshots) {
        const head = p.refHead();
        const keep = ids.slice(0, limits.maxSnapshots);
        p.setSnapshots(keep, this.treeOf(keep[0] as string), head);
        dropped += ids.length - keep.length;
      }
    }
    if (dropped) this.prune();
    let size = this.measure();
    if (size <= limits.maxTotalBytes) return dropped;
    let packed = false;
    for (;;) {
      let progress = false;
      for (const p of this.projects()) {
        const ids = p.snapshotIds();
        if (ids.length <= 1) continue;
        p.setSnapshots(ids.slice(0, -1), this.treeOf(ids[0] as string), p.refHead());
        dropped++;
        progress = true;
      }
      this.prune(!packed && fs.readdirSync(path.join(this.gitDir, "objects", "pack")).length > 0);
      packed = true;
      size = this.measure();
      if (size <= limits.maxTotalBytes || !progress) return dropped;
    }
  }

  treeOf(commit: string): string {
    return this.git.run(["rev-parse", `${commit}^{tree}`], { gitDir: this.gitDir }).toString()
      .trim();
  }
}
