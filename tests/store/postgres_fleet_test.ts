// The fleet store end to end: processes as machines of a fleet (each its own home), one
// PostgreSQL database between them.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { type ChildProcess, spawn } from "node:child_process";
import {
  captureLog,
  fixture,
  runScript,
  scriptCommand,
  sleep,
  tempHome,
  waitFor,
} from "../_helpers.ts";
import { admin, freshSchema, PG_URL, skipFleet } from "./_pg.ts";
import { backend as pgBackend, openPgStore, type PgRunStore } from "../../store/postgres.ts";
import { openBridge, PortStore } from "../../store/_bridge.ts";
import { runState, type RunView } from "../../store/types.ts";
import { createAgentCheckpoint } from "../../mod.ts";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { parseRecord } from "../../_record.ts";
import { supervise } from "../../supervise/mod.ts";
import { Worker } from "node:worker_threads";

interface Seen {
  pid: number;
  runId: string;
  file: string;
  attempt: number;
  previous?: {
    attempt: number;
    status?: string;
    host?: { machine: string; pid: number };
    summary: string;
  };
  before?: string;
  prologues: [number, string][];
  logs: string[];
}

async function attempt(
  home: string,
  url: string,
  plan: Record<string, unknown>,
): Promise<Seen> {
  const result = await runScript(fixture("pg_attempt"), [home, JSON.stringify(plan)], {
    env: { AGENT_CHECKPOINT_STORE: url },
    timeoutMs: 90_000,
  });
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout.trim().split("\n").at(-1)!);
}

test(
  "a retry on another machine recreates the checkpoint file from the store, agent text included",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    try {
      const first = tempHome();
      const second = tempHome();
      const text = "\n## Agent notes\nMigrated 3 of 7 tables; next: orders.\n";
      const one = await attempt(first, db.url, {
        sessionId: "task-42",
        turns: 6,
        calls: 5,
        append: text,
        end: "failed",
      });
      assert.equal(one.attempt, 1);
      assert.ok(fs.readFileSync(one.file, "utf8").includes(text));
      // The second machine has never seen this run.
      const two = await attempt(second, db.url, {
        sessionId: "task-42",
        turns: 6,
        calls: 1,
        end: "capped",
      });
      assert.ok(!two.file.startsWith(first));
      assert.equal(two.attempt, 2);
      assert.equal(two.previous?.attempt, 1);
      assert.equal(two.previous?.status, "failed");
      assert.equal(two.previous?.host?.pid, one.pid);
      // Its file was there before its first prologue, with the agent's own text.
      assert.ok(two.before?.includes(text), two.before ?? "(no file before the first prologue)");
      assert.ok(two.logs.some((l) => /recreated the checkpoint file from the fleet store/.test(l)));
      assert.ok(two.prologues.length > 0 && /attempt 1/i.test(two.prologues[0]![1]));
      assert.ok(fs.readFileSync(two.file, "utf8").includes("Migrated 3 of 7 tables"));
      // `show` on the first machine heads attempt 2 with attempt 2's file (the store's copy), not
      // with its own file of attempt 1, and says whose file it has.
      const m = memoryIo();
      assert.equal(await main(["show", "task-42", "--home", first, "--store", db.url], m.io), 0);
      const out = m.stdout();
      assert.match(out, /^Run task-42, attempt 2: ended capped/m);
      assert.match(out, /as the fleet store keeps it/);
      assert.match(out, /the checkpoint file on this machine, \S+task-42\.md, is attempt 1's/);
      const shown = parseRecord(new TextEncoder().encode(out.slice(out.indexOf("<!--"))));
      assert.equal(shown?.attempt, 2, out);
      assert.equal(shown?.end?.status, "capped", out);
    } finally {
      await db.drop();
    }
  },
);

