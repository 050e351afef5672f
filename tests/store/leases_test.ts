// Leases: one attempt advances, and a death is known in seconds. Machines of a fleet are
// processes (each its own machine name) on the real PostgreSQL server, or processes of one
// machine sharing a home's SQLite ledger.
import { test } from "node:test";
import assert from "node:assert/strict";
import { tempHome } from "../_helpers.ts";
import { admin, freshSchema, privateServer, skipFleet, skipPrivateServer } from "./_pg.ts";
import { type Machine, machine } from "./_machines.ts";
import { openPgStore } from "../../store/postgres.ts";
import { openStore } from "../../store/mod.ts";
import type { RunStore } from "../../store/types.ts";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";

/** A fleet to test on: a store, and machines that share it. */
interface Fleet {
  store: RunStore;
  /** The store's URL, for the command line (the fleet store). */
  url?: string;
  /** A machine of the fleet; `name` is its machine name where the fleet has several. */
  machine(name: string, settings: Record<string, unknown>): Machine;
  done(): Promise<void>;
}

const FAST = { progress_interval_seconds: 0.2 };

async function pgFleet(): Promise<Fleet & { schema: string }> {
  const db = await freshSchema();
  const machines: Machine[] = [];
  const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
  return {
    schema: db.schema,
    url: db.url,
    store,
    machine: (name, settings) => {
      const m = machine(tempHome(), { name, store: db.url, settings: { ...FAST, ...settings } });
      machines.push(m);
      return m;
    },
    done: async () => {
      await Promise.all(machines.map((m) => m.close().catch(() => {})));
      await store.close();
      await db.drop();
    },
  };
}

async function sqliteFleet(): Promise<Fleet> {
  const home = tempHome();
  // The ledger made first: processes that open a new one at once may find it locked, and a start
  // that cannot reach the ledger runs without its lease (failing open), which is not what this
  // tests.
  await openStore({ home, settings: { host_timeout_seconds: 30 } })?.close();
  const machines: Machine[] = [];
  // Opened on first use, once a machine has made the home's ledger.
  let opened: RunStore | undefined;
  const read = () =>
    opened ??= openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" });
  const store = {
    latest: (runId: string) => read()!.latest(runId),
    list: (query: Parameters<RunStore["list"]>[0]) => read()!.list(query),
    summary: () => read()!.summary(),
    close: () => opened?.close() ?? Promise.resolve(),
  } as RunStore;
  return {
    store,
    // One machine: its processes share the home's ledger, and each other's pids are known.
    machine: (_name, settings) => {
      const m = machine(home, { settings: { ...FAST, ...settings } });
      machines.push(m);
      return m;
    },
    done: async () => {
      await Promise.all(machines.map((m) => m.close().catch(() => {})));
      await store.close();
    },
  };
}

