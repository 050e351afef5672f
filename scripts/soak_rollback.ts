/**
 * The rollback soak (not in CI): an agent runs random destructive shell
 * commands and file writes through the workspace hooks, with real `sh -c`,
 * while a second process (a bash loop) makes hand edits at random moments,
 * in files of its own beside the agent's; after every round a rollback runs
 * in a third process that is SIGKILLed at a random moment half of the time,
 * then a rollback runs to its end.
 *
 * After each round: every hand edit is intact (or listed as kept), every file
 * the agent changed is back as it was at the round's start (content and
 * mode; a file kept and listed counts as not undone), and nothing outside the
 * project changed. Prints the figures; exits 1 when a check fails.
 *
 *   deno task soak:rollback [--commands 200] [--per-round 20] [--seed N]
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { createHash } from "node:crypto";
import { execFileSync, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { rollback, type RollbackResult, Workspaces } from "../workspace/mod.ts";
import { flag, runtime } from "./_bench_util.ts";

const args = process.argv.slice(2);
const total = Number(flag(args, "--commands", "200"));
const perRound = Number(flag(args, "--per-round", "20"));
let seed = Number(flag(args, "--seed", String(Date.now() % 100000)));
const random = () => {
  // mulberry32: a seeded run can be repeated
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = <T>(list: T[]): T => list[Math.floor(random() * list.length)] as T;
const startSeed = seed;

const tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "ac-soak-rb-")));
const home = path.join(tmp, "home");
const root = path.join(tmp, "project");
const outside = path.join(tmp, "outside");
for (const d of [home, root, outside]) fs.mkdirSync(d, { recursive: true });
const child = fileURLToPath(new URL("./_soak_rollback_child.ts", import.meta.url));
const childCommand = (h: string, p: string, t: string): [string, string[]] =>
  runtime.endsWith("node") || runtime.endsWith("node.exe")
    ? [runtime, [child.replace(/\.ts$/, ".js"), h, p, t]]
    : [runtime, ["run", "-A", "--quiet", child, h, p, t]];

// The agent's files, in a few directories; the hand editor's are `hand-*` beside them.
const DIRS = ["", "src", "src/lib", "docs"];
const agentFiles = () => Array.from({ length: 30 }, (_, i) => path.join(pick(DIRS), `f${i}.txt`));
for (let i = 0; i < 30; i++) {
  const rel = path.join(DIRS[i % DIRS.length] as string, `f${i}.txt`);
  fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
  fs.writeFileSync(path.join(root, rel), `file ${i}\n`.repeat(1 + (i % 7)));
}
for (let i = 0; i < 5; i++) fs.writeFileSync(path.join(outside, `o${i}.txt`), `outside ${i}\n`);
// An archive whose files keep their (old) times when extracted.
const archiveSrc = path.join(tmp, "archive-src");
fs.mkdirSync(path.join(archiveSrc, "pkg"), { recursive: true });
fs.writeFileSync(path.join(archiveSrc, "pkg", "vendored.txt"), "from the archive\n");

const old = new Date(2020, 0, 1);
fs.utimesSync(path.join(archiveSrc, "pkg", "vendored.txt"), old, old);
const archive = path.join(tmp, "x.tar");
execFileSync("tar", ["-cf", archive, "-C", archiveSrc, "pkg"]);

/** Every file under `dir` (not directories): content hash and mode, or the link's target. */
function state(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      const rel = path.relative(dir, p);
      if (e.isDirectory()) walk(p);
      else if (e.isSymbolicLink()) out.set(rel, `link:${fs.readlinkSync(p)}`);
      else {
        const st = fs.statSync(p);
        const hash = createHash("sha1").update(fs.readFileSync(p)).digest("hex");
        out.set(rel, `${hash}:${(st.mode & 0o111) ? "x" : "-"}`);
      }
    }
  };
  walk(dir);
  return out;
}

/** A random destructive command on the agent's files (or a file tool's write, as null). */
function command(): string | null {
  const [a, b] = [pick(agentFiles()), pick(agentFiles())];
  const q = (p: string) => `'${p}'`;
  const kinds: (() => string | null)[] = [
    () => `rm -f ${q(a)}`,
    () => `mv -f ${q(a)} ${q(b)}`,
    () => `cp ${q(a)} ${q(b)}`,
    () => `sed -i 's/file/FILE/' ${q(a)}`,
    () => `echo agent >> ${q(a)}`,
    () => `echo agent-new > ${q(path.join(pick(DIRS), `new${Math.floor(random() * 5)}.txt`))}`,
    () => `truncate -s 3 ${q(a)}`,
    () => `chmod +x ${q(a)}`,
    () => `ln -sf /etc/hostname ${q(a)}`,
    () => `tar -xf ${archive}`,
    () => `awk -i inplace '{print toupper($0)}' ${q(a)}`,
    () => `sleep 0.${Math.floor(random() * 4)} && rm -f ${q(a)}`,
    () => null,
  ];
  return pick(kinds)();
}

