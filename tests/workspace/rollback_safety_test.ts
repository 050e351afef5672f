// Rollback never destroys the user's work: real shell commands, real git, edits made from
// outside while a command runs, and rollbacks killed from outside.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { execFileSync, spawn } from "node:child_process";
import { listProjects, rollback, Workspaces } from "../../workspace/mod.ts";
import { fixture, scriptCommand, tempHome } from "../_helpers.ts";
import { processStart } from "../../workspace/_lock.ts";

function project(files: Record<string, string> = {}): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "ac-rbs-")));
  for (const [name, content] of Object.entries(files)) write(dir, name, content);
  return dir;
}

function write(dir: string, name: string, content: string | Uint8Array): void {
  fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
  fs.writeFileSync(path.join(dir, name), content);
}

const read = (dir: string, name: string) => fs.readFileSync(path.join(dir, name), "utf8");
const exists = (dir: string, name: string) => fs.existsSync(path.join(dir, name));

function setup(settings: Record<string, unknown> = {}) {
  const home = tempHome();
  const logs: string[] = [];
  const ws = new Workspaces({
    home,
    log: (level, message) => logs.push(`${level}: ${message}`),
    settings: () => ({ workspace_snapshots: true, ...settings }),
  });
  return { home, ws, logs };
}

/** Wait for a condition, bounded (a busy machine is slow, never this slow). */
async function until(what: string, ok: () => boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Run a shell command the way a host's shell tool does: hooks before and after, `sh -c` between. */
function shellTool(ws: Workspaces, dir: string, turn: number, command: string, callId: string) {
  ws.beforeTool(dir, turn, "Bash", { command }, { callId });
  const child = spawn("sh", ["-c", command], { cwd: dir, stdio: "ignore" });
  const done = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  return {
    started: () => child.pid !== undefined,
    end: async () => {
      await done;
      ws.afterTool(dir, "Bash", { callId, ok: true });
    },
  };
}

test("edits made by hand while an agent's shell command runs are kept, and listed", async () => {
  const dir = project({ "old.txt": "old\n", "mine.txt": "my v1\n" });
  const gate = fs.mkdtempSync(path.join(os.tmpdir(), "ac-rbs-gate-"));
  const { home, ws } = setup();
  // The command waits for a file outside the project, so the hand edits land while it runs.
  const tool = shellTool(
    ws,
    dir,
    1,
    `while [ ! -e ${gate}/go ]; do sleep 0.05; done; rm old.txt`,
    "c1",
  );
  await until("the command to start", tool.started);
  write(dir, "mine.txt", "my v2, saved while the agent's command ran\n");
  write(dir, "notes.txt", "my new notes\n");
  fs.writeFileSync(path.join(gate, "go"), "");
  await tool.end();
  assert.equal(exists(dir, "old.txt"), false);
  const r = rollback({ home, project: dir, target: 1 });
  assert.deepEqual(r.restored, ["old.txt"]);
  assert.deepEqual(r.removed, []);
  assert.deepEqual(r.skipped, [
    { path: "mine.txt", reason: "changed during the command, kept" },
    { path: "notes.txt", reason: "changed during the command, kept" },
  ]);
  assert.equal(read(dir, "old.txt"), "old\n");
  assert.equal(read(dir, "mine.txt"), "my v2, saved while the agent's command ran\n");
  assert.equal(read(dir, "notes.txt"), "my new notes\n");
  // The user decides: --all takes them back too.
  rollback({ home, project: dir, target: 1, all: true });
  assert.equal(read(dir, "mine.txt"), "my v1\n");
  assert.equal(exists(dir, "notes.txt"), false);
});

test("files a shell command names or writes with their times kept are the agent's", async () => {
  const dir = project({ "a.txt": "a\n", "src/b.txt": "b\n" });
  const { home, ws } = setup();
  const archive = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ac-rbs-tar-")), "x.tar");
  const other = project({ "pkg/c.txt": "from the archive\n" });
  fs.utimesSync(path.join(other, "pkg/c.txt"), new Date(2020, 1, 1), new Date(2020, 1, 1));
  execFileSync("tar", ["-cf", archive, "-C", other, "pkg"]);
  const tool = shellTool(
    ws,
    dir,
    1,
    `sed -i s/a/agent/ a.txt && cd src && echo agent > b.txt && cd .. && tar -xf ${archive}`,
    "c1",
  );
  await tool.end();
  const r = rollback({ home, project: dir, target: 1 });
  assert.deepEqual(r.skipped, []);
  assert.deepEqual(r.restored.sort(), ["a.txt", "src/b.txt"]);
  // The directory the archive made goes too, once emptied.
  assert.deepEqual(r.removed, ["pkg/c.txt", "pkg/"]);
  assert.ok(!exists(dir, "pkg"));
  assert.equal(read(dir, "a.txt"), "a\n");
  assert.equal(read(dir, "src/b.txt"), "b\n");
});

test("ln -sf, tar -xf, unzip -o, awk -i inplace and chmod +x are undone by a rollback", async () => {
  const src = project({ "a.txt": "from an archive\n", "b.txt": "zipped\n" });
  // An archive's files come out with the times they had when packed (days ago, say).
  for (const f of ["a.txt", "b.txt"]) {
    fs.utimesSync(path.join(src, f), new Date(2020, 1, 1), new Date(2020, 1, 1));
  }
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "ac-rbs-arc-"));
  execFileSync("tar", ["-cf", path.join(out, "x.tar"), "-C", src, "a.txt"]);
  execFileSync("zip", ["-q", path.join(out, "x.zip"), "b.txt"], { cwd: src });
  const commands: [string, (dir: string) => void][] = [
    ["ln -sf /etc/hostname a.txt", (d) => assert.equal(fs.lstatSync(`${d}/a.txt`).isFile(), true)],
    [`tar -xf ${out}/x.tar`, () => {}],
    [`unzip -o -q ${out}/x.zip`, () => {}],
    ["awk -i inplace '{print toupper($0)}' a.txt", () => {}],
    ["chmod +x a.txt", (d) => assert.equal(fs.statSync(`${d}/a.txt`).mode & 0o111, 0)],
  ];
  for (const [command, check] of commands) {
    const dir = project({ "a.txt": "mine\n", "b.txt": "mine too\n" });
    const { home, ws } = setup();
    await shellTool(ws, dir, 1, command, "c").end();
    const r = rollback({ home, project: dir, target: 1 });
    assert.deepEqual(r.skipped, [], command);
    assert.ok(r.restored.length > 0, command);
    assert.equal(read(dir, "a.txt"), "mine\n", command);
    assert.equal(read(dir, "b.txt"), "mine too\n", command);
    check(dir);
  }
});