/** A fixture process left running; `done` resolves with its exit code and output. */
function launch(
  name: string,
  args: string[],
  env: Record<string, string>,
): { child: ChildProcess; done: Promise<{ code: number | null; stdout: string; stderr: string }> } {
  const [cmd, argv] = scriptCommand(fixture(name), args);
  const child = spawn(cmd, argv, {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d) => stdout += d);
  child.stderr!.on("data", (d) => stderr += d);
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  );
  return { child, done };
}

/** Poll the store until `check` holds on what `read` gives, or `ms` passes. */
async function until<T>(read: () => Promise<T>, check: (v: T) => boolean, ms: number): Promise<T> {
  const end = Date.now() + ms;
  let value = await read();
  while (!check(value) && Date.now() < end) {
    await sleep(100);
    value = await read();
  }
  return value;
}

test(
  "two simultaneous starts of one run id get distinct attempts; the later is told the earlier is live",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
    try {
      const dir = tempHome();
      const go = path.join(dir, "go");
      const hold = path.join(dir, "hold");
      // warn: the later start runs, told that the earlier is live (the default refuses it).
      const plan = {
        sessionId: "kanban-7",
        turns: 10,
        calls: 1,
        go,
        hold,
        end: "done",
        settings: { on_duplicate: "warn" },
      };
      const a = launch("pg_attempt", [tempHome(), JSON.stringify(plan)], {
        AGENT_CHECKPOINT_STORE: db.url,
      });
      const b = launch("pg_attempt", [tempHome(), JSON.stringify(plan)], {
        AGENT_CHECKPOINT_STORE: db.url,
      });
      // Both processes loaded and waiting at the same line: then both start at once.
      await sleep(200);
      fs.writeFileSync(go, "");
      await until(() => store.list({ runId: "kanban-7" }), (v) => v.length === 2, 60_000);
      fs.writeFileSync(hold, "");
      const [ra, rb] = await Promise.all([a.done, b.done]);
      assert.equal(ra.code, 0, ra.stderr);
      assert.equal(rb.code, 0, rb.stderr);
      const seen = [ra, rb].map((r) => JSON.parse(r.stdout.trim().split("\n")[0]!) as Seen);
      assert.deepEqual(seen.map((s) => s.attempt).sort(), [1, 2]);
      const [first, second] = seen[0]!.attempt === 1 ? seen : [seen[1]!, seen[0]!];
      assert.equal(first!.previous, undefined);
      assert.equal(second!.previous?.attempt, 1);
      assert.equal(second!.previous?.status, "live");
      assert.equal(second!.previous?.host?.pid, first!.pid);
      assert.ok(
        second!.logs.some((l) => /warn: run id kanban-7 is still live in another process/.test(l)),
        second!.logs.join("\n"),
      );
    } finally {
      await store.close();
      await db.drop();
    }
  },
);

test("a wrong store URL: hooks unharmed, one log line, the local file still written", {
  skip: skipFleet,
}, async () => {
  const home = tempHome();
  const { logger, records } = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: { AGENT_CHECKPOINT_STORE: "postgres://postgres@127.0.0.1:1/nowhere" },
    settings: { progress_interval_seconds: 0.2 },
    logger,
  });
  const runs = [0, 1, 2].map((i) => ac.startRun({ sessionId: `lost-${i}`, caps: { turns: 4 } }));
  let tiers = 0;
  for (let turn = 0; turn < 3; turn++) {
    for (const run of runs) {
      if (run.preLlmCall() !== undefined) tiers++;
      run.preToolCall("step");
      run.postToolCall("step", { ok: true });
    }
  }
  assert.equal(tiers, 3);
  for (const run of runs) {
    assert.equal(run.attempt, 1);
    assert.ok(fs.existsSync(run.checkpointFile), run.checkpointFile);
  }
  const about = () => records.filter((r) => /fleet store|run ledger/.test(r.message));
  // The store thread says so once it has tried; on a busy machine that may take a while.
  assert.ok(await waitFor(() => about().length >= 1, 30_000), "the unreachable store is said");
  // Several more intervals of the watchdog's batches go by (0.2 s each), and the runs end.
  await sleep(1000);
  for (const run of runs) await run.end({ status: "done" });
  assert.equal(about().length, 1, about().map((r) => r.message).join("\n"));
  assert.match(
    about()[0]!.message,
    /postgres:\/\/postgres@127\.0\.0\.1:1\/nowhere cannot be reached/,
  );
  // At close, what never reached the store is counted: the three runs' ends.
  await ac.close();
  assert.equal(about().length, 2, about().map((r) => r.message).join("\n"));
  assert.match(about()[1]!.message, /did not take 3 record\(s\) before close/);
});

