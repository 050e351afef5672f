/**
 * `agent-checkpoint run --retries N`: a command that dies is started again
 * with the same run id, each retry resuming where the attempt before it
 * stopped, all inside one deadline; and two supervisors on two machines
 * re-driving one run id never have two attempts live at once.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fixture, scriptCommand, tempHome } from "../_helpers.ts";
import { openStore } from "../../store/mod.ts";
import { openPgStore } from "../../store/postgres.ts";
import { freshSchema, skipFleet } from "../store/_pg.ts";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { serveRuns } from "../../serve/mod.ts";
import { loadSettings } from "../../config.ts";

/** This process's environment without what would steer the supervisor. */
const cleanEnv = (): Record<string, string> => {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !/^(AGENT_CHECKPOINT_|HERMES_)/.test(k)) env[k] = v;
  }
  return env;
};

/** `agent-checkpoint run ARGS` as a program of its own, as a user runs it. */
function runCli(args: string[], env: Record<string, string> = {}) {
  const [cmd, argv] = scriptCommand(fixture("supervise_cli"), args);
  const child = spawn(cmd, argv, {
    env: { ...cleanEnv(), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stdout.resume();
  child.stderr.on("data", (d) => stderr += d);
  const timer = setTimeout(() => child.kill("SIGKILL"), 180_000);
  const done = new Promise<number | null>((resolve) =>
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve(code);
    })
  );
  return { child, done, stderr: () => stderr };
}

/** The worker: dies by its own SIGKILL while its attempt is at most `deaths`, then does 3 turns. */
const worker = (home: string, log: string, deaths: number) =>
  scriptCommand(fixture("retried_worker"), [home, log, String(deaths), "3"]).flat();

type Event = {
  pid: number;
  event: string;
  runId?: string;
  attempt?: number;
  turn?: number;
  previous?: { attempt: number; turnsUsed: number };
};
const events = (log: string): Event[] =>
  fs.existsSync(log)
    ? fs.readFileSync(log, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l))
    : [];

test("run --retries 5 --deadline 120: a command SIGKILLed 3 times is one run of 4 attempts, the last resumed from the third's position, exit 0", async () => {
  const home = tempHome();
  const log = path.join(home, "events.jsonl");
  const cli = runCli([
    "--retries",
    "5",
    "--retry-delay",
    "0.1",
    "--deadline",
    "120",
    "--run-id",
    "redriven",
    "--home",
    home,
    "--",
    ...worker(home, log, 3),
  ]);
  const code = await cli.done;
  assert.equal(code, 0, cli.stderr());
  const seen = events(log);
  const starts = seen.filter((e) => e.event === "start");
  assert.deepEqual(starts.map((e) => [e.runId, e.attempt]), [
    ["redriven", 1],
    ["redriven", 2],
    ["redriven", 3],
    ["redriven", 4],
  ]);
  // Where the third attempt died: the turn it was in. The ledger is at most one progress
  // interval behind, so the fourth starts from that turn, or the one before when the kill came
  // within that interval.
  // (Turns are counted per attempt: each retry has the full caps.)
  const third = seen.filter((e) => e.event === "turn" && e.attempt === 3).length;
  const resumed = starts[3]!.previous!;
  assert.equal(resumed.attempt, 3);
  assert.ok(
    resumed.turnsUsed === third || resumed.turnsUsed === third - 1,
    `attempt 4 resumed from ${resumed.turnsUsed} turns; attempt 3 died in its turn ${third}`,
  );
  assert.deepEqual(seen.filter((e) => e.event === "end").map((e) => e.attempt), [4]);
  assert.equal(
    (cli.stderr().match(/retried \(retry \d of 5\) because it was ended by SIGKILL/g) ?? []).length,
    3,
    cli.stderr(),
  );

  // The record: one run, its retries as attempts, each saying why it was retried.
  const store = openStore({ home, settings: { host_timeout_seconds: 30 } })!;
  try {
    const attempts = (await store.list({ runId: "redriven" })).map((v) => v.record)
      .sort((a, b) => a.attempt - b.attempt);
    const newest = attempts.at(-1)!;
    assert.equal(newest.attempt, 4);
    assert.equal(newest.status, "done");
    for (const r of attempts.filter((r) => r.attempt < 4)) {
      assert.match(
        r.end?.summary ?? "",
        /retried \(retry \d of 5\) because it was ended by SIGKILL/,
      );
    }
  } finally {
    await store.close();
  }
  // show and the web view's detail list the retries as the run's attempts, each with its reason.
  const show = memoryIo();
  assert.equal(await main(["show", "redriven", "--home", home], show.io), 0, show.stderr());
  assert.match(show.stdout(), /retried \(retry \d of 5\) because it was ended by SIGKILL/);
  const settings = loadSettings({ home, env: {} }).settings;
  const webStore = openStore({ home, settings, mode: "read" })!;
  const served = await serveRuns({ store: webStore, settings, port: 0 });
  try {
    // Typed: Node's fetch gives unknown where Deno's gives any (the npm build's tsc refused it).
    const detail = await (await fetch(`${served.url}api/runs/redriven`)).json() as {
      attempts: { attempt: number; summary: string }[];
    };
    assert.deepEqual(detail.attempts.map((a) => a.attempt), [4, 3, 2, 1]);
    for (const a of detail.attempts.slice(1)) {
      assert.match(a.summary, /retried \(retry \d of 5\) because it was ended by SIGKILL/);
    }
  } finally {
    await served.close();
    await webStore.close();
  }
});