/** The newest record of a run, read again until `check` holds (bounded). */
async function until(store: RunStore, runId: string, check: (state: string) => boolean) {
  let state = "";
  const end = Date.now() + 20_000;
  while (Date.now() < end) {
    state = (await store.latest(runId).catch(() => undefined))?.state ?? "";
    if (check(state)) return state;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return state;
}

for (const engine of ["postgres", "sqlite"] as const) {
  const open = engine === "postgres" ? pgFleet : sqliteFleet;
  const skip = engine === "postgres" ? skipFleet : false;

  test(
    `${engine}: a SIGKILL of machine A is seen as cut off at once by machine B's start, not after host_timeout_seconds`,
    { skip },
    async () => {
      const fleet = await open();
      try {
        const b = fleet.machine("machine-b", { on_duplicate: "refuse" });
        for (let kill = 0; kill < 3; kill++) {
          const runId = `task-${kill}`;
          const a = fleet.machine("machine-a", {});
          const held = await a.hold(runId);
          assert.equal(held.refused, false);
          // While A lives, B's start is refused and names A.
          const refused = await b.hold(runId);
          assert.equal(refused.refused, true, "B's start is refused while A holds the run");
          assert.match(refused.holder ?? "", /pid \d+/);
          const killedAt = Date.now();
          await a.kill();
          // A reader (`show`, `ls`, the web view) says cut off once the lease is gone.
          if (kill === 0) {
            assert.equal(await until(fleet.store, runId, (s) => s === "cut-off"), "cut-off");
            const counts = (await fleet.store.summary()).byState;
            assert.deepEqual(counts, { live: 0, ended: 0, "cut-off": 1 }, "audit's counts");
            if (fleet.url) {
              const show = memoryIo();
              const home = tempHome();
              assert.equal(
                await main(["show", runId, "--home", home, "--store", fleet.url], show.io),
                0,
              );
              assert.match(show.stdout(), new RegExp(`^Run ${runId}(, attempt 1)?: cut off`, "m"));
              const ls = memoryIo();
              assert.equal(
                await main(
                  ["ls", "--home", home, "--store", fleet.url, "--status", "cut-off"],
                  ls.io,
                ),
                0,
              );
              assert.match(ls.stdout(), new RegExp(runId));
            }
          }
          const started = await b.retry(runId);
          assert.equal(started.refused, false);
          assert.equal(started.previous, "cut-off");
          // The resume text B's run gives the model says so too, not "still live".
          assert.match(started.resume ?? "", /attempt \d+ cut off after/);
          assert.doesNotMatch(started.resume ?? "", /still live/);
          assert.equal(started.attempt, held.attempt + 1);
          // Far within the 30 s heartbeat timeout (bounded lateness, not speed: see the bench).
          assert.ok(started.at - killedAt < 15_000, `${started.at - killedAt} ms`);
          await b.end(runId);
        }
      } finally {
        await fleet.done();
      }
    },
  );

  test(
    `${engine}: races of two starts of one run id with on_duplicate refuse: exactly one advances each time`,
    { skip },
    async () => {
      const fleet = await open();
      try {
        const one = fleet.machine("runner-1", { on_duplicate: "refuse" });
        const two = fleet.machine("runner-2", { on_duplicate: "refuse" });
        for (let race = 0; race < 10; race++) {
          const runId = `race-${race}`;
          const answers = await Promise.all([one.hold(runId), two.hold(runId)]);
          const went = answers.filter((a) => !a.refused);
          assert.equal(went.length, 1, JSON.stringify(answers));
          const winner = answers[0]!.refused ? two : one;
          await winner.end(runId);
          const attempts = await fleet.store.list({ runId });
          assert.equal(attempts.length, 1, `one attempt of ${runId} in the store`);
        }
      } finally {
        await fleet.done();
      }
    },
  );

  test(
    `${engine}: 100 races of two starts of one run id with the default settings: exactly one advances each time`,
    { skip },
    async () => {
      const fleet = await open();
      try {
        // No on_duplicate given: a task picked up twice runs once out of the box.
        const one = fleet.machine("runner-1", {});
        const two = fleet.machine("runner-2", {});
        let exactlyOne = 0;
        for (let race = 0; race < 100; race++) {
          const runId = `default-race-${race}`;
          const answers = await Promise.all([one.hold(runId), two.hold(runId)]);
          if (answers.filter((a) => !a.refused).length === 1) exactlyOne++;
          for (const [k, m] of [one, two].entries()) if (!answers[k]!.refused) await m.end(runId);
          const attempts = await fleet.store.list({ runId });
          assert.equal(attempts.length, answers.filter((a) => !a.refused).length);
        }
        assert.equal(exactlyOne, 100, `exactly one advanced in ${exactlyOne} of 100 races`);
      } finally {
        await fleet.done();
      }
    },
  );

  test(
    `${engine}: take-over: no record of the old attempt lands after the new one took the run, and the old one says it lost it`,
    { skip },
    async () => {
      const fleet = await open();
      try {
        const a = fleet.machine("machine-a", {});
        const b = fleet.machine("machine-b", { on_duplicate: "take-over" });
        const runId = "deploy-7";
        const held = await a.hold(runId);
        // A's record is in the store and advancing.
        assert.equal(await until(fleet.store, runId, (s) => s === "live"), "live");
        const took = await b.hold(runId);
        assert.equal(took.refused, false);
        assert.equal(took.previous, "live");
        assert.equal(took.attempt, held.attempt + 1);
        const lost = async () => (await a.logs()).filter((l) => l.includes("lost the run"));
        let lines: string[] = [];
        assert.ok(
          await waitForAsync(async () => (lines = await lost()).length > 0),
          "the old attempt says it lost the run",
        );
        // Its end too is refused; close() writes what waits before it returns.
        await a.end(runId);
        await a.close();
        const attempts = await fleet.store.list({ runId });
        const old = attempts.find((v) => v.record.attempt === held.attempt)!;
        assert.equal(old.record.status, "live", "the old attempt's end did not land");
        assert.ok(
          old.record.updatedAt <= took.at,
          `the old attempt's record is from before the take-over (${
            old.record.updatedAt - took.at
          } ms after)`,
        );
        const newest = await fleet.store.latest(runId);
        assert.equal(newest?.record.attempt, took.attempt);
        assert.equal(newest?.state, "live");
        assert.equal(lines.length, 1, lines.join("\n"));
        await b.end(runId);
      } finally {
        await fleet.done();
      }
    },
  );
}

test(
  "postgres: a killed connection: the holder takes its lease again, and its run reads live and stays its own",
  { skip: skipFleet },
  async () => {
    const fleet = await pgFleet();
    const sql = await admin();
    try {
      const a = fleet.machine("machine-a", {});
      const b = fleet.machine("machine-b", { on_duplicate: "refuse" });
      await a.hold("long-task");
      assert.equal(await until(fleet.store, "long-task", (s) => s === "live"), "live");
      const killed = await sql.unsafe(
        `SELECT pid, pg_terminate_backend(pid) AS ok FROM pg_stat_activity
          WHERE application_name = $1 AND pid <> pg_backend_pid()
          AND pid IN (SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory')`,
        [`agent-checkpoint ${fleet.schema}`],
      );
      assert.ok(killed.length >= 1, "A's lease connection was killed");
      // pg_terminate_backend only sends the signal: on a busy server the killed backend keeps its
      // lock a moment longer, and a lease read then as held is the old connection's, not taken
      // again. Its locks gone, a held lease is the new connection's.
      assert.ok(
        await waitForAsync(async () =>
          (await sql.unsafe(
            `SELECT 1 FROM pg_locks WHERE pid = ANY(string_to_array($1, ',')::int[])`,
            [
              killed.map((k) => Number(k.pid)).join(","),
            ],
          )).length === 0
        ),
        "the killed connection is gone",
      );
      // A reconnects and takes its lease again: live, and B's start is still refused.
      assert.ok(
        await waitForAsync(async () => (await fleet.store.latest("long-task"))?.lease === "held"),
        "the lease is taken again",
      );
      assert.equal((await fleet.store.latest("long-task"))?.state, "live");
      assert.equal((await b.hold("long-task")).refused, true);
      await a.end("long-task");
    } finally {
      await sql.end({ timeout: 1 });
      await fleet.done();
    }
  },
);

/** Wait (bounded) for an asynchronous condition. */
async function waitForAsync(check: () => Promise<boolean>, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check().catch(() => false)) return true;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return false;
}

test(
  "postgres: a server restart frees every lease; a live holder takes its own again and stays the run's",
  {
    skip: skipPrivateServer,
  },
  async () => {
    const server = privateServer(0);
    const { url } = server;
    const pgCtl = server.ctl;
    const store = openPgStore({ url, hostTimeoutSeconds: 30 });
    const machines: Machine[] = [];
    try {
      const a = machine(tempHome(), { name: "machine-a", store: url, settings: FAST });
      const b = machine(tempHome(), {
        name: "machine-b",
        store: url,
        settings: { ...FAST, on_duplicate: "refuse" },
      });
      machines.push(a, b);
      await a.hold("nightly");
      assert.equal(await until(store, "nightly", (s) => s === "live"), "live");
      pgCtl("-w", "-m", "fast", "restart");
      assert.ok(
        await waitForAsync(async () => (await store.latest("nightly"))?.lease === "held"),
        "A takes its lease again once the server is back",
      );
      assert.equal((await store.latest("nightly"))?.state, "live");
      assert.equal((await b.hold("nightly")).refused, true, "the run is still A's");
      await a.end("nightly");
    } finally {
      await Promise.all(machines.map((m) => m.close().catch(() => {})));
      await store.close();
      server.remove();
    }
  },
);
