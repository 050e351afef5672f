/**
 * The store's contract: what every backend of the store's port answers alike.
 * The embedded store, the PostgreSQL store and the in-memory store each run
 * these steps (`contract_test.ts`), and the answers of any two are the same.
 */
import assert from "node:assert/strict";
import * as os from "node:os";
import type {
  GraphCheckpointRow,
  HostId,
  RunRecord,
  RunStore,
  RunView,
} from "../../store/types.ts";
import { thisHost } from "../../store/_host.ts";

/** A record of a run, as a run's start and progress make it. */
export const record = (
  runId: string,
  host: HostId,
  at: number,
  extra: Partial<RunRecord> = {},
): RunRecord => ({
  runId,
  attempt: 1,
  dialect: "kanban",
  caps: { turns: { value: 40, source: "host" } },
  turnsUsed: 0,
  elapsedSeconds: 0,
  tier: 0,
  inFlight: [],
  recent: [],
  notes: [],
  host,
  status: "live" as const,
  startedAt: at,
  updatedAt: at,
  ...extra,
});

/** What a view shows, without what differs by engine (nothing should). */
export const shown = (v: RunView) => ({
  runId: v.record.runId,
  attempt: v.record.attempt,
  status: v.record.status,
  turns: v.record.turnsUsed,
  state: v.state,
  end: v.record.end,
  heartbeat: v.heartbeat?.at,
});

/**
 * Records: starts, batches, ends never undone, retries, listings, counts and
 * pruning. Every store given the same steps gives the same answers.
 */
export async function recordSteps(store: RunStore, beat: number) {
  const gone: HostId = { machine: os.hostname(), pid: 2 ** 22 + 7, start: "x/1" }; // no such pid
  const far: HostId = { machine: "far-away", pid: 4242, start: "" };
  const me = thisHost();
  const t = beat - 120_000;
  await store.startAttempt(record("a", me, t));
  await store.startAttempt(record("b", gone, t + 1));
  await store.startAttempt(record("c", far, t + 2));
  await store.startAttempt(record("d", me, t + 3));
  await store.write({
    records: [
      record("a", me, t, { turnsUsed: 3, updatedAt: t + 10 }),
      record("d", me, t + 3, {
        status: "failed",
        end: { status: "failed", at: t + 11 },
        updatedAt: t + 11,
      }),
      // A late live record of d in the same batch: its end stays.
      record("d", me, t + 3, { turnsUsed: 9, updatedAt: t + 12 }),
    ],
    heartbeat: { host: me, at: beat, intervalSeconds: 1 },
  });
  await store.write({ records: [record("d", me, t + 3, { turnsUsed: 9, updatedAt: t + 13 })] });
  const retried = await store.startAttempt(record("d", far, t + 20));
  assert.equal(retried.attempt, 2);
  assert.equal(retried.previous?.record.status, "failed");
  await store.write({
    records: [
      record("d", far, t + 20, {
        attempt: 2,
        status: "done",
        end: { status: "done", at: t + 30 },
        updatedAt: t + 30,
      }),
    ],
  });
  return {
    all: (await store.list()).map(shown),
    attempts: (await store.list({ runId: "d" })).map(shown),
    earlier: (await store.list({ earlierOf: ["d", "a", "nothing"] })).map(shown),
    none: (await store.list({ earlierOf: [] })).map(shown),
    live: (await store.list({ state: "live" })).map(shown),
    cut: (await store.list({ state: "cut-off" })).map(shown),
    far: (await store.list({ machine: "far-away" })).map(shown),
    summary: await store.summary(),
    pruned: await store.prune(Date.now(), 10),
    after: (await store.list()).map(shown),
  };
}