test("a shell command whose snapshot was skipped (the lock held elsewhere) is still recorded, and counted once", async () => {
  const dir = project({ "a.txt": "a\n", "b.txt": "b\n" });
  const home = tempHome();
  const logs: string[] = [];
  const ws = new Workspaces({
    home,
    log: (level, message) => logs.push(`${level}: ${message}`),
    settings: () => ({ workspace_snapshots: true }),
    lockWaitMs: 300,
  });
  assert.ok(ws.beforeWrite(dir, 1));
  // Another live process holds the project's lock for longer than a hook waits.
  const holder = spawn("sleep", ["120"], { stdio: "ignore" });
  try {
    const key = listProjects({ home }).projects[0]!.key;
    const start = processStart(holder.pid!);
    fs.writeFileSync(
      path.join(home, "agent-checkpoint", "projects", key, "lock"),
      JSON.stringify({ pid: holder.pid, host: os.hostname(), ...(start ? { start } : {}) }),
    );
    await shellTool(ws, dir, 2, "rm b.txt", "c1").end();
    await shellTool(ws, dir, 3, "echo agent > a.txt", "c2").end();
    const skips = logs.filter((l) => l.includes("snapshot skipped")).length;
    assert.equal(skips, 2, logs.join("\n"));
    assert.equal(listProjects({ home }).projects[0]!.skippedSnapshots, skips);
    assert.ok(!logs.some((l) => l.startsWith("warn:")), logs.join("\n"));
  } finally {
    holder.kill("SIGKILL");
    await new Promise((r) => holder.once("close", r));
  }
  const r = rollback({ home, project: dir, target: 1 });
  assert.deepEqual(r.restored.sort(), ["a.txt", "b.txt"]);
  assert.deepEqual(r.skipped, []);
  assert.equal(read(dir, "b.txt"), "b\n");
  assert.equal(read(dir, "a.txt"), "a\n");
});

