import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import {
  isDestructiveCommand,
  listProjects,
  pruneStore,
  rollback,
  rollbackDiff,
  Workspaces,
} from "../../workspace/mod.ts";
import { rollbackCommand, snapshotsCommand } from "../../cli/_workspace.ts";
import { memoryIo } from "../../cli/_io.ts";
import { tempHome } from "../_helpers.ts";
import { SETTINGS } from "../../settings.ts";
import { Git, Store } from "../../workspace/_store.ts";

const GIT_ENV = {
  ...process.env,
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_CONFIG_GLOBAL: os.devNull,
  GIT_AUTHOR_NAME: "t",
  GIT_AUTHOR_EMAIL: "t@t",
  GIT_COMMITTER_NAME: "t",
  GIT_COMMITTER_EMAIL: "t@t",
};

/** Run the user's own git in `cwd` (never the store's). */
function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "protocol.file.allow=always", ...args], {
    cwd,
    env: GIT_ENV,
    stdio: ["ignore", "pipe", "pipe"],
  }).toString();
}

/** A fresh project directory (real path), with files. */
function project(files: Record<string, string> = {}): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "ac-ws-")));
  for (const [name, content] of Object.entries(files)) write(dir, name, content);
  return dir;
}

function write(dir: string, name: string, content: string): void {
  fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
  fs.writeFileSync(path.join(dir, name), content);
}

const read = (dir: string, name: string) => fs.readFileSync(path.join(dir, name), "utf8");

function setup(settings: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) {
  const home = tempHome();
  const logs: string[] = [];
  const ws = new Workspaces({
    home,
    log: (level, message) => logs.push(`${level}: ${message}`),
    settings: () => ({ workspace_snapshots: true, ...settings }),
    ...extra,
  });
  return { home, ws, logs };
}

/** Every file under `dir` with its content hash (and symlinks with their target). */
function hashTree(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isSymbolicLink()) out.set(p, `link:${fs.readlinkSync(p)}`);
      else {
        const st = fs.statSync(p);
        out.set(
          p,
          createHash("sha256").update(fs.readFileSync(p)).digest("hex") + `:${st.mode}`,
        );
      }
    }
  };
  walk(dir);
  return out;
}

/** The paths (and modes) of a store snapshot's tree. */
function snapshotFiles(home: string, id: string): Map<string, string> {
  const out = execFileSync("git", ["ls-tree", "-r", "-z", id], {
    env: { ...GIT_ENV, GIT_DIR: path.join(home, "agent-checkpoint", "store") },
  });
  const files = new Map<string, string>();
  for (const rec of out.toString("latin1").split("\0").filter(Boolean)) {
    const [meta = "", name = ""] = rec.split("\t");
    files.set(Buffer.from(name, "latin1").toString("utf8"), meta.split(" ")[0] ?? "");
  }
  return files;
}

function snapshotCount(home: string, dir: string): number {
  const p = listProjects({ home }).projects.find((x) => x.project === dir);
  return p?.snapshots ?? 0;
}

test("snapshots and rollbacks never change the project's own .git", () => {
  const dir = project({ "a.txt": "one\n", "src/b.ts": "b\n" });
  git(dir, "init", "-q");
  git(dir, "add", "-A");
  git(dir, "commit", "-q", "-m", "init");
  write(dir, "a.txt", "uncommitted\n");
  const before = hashTree(path.join(dir, ".git"));
  const { home, ws } = setup();
  assert.ok(ws.beforeWrite(dir, 1));
  write(dir, "a.txt", "agent\n");
  ws.afterWrite(dir, ["a.txt"]);
  assert.ok(ws.beforeTool(dir, 2, "Bash", { command: "rm src/b.ts" }, { callId: "1" }));
  fs.rmSync(path.join(dir, "src/b.ts"));
  ws.afterTool(dir, "Bash", { callId: "1", ok: true });
  rollbackDiff({ home, project: dir, target: 2 });
  const r = rollback({ home, project: dir, target: 2 });
  assert.deepEqual(r.restored.sort(), ["a.txt", "src/b.ts"]);
  assert.equal(read(dir, "a.txt"), "uncommitted\n");
  // The snapshot taken just before that rollback undoes it (reached by id).
  assert.ok(r.before);
  rollback({ home, project: dir, target: r.before });
  pruneStore({ home });
  assert.deepEqual(hashTree(path.join(dir, ".git")), before);
  assert.equal(read(dir, "a.txt"), "agent\n");
  // The project's git still sees its own state, untouched by the store.
  const status = git(dir, "status", "--porcelain");
  assert.match(status, /^ M a\.txt$/m);
  assert.match(status, /^ D src\/b\.ts$/m);
});

test("a nested repository and a git submodule are stored as plain files and restored", () => {
  const upstream = project({ "lib.txt": "lib v1\n" });
  git(upstream, "init", "-q");
  git(upstream, "add", "-A");
  git(upstream, "commit", "-q", "-m", "lib");
  const dir = project({ "top.txt": "top\n" });
  git(dir, "init", "-q");
  git(dir, "submodule", "add", "-q", upstream, "vendor/lib");
  git(dir, "commit", "-q", "-m", "with submodule");
  const nested = path.join(dir, "tools");
  fs.mkdirSync(nested);
  git(nested, "init", "-q");
  write(nested, "tool.sh", "echo tool\n");
  write(nested, ".gitignore", "*.log\n");
  write(nested, "debug.log", "noise\n");
  const { home, ws } = setup();
  const id = ws.beforeWrite(dir, 1);
  assert.ok(id);
  const files = snapshotFiles(home, id);
  assert.equal(files.get("vendor/lib/lib.txt"), "100644");
  assert.equal(files.get("tools/tool.sh"), "100644");
  assert.equal(files.has("tools/debug.log"), false, "the nested repo's .gitignore is honoured");
  assert.ok(![...files.values()].includes("160000"), "no gitlinks");
  assert.ok(![...files.keys()].some((f) => f.split("/").includes(".git")), "no .git stored");
  const subGit = hashTree(path.join(dir, ".git"));
  write(dir, "vendor/lib/lib.txt", "agent broke it\n");
  write(dir, "tools/tool.sh", "agent broke it\n");
  ws.afterWrite(dir, ["vendor/lib/lib.txt", "tools/tool.sh"]);
  assert.ok(ws.beforeWrite(dir, 2), "changes inside nested repos are seen");
  const r = rollback({ home, project: dir, target: 2 });
  assert.deepEqual(r.restored.sort(), ["tools/tool.sh", "vendor/lib/lib.txt"]);
  assert.equal(read(dir, "vendor/lib/lib.txt"), "lib v1\n");
  assert.equal(read(dir, "tools/tool.sh"), "echo tool\n");
  assert.deepEqual(hashTree(path.join(dir, ".git")), subGit);
});