test("a prune that is the store's first word to an unreachable server says the outage, once", async () => {
  // The watchdog asks for its prune at a process's start, before any record may be waiting: the
  // store's thread must say that the server cannot be reached, not that a prune failed.
  const said: string[] = [];
  const bridge = openBridge({
    backend: pgBackend,
    url: "postgres://postgres@127.0.0.1:1/nowhere",
    hostTimeoutSeconds: 30,
    fileMaxKb: 4,
    log: (_level, message) => said.push(message),
  });
  try {
    const port = bridge.watchdogPort();
    assert.ok(port, "the bridge gives the watchdog a port");
    await new PortStore(port, bridge.location, bridge.engine).prune(Date.now(), 10);
    assert.ok(await waitFor(() => said.length >= 1, 60_000), "the store's thread says something");
    // Its retries go by (every second at most); none of them is said again.
    await waitFor(() => said.length >= 2, 2500);
    assert.deepEqual(said.length, 1, said.join("\n"));
    assert.match(said[0]!, /postgres:\/\/postgres@127\.0\.0\.1:1\/nowhere cannot be reached/);
  } finally {
    await bridge.close();
  }
});

/** A run's state as a machine that is not this one sees it: from its heartbeat alone. */
const fromElsewhere = (view: RunView, hostTimeoutSeconds: number) =>
  runState(view.record, view.heartbeat, {
    now: Date.now(),
    hostTimeoutSeconds,
    machine: "another-machine",
    processStart: () => undefined,
  });

test("900 runs over 3 processes are listed live; one process killed, its 300 runs are cut off", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const timeout = 3;
  const store: PgRunStore = openPgStore({ url: db.url, hostTimeoutSeconds: timeout });
  const dir = tempHome();
  const stop = path.join(dir, "stop");
  const procs = [0, 1, 2].map((p) =>
    launch("pg_fleet", [
      tempHome(),
      JSON.stringify({
        prefix: `p${p}`,
        runs: 300,
        everyMs: 1000,
        ready: path.join(dir, `ready${p}`),
        stop,
        settings: { host_timeout_seconds: timeout },
      }),
    ], { AGENT_CHECKPOINT_STORE: db.url })
  );
  try {
    const all = (state?: "live" | "cut-off" | "ended") =>
      store.list(state ? { state, limit: 10_000 } : { limit: 10_000 });
    const live = await until(() => all("live"), (v) => v.length === 900, 120_000);
    assert.equal(live.length, 900);
    assert.equal(new Set(live.map((v) => v.record.host.pid)).size, 3);
    const summary = await store.summary();
    assert.equal(summary.byState.live, 900);
    // One machine dies at once.
    const victim = procs[0]!;
    const pid = victim.child.pid!;
    victim.child.kill("SIGKILL");
    await victim.done;
    const killed = (views: RunView[]) => views.filter((v) => v.record.host.pid === pid);
    // Seen from another machine: its heartbeat stops, and past the timeout its runs are cut off.
    const after = await until(
      () => all(),
      (v) => killed(v).every((x) => fromElsewhere(x, timeout) === "cut-off"),
      (timeout + 30) * 1000,
    );
    assert.equal(killed(after).length, 300);
    assert.ok(killed(after).every((x) => fromElsewhere(x, timeout) === "cut-off"));
    // The others' heartbeats go on: live from anywhere.
    const others = after.filter((v) => v.record.host.pid !== pid);
    assert.equal(others.length, 600);
    assert.ok(others.every((x) => fromElsewhere(x, timeout) === "live"));
    // And from this machine, where the pid is known gone, at once.
    assert.equal((await all("cut-off")).length, 300);
    fs.writeFileSync(stop, "");
    for (const p of procs.slice(1)) {
      const r = await p.done;
      assert.equal(r.code, 0, r.stderr);
    }
    const ended = await all("ended");
    assert.equal(ended.length, 600);
    assert.ok(ended.every((v) => v.record.status === "done"));
    const final = await store.summary();
    assert.deepEqual(final.byState, { live: 0, ended: 600, "cut-off": 300 });
  } finally {
    fs.writeFileSync(stop, "");
    for (const p of procs) p.child.kill("SIGKILL");
    await store.close();
    await db.drop();
  }
});