test("a path under a directory the agent replaced by a link outside is never read through", async () => {
  const dir = project({ "src/x.txt": "mine\n", "src/y.txt": "y\n" });
  const outside = project({ "x.txt": "outside\n", "y.txt": "y\n" });
  const { home, ws } = setup();
  await shellTool(ws, dir, 1, "rm -rf src", "c1").end();
  await shellTool(ws, dir, 2, `ln -s ${outside} src && rm -f none.tmp`, "c2").end();
  const r = rollback({ home, project: dir, target: 2 });
  assert.deepEqual(r.skipped, []);
  assert.deepEqual(r.restored.sort(), ["src/x.txt", "src/y.txt"]);
  assert.equal(fs.lstatSync(path.join(dir, "src")).isDirectory(), true);
  assert.equal(read(dir, "src/x.txt"), "mine\n");
  assert.equal(fs.readFileSync(path.join(outside, "x.txt"), "utf8"), "outside\n");
});

test("a file named under a symbolically linked directory is in the project, not outside", async () => {
  const dir = project({ "src/x.txt": "mine\n" });
  const outside = project({ "x.txt": "outside\n" });
  const { home, ws } = setup();
  await shellTool(ws, dir, 1, `rm -rf src && ln -s ${outside} src`, "c1").end();
  const one = rollback({ home, project: dir, target: 1, path: "src/x.txt", cwd: dir });
  assert.deepEqual(one.skipped, [{ path: "src/x.txt", reason: "behind a symbolic link" }]);
  assert.equal(fs.readFileSync(path.join(outside, "x.txt"), "utf8"), "outside\n");
});

test("a file too big for the snapshot is never removed nor passed over in silence", async () => {
  const dir = project({ "a.txt": "a\n" });
  write(dir, "big.dat", Buffer.alloc(1_500_000, 1));
  write(dir, "huge.raw", Buffer.alloc(1_200_000, 2));
  const { home, ws, logs } = setup({ max_file_size_mb: 1 });
  await shellTool(ws, dir, 1, "truncate -s 500000 big.dat && echo more >> huge.raw", "c1").end();
  await shellTool(ws, dir, 2, "echo x > a.txt", "c2").end();
  ws.snapshot(dir);
  // One line per file, however many snapshots leave it out.
  for (const name of ["big.dat", "huge.raw"]) {
    const said = logs.filter((l) => l.includes(`leave out ${path.join(dir, name)}:`));
    assert.equal(said.length, 1, `${name}: ${logs.join("\n")}`);
  }
  for (const all of [false, true]) {
    const r = rollback({ home, project: dir, target: 3, all });
    assert.deepEqual(r.removed, []);
    assert.deepEqual(r.skipped, [
      { path: "big.dat", reason: "not in the snapshot (over max_file_size_mb), kept" },
      { path: "huge.raw", reason: "not in the snapshot (over max_file_size_mb), kept" },
    ]);
    assert.equal(fs.statSync(path.join(dir, "big.dat")).size, 500_000);
    assert.equal(fs.statSync(path.join(dir, "huge.raw")).size, 1_200_005);
    assert.equal(read(dir, "a.txt"), "a\n");
  }
});

test("a tree the file-count guard kept out says so at rollback", () => {
  const dir = project(Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`f${i}`, "x"])));
  const { home, ws } = setup({ max_tree_files: 5 });
  assert.equal(ws.beforeTool(dir, 1, "Bash", { command: "rm f1" }, { callId: "c" }), undefined);
  assert.throws(
    () => rollback({ home, project: dir, target: 1 }),
    new RangeError(
      `No snapshots of ${dir}: it was not snapshotted, the tree has more than 5 files (max_tree_files)`,
    ),
  );
});