/** What every store's answers to {@linkcode recordSteps} must say, whatever the engine. */
export function checkRecordAnswers(got: Awaited<ReturnType<typeof recordSteps>>): void {
  assert.deepEqual(got.summary.byState, { live: 1, ended: 1, "cut-off": 2 });
  assert.deepEqual(got.attempts.map((v) => [v.attempt, v.status]), [[2, "done"], [1, "failed"]]);
  assert.deepEqual(got.after.map((v) => v.runId).sort(), ["a", "b", "c"]);
  // The earlier attempts of the runs asked for: d's first; a has none.
  assert.deepEqual(got.earlier.map((v) => [v.runId, v.attempt, v.status]), [["d", 1, "failed"]]);
  assert.deepEqual(got.none, []);
}

/**
 * Leases, effects and trees, each a capability a store offers whole: the
 * steps a store of all three answers alike.
 */
export async function capabilitySteps(store: RunStore, t: number) {
  const me = thisHost();
  const gone: HostId = { machine: os.hostname(), pid: 2 ** 22 + 9, start: "x/1" };
  const out: Record<string, unknown> = {};
  // Leases: a run taken from a live attempt whose process is gone fences that attempt.
  assert.ok(store.leases, `the ${store.engine} store offers leases`);
  await store.startAttempt(record("lease", gone, t - 200_000));
  const taken = await store.startAttempt(record("lease", me, t));
  out.taken = [taken.attempt, taken.fenced ?? false, taken.previous?.state];
  await store.write({
    records: [record("lease", gone, t - 200_000, { turnsUsed: 7, updatedAt: t + 1 })],
  });
  out.fenced = store.leases.takeFenced().map((f) => [f.runId, f.attempt, f.holder]);
  out.fencedAgain = store.leases.takeFenced();
  out.leaseLatest = shown((await store.latest("lease"))!);
  // Effects: an intent kept until its receipt; a receipt never undone by a later intent.
  assert.ok(store.effects, `the ${store.engine} store offers effects`);
  await store.effects.write({
    intents: [
      { runId: "fx", key: "k1", tool: "send", inputDigest: "d1", attempt: 1, at: t },
      {
        runId: "fx",
        key: "k2",
        tool: "pay",
        inputDigest: "d2",
        callId: "c2",
        attempt: 1,
        at: t + 1,
      },
    ],
    receipts: [],
  });
  await store.effects.write({
    intents: [],
    receipts: [{
      runId: "fx",
      key: "k1",
      tool: "send",
      ok: true,
      result: '"sent"',
      attempt: 1,
      at: t + 2,
    }],
  });
  await store.effects.write({
    intents: [
      { runId: "fx", key: "k1", tool: "send", inputDigest: "d9", attempt: 2, at: t + 3 },
      { runId: "fx", key: "k2", tool: "pay", inputDigest: "d2", attempt: 2, at: t + 4 },
    ],
    receipts: [],
  });
  out.effects = await store.effects.read("fx");
  out.noEffects = await store.effects.read("nothing");
  // Trees: joined runs read as the tree's rows; an admission writes what it decides.
  assert.ok(store.trees, `the ${store.engine} store offers trees`);
  await store.startAttempt(
    record("root", me, t + 10, { caps: { usd: { value: 1, source: "host" } } }),
  );
  await store.startAttempt(
    record("kid", me, t + 11, { caps: { usd: { value: 1, source: "host" } } }),
  );
  await store.trees.join("root", "root", undefined);
  await store.trees.join("kid", "root", "root");
  await store.trees.admit("root", (rows) => {
    out.admitSaw = rows.map((r) => [r.runId, r.parentId ?? null]).sort();
    return record("kid", me, t + 11, {
      caps: { usd: { value: 1, source: "host" } },
      turnsUsed: 2,
      updatedAt: t + 12,
    });
  });
  out.treeRows = (await store.trees.read("root"))
    .map((r) => [r.runId, r.parentId ?? null, r.use.turns]).sort();
  out.treeList = (await store.trees.list({ root: "root" })).map(shown);
  out.noTree = await store.trees.read("nothing");
  return out;
}

/**
 * The run journal, a capability a store offers whole: entries of two
 * attempts, a body shared by both kept once, an entry written twice kept as
 * first written, every attempt's read back in order with whether it was
 * replayed (and from which attempt) or how long its live call took; a run
 * pruned takes its journal with it.
 */