test("hand edits are kept and listed; the agent's writes are restored", async () => {
  const dir = project({ "agent.txt": "v1\n", "mine.txt": "v1\n", "both.txt": "v1\n" });
  const { home, ws } = setup();
  ws.beforeTool(dir, 1, "write_file", { path: "agent.txt" }, { callId: "a" });
  write(dir, "agent.txt", "agent v2\n");
  ws.afterTool(dir, "write_file", { callId: "a", ok: true });
  ws.beforeTool(dir, 1, "Edit", { file_path: path.join(dir, "both.txt") }, { callId: "b" });
  write(dir, "both.txt", "agent v2\n");
  ws.afterTool(dir, "Edit", { callId: "b", ok: true });
  write(dir, "both.txt", "agent v2, then my fix\n");
  write(dir, "mine.txt", "my edit\n");
  const m = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["1", "--home", home, "--json"], m.io), 0);
  const r = JSON.parse(m.stdout());
  assert.deepEqual(r.restored, ["agent.txt"]);
  assert.deepEqual(r.skipped, [
    { path: "both.txt", reason: "edited since the agent wrote it" },
    { path: "mine.txt", reason: "not changed by the agent" },
  ]);
  assert.equal(read(dir, "agent.txt"), "v1\n");
  assert.equal(read(dir, "both.txt"), "agent v2, then my fix\n");
  assert.equal(read(dir, "mine.txt"), "my edit\n");
  // The text output lists what was kept, and --all restores everything.
  const t = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["1", "--home", home, "--all"], t.io), 0);
  assert.match(t.stdout(), /restored +both\.txt/);
  assert.equal(read(dir, "mine.txt"), "v1\n");
  assert.equal(read(dir, "both.txt"), "v1\n");
});

test("a file the agent created is removed only while it is as the agent wrote it", () => {
  const dir = project({ "a.txt": "a" });
  const { home, ws } = setup();
  ws.beforeWrite(dir, 1);
  write(dir, "made.txt", "agent\n");
  write(dir, "edited.txt", "agent\n");
  ws.afterWrite(dir, ["made.txt", "edited.txt"]);
  write(dir, "edited.txt", "agent, then mine\n");
  const r = rollback({ home, project: dir });
  assert.deepEqual(r.removed, ["made.txt"]);
  assert.deepEqual(r.skipped, [{ path: "edited.txt", reason: "edited since the agent wrote it" }]);
  assert.equal(read(dir, "edited.txt"), "agent, then mine\n");
});

test("a failed file tool does not make the file the agent's", () => {
  const dir = project({ "a.txt": "v1\n" });
  const { home, ws } = setup();
  ws.beforeTool(dir, 1, "write_file", { path: "a.txt" }, { callId: "x" });
  write(dir, "a.txt", "my edit\n");
  ws.afterTool(dir, "write_file", { callId: "x", ok: false });
  const r = rollback({ home, project: dir });
  assert.deepEqual(r.restored, []);
  assert.equal(read(dir, "a.txt"), "my edit\n");
});

test("files a destructive command deleted are restored; files it created are removed", () => {
  const dir = project({ "keep.txt": "k\n", "gone.txt": "precious\n", "sub/deep.txt": "deep\n" });
  const { home, ws } = setup();
  assert.ok(
    ws.beforeTool(dir, 1, "bash", { command: "rm -rf sub gone.txt && echo hi > made.txt" }),
  );
  fs.rmSync(path.join(dir, "sub"), { recursive: true });
  fs.rmSync(path.join(dir, "gone.txt"));
  write(dir, "made.txt", "hi\n");
  ws.afterTool(dir, "bash", { ok: true });
  write(dir, "by-hand.txt", "mine\n");
  const r = rollback({ home, project: dir });
  assert.deepEqual(r.restored.sort(), ["gone.txt", "sub/deep.txt"]);
  assert.deepEqual(r.removed, ["made.txt"]);
  assert.deepEqual(r.skipped, [{ path: "by-hand.txt", reason: "not changed by the agent" }]);
  assert.equal(read(dir, "gone.txt"), "precious\n");
  assert.equal(read(dir, "sub/deep.txt"), "deep\n");
  assert.equal(fs.existsSync(path.join(dir, "made.txt")), false);
  assert.equal(read(dir, "by-hand.txt"), "mine\n");
  // The rollback snapshotted the tree first, so it can be rolled back itself.
  assert.ok(r.before);
  const undo = rollback({ home, project: dir, target: r.before });
  // sub/ was not there when that snapshot was taken: emptied, it goes too.
  assert.deepEqual(undo.removed.sort(), ["gone.txt", "sub/", "sub/deep.txt"]);
  assert.deepEqual(undo.restored, ["made.txt"]);
});