test("a rollback SIGKILLed mid-way leaves each file as before or as restored; the next one finishes", async () => {
  const N = 4000;
  const names = Array.from(
    { length: N },
    (_, i) => `d${i % 40}/f${String(i).padStart(5, "0")}.txt`,
  );
  const original = (n: string) => `${n} as the user had it\n`.repeat(200);
  const dir = project(Object.fromEntries(names.map((n) => [n, original(n)])));
  const { home, ws } = setup();
  let killedMidway = 0;
  for (let attempt = 0; attempt < 6 && killedMidway === 0; attempt++) {
    ws.beforeWrite(dir, attempt + 1);
    for (const n of names) write(dir, n, `${n}: the agent's\n`);
    ws.afterWrite(dir, names);
    const [cmd, argv] = scriptCommand(fixture("workspace_rollback"), [home, dir]);
    const child = spawn(cmd, argv, { stdio: ["ignore", "ignore", "inherit"] });
    const closed = new Promise((r) => child.once("close", r));
    // Killed as soon as the first file is back (files are restored in name order).
    await until(
      "the rollback to begin restoring",
      () => read(dir, names[0]!) === original(names[0]!),
    );
    child.kill("SIGKILL");
    await closed;
    let restored = 0;
    for (const n of names) {
      const now = fs.readFileSync(path.join(dir, n), "utf8");
      if (now === original(n)) restored++;
      else assert.equal(now, `${n}: the agent's\n`, `${n} is neither as before nor as restored`);
    }
    if (restored < N) killedMidway = restored;
    // The next rollback finishes the job, saying nothing false about the files.
    const r = rollback({ home, project: dir, target: 1 });
    assert.deepEqual(r.skipped, []);
    for (const n of names) assert.equal(read(dir, n), original(n), n);
    assert.deepEqual(
      fs.readdirSync(dir, { recursive: true }).filter((f) => String(f).includes("ac-rollback")),
      [],
    );
  }
  assert.ok(killedMidway > 0, "no kill landed mid-way in 6 tries");
});

test("a rollback SIGKILLed mid-way: the snapshot that finishes it also puts the directories right", async () => {
  const N = 3000;
  const names = Array.from(
    { length: N },
    (_, i) => `gen/d${i % 30}/f${String(i).padStart(5, "0")}.txt`,
  );
  const dir = project({ "a.txt": "a\n" });
  const { home, ws } = setup();
  let turn = 1;
  let killedMidway = false;
  for (let attempt = 0; attempt < 6 && !killedMidway; attempt++) {
    fs.mkdirSync(path.join(dir, "keep"), { recursive: true });
    ws.beforeWrite(dir, turn++);
    fs.rmdirSync(path.join(dir, "keep"));
    for (const n of names) write(dir, n, `${n}: the agent's\n`);
    ws.afterWrite(dir, names);
    const [cmd, argv] = scriptCommand(fixture("workspace_rollback"), [home, dir]);
    const child = spawn(cmd, argv, { stdio: ["ignore", "ignore", "inherit"] });
    const closed = new Promise((r) => child.once("close", r));
    // Killed as soon as the first file is gone (files are removed in name order).
    await until("the rollback to begin removing", () => !exists(dir, names[0]!));
    child.kill("SIGKILL");
    await closed;
    killedMidway = names.some((n) => exists(dir, n));
    // The next snapshot finishes the rollback: files, then directories.
    ws.beforeWrite(dir, turn++);
    assert.ok(names.every((n) => !exists(dir, n)));
    assert.ok(!exists(dir, "gen"), "the directories the agent made, emptied, are gone");
    assert.deepEqual(fs.readdirSync(path.join(dir, "keep")), []);
  }
  assert.ok(killedMidway, "no kill landed mid-way in 6 tries");
});

test("the store's size cap counts bytes on disk, is applied at snapshot time, and packs first", () => {
  // 400 small files: a few KB of content, but 4 KiB on disk each as loose objects.
  const files = Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`f${i}.txt`, `${i}\n`]));
  const dir = project(files);
  const { home, ws, logs } = setup({ max_total_size_mb: 1 });
  const storeInfo = () => listProjects({ home });
  for (let t = 1; t <= 3; t++) {
    write(dir, `f${t}.txt`, `turn ${t}\n`);
    assert.ok(ws.beforeWrite(dir, t));
    assert.ok(storeInfo().bytes <= 1024 * 1024, `turn ${t}: ${storeInfo().bytes} bytes`);
  }
  assert.match(logs.join("\n"), /over max_total_size_mb \(1\.0 MiB\): repacked; now/);
  // Packing was enough: no snapshot was dropped for it.
  assert.equal(storeInfo().projects[0]?.snapshots, 3);
});

