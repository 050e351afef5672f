// The store's contract, run against every backend of the store's port: the embedded store,
// the PostgreSQL store (when a server is there) and the in-memory one. Each answers alike;
// and the store's bridge carries a backend it was never written for (the in-memory one) to
// the host's thread.
import { test } from "node:test";
import assert from "node:assert/strict";
import { freshSchema, skipFleet } from "./_pg.ts";
import {
  capabilitySteps,
  checkpointSteps,
  checkRecordAnswers,
  journalSteps,
  record,
  recordSteps,
  sessionSteps,
} from "./_contract.ts";
import { openPgStore } from "../../store/postgres.ts";
import { openSqliteStore, storeFile } from "../../store/sqlite.ts";
import { memoryBackend } from "../../store/memory.ts";
import { openBridge } from "../../store/_bridge.ts";
import { thisHost } from "../../store/_host.ts";
import type { RunStore } from "../../store/types.ts";
import { sqliteDriver } from "../../_sqlite.ts";
import { tempHome, waitFor } from "../_helpers.ts";

/** Each backend's store, fresh, and what to do after. */
interface Opened {
  store: RunStore;
  done(): Promise<void>;
}

let fresh = 0;
const memory = (): Promise<Opened> => {
  const store = memoryBackend.open({
    url: `memory://contract-${++fresh}`,
    hostTimeoutSeconds: 30,
    fileMaxKb: 4,
  });
  return Promise.resolve({ store, done: () => store.close() });
};
const sqlite = (): Promise<Opened> => {
  const store = openSqliteStore({ file: storeFile(tempHome()), hostTimeoutSeconds: 30 });
  return Promise.resolve({ store, done: () => store.close() });
};
const postgres = async (): Promise<Opened> => {
  const db = await freshSchema();
  const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
  return {
    store,
    done: async () => {
      await store.close();
      await db.drop();
    },
  };
};

/** The stores this machine can run the contract on. */
const BACKENDS: [string, () => Promise<Opened>][] = [
  ["memory", memory],
  ...(sqliteDriver() ? [["sqlite", sqlite] as [string, () => Promise<Opened>]] : []),
  ...(skipFleet ? [] : [["postgres", postgres] as [string, () => Promise<Opened>]]),
];

/** Every backend's answers to the same steps, at the same moment: each checked, all alike. */
async function alike<T>(steps: (store: RunStore) => Promise<T>, check?: (got: T) => void) {
  const answers: [string, T][] = [];
  for (const [name, open] of BACKENDS) {
    const { store, done } = await open();
    try {
      answers.push([name, await steps(store)]);
    } finally {
      await done();
    }
  }
  for (const [name, got] of answers) {
    check?.(got);
    assert.deepEqual(got, answers[0]![1], `${name} answers as ${answers[0]![0]} does`);
  }
  return answers.map(([name]) => name);
}

test("records: every store gives the same answers to the same records", async () => {
  const beat = Date.now();
  const ran = await alike((store) => recordSteps(store, beat), checkRecordAnswers);
  assert.ok(ran.includes("memory"));
});

test("leases, effects and trees: every store gives the same answers", async () => {
  const t = Date.now();
  await alike((store) => capabilitySteps(store, t), (got) => {
    // A start from a live attempt whose process is gone takes it, and fences it.
    assert.deepEqual(got.taken, [2, true, "cut-off"]);
    assert.deepEqual(got.fenced, [["lease", 1, 2]]);
    assert.deepEqual(got.fencedAgain, []);
    const effects = got.effects as { key: string; inputDigest: string; attempt: number }[];
    // k1's receipt stays over the later intent; k2's intent is the newest attempt's.
    assert.deepEqual(effects.map((e) => [e.key, e.inputDigest, e.attempt]), [
      ["k1", "d1", 1],
      ["k2", "d2", 2],
    ]);
    assert.deepEqual(got.noEffects, []);
    assert.deepEqual(got.admitSaw, [["kid", "root"], ["root", null]]);
    assert.deepEqual(got.treeRows, [["kid", "root", 2], ["root", null, 0]]);
    assert.deepEqual(got.noTree, []);
  });
});

test("the journal: every store keeps each attempt's entries alike, bodies once, pruned with the run", async () => {
  const t = Date.now() - 10_000;
  await alike((store) => journalSteps(store, t), (got) => {
    const entries = got.entries as { attempt: number; kind: string; index: number; body: string }[];
    assert.deepEqual(entries.map((e) => [e.attempt, e.kind, e.index]), [
      [1, "model", 0],
      [1, "model", 1],
      [1, "tool", 0],
      [2, "model", 0],
      [2, "model", 1],
    ]);
    assert.equal(entries[0]!.body, "{}", "an entry written again is kept as first written");
    // Replayed (from which attempt) or live (its duration, whole ms): each entry's own.
    assert.deepEqual(
      (got.entries as { replayed?: number; ms?: number }[]).map((e) => [e.replayed, e.ms]),
      [[undefined, 1000], [undefined, 1001], [undefined, 1000], [1, undefined], [undefined, 2001]],
    );
    assert.equal(entries[1]!.body, entries[4]!.body);
    assert.deepEqual(got.none, []);
    assert.equal(got.pruned, 1);
    assert.deepEqual(got.after, []);
  });
});