test("a single path restores that file alone", async () => {
  const dir = project({ "a.txt": "a1\n", "b.txt": "b1\n" });
  const { home, ws } = setup();
  ws.beforeWrite(dir, 1);
  write(dir, "a.txt", "a2\n");
  write(dir, "b.txt", "b2\n");
  ws.afterWrite(dir, ["a.txt", "b.txt"]);
  const m = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["1", "b.txt", "--home", home], m.io), 0, m.stderr());
  assert.equal(read(dir, "a.txt"), "a2\n");
  assert.equal(read(dir, "b.txt"), "b1\n");
  // A path alone (no N) means the newest of the agent's snapshots.
  assert.ok(ws.beforeWrite(dir, 2));
  write(dir, "a.txt", "a3\n");
  write(dir, "b.txt", "b3\n");
  ws.afterWrite(dir, ["a.txt", "b.txt"]);
  const n = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["a.txt", "--home", home], n.io), 0, n.stderr());
  assert.match(n.stdout(), /restored +a\.txt/);
  assert.equal(read(dir, "a.txt"), "a2\n");
  assert.equal(read(dir, "b.txt"), "b3\n");
  const outside = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["1", os.tmpdir(), "--home", home], outside.io), 1);
  assert.match(outside.stderr(), /outside the project/);
});

test("--dry-run and diff change nothing", async () => {
  const dir = project({ "a.txt": "a1\n" });
  const { home, ws } = setup();
  ws.beforeWrite(dir, 1);
  write(dir, "a.txt", "a2\n");
  write(dir, "new.txt", "n\n");
  ws.afterWrite(dir, ["a.txt", "new.txt"]);
  const tree = hashTree(dir);
  const store = hashTree(path.join(home, "agent-checkpoint"));
  const m = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["1", "--dry-run", "--home", home], m.io), 0);
  assert.match(m.stdout(), /would restore +a\.txt/);
  assert.match(m.stdout(), /would remove +new\.txt/);
  write(dir, "hand.txt", "mine\n");
  const d = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["diff", "1", "--home", home], d.io), 0);
  assert.match(d.stdout(), /-a2\n\+a1/);
  assert.match(d.stdout(), /deleted file mode 100644\n.*\n--- a\/new\.txt/);
  assert.doesNotMatch(d.stdout(), /\+\+\+ .*hand\.txt/, "a kept file is listed, not patched");
  assert.match(d.stdout(), /kept +hand\.txt/);
  const all = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["diff", "1", "--all", "--home", home], all.io), 0);
  assert.match(all.stdout(), /--- a\/hand\.txt/);
  fs.rmSync(path.join(dir, "hand.txt"));
  assert.deepEqual(hashTree(dir), tree);
  assert.equal(snapshotCount(home, dir), 1);
  // Refs and ledger unchanged (the store's own index may be refreshed).
  const after = hashTree(path.join(home, "agent-checkpoint"));
  for (const [file, hash] of store) {
    if (/refs|ledger/.test(file)) assert.equal(after.get(file), hash, file);
  }
});

test("an unchanged tree gets no new snapshot, and one turn gets at most one", () => {
  const dir = project({ "a.txt": "1" });
  const { home, ws } = setup();
  const first = ws.beforeWrite(dir, 1);
  assert.ok(first);
  write(dir, "a.txt", "2");
  assert.equal(ws.beforeWrite(dir, 1), undefined, "same turn");
  const second = ws.beforeWrite(dir, 2);
  assert.ok(second, "next turn, changed tree");
  assert.equal(ws.beforeWrite(dir, 3), undefined, "unchanged tree");
  assert.equal(snapshotCount(home, dir), 2);
  // A tier persist names the newest snapshot when nothing changed, a new one otherwise.
  assert.deepEqual(ws.snapshot(dir, "tier 1"), { snapshot: second, project: dir });
  write(dir, "a.txt", "3");
  const third = ws.snapshot(dir, "tier 2");
  assert.notEqual(third?.snapshot, second);
  assert.equal(snapshotCount(home, dir), 3);
});

test(".gitignore is honoured and node_modules is never stored", () => {
  const dir = project({
    ".gitignore": "dist/\n*.tmp\n",
    "src/a.ts": "a",
    "dist/out.js": "x",
    "x.tmp": "t",
    "node_modules/pkg/index.js": "m",
  });
  const { home, ws } = setup();
  const files = snapshotFiles(home, ws.beforeWrite(dir, 1) as string);
  assert.deepEqual([...files.keys()].sort(), [".gitignore", "src/a.ts"]);
});

test("guards: the filesystem root, the user's home, big files and too many files", () => {
  const { ws, logs } = setup();
  assert.equal(ws.beforeWrite("/", 1), undefined);
  assert.match(logs.join("\n"), /skip \/: it is the filesystem root/);

  const fakeHome = project({ "a.txt": "a" });
  const h = setup({}, { userHome: fakeHome });
  assert.equal(h.ws.beforeWrite(fakeHome, 1), undefined);
  assert.equal(h.ws.beforeWrite(fakeHome, 2), undefined);
  assert.equal(h.logs.filter((l) => /it is your home directory/.test(l)).length, 1);
  assert.equal(fs.existsSync(path.join(h.home, "agent-checkpoint", "projects")), false);

  const big = project({ "small.txt": "s" });
  fs.writeFileSync(path.join(big, "big.bin"), Buffer.alloc(2 * 1024 * 1024));
  const b = setup({ max_file_size_mb: 1 });
  const files = snapshotFiles(b.home, b.ws.beforeWrite(big, 1) as string);
  assert.deepEqual([...files.keys()], ["small.txt"]);
  // A file that grows past the limit leaves the next snapshot.
  fs.writeFileSync(path.join(big, "small.txt"), Buffer.alloc(2 * 1024 * 1024));
  write(big, "other.txt", "o");
  const next = snapshotFiles(b.home, b.ws.beforeWrite(big, 2) as string);
  assert.deepEqual([...next.keys()], ["other.txt"]);
  // Rolling back does not delete a file only missing from the snapshot for its size.
  const r = rollback({ home: b.home, project: big, target: 2 });
  assert.equal(fs.statSync(path.join(big, "big.bin")).size, 2 * 1024 * 1024);
  assert.ok(r.skipped.some((s) => s.path === "small.txt"));

  const many = project(Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`f${i}`, "x"])));
  const c = setup({}, { maxFiles: 5 });
  assert.equal(c.ws.beforeWrite(many, 1), undefined);
  assert.equal(c.ws.beforeWrite(many, 2), undefined);
  assert.equal(c.logs.length, 1, "said once");
  assert.match(c.logs[0] as string, /more than 5 files/);
});