export async function journalSteps(store: RunStore, t: number) {
  assert.ok(store.journal, `the ${store.engine} store offers a journal`);
  const me = thisHost();
  const long = JSON.stringify({ role: "assistant", content: "step ".repeat(5000) });
  // Attempt 2's model call 0 was answered from attempt 1's entry; every other call ran live.
  const entry = (attempt: number, kind: "model" | "tool", index: number, body: string) => ({
    runId: "jr",
    attempt,
    kind,
    index,
    key: `${kind}-${index}`,
    ...(kind === "tool" ? { tool: "append" } : {}),
    body,
    ...(kind === "model" ? { usage: '{"inputTokens":10,"outputTokens":2}' } : {}),
    at: t + index,
    ...(attempt === 2 && index === 0 ? { replayed: 1 } : { ms: 1000 * attempt + index + 0.4 }),
  });
  await store.startAttempt(record("jr", me, t));
  // Written out of order, in two batches: read back by attempt, kind, index.
  await store.journal.write({
    entries: [
      entry(1, "tool", 0, '"ok 0"'),
      entry(1, "model", 1, long),
      entry(1, "model", 0, "{}"),
    ],
  });
  await store.journal.write({
    entries: [
      entry(2, "model", 0, "{}"),
      entry(2, "model", 1, long),
      // Already there: kept as it was.
      entry(1, "model", 0, '"changed"'),
    ],
  });
  await store.journal.write({ entries: [] });
  const out: Record<string, unknown> = {};
  out.entries = await store.journal.read("jr");
  out.none = await store.journal.read("nothing");
  // Pruned with the run's records once it ended.
  await store.write({
    records: [record("jr", me, t, { status: "done", end: { status: "done", at: t + 1 } })],
  });
  out.pruned = await store.prune(Date.now() + 1000, 10);
  out.after = await store.journal.read("jr");
  return out;
}

/**
 * A graph framework's checkpoints (LangGraph's), a capability a store offers
 * whole: checkpoints of two threads and two namespaces, a channel value kept
 * once per version and read back by the versions a checkpoint names, pending
 * writes (a regular one kept as first written, a special one replaced) in
 * task path, task id, index order, listings newest first with before and
 * limit, a thread deleted alone; a prune of runs leaves them.
 */