test("a user's empty directory stays when the agent's file in it is removed", async () => {
  const dir = project({ "a.txt": "a\n" });
  fs.mkdirSync(path.join(dir, "keepme"));
  const { home, ws } = setup();
  await shellTool(ws, dir, 1, "echo agent > keepme/new.txt", "c1").end();
  const r = rollback({ home, project: dir, target: 1 });
  assert.deepEqual(r.removed, ["keepme/new.txt"]);
  assert.deepEqual(fs.readdirSync(path.join(dir, "keepme")), []);
});

test("empty directories as they were: the agent's rmdir undone, what it made and a rollback emptied gone", async () => {
  const dir = project({ "a.txt": "a\n" });
  fs.mkdirSync(path.join(dir, "keep/deep"), { recursive: true });
  fs.mkdirSync(path.join(dir, "spare"));
  const { home, ws } = setup();
  const command = "rmdir keep/deep keep && rm -r spare && mkdir -p gen/sub made && " +
    "echo x > gen/sub/out.txt && echo y > gen/top.txt && echo z > made/agent.txt";
  await shellTool(ws, dir, 1, command, "c1").end();
  write(dir, "made/mine.txt", "by hand\n");
  const preview = rollback({ home, project: dir, target: 1, dryRun: true });
  assert.deepEqual(preview.restored.filter((p) => p.endsWith("/")), ["keep/deep/", "spare/"]);
  assert.deepEqual(preview.removed.filter((p) => p.endsWith("/")), ["gen/sub/", "gen/"]);
  assert.ok(exists(dir, "gen/sub/out.txt") && !exists(dir, "spare"), "a preview changes nothing");
  const r = rollback({ home, project: dir, target: 1 });
  assert.deepEqual(r.restored, ["keep/deep/", "spare/"]);
  assert.deepEqual(r.removed, [
    "gen/sub/out.txt",
    "gen/top.txt",
    "made/agent.txt",
    "gen/sub/",
    "gen/",
  ]);
  assert.deepEqual(fs.readdirSync(path.join(dir, "keep")), ["deep"]);
  assert.deepEqual(fs.readdirSync(path.join(dir, "keep/deep")), []);
  assert.deepEqual(fs.readdirSync(path.join(dir, "spare")), []);
  assert.ok(!exists(dir, "gen"));
  // The directory the agent made holds a user's file: it stays, with that file alone.
  assert.deepEqual(fs.readdirSync(path.join(dir, "made")), ["mine.txt"]);
  // The rollback can be undone: the snapshot it took first has the agent's directories.
  rollback({ home, project: dir, target: r.before as string, all: true });
  assert.equal(read(dir, "gen/sub/out.txt"), "x\n");
});

test("an empty directory made by hand after the last snapshot is in the next one", async () => {
  const dir = project({ "a.txt": "a\n" });
  const { home, ws } = setup();
  await shellTool(ws, dir, 1, "echo agent > b.txt", "c1").end();
  // No file changes, so the tree is the same: the new empty directory alone makes a snapshot.
  fs.mkdirSync(path.join(dir, "later"));
  await shellTool(ws, dir, 2, "rmdir later", "c2").end();
  assert.ok(!exists(dir, "later"));
  const r = rollback({ home, project: dir, target: 1 });
  assert.deepEqual(r.restored, ["later/"]);
  assert.deepEqual(fs.readdirSync(path.join(dir, "later")), []);
});

test("wording: a file the user deleted says so; 'taken first' never names the target", async () => {
  const dir = project({ "a.txt": "a\n", "b.txt": "b\n" });
  const { home, ws } = setup();
  await shellTool(ws, dir, 1, "echo agent > a.txt && echo agent > b.txt", "c1").end();
  fs.rmSync(path.join(dir, "b.txt"));
  const r = rollback({ home, project: dir, target: 1 });
  assert.deepEqual(r.skipped, [{ path: "b.txt", reason: "deleted since the agent wrote it" }]);
  // Nothing changed since the snapshot: no "snapshot taken first" naming the snapshot itself.
  const other = project({ "c.txt": "c\n" });
  const second = setup();
  assert.ok(second.ws.beforeWrite(other, 1));
  const same = rollback({ home: second.home, project: other, target: 1 });
  assert.equal(same.before, undefined);
});