test("without git on PATH the feature is off with one log line", () => {
  const dir = project({ "a.txt": "a" });
  const { ws, logs } = setup({}, { env: { PATH: "/nonexistent-bin" } });
  assert.equal(ws.beforeWrite(dir, 1), undefined);
  assert.equal(ws.beforeTool(dir, 2, "bash", { command: "rm a.txt" }), undefined);
  ws.afterWrite(dir, ["a.txt"]);
  assert.equal(ws.snapshot(dir), undefined);
  assert.equal(logs.length, 1);
  assert.match(logs[0] as string, /git was not found on PATH/);
});

test("off unless workspace_snapshots is true", () => {
  const dir = project({ "a.txt": "a" });
  const home = tempHome();
  const ws = new Workspaces({ home, log: () => {}, settings: () => ({}) });
  assert.equal(ws.beforeWrite(dir, 1), undefined);
  assert.equal(fs.existsSync(path.join(home, "agent-checkpoint")), false);
});

test("a restore never follows a symbolic link out of the tree", () => {
  const outside = project({ "victim.txt": "outside\n", "d/file.txt": "outside d\n" });
  const dir = project({ "a.txt": "a1\n", "d/file.txt": "d1\n" });
  const { home, ws } = setup();
  ws.beforeWrite(dir, 1);
  // The agent replaces a file by a link out of the tree, and a directory too.
  fs.rmSync(path.join(dir, "a.txt"));
  fs.symlinkSync(path.join(outside, "victim.txt"), path.join(dir, "a.txt"));
  fs.rmSync(path.join(dir, "d"), { recursive: true });
  fs.symlinkSync(path.join(outside, "d"), path.join(dir, "d"));
  ws.afterWrite(dir, ["a.txt", "d"]);
  const r = rollback({ home, project: dir, all: true });
  assert.equal(read(outside, "victim.txt"), "outside\n");
  assert.equal(read(outside, "d/file.txt"), "outside d\n");
  // The links themselves are replaced: by the file, and by the directory with its file.
  assert.equal(fs.lstatSync(path.join(dir, "a.txt")).isFile(), true);
  assert.equal(read(dir, "a.txt"), "a1\n");
  assert.equal(fs.lstatSync(path.join(dir, "d")).isDirectory(), true);
  assert.equal(read(dir, "d/file.txt"), "d1\n");
  assert.deepEqual(r.removed, ["d"]);
  assert.deepEqual(r.skipped, []);
});

/** Run `script` in sh; the only way to name non-UTF-8 files under Deno, whose node:fs is lossy. */
function sh(cwd: string, script: string): string {
  return execFileSync("sh", ["-c", script], { cwd }).toString();
}

test("paths with spaces, newlines and non-UTF-8 bytes are stored and restored", () => {
  const dir = project({ "with space.txt": "s1", "new\nline.txt": "n1" });
  const latin = `"$(printf 'caf\\351.txt')"`;
  sh(dir, `mkdir "sub dir" && printf l1 > ${latin} && printf d1 > "sub dir/$(printf 'x\\377')"`);
  const { home, ws } = setup();
  const id = ws.beforeTool(dir, 1, "bash", { command: "rm -rf ./*" }) as string;
  assert.ok(id);
  assert.equal(snapshotFiles(home, id).size, 4);
  sh(dir, "rm -rf ./*");
  assert.equal(sh(dir, "ls -A"), "");
  ws.afterTool(dir, "bash", { ok: true });
  const r = rollback({ home, project: dir });
  assert.deepEqual(r.restored.sort(), [
    '"caf\\351.txt"',
    '"new\\nline.txt"',
    '"sub dir/x\\377"',
    "with space.txt",
  ]);
  assert.equal(read(dir, "with space.txt"), "s1");
  assert.equal(read(dir, "new\nline.txt"), "n1");
  assert.equal(sh(dir, `cat ${latin} "sub dir/$(printf 'x\\377')"`), "l1d1");
  // A file the agent created is removed, whatever its name.
  const made = `"$(printf 'made\\351')"`;
  const before = ws.beforeTool(dir, 2, "bash", { command: `printf x > ${made}` }) as string;
  assert.ok(before);
  sh(dir, `printf x > ${made}`);
  ws.afterTool(dir, "bash", { ok: true });
  const undo = rollback({ home, project: dir, target: before });
  assert.deepEqual(undo.removed, ['"made\\351"']);
  assert.equal(sh(dir, `ls ${made} 2>/dev/null || echo gone`), "gone\n");
});

test("max_snapshots keeps the newest snapshots, their ids, and prunes the rest", () => {
  const dir = project({ "a.txt": "0" });
  const { home, ws } = setup({ max_snapshots: 3 });
  const ids: string[] = [];
  for (let t = 1; t <= 5; t++) {
    write(dir, "a.txt", `unique content ${t}`);
    ids.push(ws.beforeWrite(dir, t) as string);
  }
  const storeEnv = { ...GIT_ENV, GIT_DIR: path.join(home, "agent-checkpoint", "store") };
  const projects = listProjects({ home }).projects;
  assert.equal(projects[0]?.snapshots, 3);
  const r = rollback({ home, project: dir, target: ids[2] as string, dryRun: true });
  assert.equal(r.snapshot.id, ids[2]);
  const exists = (obj: string) => {
    try {
      execFileSync("git", ["cat-file", "-e", obj], { env: storeEnv, stdio: "ignore" });
      return true;
    } catch {
      return false;
    }
  };
  assert.equal(exists(ids[0] as string), false, "dropped snapshot pruned");
  const blob1 = createHash("sha1").update("blob 16\0unique content 1").digest("hex");
  assert.equal(exists(blob1), false, "its unique content pruned");
  assert.equal(exists(ids[4] as string), true);
  // The store is a sound git repository.
  execFileSync("git", ["fsck", "--no-dangling", "--strict"], { env: storeEnv, stdio: "pipe" });
});