export async function checkpointSteps(store: RunStore, t: number) {
  assert.ok(store.checkpoints, `the ${store.engine} store offers checkpoints`);
  const cp = store.checkpoints;
  const bytes = (text: string) => new TextEncoder().encode(text);
  const body = (text: string) => ({ type: "json", bytes: bytes(text) });
  const put = (thread: string, ns: string, id: string, extra: Record<string, unknown> = {}) => ({
    thread,
    ns,
    id,
    checkpoint: body(`{"id":"${id}"}`),
    metadata: body(`{"step":${id.length}}`),
    versions: {},
    values: [],
    ...extra,
  });
  const write = (taskId: string, index: number, channel: string, text: string, taskPath = "") => ({
    taskId,
    index,
    channel,
    type: "json",
    bytes: bytes(text),
    taskPath,
  });
  await cp.put(put("t1", "", "01", {
    versions: { a: "1", b: "1" },
    values: [
      { channel: "a", version: "1", type: "json", bytes: bytes('"a1"') },
      { channel: "b", version: "1", type: "empty" },
    ],
  }));
  // The child brings b at version 2 only; a's value at version 1 is the parent's.
  await cp.put(put("t1", "", "02", {
    parent: "01",
    versions: { a: "1", b: "2" },
    values: [
      { channel: "b", version: "2", type: "json", bytes: bytes('"b2"') },
      // Already kept at this version: kept as it was.
      { channel: "a", version: "1", type: "json", bytes: bytes('"changed"') },
    ],
  }));
  await cp.put(put("t1", "child", "03", { parent: "x" }));
  await cp.put(put("t2", "", "04"));
  await cp.putWrites({
    thread: "t1",
    ns: "",
    id: "01",
    writes: [
      write("task-b", 0, "c", '"b0"'),
      write("task-a", 1, "c", '"a1"'),
      write("task-a", 0, "c", '"a0"'),
      write("task-z", 0, "c", '"z0"', "~path"),
      write("task-a", -3, "__interrupt__", '"first"'),
    ],
  });
  await cp.putWrites({
    thread: "t1",
    ns: "",
    id: "01",
    writes: [
      write("task-a", 0, "c", '"again"'),
      write("task-a", -3, "__interrupt__", '"second"'),
    ],
  });
  await cp.putWrites({ thread: "t1", ns: "", id: "01", writes: [] });
  // Kept again: the body and metadata new, the parent as it was.
  await cp.put(put("t1", "", "02", {
    parent: "zz",
    metadata: body('{"step":9}'),
    versions: { a: "1", b: "2" },
  }));
  const text = (b?: Uint8Array) => b === undefined ? undefined : new TextDecoder().decode(b);
  const shown = (row: GraphCheckpointRow | undefined) =>
    row && {
      at: [row.thread, row.ns, row.id, row.parent ?? null],
      checkpoint: [row.checkpoint.type, text(row.checkpoint.bytes)],
      metadata: text(row.metadata.bytes),
      values: row.values.map((v) => [v.channel, v.version, v.type, text(v.bytes) ?? null]),
      writes: row.writes.map((w) => [w.taskPath, w.taskId, w.index, w.channel, text(w.bytes)]),
    };
  const ids = (rows: GraphCheckpointRow[]) => rows.map((r) => `${r.thread}/${r.ns}/${r.id}`);
  const out: Record<string, unknown> = {};
  out.latest = shown(await cp.get({ thread: "t1", ns: "" }));
  out.first = shown(await cp.get({ thread: "t1", ns: "", id: "01" }));
  out.child = shown(await cp.get({ thread: "t1", ns: "child" }));
  out.missing = await cp.get({ thread: "t1", ns: "", id: "99" });
  out.none = await cp.get({ thread: "nobody", ns: "" });
  out.thread = ids(await cp.list({ thread: "t1", ns: "" }));
  out.threadAllNs = ids(await cp.list({ thread: "t1" }));
  out.every = ids(await cp.list({}));
  out.before = ids(await cp.list({ thread: "t1", before: "02" }));
  out.limit = ids(await cp.list({ limit: 2 }));
  out.byId = ids(await cp.list({ id: "03" }));
  // A prune of runs leaves checkpoints, which belong to threads.
  const me = thisHost();
  await store.startAttempt(record("graph-run", me, t));
  await store.write({
    records: [record("graph-run", me, t, { status: "done", end: { status: "done", at: t + 1 } })],
  });
  out.pruned = await store.prune(Date.now() + 1000, 10);
  out.afterPrune = ids(await cp.list({}));
  await cp.deleteThread("t1");
  out.afterDelete = ids(await cp.list({}));
  out.deletedGet = await cp.get({ thread: "t1", ns: "" });
  await cp.deleteThread("nobody");
  return out;
}

/**
 * A framework's session transcripts, a capability a store offers whole:
 * entries kept in order as given (JSON text, unicode and nesting alike), a
 * uuid once per transcript (in one batch or across batches), entries without
 * one always kept, subpaths and scopes apart, the last N, a pop, listings
 * with their write times, deletes of a subpath or a whole session; a prune
 * of runs leaves them.
 */