test("graph checkpoints: every store keeps values once per version, writes in order, threads apart", async () => {
  const t = Date.now() - 10_000;
  await alike((store) => checkpointSteps(store, t), (got) => {
    assert.deepEqual(got.latest, {
      at: ["t1", "", "02", "01"],
      checkpoint: ["json", '{"id":"02"}'],
      metadata: '{"step":9}',
      values: [["a", "1", "json", '"a1"'], ["b", "2", "json", '"b2"']],
      writes: [],
    });
    assert.deepEqual(got.first, {
      at: ["t1", "", "01", null],
      checkpoint: ["json", '{"id":"01"}'],
      metadata: '{"step":2}',
      values: [["a", "1", "json", '"a1"'], ["b", "1", "empty", null]],
      writes: [
        ["", "task-a", -3, "__interrupt__", '"second"'],
        ["", "task-a", 0, "c", '"a0"'],
        ["", "task-a", 1, "c", '"a1"'],
        ["", "task-b", 0, "c", '"b0"'],
        ["~path", "task-z", 0, "c", '"z0"'],
      ],
    });
    assert.deepEqual((got.child as { at: unknown }).at, ["t1", "child", "03", "x"]);
    assert.equal(got.missing, undefined);
    assert.equal(got.none, undefined);
    assert.deepEqual(got.thread, ["t1//02", "t1//01"]);
    assert.deepEqual(got.threadAllNs, ["t1/child/03", "t1//02", "t1//01"]);
    assert.deepEqual(got.every, ["t2//04", "t1/child/03", "t1//02", "t1//01"]);
    assert.deepEqual(got.before, ["t1//01"]);
    assert.deepEqual(got.limit, ["t2//04", "t1/child/03"]);
    assert.deepEqual(got.byId, ["t1/child/03"]);
    assert.equal(got.pruned, 1);
    assert.deepEqual(got.afterPrune, got.every);
    assert.deepEqual(got.afterDelete, ["t2//04"]);
    assert.equal(got.deletedGet, undefined);
  });
});

test("session transcripts: every store keeps entries in order, a uuid once, subpaths and scopes apart", async () => {
  const t = Date.now() - 10_000;
  const check = (got: Awaited<ReturnType<typeof sessionSteps>>) => {
    assert.equal(got.never, null);
    assert.deepEqual(got.neverList, []);
    assert.deepEqual(got.neverSubkeys, []);
    assert.equal(got.neverPop, undefined);
    assert.deepEqual(got.s1, [
      { type: "user", uuid: "u1", message: { content: [{ text: "héllo ✓ 𝄞" }] } },
      { type: "title", title: "first" },
      { type: "assistant", uuid: "u2", nested: { a: [1, { b: null }] } },
      { type: "title", title: "first" },
      { type: "user", uuid: "u3" },
    ]);
    assert.deepEqual(got.agentA, [{ type: "user", uuid: "u1" }]);
    assert.deepEqual(got.otherScope, [{ type: "user", uuid: "o1" }]);
    assert.deepEqual(got.last2, [{ type: "title", title: "first" }, { type: "user", uuid: "u3" }]);
    assert.deepEqual(got.last0, []);
    assert.equal(got.last99, 5);
    assert.equal(got.lastOfNever, null);
    assert.deepEqual(got.subkeys, ["subagents/agent-a", "subagents/agent-b"]);
    assert.deepEqual(got.listed, ["s1", "s2"]);
    assert.deepEqual(got.mtimes, [true, true]);
    assert.deepEqual(got.otherList, ["s1"]);
    assert.equal(got.pruned, 1);
    assert.equal(got.afterPrune, 5);
    assert.deepEqual(got.popped, [{ type: "user", uuid: "u3" }]);
    assert.deepEqual(got.afterPop, [{ type: "title", title: "first" }]);
    assert.deepEqual(got.reappended, [{ type: "user", uuid: "u3", again: true }]);
    assert.deepEqual(got.poppedLast, [{ type: "x" }]);
    assert.equal(got.emptied, null);
    assert.equal(got.emptiedPop, undefined);
    assert.deepEqual(got.afterSubDelete, { sub: null, main: 5, subkeys: ["subagents/agent-b"] });
    assert.deepEqual(got.afterDelete, {
      main: null,
      sub: null,
      subkeys: [],
      listed: ["s2"],
      s2: 1,
      otherScope: 1,
    });
  };
  const names = await alike((store) => sessionSteps(store, t), check);
  // And through the store's thread, where the in-memory backend's data lives.
  const bridge = openBridge({
    backend: memoryBackend,
    url: "memory://bridged-sessions",
    hostTimeoutSeconds: 30,
    fileMaxKb: 4,
  });
  try {
    // (Its prune of runs is the watchdog's, not this thread's: only the transcripts compared.)
    const got = await sessionSteps(bridge, t);
    check({ ...got, pruned: 1 });
  } finally {
    await bridge.close();
  }
  console.log(`session transcripts alike on ${names.join(", ")} and through the bridge`);
});