test("max_total_size_mb drops the oldest snapshots", () => {
  const dir = project();
  const { home, ws } = setup({ max_total_size_mb: 0.15, max_file_size_mb: 1 });
  for (let t = 1; t <= 4; t++) {
    fs.writeFileSync(
      path.join(dir, `f${t}.bin`),
      Buffer.from(Array.from({ length: 60_000 }, () => Math.floor(Math.random() * 256))),
    );
    ws.beforeWrite(dir, t);
  }
  const count = listProjects({ home }).projects[0]?.snapshots ?? 0;
  assert.ok(count < 4 && count >= 1, `kept ${count}`);
});

test("snapshots lists projects; clear asks on a terminal and refuses without one", async () => {
  const dir = project({ "a.txt": "a" });
  const { home, ws } = setup();
  ws.beforeWrite(dir, 1);
  const ls = memoryIo();
  assert.equal(await snapshotsCommand.run(["--home", home, "--json"], ls.io), 0);
  const s = JSON.parse(ls.stdout());
  assert.equal(s.projects[0].project, dir);
  assert.equal(s.projects[0].snapshots, 1);
  const text = memoryIo();
  assert.equal(await snapshotsCommand.run(["--home", home], text.io), 0);
  assert.ok(text.stdout().includes(dir));
  const prune = memoryIo();
  assert.equal(await snapshotsCommand.run(["prune", "--home", home], prune.io), 0);
  await assert.rejects(() => snapshotsCommand.run(["clear", "--home", home], memoryIo().io));
  const no = memoryIo({ stdinIsTTY: true, answers: ["n"] });
  assert.equal(await snapshotsCommand.run(["clear", "--home", home], no.io), 0);
  assert.equal(no.questions.length, 1);
  assert.ok(fs.existsSync(path.join(home, "agent-checkpoint", "store")));
  const yes = memoryIo();
  assert.equal(await snapshotsCommand.run(["clear", "--yes", "--home", home], yes.io), 0);
  assert.equal(fs.existsSync(path.join(home, "agent-checkpoint")), false);
});

test("rollback reports a missing snapshot and bad arguments", async () => {
  const dir = project({ "a.txt": "a" });
  const { home, ws } = setup();
  ws.beforeWrite(dir, 1);
  const m = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["7", "--home", home], m.io), 1);
  assert.match(m.stderr(), /no snapshot 7 .* it has 1/);
  await assert.rejects(
    () => rollbackCommand.run(["1", "a.txt", "extra", "--home", home], memoryIo().io),
  );
  await assert.rejects(() => rollbackCommand.run(["diff", "1", "--dry-run"], memoryIo().io));
});

test("destructive shell commands are found by tokenizing", () => {
  const table: [string, boolean][] = [
    ["rm -rf build", true],
    ["mv a b", true],
    ["cp a b", true],
    ["sed -i 's/a/b/' f", true],
    ["sed -n 1p f", false],
    ["echo hi > out.txt", true],
    ["echo hi >> out.txt", true],
    ["echo hi > /dev/null", false],
    ["ls 2>&1", false],
    ["ls 2>/dev/null | head", false],
    ["make >&2", false],
    ["cmd &> log.txt", true],
    ["cd x && rm y", true],
    ["ls; rmdir z", true],
    ["(rm a)", true],
    ["echo $(rm a)", true],
    ["echo `rm a`", true],
    ["cat a | tee b", true],
    ["cat a | tee /dev/null", false],
    ["git reset --hard", true],
    ["git -C sub checkout -- .", true],
    ["git status && git diff", false],
    ["sudo rm x", true],
    ["FOO=1 truncate -s 0 f", true],
    ["bash -c 'rm x'", true],
    ["sh -c 'ls -la'", false],
    ["find . -name '*.o' -delete", true],
    ["xargs rm < list", true],
    ["grep -r foo . | wc -l", false],
    ["cat < in.txt", false],
    ["ls\nrm x", true],
    ["npm test", false],
    ["echo 'rm -rf /' # not run", false],
    ["dd if=/dev/zero of=x bs=1 count=1", true],
    ["python -c 'print(1)'", false],
    ["ln -sf /etc/passwd a.txt", true],
    ["tar -xf x.tar", true],
    ["tar xzf x.tgz", true],
    ["tar --extract --file=x.tar", true],
    ["tar -czf out.tgz src", true],
    ["tar -tf x.tar", false],
    ["unzip -o x.zip", true],
    ["unzip -l x.zip", false],
    ["awk -i inplace '{print}' f", true],
    ["gawk -i inplace '{print}' f", true],
    ["awk '{print}' f", false],
    ["chmod +x run.sh", true],
  ];
  for (const [command, expected] of table) {
    assert.equal(isDestructiveCommand(command), expected, command);
  }
});

test("non-destructive shell commands and other tools take no snapshot", () => {
  const dir = project({ "a.txt": "a" });
  const { home, ws } = setup();
  assert.equal(ws.beforeTool(dir, 1, "bash", { command: "ls -la 2>&1 | grep a" }), undefined);
  assert.equal(ws.beforeTool(dir, 2, "web_search", { query: "rm -rf" }), undefined);
  assert.equal(fs.existsSync(path.join(home, "agent-checkpoint")), false);
  assert.ok(ws.beforeTool(dir, 3, "NotebookEdit", { notebook_path: "n.ipynb" }));
});

test("a staged tree pruned from the store is rebuilt, never committed broken", () => {
  const dir = project({ "a.txt": "1" });
  const other = project({ "b.txt": "1" });
  const { home, ws } = setup({ max_snapshots: 1 });
  ws.beforeWrite(dir, 1);
  // A destructive command stages the tree after it without committing it...
  ws.beforeTool(dir, 2, "bash", { command: "echo 2 > a.txt" });
  write(dir, "a.txt", "2 staged, never committed");
  ws.afterTool(dir, "bash", { ok: true });
  // ...then another project's snapshots prune everything unreachable.
  ws.beforeWrite(other, 1);
  write(other, "b.txt", "2");
  ws.beforeWrite(other, 2);
  const id = ws.beforeWrite(dir, 3) as string;
  assert.ok(id);
  assert.equal(snapshotFiles(home, id).size, 1);
  const storeEnv = { ...GIT_ENV, GIT_DIR: path.join(home, "agent-checkpoint", "store") };
  execFileSync("git", ["fsck", "--strict", "--no-dangling"], { env: storeEnv, stdio: "pipe" });
});