const figures = {
  seed: startSeed,
  commands: 0,
  fileToolWrites: 0,
  rounds: 0,
  handEdits: 0,
  handFilesChecked: 0,
  handFilesIntact: 0,
  handFilesListedKept: 0,
  handFilesLost: 0,
  rollbacksKilled: 0,
  killsMidway: 0,
  rollbacksRun: 0,
  agentFilesChanged: 0,
  agentChangesUndone: 0,
  agentChangesKeptListed: 0,
  agentChangesNotUndone: 0,
  outsideChanged: 0,
  lostFiles: [] as string[],
};
const failures: string[] = [];
const logs: string[] = [];
const ws = new Workspaces({
  home,
  log: (level, message) => logs.push(`${level}: ${message}`),
  settings: () => ({ workspace_snapshots: true }),
});
const outsideBefore = state(outside);
/** The journals of rollbacks under way (or killed). */
const journals = () => {
  const dir = path.join(home, "agent-checkpoint", "projects");
  return (fs.existsSync(dir) ? fs.readdirSync(dir) : [])
    .filter((k) => fs.existsSync(path.join(dir, k, "rollback-journal.json")));
};
let turn = 0;
while (figures.commands + figures.fileToolWrites < total) {
  figures.rounds++;
  turn++;
  // The hand editor: its own files, at random moments, until told to stop.
  const stop = path.join(tmp, `stop-${turn}`);
  const editor = spawn("bash", [
    "-c",
    `n=0; while [ ! -e '${stop}' ]; do sleep 0.0$((RANDOM % 9 + 1)); ` +
    `d=$(( RANDOM % 4 )); case $d in 0) d=.;; 1) d=src;; 2) d=src/lib;; 3) d=docs;; esac; ` +
    `mkdir -p "$d"; echo "hand edit $n $RANDOM" >> "$d/hand-$((RANDOM % 3)).txt"; n=$((n+1)); done; echo $n`,
  ], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });
  let editorOut = "";
  editor.stdout.on("data", (d) => editorOut += d);
  const editorDone = new Promise((r) => editor.once("close", r));
  const start = state(root);
  for (let i = 0; i < perRound && figures.commands + figures.fileToolWrites < total; i++) {
    const cmd = command();
    const callId = `c${turn}-${i}`;
    if (cmd === null) {
      const rel = pick(agentFiles());
      ws.beforeTool(root, turn, "write_file", { path: rel }, { callId });
      fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
      try {
        fs.writeFileSync(path.join(root, rel), `written by the agent's file tool ${i}\n`);
        ws.afterTool(root, "write_file", { callId, ok: true });
      } catch {
        ws.afterTool(root, "write_file", { callId, ok: false });
      }
      figures.fileToolWrites++;
      continue;
    }
    ws.beforeTool(root, turn, "Bash", { command: cmd }, { callId });
    await new Promise((r) =>
      spawn("sh", ["-c", cmd], { cwd: root, stdio: "ignore" }).once("close", r)
    );
    ws.afterTool(root, "Bash", { callId, ok: true });
    figures.commands++;
  }
  fs.writeFileSync(stop, "");
  await editorDone;
  figures.handEdits += Number(editorOut.trim()) || 0;
  const end = state(root);
  // A rollback killed from outside at a random moment, half of the time.
  const listedKept = new Set<string>();
  const note = (r: RollbackResult) => {
    for (const s of r.skipped) listedKept.add(s.path);
  };
  if (random() < 0.5) {
    const [c, a] = childCommand(home, root, "1");
    const proc = spawn(c, a, { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    proc.stdout.on("data", (d) => out += d);
    const closed = new Promise((r) => proc.once("close", r));
    let exited = false;
    proc.once("close", () => exited = true);
    if (random() < 0.5) await new Promise((r) => setTimeout(r, 300 + random() * 2500));
    else {
      // Killed once its plan is written down: in the middle of putting files back.
      const end = Date.now() + 60_000;
      while (!exited && Date.now() < end && journals().length === 0) {
        await new Promise((r) => setTimeout(r, 1));
      }
    }
    proc.kill("SIGKILL");
    await closed;
    if (out.trim() === "") {
      figures.rollbacksKilled++;
      if (journals().length > 0) figures.killsMidway++;
    } else note(JSON.parse(out.trim()) as RollbackResult);
  }
  const r = rollback({ home, project: root, target: 1 });
  figures.rollbacksRun++;
  note(r);
  const after = state(root);
  // Hand edits: the editor's files as it left them.
  for (const [rel, v] of end) {
    if (!path.basename(rel).startsWith("hand-")) continue;
    figures.handFilesChecked++;
    if (after.get(rel) === v) figures.handFilesIntact++;
    else if (listedKept.has(rel)) figures.handFilesListedKept++;
    else {
      figures.handFilesLost++;
      figures.lostFiles.push(rel);
      failures.push(`round ${turn}: the hand-edited ${rel} changed`);
    }
  }
  // The agent's changes: every path not the editor's is back as it was at the round's start.
  const paths = new Set([...start.keys(), ...end.keys()]);
  for (const rel of paths) {
    if (path.basename(rel).startsWith("hand-")) continue;
    if (start.get(rel) === end.get(rel)) continue;
    figures.agentFilesChanged++;
    if (after.get(rel) === start.get(rel)) figures.agentChangesUndone++;
    else if (listedKept.has(rel)) figures.agentChangesKeptListed++;
    else {
      figures.agentChangesNotUndone++;
      failures.push(`round ${turn}: the agent's change to ${rel} was not undone`);
    }
  }
  const outsideNow = state(outside);
  for (const [rel, v] of outsideBefore) {
    if (outsideNow.get(rel) !== v) {
      figures.outsideChanged++;
      failures.push(`round ${turn}: outside file ${rel} changed`);
    }
  }
}
const { lostFiles: _, ...shown } = figures;
console.log(JSON.stringify(shown, null, 2));
for (const f of failures.slice(0, 30)) console.log(`FAIL ${f}`);
if (failures.length === 0) fs.rmSync(tmp, { recursive: true, force: true });
else console.log(`left for a look: ${tmp}`);
process.exit(failures.length === 0 ? 0 : 1);
