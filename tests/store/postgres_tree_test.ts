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
import {
  assertAbortedWithin1s,
  assertUnknownCostStopped,
  costlessAt,
  PER_CALL,
  runTree,
} from "../_tree_procs.ts";

test(
  "a parent and 8 children in 3 processes, each with its own home, share a $1.00 cap through the fleet store: spend stops within one call, every run, the idle parent included, aborts within 1 s of the cap, and the store's tree total is the runs' own sum",
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
      parent.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.05 });
      const env = { ...parent.budget.childEnv(), AGENT_CHECKPOINT_STORE: db.url };
      const perCall = PER_CALL;
      // Each process a home of its own: the tree's totals come from the database alone.
      const tree = await runTree(parent, env, tempHome);
      const { children, spent } = tree;
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
      // The parent made no call since its children began: it learns of their spend by itself.
      assert.ok(
        tree.parentAbortedAt !== undefined,
        "the parent is stopped by its children's spend",
      );
      assertAbortedWithin1s("PostgreSQL", tree, Math.min(...children.map((c) => c.abortedAt!)));
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

test(
  "a child's call of unknown cost midway stops the whole tree of 3 processes through the fleet store under an enforced dollar cap: never counted as $0, every run aborted within 1 s, the stored totals keep the known dollars",
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
      parent.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.05 });
      const env = { ...parent.budget.childEnv(), AGENT_CHECKPOINT_STORE: db.url };
      const tree = await runTree(parent, env, tempHome, "child-1-2");
      assertUnknownCostStopped(tree);
      assertAbortedWithin1s("PostgreSQL, a call of unknown cost", tree, costlessAt(tree));
      await parent.end();
      await ac.close();
      const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
      try {
        const rows = await store.tree("lead");
        assert.equal(rows.length, 9);
        const total = rows.reduce((sum, r) => sum + r.use.usd, 0);
        assert.ok(
          Math.abs(total - tree.spent) < 1e-9,
          `store $${total} vs runs' own $${tree.spent}`,
        );
        assert.deepEqual(rows.find((r) => r.runId === "child-1-2")?.use.unpriced, [
          "(no model named)",
        ]);
        const root = (await store.latest("lead"))?.record;
        // The root's stored totals keep the known dollars and say which calls' cost is unknown.
        assert.ok((root?.tree?.totals?.usd ?? 0) >= 0.05, JSON.stringify(root?.tree));
        assert.deepEqual(root?.tree?.totals?.unpriced, ["(no model named)"]);
      } finally {
        await store.close();
      }
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
  while (!helper.signal.aborted && calls < 100) {
    const t = performance.now();
    helper.preLlmCall();
    slowest = Math.max(slowest, performance.now() - t);
    if (helper.signal.aborted) break;
    helper.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.3 });
    calls++;
  }
  assert.equal(calls, 4, "the fourth call passed $1.00; the fifth never started");
  assert.equal(lead.signal.aborted, true, "the lead is stopped by its child's spend");
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
      lead.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.5 });
      const env = { ...lead.budget.childEnv(), AGENT_CHECKPOINT_STORE: db.url }; // the lead roots a tree
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
        lead.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.2 });
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
        const views = await store.trees.list({ root: "lead" });
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
      const env = { ...lead.budget.childEnv(), AGENT_CHECKPOINT_STORE: db.url };
      lead.preLlmCall();
      lead.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.4 });
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
      assert.equal(lead.signal.aborted, false);
      lead.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.4 });
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