test("one rollback restores a directory the agent replaced by a file, a link, or the reverse", () => {
  for (const replace of ["echo oops > docs", "ln -s /tmp docs"]) {
    const dir = project({ "docs/guide.md": "the guide\n", "docs/api/ref.md": "ref\n", "x": "x\n" });
    const { home, ws } = setup();
    const command = `rm -rf docs && ${replace} && rm x && mkdir x && echo in > x/inside`;
    assert.ok(ws.beforeTool(dir, 1, "bash", { command }, { callId: "c" }));
    sh(dir, command);
    ws.afterTool(dir, "bash", { callId: "c", ok: true });
    const r = rollback({ home, project: dir });
    assert.deepEqual(r.skipped, [], replace);
    assert.deepEqual(r.restored.sort(), ["docs/api/ref.md", "docs/guide.md", "x"], replace);
    assert.deepEqual(r.removed.sort(), ["docs", "x/inside"], replace);
    assert.equal(fs.lstatSync(path.join(dir, "docs")).isDirectory(), true, replace);
    assert.equal(read(dir, "docs/guide.md"), "the guide\n");
    assert.equal(read(dir, "docs/api/ref.md"), "ref\n");
    assert.equal(read(dir, "x"), "x\n");
  }
});

/**
 * Every entry under `dir` (directories too) with its content hash and mode.
 * Not modification times: git refreshes the time of an object it is asked to
 * write again, also in a read-only view's alternate store (where it may).
 */
function fullState(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      const st = fs.lstatSync(p);
      if (e.isDirectory()) {
        out.set(p, `dir:${st.mode}`);
        walk(p);
      } else if (e.isSymbolicLink()) out.set(p, `link:${fs.readlinkSync(p)}`);
      else {
        const hash = createHash("sha256").update(fs.readFileSync(p)).digest("hex");
        out.set(p, `${hash}:${st.mode}`);
      }
    }
  };
  walk(dir);
  return out;
}

test("--dry-run and diff write nothing to the store, and work on a read-only store", async () => {
  const dir = project({ "a.txt": "a1\n", "b.txt": "b1\n" });
  const { home, ws } = setup();
  ws.beforeWrite(dir, 1);
  write(dir, "a.txt", "a2\n");
  ws.afterWrite(dir, ["a.txt"]);
  ws.beforeWrite(dir, 2);
  // Changes since the newest snapshot, so a preview must stage the tree to see them.
  write(dir, "a.txt", "a3\n");
  write(dir, "new.txt", "n\n");
  ws.afterWrite(dir, ["a.txt", "new.txt"]);
  const state = path.join(home, "agent-checkpoint");
  const before = fullState(state);
  const tree = fullState(dir);
  const run = async (args: string[]) => {
    const m = memoryIo({ cwd: dir });
    assert.equal(await rollbackCommand.run([...args, "--home", home], m.io), 0, m.stderr());
    return m.stdout();
  };
  const check = async (expected: Map<string, string>) => {
    assert.match(await run(["2", "--dry-run"]), /would restore +a\.txt\n.*would remove +new\.txt/s);
    assert.match(await run(["diff", "2"]), /-a3\n\+a1/);
    const one = await run(["diff", "1", "--all", "a.txt"]);
    assert.match(one, /-a3\n\+a2/);
    const all = await run(["diff", "1", "--all"]);
    assert.match(all, /-a3\n\+a2/);
    assert.match(all, /new\.txt/);
    assert.match(await run(["1", "--all", "--dry-run"]), /would restore +a\.txt/);
    assert.match(await run(["2", "--dry-run", "--json"]), /"dryRun": true/);
    assert.deepEqual(fullState(state), expected, "the store is as it was");
    assert.deepEqual(fullState(dir), tree, "the tree is as it was");
  };
  await check(before);
  // Not even an object's time: `diff 1 --all` leaves the tree of the snapshot itself, an object
  // the store has, which git would refresh if it were asked to write it.
  const objects = path.join(state, "store", "objects");
  const old = new Date(1_000_000_000_000);
  const files = [...fullState(objects).entries()].filter(([, v]) => !v.startsWith("dir:"));
  for (const [file] of files) fs.utimesSync(file, old, old);
  assert.match(await run(["diff", "1", "--all"]), /-a3\n\+a2/);
  assert.match(await run(["1", "--all", "--dry-run"]), /would restore +a\.txt/);
  const touched = files.filter(([file]) => fs.statSync(file).mtimeMs !== old.getTime());
  assert.deepEqual(touched.map(([file]) => path.relative(objects, file)), []);
  // Read-only: tests may run as root, who writes anyway through permissions; where root may
  // mount, a read-only bind mount of the store refuses root too.
  const mounted = readOnlyMount(state);
  if (!mounted) execFileSync("chmod", ["-R", "a-w", state]);
  try {
    if (mounted) {
      assert.throws(() => fs.writeFileSync(path.join(state, "probe"), ""), /EROFS/);
    }
    await check(fullState(state));
  } finally {
    if (mounted) execFileSync("umount", [state]);
    else execFileSync("chmod", ["-R", "u+w", state]);
  }
});

/** Make `dir` a read-only bind mount of itself, where this process may mount (root, Linux). */
function readOnlyMount(dir: string): boolean {
  if (process.platform !== "linux" || process.getuid?.() !== 0) return false;
  try {
    execFileSync("mount", ["--bind", dir, dir], { stdio: "pipe" });
  } catch {
    return false;
  }
  try {
    execFileSync("mount", ["-o", "remount,bind,ro", dir], { stdio: "pipe" });
    return true;
  } catch {
    execFileSync("umount", [dir]);
    return false;
  }
}