test("the bridge carries a backend written only against the port to the host's thread", async () => {
  // The in-memory backend, in the store's thread: starts, reads, effects and trees answered
  // synchronously on this thread through it, as the PostgreSQL store's are.
  const bridge = openBridge({
    backend: memoryBackend,
    url: "memory://bridged",
    hostTimeoutSeconds: 30,
    fileMaxKb: 4,
  });
  try {
    assert.equal(bridge.engine, "memory");
    // Its thread starts (and, under Deno's test runner, its modules are checked first): a
    // first read may come too late for its bound; the thread says it is there once it answers.
    try {
      bridge.sync.latest("nothing");
    } catch { /* late: waited for below */ }
    assert.ok(await waitFor(() => bridge.reachable === true, 60_000), "the store's thread answers");
    const me = thisHost();
    const t = Date.now();
    const first = bridge.sync.startAttempt(record("br", me, t));
    assert.equal(first.attempt, 1);
    bridge.sync.write({ records: [record("br", me, t, { turnsUsed: 4, updatedAt: t + 1 })] });
    assert.equal(bridge.relay.drainSync(), true);
    assert.equal(bridge.sync.latest("br")?.record.turnsUsed, 4);
    const second = bridge.sync.startAttempt(record("br", me, t + 5), { minAttempt: 1 });
    assert.equal(second.attempt, 2);
    assert.equal(second.previous?.record.turnsUsed, 4);
    await bridge.effects!.write({
      intents: [{ runId: "br", key: "k", tool: "send", inputDigest: "d", attempt: 2, at: t }],
      receipts: [],
    });
    assert.deepEqual(bridge.effects!.readSync("br").map((e) => e.key), ["k"]);
    await bridge.journal!.write({
      entries: [{ runId: "br", attempt: 2, kind: "model", index: 0, key: "d", body: "{}", at: t }],
    });
    assert.deepEqual((await bridge.journal!.read("br")).map((e) => [e.kind, e.body]), [[
      "model",
      "{}",
    ]]);
    // Graph checkpoints, through the store's thread, where the in-memory backend's data lives.
    const bytes = new TextEncoder().encode("{}");
    await bridge.checkpoints!.put({
      thread: "th",
      ns: "",
      id: "1",
      checkpoint: { type: "json", bytes },
      metadata: { type: "json", bytes },
      versions: { c: "1" },
      values: [{ channel: "c", version: "1", type: "json", bytes }],
    });
    await bridge.checkpoints!.putWrites({
      thread: "th",
      ns: "",
      id: "1",
      writes: [{ taskId: "t", index: 0, channel: "c", type: "json", bytes, taskPath: "" }],
    });
    const kept = await bridge.checkpoints!.get({ thread: "th", ns: "" });
    assert.deepEqual([kept?.id, kept?.values.length, kept?.writes.length], ["1", 1, 1]);
    assert.ok(kept?.checkpoint.bytes instanceof Uint8Array);
    await bridge.checkpoints!.deleteThread("th");
    assert.deepEqual(await bridge.checkpoints!.list({}), []);
    bridge.trees!.joinSync("br", "br", undefined);
    assert.deepEqual(bridge.trees!.readSync("br").map((r) => r.runId), ["br"]);
    let saw: string[] = [];
    bridge.trees!.admitSync("br", (rows) => {
      saw = rows.map((r) => r.runId);
      return undefined;
    });
    assert.deepEqual(saw, ["br"]);
  } finally {
    await bridge.close();
  }
});

test("a backend of records only: the bridge offers no other group, and its starts still work", async () => {
  const { backend } = await import("../fixtures/records_only_backend.ts");
  const bridge = openBridge({
    backend,
    url: "records-only://one",
    hostTimeoutSeconds: 30,
    fileMaxKb: 4,
  });
  try {
    // Each group whole or not at all: a caller tests the group, and finds none.
    assert.equal(bridge.effects, undefined);
    assert.equal(bridge.journal, undefined);
    assert.equal(bridge.checkpoints, undefined);
    assert.equal(bridge.sessions, undefined);
    assert.equal(bridge.trees, undefined);
    try {
      bridge.sync.latest("nothing");
    } catch { /* late: waited for below */ }
    assert.ok(await waitFor(() => bridge.reachable === true, 60_000), "the store's thread answers");
    const me = thisHost();
    const t = Date.now();
    assert.equal(bridge.sync.startAttempt(record("only", me, t)).attempt, 1);
    assert.equal(bridge.sync.startAttempt(record("only", me, t + 1)).attempt, 2);
    // A checkpoint file's content, for a backend that keeps no files: nothing, and no failure.
    bridge.relay.fileWritten({ runId: "only", file: "/nonexistent/only.md" } as never);
    assert.equal(bridge.relay.drainSync(), true);
    assert.equal(bridge.sync.latest("only")?.record.attempt, 2);
  } finally {
    await bridge.close();
  }
});
