// Trees of runs sharing one budget through the fleet store: children in other processes, each
// with a home of its own (so nothing but the database is shared), stop within one call of the cap.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createAgentCheckpoint } from "../../mod.ts";
import { openPgStore } from "../../store/postgres.ts";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { captureLog, fixture, runScript, tempHome } from "../_helpers.ts";
import { START_WAIT_MS } from "../../store/mod.ts";
import { admin, freshSchema, skipFleet } from "./_pg.ts";

test(
  "a parent and 8 children in 3 processes, each with its own home, share a $1.00 cap through the fleet store: spend stops within one call, and the store's tree total is the runs' own sum",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    try {
      const ac = createAgentCheckpoint({
        home: tempHome(),
        env: {},
        settings: { store: db.url, enforce: ["usd"], progress_interval_seconds: 0.2 },
      });
      const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
      parent.preLlmCall();
      parent.usage({ inputTokens: 100, outputTokens: 50, usd: 0.05 });
      const env = { ...parent.childEnv(), AGENT_CHECKPOINT_STORE: db.url };
      const perCall = 0.03;
      const results = await Promise.all([0, 1].map((p) =>
        runScript(
          fixture("tree_children"),
          [
            tempHome(), // a home of its own: the tree's totals come from the database alone
            JSON.stringify({ children: [0, 1, 2, 3].map((c) => `child-${p}-${c}`), usd: perCall }),
          ],
          { env, timeoutMs: 120_000 },
        )
      ));
      for (const r of results) assert.equal(r.code, 0, r.stderr);
      const children = results.flatMap((r) =>
        JSON.parse(r.stdout) as { runId: string; spent: number; stopped: boolean; tree: boolean }[]
      );
      assert.equal(children.length, 8);
      const spent = 0.05 + children.reduce((sum, c) => sum + c.spent, 0);
      assert.ok(spent >= 1, `the tree spent $${spent.toFixed(2)}`);
      assert.ok(spent <= 1 + perCall + 1e-9, `the tree spent $${spent.toFixed(2)}`);
      console.log(
        `tree of 9 runs in 3 processes over PostgreSQL: $${
          spent.toFixed(2)
        } spent against a $1.00 cap`,
      );
      for (const c of children) {
        assert.equal(c.stopped, true, `${c.runId} was stopped`);
        assert.equal(c.tree, true, `${c.runId}'s file names the tree's totals`);
      }
      parent.preLlmCall();
      assert.equal(
        parent.budgetSignal.aborted,
        true,
        "the parent is stopped by its children's spend",
      );
      await parent.end();
      await ac.close();
      const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
      try {
        const rows = await store.tree("lead");
        assert.equal(rows.length, 9);
        assert.deepEqual(
          rows.filter((r) => r.runId !== "lead").map((r) => r.parentId),
          Array(8).fill("lead"),
        );
        const total = rows.reduce((sum, r) => sum + r.use.usd, 0);
        assert.ok(Math.abs(total - spent) < 1e-9, `store $${total} vs runs' own $${spent}`);
      } finally {
        await store.close();
      }
      // The command line over the fleet store shows the tree: parents, children, totals.
      const cli = async (...args: string[]) => {
        const m = memoryIo({ env: {} });
        const code = await main([...args, "--store", db.url, "--home", tempHome()], m.io);
        assert.equal(code, 0, m.stderr());
        return m.stdout();
      };
      const dollars = `\\$${spent.toFixed(2).replace(".", "\\.")} of \\$1\\.00`;
      const ls = await cli("ls");
      assert.match(ls, new RegExp(`^tree lead: 9 runs: \\d+ turns, \\d+ tokens, ${dollars}$`, "m"));
      assert.match(ls, /^child-1-3 .* lead$/m);
      const show = await cli("show", "lead");
      assert.match(show, /^children +(child-\d-\d \(ended capped\)(, )?){8}$/m);
      assert.match(show, new RegExp(`^tree totals +9 runs: .*${dollars}$`, "m"));
      assert.match(await cli("audit"), new RegExp(`^  tree lead +9 runs: .*${dollars}$`, "m"));
    } finally {
      await db.drop();
    }
  },
);

test("with the fleet store away, a tree's runs go on from what their process knows: an enforced cap still stops them, and no hook waits long", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: {
      store: "postgres://postgres@127.0.0.1:1/nowhere",
      enforce: ["usd"],
      progress_interval_seconds: 0.2,
    },
  });
  const lead = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  const helper = ac.startRun({ sessionId: "helper", parent: lead });
  let calls = 0;
  let slowest = 0;
  while (!helper.budgetSignal.aborted && calls < 100) {
    const t = performance.now();
    helper.preLlmCall();
    slowest = Math.max(slowest, performance.now() - t);
    if (helper.budgetSignal.aborted) break;
    helper.usage({ inputTokens: 100, outputTokens: 50, usd: 0.3 });
    calls++;
  }
  assert.equal(calls, 4, "the fourth call passed $1.00; the fifth never started");
  assert.equal(lead.budgetSignal.aborted, true, "the lead is stopped by its child's spend");
  // Bounded, not fast: the first look may wait for the store's answer, never beyond its bound.
  assert.ok(slowest < START_WAIT_MS + 5000, `the slowest hook took ${slowest.toFixed(0)} ms`);
  await helper.end();
  await lead.end();
  await ac.close();
  assert.ok(
    log.records.some((r) => /cannot be reached/.test(r.message)),
    log.records.map((r) => r.message).join("\n"),
  );
});