test("snapshots list numbers the agent's snapshots; a rollback's are marked and reached by id", async () => {
  const dir = project({ "a.txt": "a1\n", "b.txt": "b1\n" });
  const { home, ws } = setup();
  for (let turn = 1; turn <= 4; turn++) {
    ws.beforeTool(dir, turn, "write_file", { path: "a.txt" }, { callId: `c${turn}`, runId: "r1" });
    write(dir, "a.txt", `a${turn + 1}\n`);
    if (turn === 2) write(dir, "b.txt", "b2\n");
    ws.afterTool(dir, "write_file", { callId: `c${turn}`, runId: "r1", ok: true });
  }
  ws.afterWrite(dir, ["b.txt"]);
  const list = async () => {
    const m = memoryIo({ cwd: dir });
    assert.equal(await snapshotsCommand.run(["list", "--home", home, "--json"], m.io), 0);
    return JSON.parse(m.stdout()).snapshots as Record<string, unknown>[];
  };
  const four = await list();
  assert.deepEqual(four.map((s) => s.number), [1, 2, 3, 4]);
  assert.deepEqual(four.map((s) => s.turn), [4, 3, 2, 1]);
  assert.equal(four[0]!.tool, "write_file");
  assert.equal(four[0]!.runId, "r1");
  assert.match(four[0]!.short as string, /^[0-9a-f]{12}$/);
  assert.deepEqual(four[1]!.files, ["a.txt", "b.txt"], "differs from the one before in both");
  assert.deepEqual(four[0]!.files, ["a.txt"]);
  // rollback 4, twice: the second finds the same snapshot and nothing to undo.
  const first = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["4", "--home", home], first.io), 0, first.stderr());
  const restoredId = (four[3]!.id as string).slice(0, 12);
  assert.match(first.stdout(), new RegExp(`rolled back to snapshot ${restoredId}`));
  const took = first.stdout().match(/snapshot taken first: ([0-9a-f]{12})/)?.[1];
  assert.ok(took, first.stdout());
  assert.equal(read(dir, "a.txt"), "a1\n");
  assert.equal(read(dir, "b.txt"), "b1\n");
  const after = await list();
  assert.deepEqual(after.map((s) => s.number), [undefined, 1, 2, 3, 4]);
  assert.equal(after[0]!.kind, "rollback");
  assert.equal(after[0]!.short, took);
  const text = memoryIo({ cwd: dir });
  assert.equal(await snapshotsCommand.run(["list", "--home", home], text.io), 0);
  assert.match(text.stdout(), new RegExp(`^rollback +${took} `, "m"));
  assert.match(text.stdout(), new RegExp(`^4 +${restoredId} `, "m"));
  // The user keeps a file the rollback restored, by hand, then runs rollback 4 again.
  write(dir, "b.txt", "b1, then mine\n");
  const second = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run(["4", "--home", home], second.io), 0);
  assert.match(second.stdout(), new RegExp(`rolled back to snapshot ${restoredId}`));
  assert.equal(read(dir, "a.txt"), "a1\n", "the user's rollback is not undone");
  assert.equal(read(dir, "b.txt"), "b1, then mine\n");
  // The rollback's snapshot is reached by id: undo the first rollback.
  const undo = memoryIo({ cwd: dir });
  assert.equal(await rollbackCommand.run([took, "a.txt", "--home", home], undo.io), 0);
  assert.equal(read(dir, "a.txt"), "a5\n");
});

test("tool names and input keys come from settings; any other tool is logged once per name", () => {
  const dir = project({ "a.txt": "a1\n", "b.txt": "b1\n" });
  const { home, ws, logs } = setup({
    workspace_file_tools: { names: ["edit_file"], path_keys: ["target"] },
    workspace_shell_tools: { names: ["run_command"], command_keys: ["cmdline"] },
  });
  // Built-in names not in the settings' lists are other tools now.
  assert.equal(ws.beforeTool(dir, 1, "write_file", { path: "a.txt" }), undefined);
  assert.equal(ws.beforeTool(dir, 2, "write_file", { path: "a.txt" }), undefined);
  assert.equal(ws.beforeTool(dir, 3, "web_search", { query: "x" }), undefined);
  assert.deepEqual(logs, [
    'info: workspace snapshots: tool "write_file" is in neither workspace_file_tools nor workspace_shell_tools, so no snapshot is taken before it',
    'info: workspace snapshots: tool "web_search" is in neither workspace_file_tools nor workspace_shell_tools, so no snapshot is taken before it',
  ]);
  assert.equal(fs.existsSync(path.join(home, "agent-checkpoint")), false);
  // A file tool of the settings, its path under the settings' key.
  assert.ok(ws.beforeTool(dir, 4, "edit_file", { target: "a.txt" }, { callId: "e" }));
  write(dir, "a.txt", "a2\n");
  ws.afterTool(dir, "edit_file", { callId: "e", ok: true });
  // A shell tool of the settings, its command under the settings' key.
  assert.ok(ws.beforeTool(dir, 5, "run_command", { cmdline: "rm b.txt" }, { callId: "r" }));
  fs.rmSync(path.join(dir, "b.txt"));
  ws.afterTool(dir, "run_command", { callId: "r", ok: true });
  assert.equal(ws.beforeTool(dir, 6, "run_command", { cmdline: "ls" }), undefined);
  const r = rollback({ home, project: dir, target: 2 });
  assert.deepEqual(r.restored.sort(), ["a.txt", "b.txt"]);
  assert.equal(logs.length, 2);
});