test("connections terminated again and again mid-run: hooks never slowed, every run's end right", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
  const sql = await admin();
  const dir = tempHome();
  const stop = path.join(dir, "stop");
  const procs = [0, 1].map((p) =>
    launch("pg_fleet", [
      tempHome(),
      JSON.stringify({
        prefix: `t${p}`,
        runs: 50,
        everyMs: 100,
        ready: path.join(dir, `ready${p}`),
        stop,
        settings: { progress_interval_seconds: 0.25 },
      }),
    ], { AGENT_CHECKPOINT_STORE: db.url })
  );
  try {
    assert.ok(
      await waitFor(() => [0, 1].every((p) => fs.existsSync(path.join(dir, `ready${p}`))), 60_000),
    );
    await until(() => store.list({ state: "live" }), (v) => v.length === 100, 60_000);
    // Every connection of this test's store, cut 12 times, a little apart.
    let terminated = 0;
    for (let i = 0; i < 12; i++) {
      const rows = await sql.unsafe(
        `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
          WHERE application_name = $1 AND pid <> pg_backend_pid()`,
        [`agent-checkpoint ${db.schema}`],
      );
      terminated += Number(rows[0]?.n ?? 0);
      await sleep(400);
    }
    assert.ok(terminated >= 2, `terminated ${terminated}`);
    fs.writeFileSync(stop, "");
    const results = await Promise.all(procs.map((p) => p.done));
    // Each record carries the turns its run made: nothing lost.
    const views = await until(
      () => store.list({ limit: 1000 }),
      (v) => v.length === 100 && v.every((x) => x.record.status === "done"),
      30_000,
    );
    const byId = new Map(views.map((v) => [v.record.runId, v.record]));
    for (const r of results) {
      assert.equal(r.code, 0, r.stderr);
      const out = JSON.parse(r.stdout.trim()) as {
        runIds: string[];
        turns: number[];
        maxHookMs: number;
        logs: string[];
      };
      // A bound, not a speed: no hook ever waits on the network.
      assert.ok(out.maxHookMs < 250, `a hook took ${out.maxHookMs} ms`);
      out.runIds.forEach((id, i) => {
        const record = byId.get(id);
        assert.equal(record?.status, "done", id);
        assert.equal(record?.turnsUsed, out.turns[i], id);
      });
      // A connection cut between two writes is made again unseen; one cut during a write is
      // an outage, said when it begins and when it ends.
      const away = out.logs.filter((l) => /cannot be reached/.test(l)).length;
      const back = out.logs.filter((l) => /reachable again/.test(l)).length;
      assert.equal(away, back, out.logs.join("\n"));
    }
  } finally {
    fs.writeFileSync(stop, "");
    for (const p of procs) p.child.kill("SIGKILL");
    await sql.end({ timeout: 1 });
    await store.close();
    await db.drop();
  }
});

/**
 * A TCP relay to the test server that can be cut (every connection dropped, each new one reset
 * and counted in `refused`) and mended. It runs in a thread of its own: a run's first start
 * blocks this thread while the store thread connects through it, and a relay here would hold
 * that connection until it timed out, an outage of the test's own before the one it makes.
 */