test(
  "a tree's spend reaches the fleet store across a killed connection: children in another process see it and stop within one call of the cap",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    const sql = await admin();
    try {
      const ac = createAgentCheckpoint({
        home: tempHome(),
        env: {},
        settings: { store: db.url, enforce: ["usd"], progress_interval_seconds: 0.2 },
      });
      const lead = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
      lead.preLlmCall();
      lead.usage({ inputTokens: 100, outputTokens: 50, usd: 0.5 });
      const env = { ...lead.childEnv(), AGENT_CHECKPOINT_STORE: db.url }; // the lead roots a tree
      const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
      try {
        const spentInStore = async () =>
          (await store.tree("lead")).reduce((sum, r) => sum + r.use.usd, 0);
        assert.ok(await until(async () => await spentInStore() >= 0.5 - 1e-9));
        // Cut the lead's connection, then spend on: its next look fails, and its use still lands.
        const rows = await sql.unsafe(
          `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
          WHERE application_name = $1 AND pid <> pg_backend_pid()`,
          [`agent-checkpoint ${db.schema}`],
        );
        assert.ok(Number(rows[0]?.n) >= 1, "the lead's connection was cut");
        lead.preLlmCall();
        lead.usage({ inputTokens: 100, outputTokens: 50, usd: 0.2 });
        assert.ok(
          await until(async () => await spentInStore() >= 0.7 - 1e-9),
          "the lead's $0.70 reached the store after its connection was cut",
        );
        const r = await runScript(
          fixture("tree_children"),
          [tempHome(), JSON.stringify({ children: ["a", "b", "c"], usd: 0.03 })],
          { env, timeoutMs: 120_000 },
        );
        assert.equal(r.code, 0, r.stderr);
        const children = JSON.parse(r.stdout) as { spent: number; stopped: boolean }[];
        const spent = 0.7 + children.reduce((sum, c) => sum + c.spent, 0);
        assert.ok(spent >= 1 && spent <= 1 + 0.03 + 1e-9, `the tree spent $${spent.toFixed(2)}`);
        assert.ok(children.every((c) => c.stopped));
        await lead.end();
        await ac.close();
        // Every run's end is in the store: a child process's last writes are not lost at its close.
        const inStore = await spentInStore();
        assert.ok(Math.abs(inStore - spent) < 1e-9, `store $${inStore} vs runs' own $${spent}`);
        const views = await store.trees({ root: "lead" });
        assert.deepEqual(views.map((v) => v.state).sort(), ["ended", "ended", "ended", "ended"]);
      } finally {
        await store.close();
      }
    } finally {
      await sql.end({ timeout: 1 });
      await db.drop();
    }
  },
);

test(
  "a tree's lock held elsewhere holds a model call back for a bounded while only; the store is not taken for away",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    const sql = await admin(db.url.replace(/\?schema=.*$/, ""));
    const log = captureLog();
    try {
      const ac = createAgentCheckpoint({
        home: tempHome(),
        env: {},
        logger: log.logger,
        settings: { store: db.url, enforce: ["usd"], progress_interval_seconds: 0.2 },
      });
      const lead = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
      const env = { ...lead.childEnv(), AGENT_CHECKPOINT_STORE: db.url };
      lead.preLlmCall();
      lead.usage({ inputTokens: 100, outputTokens: 50, usd: 0.4 });
      // Another holder of the tree's lock (a process stopped inside its admission, say).
      let release!: () => void;
      const released = new Promise<void>((resolve) => release = resolve);
      let locked!: () => void;
      const isLocked = new Promise<void>((resolve) => locked = resolve);
      const holder = sql.begin(async (tx) => {
        await tx.unsafe(
          `SELECT pg_advisory_xact_lock(hashtextextended('agent-checkpoint tree ' || $1, 0))`,
          ["lead"],
        );
        locked();
        await released;
      });
      await isLocked;
      const t = performance.now();
      lead.preLlmCall();
      const waited = performance.now() - t;
      release();
      await holder;
      assert.ok(waited < START_WAIT_MS + 3000, `the call waited ${waited.toFixed(0)} ms`);
      console.log(
        `a model call behind a tree's lock held elsewhere waited ${waited.toFixed(0)} ms`,
      );
      assert.equal(lead.budgetSignal.aborted, false);
      lead.usage({ inputTokens: 100, outputTokens: 50, usd: 0.4 });
      // The lock let go: the store still counts the tree; a child elsewhere sees the lead's $0.80.
      const r = await runScript(
        fixture("tree_children"),
        [tempHome(), JSON.stringify({ children: ["a", "b"], usd: 0.03 })],
        { env, timeoutMs: 120_000 },
      );
      assert.equal(r.code, 0, r.stderr);
      const children = JSON.parse(r.stdout) as { spent: number }[];
      const spent = 0.8 + children.reduce((sum, c) => sum + c.spent, 0);
      assert.ok(spent >= 1 && spent <= 1 + 0.03 + 1e-9, `the tree spent $${spent.toFixed(2)}`);
      await lead.end();
      await ac.close();
      const lines = log.records.map((r) => r.message);
      assert.deepEqual(lines.filter((l) => /cannot be reached/.test(l)), [], lines.join("\n"));
    } finally {
      await sql.end({ timeout: 1 });
      await db.drop();
    }
  },
);

/** Whether `check` comes true within `ms`, asked a little apart. */
async function until(check: () => Promise<boolean>, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms;
  for (let wait = 20; Date.now() < end; wait = Math.min(500, wait * 2)) {
    // A read on a connection the test cut fails once; the store connects again on the next.
    if (await check().catch(() => false)) return true;
    await new Promise((r) => setTimeout(r, wait));
  }
  return await check();
}