test("max_tree_files sets the file limit (200,000 by default) and the skip is logged once", () => {
  assert.equal(SETTINGS.max_tree_files.default, 200_000);
  const many = project(Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`f${i}`, "x"])));
  const over = setup({ max_tree_files: 7 });
  assert.equal(over.ws.beforeWrite(many, 1), undefined);
  assert.equal(over.ws.beforeWrite(many, 2), undefined);
  assert.deepEqual(over.logs, [
    `info: workspace snapshots skip ${many}: the tree has more than 7 files (max_tree_files)`,
  ]);
  const fits = setup({ max_tree_files: 8 });
  assert.ok(fits.ws.beforeWrite(many, 1));
  // A tree at the limit stays snapshotted as files change, go and come.
  write(many, "f0", "changed");
  assert.ok(fits.ws.beforeWrite(many, 2));
  fs.rmSync(path.join(many, "f1"));
  write(many, "new", "n");
  assert.ok(fits.ws.beforeWrite(many, 3));
  assert.deepEqual(fits.logs, []);
  write(many, "ninth", "n");
  assert.equal(fits.ws.beforeWrite(many, 4), undefined);
  assert.deepEqual(fits.logs, [
    `info: workspace snapshots skip ${many}: the tree has more than 8 files (max_tree_files)`,
  ]);
});

test("the tree before a shell command outlives a prune by another project until the tool ends", () => {
  const dir = project({ "a.txt": "1\n" });
  const other = project({ "b.txt": "1\n" });
  const { home, ws } = setup({ max_snapshots: 1 });
  ws.beforeWrite(dir, 1);
  // A second command in the same turn: no snapshot, but its tree before is staged.
  write(dir, "a.txt", "2, by a first command\n");
  assert.equal(
    ws.beforeTool(dir, 1, "bash", { command: "echo 3 > a.txt" }, { callId: "s" }),
    undefined,
  );
  // Meanwhile another project's snapshots drop old ones and prune at once.
  write(other, "b.txt", "2\n");
  ws.beforeWrite(other, 1);
  write(other, "b.txt", "3\n");
  ws.beforeWrite(other, 2);
  write(dir, "a.txt", "3, by the command\n");
  ws.afterTool(dir, "bash", { callId: "s", ok: true });
  // The command's write is the agent's: rolling back to the newest snapshot restores a.txt.
  const r = rollback({ home, project: dir });
  assert.deepEqual(r.restored, ["a.txt"]);
  assert.equal(read(dir, "a.txt"), "1\n");
  const storeEnv = { ...GIT_ENV, GIT_DIR: path.join(home, "agent-checkpoint", "store") };
  assert.equal(
    execFileSync("git", ["for-each-ref", "refs/agent-checkpoint-pending/"], { env: storeEnv })
      .toString(),
    "",
    "nothing held once the tool ended",
  );
});

test("replacing the ledger keeps writes appended by another process since it was read", () => {
  const dir = project({ "a.txt": "a\n" });
  const home = tempHome();
  const store = new Store(home, new Git("git", process.env));
  const mine = store.project(dir);
  const theirs = store.project(dir);
  theirs.recordWrites({ "a.txt": "1".repeat(40) });
  const files = mine.ledger();
  // Another process appends while this one holds what it read.
  theirs.recordWrites({ "b.txt": "2".repeat(40), "é.txt": null });
  files["a.txt"] = "3".repeat(40);
  mine.saveLedger(files);
  assert.deepEqual(store.project(dir).ledger(), {
    "a.txt": "3".repeat(40),
    "b.txt": "2".repeat(40),
    "é.txt": null,
  });
  // And later appends go on top of the new ledger.
  theirs.recordWrites({ "a.txt": "4".repeat(40) });
  assert.equal(store.project(dir).ledger()["a.txt"], "4".repeat(40));
});

test("a first snapshot of many files leaves out what a small one does", () => {
  const files: Record<string, string> = { ".gitignore": "*.log\n" };
  for (let i = 0; i < 2100; i++) files[`src/m${i % 30}/f${i}.ts`] = `export const x${i} = ${i};\n`;
  files["debug.log"] = "noise\n";
  files["node_modules/pkg/index.js"] = "m\n";
  const dir = project(files);
  fs.writeFileSync(path.join(dir, "big.bin"), Buffer.alloc(2 * 1024 * 1024));
  fs.symlinkSync("src", path.join(dir, "link"));
  // The home (and so the store) inside the project's tree.
  const home = path.join(dir, "home");
  const ws = new Workspaces({
    home,
    log: () => {},
    settings: () => ({ workspace_snapshots: true, max_file_size_mb: 1 }),
  });
  const id = ws.beforeWrite(dir, 1) as string;
  assert.ok(id);
  const stored = snapshotFiles(home, id);
  assert.equal(
    stored.size,
    2100 + 2,
    [...stored.keys()].filter((f) => !f.startsWith("src/")).join(),
  );
  assert.ok(stored.has(".gitignore"));
  assert.equal(stored.get("link"), "120000");
  for (const left of ["big.bin", "debug.log", "node_modules/pkg/index.js"]) {
    assert.equal(stored.has(left), false, left);
  }
  assert.ok(![...stored.keys()].some((f) => f.startsWith("home/")), "the store is not stored");
});

test("a prune keeps what every project's index holds, so it is not hashed anew", () => {
  const dir = project({ "a.txt": "1\n" });
  const other = project({ "b.txt": "1\n" });
  const { home, ws } = setup({ max_snapshots: 1 });
  ws.beforeWrite(dir, 1);
  // A command's change is staged after it ends, and in no snapshot.
  ws.beforeTool(dir, 2, "bash", { command: "echo staged > a.txt" }, { callId: "s" });
  write(dir, "a.txt", "staged, in no snapshot\n");
  ws.afterTool(dir, "bash", { callId: "s", ok: true });
  write(other, "b.txt", "2\n");
  ws.beforeWrite(other, 1);
  write(other, "b.txt", "3\n");
  ws.beforeWrite(other, 2);
  const storeEnv = { ...GIT_ENV, GIT_DIR: path.join(home, "agent-checkpoint", "store") };
  const blob = createHash("sha1").update("blob 23\0staged, in no snapshot\n").digest("hex");
  execFileSync("git", ["cat-file", "-e", blob], { env: storeEnv, stdio: "pipe" });
});