async function relay(): Promise<
  {
    port: number;
    refused(): number;
    cut(): Promise<void>;
    mend(): Promise<void>;
    stop(): Promise<void>;
  }
> {
  const target = new URL(PG_URL);
  const worker = new Worker(fixture("pg_relay"), {
    workerData: { host: target.hostname, port: Number(target.port || 5432) },
  });
  let refused = 0;
  const replies: ((m: unknown) => void)[] = [];
  const reply = () => new Promise<unknown>((resolve) => replies.push(resolve));
  worker.on("message", (m: unknown) => m === "refused" ? refused++ : replies.shift()?.(m));
  worker.on("error", (e) => replies.splice(0).forEach((r) => r(e)));
  const ask = async (what: "cut" | "mend") => {
    const done = reply();
    worker.postMessage(what);
    assert.equal(await done, what);
  };
  const port = await reply();
  assert.equal(typeof port, "number", String(port));
  return {
    port: port as number,
    refused: () => refused,
    cut: () => ask("cut"),
    mend: () => ask("mend"),
    async stop() {
      await worker.terminate();
    },
  };
}

/**
 * A fresh schema, a direct store on it, and a keeper whose fleet store reaches it through a
 * relay the test can cut and mend, with a short progress interval and its log captured.
 */
async function behindRelay() {
  const db = await freshSchema();
  const direct = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
  const link = await relay();
  const url = new URL(db.url);
  url.port = String(link.port);
  const { logger, records } = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: { AGENT_CHECKPOINT_STORE: url.href },
    settings: { progress_interval_seconds: 0.2 },
    logger,
  });
  return { db, direct, link, ac, records };
}

test(
  "the database away for a while: records wait in order, are written when it returns, said once each way",
  {
    skip: skipFleet,
  },
  async () => {
    const { db, direct, link, ac, records } = await behindRelay();
    try {
      const runs = [0, 1, 2, 3, 4].map((i) =>
        ac.startRun({ sessionId: `away-${i}`, caps: { turns: 100 } })
      );
      for (const run of runs) run.preLlmCall();
      // The database has each run's first turn: what it holds while it is away.
      await until(
        () => direct.list({ state: "live" }),
        (v) => v.length === 5 && v.every((x) => x.record.turnsUsed === 1),
        30_000,
      );
      const about = (re: RegExp) => records.filter((r) => re.test(r.message));
      // The outage counted below is the one the cut makes: none was said before it.
      assert.equal(about(/cannot be reached/).length, 0, records.map((r) => r.message).join("\n"));
      await link.cut();
      // While it is away: the runs go on, two end.
      for (let turn = 0; turn < 3; turn++) {
        for (const run of runs) {
          run.preLlmCall();
          run.preToolCall("step");
          run.postToolCall("step", { ok: true });
        }
      }
      await runs[0]!.end({ status: "failed" });
      await runs[1]!.end({ status: "done" });
      assert.ok(await waitFor(() => about(/cannot be reached/).length > 0, 30_000));
      // What the database holds meanwhile is what it had before.
      assert.deepEqual((await direct.list()).map((v) => v.record.turnsUsed), [1, 1, 1, 1, 1]);
      // Away long enough for the store to try again (a line per try would be a second one).
      assert.ok(await waitFor(() => link.refused() >= 2, 30_000), `${link.refused()} tries`);
      await link.mend();
      assert.ok(await waitFor(() => about(/reachable again/).length > 0, 60_000));
      const views = await until(
        () => direct.list(),
        (v) => v.length === 5 && v.every((x) => x.record.turnsUsed === 4),
        30_000,
      );
      const byId = new Map(views.map((v) => [v.record.runId, v]));
      assert.equal(byId.get("away-0")?.record.status, "failed");
      assert.equal(byId.get("away-1")?.record.status, "done");
      for (const id of ["away-2", "away-3", "away-4"]) assert.equal(byId.get(id)?.state, "live");
      assert.ok(views.every((v) => v.record.turnsUsed === 4));
      assert.equal(about(/cannot be reached/).length, 1);
      assert.equal(about(/reachable again/).length, 1);
      for (const run of runs.slice(2)) await run.end({ status: "done" });
    } finally {
      await ac.close();
      await link.stop();
      await direct.close();
      await db.drop();
    }
  },
);