export async function sessionSteps(store: RunStore, t: number) {
  assert.ok(store.sessions, `the ${store.engine} store offers session transcripts`);
  const ss = store.sessions;
  const key = (sessionId: string, subpath = "", scope = "proj") => ({ scope, sessionId, subpath });
  const entry = (value: Record<string, unknown>) => ({
    json: JSON.stringify(value),
    ...(typeof value.uuid === "string" ? { uuid: value.uuid } : {}),
  });
  const out: Record<string, unknown> = {};
  out.never = await ss.load(key("s1"));
  out.neverList = await ss.list("proj");
  out.neverSubkeys = await ss.subkeys("proj", "s1");
  out.neverPop = await ss.pop(key("s1"));
  const before = Date.now();
  await ss.append(key("s1"), [
    entry({ type: "user", uuid: "u1", message: { content: [{ text: "héllo ✓ 𝄞" }] } }),
    entry({ type: "title", title: "first" }),
    entry({ type: "assistant", uuid: "u2", nested: { a: [1, { b: null }] } }),
    // The same uuid in one batch: the first kept.
    entry({ type: "assistant", uuid: "u2", nested: "dup" }),
  ]);
  await ss.append(key("s1"), []);
  await ss.append(key("s1"), [
    entry({ type: "user", uuid: "u1", message: "replayed" }), // kept already: left out
    entry({ type: "title", title: "first" }), // no uuid: kept again
    entry({ type: "user", uuid: "u3" }),
  ]);
  await ss.append(key("s1", "subagents/agent-a"), [entry({ type: "user", uuid: "u1" })]);
  await ss.append(key("s1", "subagents/agent-b"), [entry({ type: "user", uuid: "b1" })]);
  await ss.append(key("s2"), [entry({ type: "user", uuid: "u1" })]);
  await ss.append(key("s1", "", "other"), [entry({ type: "user", uuid: "o1" })]);
  const after = Date.now();
  const parsed = (texts: string[] | null) => texts && texts.map((x) => JSON.parse(x));
  out.s1 = parsed(await ss.load(key("s1")));
  out.agentA = parsed(await ss.load(key("s1", "subagents/agent-a")));
  out.otherScope = parsed(await ss.load(key("s1", "", "other")));
  out.last2 = parsed(await ss.load(key("s1"), 2));
  out.last0 = await ss.load(key("s1"), 0);
  out.last99 = (await ss.load(key("s1"), 99))?.length;
  out.lastOfNever = await ss.load(key("nobody"), 3);
  out.subkeys = await ss.subkeys("proj", "s1");
  const listed = (await ss.list("proj")).sort((a, b) => a.sessionId < b.sessionId ? -1 : 1);
  out.listed = listed.map((s) => s.sessionId);
  out.mtimes = listed.map((s) =>
    Number.isInteger(s.mtime) && s.mtime >= before - 1 && s.mtime <= after + 1
  );
  out.otherList = (await ss.list("other")).map((s) => s.sessionId);
  // A prune of runs leaves transcripts, which belong to sessions.
  const me = thisHost();
  await store.startAttempt(record("session-run", me, t));
  await store.write({
    records: [record("session-run", me, t, { status: "done", end: { status: "done", at: t + 1 } })],
  });
  out.pruned = await store.prune(Date.now() + 1000, 10);
  out.afterPrune = (await ss.load(key("s1")))?.length;
  out.popped = parsed([(await ss.pop(key("s1")))!]);
  out.afterPop = parsed(await ss.load(key("s1"), 1));
  // A uuid popped may be kept again.
  await ss.append(key("s1"), [entry({ type: "user", uuid: "u3", again: true })]);
  out.reappended = parsed(await ss.load(key("s1"), 1));
  await ss.append(key("s3"), [entry({ type: "x" })]);
  out.poppedLast = parsed([(await ss.pop(key("s3")))!]);
  out.emptied = await ss.load(key("s3"));
  out.emptiedPop = await ss.pop(key("s3"));
  await ss.delete(key("s1", "subagents/agent-a"));
  out.afterSubDelete = {
    sub: await ss.load(key("s1", "subagents/agent-a")),
    main: (await ss.load(key("s1")))?.length,
    subkeys: await ss.subkeys("proj", "s1"),
  };
  await ss.delete(key("s1"));
  out.afterDelete = {
    main: await ss.load(key("s1")),
    sub: await ss.load(key("s1", "subagents/agent-b")),
    subkeys: await ss.subkeys("proj", "s1"),
    listed: (await ss.list("proj")).map((s) => s.sessionId),
    s2: (await ss.load(key("s2")))?.length,
    otherScope: (await ss.load(key("s1", "", "other")))?.length,
  };
  await ss.delete(key("nobody"));
  return out;
}
