// deno-lint-ignore-file no-import-prefix
/**
 * The LangGraph checkpointer over the run store: LangGraph's own conformance
 * suite for savers (`@langchain/langgraph-checkpoint-validation`) on the
 * embedded store and on PostgreSQL, and a graph stopped mid-way in one keeper
 * that resumes by its thread in a second one sharing the store.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { validate } from "npm:@langchain/langgraph-checkpoint-validation@1.1.1";
import { MemorySaver } from "npm:@langchain/langgraph-checkpoint@1";
import { Annotation, END, START, StateGraph } from "npm:@langchain/langgraph@1";
import { createAgentCheckpoint } from "../../mod.ts";
import { RunStoreSaver } from "../../adapters/langchain.ts";
import { sqliteDriver } from "../../_sqlite.ts";
import { tempHome } from "../_helpers.ts";
import { freshSchema, skipFleet } from "../store/_pg.ts";
import { collect } from "./_vitest_globals.ts";

type Keeper = ReturnType<typeof createAgentCheckpoint>;

/** A keeper on the embedded store of its own home, or on a PostgreSQL schema's fleet store. */
const keeperOn = (store: string | undefined) =>
  createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: store === undefined ? {} : { store },
  });

/** Every thread's checkpoints gone: the suite wants each saver it makes to start empty. */
async function emptied(saver: RunStoreSaver): Promise<RunStoreSaver> {
  const threads = new Set<string>();
  for await (const t of saver.list({ configurable: {} })) {
    threads.add(String(t.config.configurable?.thread_id));
  }
  for (const thread of threads) await saver.deleteThread(thread);
  return saver;
}

/** LangGraph's conformance suite against a keeper's saver: its counts, and every failure. */
async function conformance(ac: Keeper, name: string) {
  const run = collect(() =>
    validate({
      checkpointerName: `agent-checkpoint RunStoreSaver (${name})`,
      createCheckpointer: () => emptied(new RunStoreSaver(ac)),
    })
  );
  const result = await run();
  console.log(
    `LangGraph checkpointer conformance on ${name}: ${result.passed} passed, ${result.failed.length} failed, ${result.skipped} skipped`,
  );
  assert.deepEqual(result.failed, [], `${name}: every test of the suite passes`);
  assert.ok(result.passed > 700, `${name}: the whole suite ran (${result.passed} passed)`);
  assert.equal(result.skipped, 0);
}

test("LangGraph's checkpointer conformance suite passes on the embedded store", {
  skip: !sqliteDriver() && "no SQLite driver",
}, async () => {
  const ac = keeperOn(undefined);
  try {
    await conformance(ac, "sqlite");
  } finally {
    await ac.close();
  }
});

test("LangGraph's checkpointer conformance suite passes on PostgreSQL", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const ac = keeperOn(db.url);
  try {
    await conformance(ac, "postgres");
  } finally {
    await ac.close();
    await db.drop();
  }
});

const State = Annotation.Root({
  n: Annotation<number>({ reducer: (_, b) => b, default: () => 0 }),
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

/**
 * A graph of five rounds: `count`, then `note` and `check` side by side. On
 * the first machine `check` fails in round 3 (the machine is lost there),
 * after `note` of that round already ran. Each node's calls are counted.
 */
function rounds(checkpointer: RunStoreSaver | MemorySaver, failAt?: number) {
  const calls: string[] = [];
  // The failing check waits for its round's note: the note's write is there when it fails.
  let resolveNoted = () => {};
  const noted = new Promise<void>((resolve) => (resolveNoted = resolve));
  const graph = new StateGraph(State)
    .addNode("count", (s) => {
      calls.push(`count ${s.n + 1}`);
      return { n: s.n + 1, log: [`count ${s.n + 1}`] };
    })
    .addNode("note", (s) => {
      calls.push(`note ${s.n}`);
      if (s.n === failAt) resolveNoted();
      return { log: [`note ${s.n}`] };
    })
    .addNode("check", async (s) => {
      if (s.n === failAt) {
        await noted;
        throw new Error("the machine was lost");
      }
      calls.push(`check ${s.n}`);
      return { log: [`check ${s.n}`] };
    })
    .addEdge(START, "count")
    .addConditionalEdges("count", (s) => (s.n >= 5 ? END : ["note", "check"]))
    .addEdge("note", "count")
    .addEdge("check", "count")
    .compile({ checkpointer });
  return { graph, calls };
}

for (
  const [where, skip] of [
    ["the embedded store (a second keeper)", !sqliteDriver() && "no SQLite driver"],
    ["PostgreSQL (a second machine: another home)", skipFleet],
  ] as const
) {
  test(`a graph stopped mid-way resumes by its thread from its last super-step on ${where}`, {
    skip,
  }, async () => {
    const db = where.startsWith("PostgreSQL") ? await freshSchema() : undefined;
    const home = tempHome();
    const keeper = () =>
      createAgentCheckpoint({
        home: db ? tempHome() : home,
        env: {},
        settings: db ? { store: db.url } : {},
      });
    const config = { configurable: { thread_id: "order-42" } };
    const first = keeper();
    let second: Keeper | undefined;
    try {
      const one = rounds(new RunStoreSaver(first), 3);
      await assert.rejects(one.graph.invoke({ n: 0 }, config), /the machine was lost/);
      assert.ok(one.calls.includes("note 3"), "round 3's note ran beside its failed check");
      assert.ok(!one.calls.includes("count 4"));
      await first.close();

      second = keeper();
      const two = rounds(new RunStoreSaver(second));
      const before = await two.graph.getState(config);
      assert.equal(before.values.n, 3, "the second keeper sees the thread's last super-step");
      const done = await two.graph.invoke(null, config);
      // Round 3's note is not run again (its write was kept as a pending write); its check is.
      // (The two nodes of a round run side by side: their calls in either order.)
      assert.deepEqual(two.calls.toSorted(), [
        "check 3",
        "check 4",
        "count 4",
        "count 5",
        "note 4",
      ]);
      // The same state as a run that was never stopped.
      const never = rounds(new MemorySaver());
      const whole = await never.graph.invoke({ n: 0 }, { configurable: { thread_id: "x" } });
      assert.deepEqual(done, whole);
      const history = [];
      for await (const s of two.graph.getStateHistory(config)) history.push(s.values.n);
      assert.equal(history[0], 5);
      assert.ok(history.includes(3));
    } finally {
      await first.close();
      await second?.close();
      await db?.drop();
    }
  });
}