test("run --retries 2: the third death is the last attempt, and run exits with its status", async () => {
  const home = tempHome();
  const log = path.join(home, "events.jsonl");
  const cli = runCli([
    "--retries",
    "2",
    "--retry-delay",
    "0.1",
    "--deadline",
    "120",
    "--run-id",
    "gives-up",
    "--home",
    home,
    "--",
    ...worker(home, log, 3),
  ]);
  const code = await cli.done;
  assert.equal(code, 128 + 9, cli.stderr()); // SIGKILL's status, as a shell gives it
  assert.deepEqual(events(log).filter((e) => e.event === "start").map((e) => e.attempt), [1, 2, 3]);
  assert.match(cli.stderr(), /no retries left \(2 made\): the command was ended by SIGKILL/);
});

const skip = skipFleet;

test(
  "two supervisors on two machines re-driving one run id: at most one attempt live at any moment",
  { skip },
  async () => {
    const db = await freshSchema();
    const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
    const runs: ReturnType<typeof runCli>[] = [];
    try {
      const logs: string[] = [];
      for (const name of ["machine-a", "machine-b"]) {
        const home = tempHome();
        const log = path.join(home, "events.jsonl");
        logs.push(log);
        runs.push(runCli(
          [
            "--retries",
            "4",
            "--retry-delay",
            "0.1",
            "--deadline",
            "120",
            "--run-id",
            "shared-task",
            "--home",
            home,
            "--",
            ...worker(home, log, 3),
          ],
          { AGENT_CHECKPOINT_MACHINE: name, AGENT_CHECKPOINT_STORE: db.url },
        ));
      }
      // From the store, every 100 ms while either supervisor runs: the live attempts of the run.
      let samples = 0;
      let most = 0;
      let ended = false;
      const over = Promise.all(runs.map((r) => r.done)).then((codes) => (ended = true, codes));
      while (!ended) {
        const live = (await store.list({ runId: "shared-task" })).filter((v) => v.state === "live");
        samples++;
        most = Math.max(most, live.length);
        assert.ok(
          live.length <= 1,
          `two attempts live at once: ${JSON.stringify(live.map((v) => v.record.host))}`,
        );
        await new Promise((r) => setTimeout(r, 100));
      }
      const codes = await over;
      const all = logs.flatMap(events);
      // The run got done.
      const said = runs.map((r) => r.stderr()).join("\n");
      assert.ok(all.some((e) => e.event === "end"), `${JSON.stringify(all)}\n${said}`);
      assert.ok(codes.includes(0), `${codes}: ${runs.map((r) => r.stderr()).join("\n")}`);
      assert.ok(samples >= 10, `${samples} samples`);
      assert.equal(most, 1);
    } finally {
      for (const r of runs) r.child.kill("SIGKILL");
      await store.close();
      await db.drop();
    }
  },
);
