// The watchdog's scheduling on a clock the test moves, as std's FakeTime tests do: its loop
// runs in this thread over the keeper's run table, and each check is made at the exact
// moment something falls due and just before it.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { MessageChannel } from "node:worker_threads";
import { type AgentCheckpoint, createAgentCheckpoint } from "../mod.ts";
import { parseRecord } from "../_record.ts";
import type { RunTable } from "../_run_table.ts";
import { watchdog, WATCHDOG_ENTRY, type WatchdogClock } from "../watchdog.ts";
import { tempHome, waitFor } from "./_helpers.ts";

const record = (file: string) =>
  fs.existsSync(file) ? parseRecord(fs.readFileSync(file)) : undefined;

/**
 * A clock that moves only when told. The watchdog's waits end when it passes their end, or
 * when the run table is woken (as the real wait's do).
 */
class FakeClock implements WatchdogClock {
  #now: number;
  #timers = new Set<{ at: number; fire: () => void }>();

  constructor(now: number) {
    this.#now = now;
  }

  now = (): number => this.#now;

  sleep = (table: RunTable, seen: number, ms: number): Promise<boolean> =>
    new Promise((resolve) => {
      const timer = { at: this.#now + Math.max(0, ms), fire: () => resolve(false) };
      this.#timers.add(timer);
      // Woken (the test's look at a moment of its choosing), the wait ends, its timer with it.
      table.waitForWake(seen, 2 ** 31 - 1).then(() => {
        if (this.#timers.delete(timer)) resolve(true);
      });
    });

  after = (ms: number, then: () => void): void => {
    this.#timers.add({ at: this.#now + Math.max(0, ms), fire: then });
  };

  /** The end of the watchdog's wait, once it waits. */
  get waitsUntil(): number | undefined {
    return this.#timers.size === 0 ? undefined : Math.min(...[...this.#timers].map((t) => t.at));
  }

  /** Move to `ms`, ending the waits that end by then; whether one did. */
  set(ms: number): boolean {
    this.#now = ms;
    const due = [...this.#timers].filter((t) => t.at <= ms);
    for (const t of due) {
      this.#timers.delete(t);
      t.fire();
    }
    return due.length > 0;
  }
}

/**
 * A keeper without a watchdog thread of its own (watchdog and ledger off) and the watchdog's
 * loop run here over its table with `settings`, on a fake clock set to `at(table)`.
 */
async function onFakeClock(
  settings: Record<string, unknown>,
  begin: (ac: AgentCheckpoint) => void,
  at: (table: RunTable) => number,
) {
  const home = tempHome();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { ...settings, watchdog: false, ledger: false },
  });
  begin(ac);
  const table = ac.sharedRuns;
  const clock = new FakeClock(at(table));
  const { port1, port2 } = new MessageChannel();
  port2.unref();
  const loop = watchdog(port1, {
    entry: WATCHDOG_ENTRY,
    buffers: table.buffers,
    home,
    env: {},
    // A poll an hour long: each wait ends where something falls due, not at a poll.
    overrides: { watchdog_poll_seconds: 3600, ...settings, watchdog: true, ledger: false },
    hostLogger: true,
    hostComments: false,
  }, clock);
  /**
   * Move the clock to `ms` and resolve once the watchdog has looked and waits again: the look
   * its wait ending at `ms` makes, else one the test asks for by waking it there.
   */
  const moveTo = async (ms: number) => {
    const looks = table.looks();
    if (!clock.set(ms)) table.wake();
    assert.ok(
      await waitFor(() => table.looks() > looks && clock.waitsUntil !== undefined),
      `the watchdog looked at ${ms}`,
    );
  };
  assert.ok(await waitFor(() => table.looks() > 0 && clock.waitsUntil !== undefined));
  const stop = async () => {
    loop.stop();
    port1.close();
    await ac.close();
  };
  return { ac, table, clock, moveTo, stop };
}

test("on a fake clock: the stall record comes at its window's end, not before, and once", async () => {
  let file = "";
  const { table, clock, moveTo, stop } = await onFakeClock(
    { stall_window_seconds: 30, uncapped_interval_seconds: 0 },
    (ac) => {
      const run = ac.startRun({ sessionId: "quiet", caps: { tokens: 1_000_000 } });
      run.preLlmCall();
      file = run.checkpointFile;
    },
    (table) => table.activity(0),
  );
  try {
    const silentFrom = table.activity(0);
    const due = silentFrom + 30_000;
    // The watchdog sleeps until the window ends, not a poll's length.
    assert.equal(clock.waitsUntil, due);
    await moveTo(due - 1);
    assert.equal(record(file), undefined, "no stall record before the window ends");
    await moveTo(due);
    const stall = record(file);
    assert.equal(stall?.kind, "stall");
    assert.equal(stall?.source, "watchdog");
    // A second window of silence, with no hook between, gets no second record.
    await moveTo(due + 60_000);
    assert.equal(record(file)?.persistedAt, stall?.persistedAt);
  } finally {
    await stop();
  }
});

test("on a fake clock: a capless run gets its checkpoint at each multiple of the interval, no sooner", async () => {
  let file = "";
  const { table, clock, moveTo, stop } = await onFakeClock(
    { stall_window_seconds: 0, uncapped_interval_seconds: 60 },
    (ac) => {
      const run = ac.startRun({ sessionId: "capless" });
      run.preLlmCall();
      file = run.checkpointFile;
    },
    (table) => table.start(0),
  );
  try {
    const start = table.start(0);
    assert.equal(clock.waitsUntil, start + 60_000);
    await moveTo(start + 59_999);
    assert.equal(record(file), undefined, "nothing before the first multiple");
    await moveTo(start + 60_000);
    assert.equal(record(file)?.kind, "uncapped");
    assert.equal(record(file)?.multiple, 1);
    assert.equal(clock.waitsUntil, start + 120_000);
    await moveTo(start + 119_999);
    assert.equal(record(file)?.multiple, 1);
    await moveTo(start + 120_000);
    assert.equal(record(file)?.multiple, 2);
  } finally {
    await stop();
  }
});

test("on a fake clock: a tool call's record comes at its deadline, not before", async () => {
  let file = "";
  let end = () => {};
  const { table, clock, moveTo, stop } = await onFakeClock(
    { stall_window_seconds: 0, uncapped_interval_seconds: 0 },
    (ac) => {
      const run = ac.startRun({ sessionId: "slow-tool", caps: { tokens: 1_000_000 } });
      run.preLlmCall();
      run.preToolCall("shell", { callId: "call_1", timeoutSeconds: 120 });
      file = run.checkpointFile;
      end = () => run.postToolCall("shell", { callId: "call_1", ok: true });
    },
    (table) => table.activity(0),
  );
  try {
    const deadline = table.toolDeadline(0, 0);
    assert.ok(deadline > 0, "the call has a deadline");
    assert.equal(clock.waitsUntil, deadline);
    await moveTo(deadline - 1);
    assert.equal(record(file), undefined, "no tool_timeout record before the deadline");
    await moveTo(deadline);
    const timedOut = record(file);
    assert.equal(timedOut?.kind, "tool_timeout");
    assert.equal(timedOut?.timedOut?.callId, "call_1");
    assert.equal(timedOut?.timedOut?.timeoutSeconds, 120);
  } finally {
    end();
    await stop();
  }
});