test("the database back while close() waits: the runs' ends still reach it", {
  skip: skipFleet,
}, async () => {
  const { db, direct, link, ac, records } = await behindRelay();
  let closed: Promise<void> | undefined;
  try {
    const runs = [0, 1].map((i) => ac.startRun({ sessionId: `closing-${i}`, caps: { turns: 9 } }));
    for (const run of runs) run.preLlmCall();
    await until(
      () => direct.list({ state: "live" }),
      (v) => v.length === 2 && v.every((x) => x.record.turnsUsed === 1),
      30_000,
    );
    await link.cut();
    await runs[0]!.end({ status: "failed" });
    await runs[1]!.end({ status: "done" });
    // Away long enough that the store thread's next try of its own is a second or more off.
    assert.ok(await waitFor(() => link.refused() >= 3, 30_000), `${link.refused()} tries`);
    const tries = link.refused();
    closed = ac.close();
    // close() has found the database still away; then it comes back, within close()'s wait.
    assert.ok(await waitFor(() => link.refused() > tries, 30_000), "close() tried the database");
    await link.mend();
    await closed;
    const byId = new Map((await direct.list()).map((v) => [v.record.runId, v.record]));
    assert.equal(byId.get("closing-0")?.status, "failed");
    assert.equal(byId.get("closing-1")?.status, "done");
    assert.ok(
      !records.some((r) => /did not take/.test(r.message)),
      records.map((r) => r.message).join("\n"),
    );
  } finally {
    await (closed ?? ac.close());
    await link.stop();
    await direct.close();
    await db.drop();
  }
});

test("the supervisor's end goes to the fleet store, on the attempt the library inside recorded", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
  try {
    const home = tempHome();
    const env: Record<string, string | undefined> = {
      ...process.env,
      AGENT_CHECKPOINT_STORE: db.url,
    };
    for (const name of ["AGENT_CHECKPOINT_RUN_ID", "AGENT_CHECKPOINT_DEADLINE", "HERMES_HOME"]) {
      delete env[name];
    }
    const notices: string[] = [];
    const quiet = { write: () => true };
    const common = {
      home,
      env,
      stdin: "ignore" as const,
      stdout: quiet,
      stderr: quiet,
      notice: (line: string) => notices.push(line),
      forwardSignals: false,
    };
    const result = await supervise({
      ...common,
      command: scriptCommand(fixture("supervise_library"), [home]).flat(),
      deadlineSeconds: 3,
      graceSeconds: 2,
      runId: "supervised",
    });
    assert.equal(result.outcome, "deadline");
    const view = await until(
      () => store.latest("supervised"),
      (v) => v?.record.status === "deadline",
      10_000,
    );
    assert.equal(view?.record.status, "deadline");
    assert.equal(view?.record.attempt, 1);
    assert.ok(view!.record.turnsUsed >= 1, "the library's own figures are kept");
    // A command with no library inside gets an attempt recorded for it.
    const bare = await supervise({
      ...common,
      command: ["sh", "-c", "sleep 30"],
      deadlineSeconds: 1,
      graceSeconds: 1,
      runId: "bare",
    });
    assert.equal(bare.outcome, "deadline");
    const recorded = await until(
      () => store.latest("bare"),
      (v) => v?.record.status === "deadline",
      10_000,
    );
    assert.equal(recorded?.state, "ended");
    assert.ok(!notices.some((n) => /run ledger/.test(n)), notices.join("\n"));
    // Nothing of it went to the embedded store in the home.
    assert.ok(!fs.existsSync(path.join(home, "agent-checkpoint", "runs.db")));
  } finally {
    await store.close();
    await db.drop();
  }
});
