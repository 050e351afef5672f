/**
 * Side effects across attempts: the effect key, intents durable before the
 * tool runs (one commit for the intents of a moment), receipts, replay with
 * `once`, the resume text, `show`, and both stores.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createAgentCheckpoint, type Run } from "../mod.ts";
import { openStore, storeFile } from "../store/mod.ts";
import { openPgStore } from "../store/postgres.ts";
import { main } from "../cli/mod.ts";
import { memoryIo } from "../cli/_io.ts";
import { captureLog, locker, tempHome, waitFor } from "./_helpers.ts";
import { setImmediate as nextTurn } from "node:timers/promises";
import * as fs from "node:fs";
import { type RunPayload, serveRuns } from "../serve/mod.ts";
import { loadSettings } from "../config.ts";
import { admin, freshSchema, skipFleet } from "./store/_pg.ts";

/** The effects the home's ledger holds for a run, read by another connection. */
function stored(home: string, runId: string) {
  const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" })!;
  try {
    return store.effectsSync(runId);
  } finally {
    store.closeSync();
  }
}

test("effectKey is the same for the same run id, tool and input in any keeper, and differs otherwise", async () => {
  const a = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  const b = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  try {
    const ra = a.startRun({ sessionId: "invoice-7" });
    const rb = b.startRun({ sessionId: "invoice-7" });
    const input = { to: "a@example.com", lines: [{ sku: 1, qty: 2 }], note: undefined };
    const key = ra.effects.key("send_email", input);
    // Another machine (another home) and another key order: the same key.
    assert.equal(
      rb.effects.key("send_email", { lines: [{ qty: 2, sku: 1 }], to: "a@example.com" }),
      key,
    );
    // Pinned: a key is a contract with the APIs that dedupe by it, across versions too.
    assert.equal(ra.effects.key("t", { a: 1 }), "ek_7d3df16220b211d48394fda508388809");
    assert.notEqual(ra.effects.key("send_email", { ...input, to: "b@example.com" }), key);
    assert.notEqual(ra.effects.key("send_sms", input), key);
    assert.notEqual(a.startRun({ sessionId: "invoice-8" }).effects.key("send_email", input), key);
    // Input JSON cannot carry: a clear fallback, never a throw.
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    assert.match(ra.effects.key("t", cyclic), /^ek_[0-9a-f]{32}$/);
    assert.match(ra.effects.key("t", { n: 10n }), /^ek_[0-9a-f]{32}$/);
  } finally {
    await a.close();
    await b.close();
  }
});

test("run.intent resolves once the intent is in the ledger, and the intents of one moment share one commit", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  try {
    const run = ac.startRun({ sessionId: "batch" });
    const waits = Array.from({ length: 20 }, (_, i) => run.effects.intent("pay", { n: i }));
    assert.equal(stored(home, "batch").length, 0, "not before the commit");
    assert.deepEqual(await Promise.all(waits), Array(20).fill(true));
    // Durable when it resolved: another connection reads every one, each without a receipt.
    const rows = stored(home, "batch");
    assert.equal(rows.length, 20);
    assert.ok(rows.every((r) => r.tool === "pay" && r.attempt === 1 && !r.receipt));
    assert.equal(ac.effectCommits, 1);
  } finally {
    await ac.close();
  }
});

test("an effect tool's receipt keeps its result, cut to effect_result_max_bytes with a log line", async () => {
  const home = tempHome();
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: log.logger,
    settings: { watchdog: false, effect_tools: ["send_email"], effect_result_max_bytes: 64 },
  });
  try {
    const run = ac.startRun({ sessionId: "receipts" });
    run.preToolCall("send_email", { callId: "c1", input: { to: "x" } });
    run.postToolCall("send_email", { callId: "c1", ok: true, result: { id: "m1" } });
    run.preToolCall("send_email", { callId: "c2", input: { to: "y" } });
    run.postToolCall("send_email", { callId: "c2", ok: true, result: "z".repeat(500) });
    run.preToolCall("send_email", { callId: "c3", input: { to: "w" } });
    run.postToolCall("send_email", { callId: "c3", error: new Error("SMTP 550") });
    run.preToolCall("search", { callId: "c4", input: { q: "not an effect" } });
    run.postToolCall("search", { callId: "c4", ok: true });
    // The hooks do not wait; the run's next intent shares their commit, and its promise tells.
    assert.equal(await run.effects.intent("send_email", { to: "v" }), true);
    const rows = stored(home, "receipts");
    assert.equal(rows.length, 4, "search is not an effect tool");
    const byKey = new Map(rows.map((r) => [r.key, r]));
    assert.deepEqual(
      byKey.get(run.effects.key("send_email", { to: "x" }))?.receipt?.result,
      '{"id":"m1"}',
    );
    const cut = byKey.get(run.effects.key("send_email", { to: "y" }))!.receipt!;
    assert.equal(cut.truncated, true);
    assert.equal(new TextEncoder().encode(cut.result!).length, 64);
    assert.ok(log.records.some((r) => /keeps 64 of its result's 502 bytes/.test(r.message)));
    const failed = byKey.get(run.effects.key("send_email", { to: "w" }))!.receipt!;
    assert.equal(failed.ok, false);
    assert.match(failed.result!, /SMTP 550/);
    assert.equal(byKey.get(run.effects.key("send_email", { to: "v" }))?.receipt, undefined);
  } finally {
    await ac.close();
  }
});

/** Attempt 1 of `runId` in `home`: does `body`, then its process "dies" (the keeper closes, the run never ends). */
async function firstAttempt(
  home: string,
  runId: string,
  body: (run: Run) => Promise<void>,
  settings: Record<string, unknown> = {},
): Promise<void> {
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false, ...settings } });
  await body(ac.startRun({ sessionId: runId }));
  await ac.close();
  // Its threads may hold the ledger a moment longer: the retry starts once they let go, as a
  // retry in a new process would (the last connection to close removes the write-ahead log).
  if (settings.store === undefined) {
    assert.ok(await waitFor(() => !fs.existsSync(`${storeFile(home)}-wal`), 30_000));
  }
}

test("a retried run: once replays what was done, runs again what is of unknown outcome with the same key, and the resume text names both", async () => {
  const home = tempHome();
  const applied: string[] = [];
  let charged: string | undefined;
  await firstAttempt(home, "retry", async (run) => {
    await run.effects.once("send_email", { to: "boss" }, (key) => {
      applied.push(key);
      return { id: "msg_1", at: new Date(0) };
    });
    // The attempt dies inside charge: its intent is durable, its receipt never comes.
    charged = run.effects.key("charge", { cents: 5 });
    await run.effects.intent("charge", { cents: 5 }, { callId: "call_9" });
  });
  // The dead attempt's process is this one, still running: only warn lets its retry go on here.
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { watchdog: false, on_duplicate: "warn" },
  });
  try {
    const run = ac.startRun({ sessionId: "retry" });
    assert.equal(run.attempt, 2);
    const text = run.preLlmCall()!;
    assert.ok(
      text.includes(
        `outcome is unknown: charge (effect key ${charged}, attempt 1, call id call_9)`,
      ),
      text,
    );
    assert.ok(
      text.includes(`send_email (effect key ${applied[0]}, attempt 1): ok, {"id":"msg_1"`),
      text,
    );
    assert.deepEqual(await run.effects.state(charged!), {
      state: "unknown",
      tool: "charge",
      attempt: 1,
    });
    // Replayed: the value as recorded (its JSON read back), and not run again.
    const again = await run.effects.once("send_email", { to: "boss" }, (key) => {
      applied.push(key);
      return { id: "msg_2", at: new Date(0) };
    });
    assert.deepEqual(again, { id: "msg_1", at: "1970-01-01T00:00:00.000Z" });
    assert.equal(applied.length, 1);
    // Of unknown outcome: it runs again, with the same key for the API to dedupe by.
    let seen: string | undefined;
    assert.equal(await run.effects.once("charge", { cents: 5 }, (key) => (seen = key, "ok")), "ok");
    assert.equal(seen, charged);
    assert.equal((await run.effects.state(charged!))?.state, "done");
    // A call that failed is no receipt to replay: it runs again.
    await assert.rejects(
      run.effects.once("refund", { cents: 1 }, () => {
        throw new Error("bank down");
      }),
      /bank down/,
    );
    assert.equal(await run.effects.once("refund", { cents: 1 }, () => "refunded"), "refunded");
    await run.end();
  } finally {
    await ac.close();
  }
  // Ended done: a fresh run of the id owes nothing to the old one's effects (its keys are its
  // own, and nothing is replayed), which stay in the ledger beside it.
  const before = stored(home, "retry");
  const fresh = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  try {
    const run = fresh.startRun({ sessionId: "retry" });
    assert.equal(run.attempt, 3);
    assert.equal(run.previous, undefined);
    assert.notEqual(run.effects.key("charge", { cents: 5 }), charged);
    assert.equal(await run.effects.state(run.effects.key("charge", { cents: 5 })), undefined);
    let sentAgain = false;
    await run.effects.once("send_email", { to: "boss" }, () => {
      sentAgain = true;
      return { id: "msg_3" };
    });
    assert.equal(sentAgain, true);
    assert.deepEqual(stored(home, "retry").filter((e) => e.attempt < 3), before);
  } finally {
    await fresh.close();
  }
});

test("show RUN lists the run's effects, those of unknown outcome first, and --json has them", async () => {
  const home = tempHome();
  let unknownKey = "";
  await firstAttempt(home, "shown", async (run) => {
    await run.effects.once("send_email", { to: "boss" }, () => ({ id: "msg_1" }));
    unknownKey = run.effects.key("deploy", { env: "prod" });
    await run.effects.intent("deploy", { env: "prod" });
  });
  const m = memoryIo({ env: { HERMES_HOME: home } });
  assert.equal(await main(["show", "shown", "--home", home], m.io), 0);
  const out = m.stdout();
  const lines = out.split("\n").filter((l) => l.startsWith("effect"));
  assert.equal(lines.length, 2, out);
  assert.match(
    lines[0]!,
    new RegExp(`deploy ${unknownKey}: outcome unknown \\(intent of attempt 1, no receipt\\)`),
  );
  assert.match(lines[1]!, /send_email ek_[0-9a-f]{32}: done by attempt 1, ok: \{"id":"msg_1"\}/);
  const j = memoryIo({ env: { HERMES_HOME: home } });
  assert.equal(await main(["show", "shown", "--home", home, "--json"], j.io), 0);
  assert.equal(JSON.parse(j.stdout()).effects.length, 2);
});

test("with the ledger off, intent resolves false and once runs the call, with one log line", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { ledger: false, watchdog: false },
  });
  try {
    const run = ac.startRun({ sessionId: "no-ledger" });
    assert.equal(await run.effects.intent("pay", { n: 1 }), false);
    assert.equal(await run.effects.intent("pay", { n: 2 }), false);
    assert.equal(await run.effects.once("pay", { n: 3 }, () => 7), 7);
    assert.equal(
      log.records.filter((r) => /side effects are not recorded/.test(r.message)).length,
      1,
    );
  } finally {
    await ac.close();
  }
});

test(
  "the fleet store: intents and receipts through the store's thread, read back by another machine's start",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    try {
      const settings = { watchdog: false, store: db.url };
      let key = "";
      await firstAttempt(tempHome(), "fleet-fx", async (run) => {
        assert.equal(await run.effects.once("send_email", { to: "boss" }, () => "sent"), "sent");
        key = run.effects.key("charge", { cents: 5 });
        assert.equal(await run.effects.intent("charge", { cents: 5 }), true);
        // Committed when it resolved: another connection reads it.
        const reader = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
        try {
          const rows = await reader.effects.read("fleet-fx");
          assert.deepEqual(rows.map((r) => [r.tool, r.receipt?.ok]), [["send_email", true], [
            "charge",
            undefined,
          ]]);
        } finally {
          await reader.close();
        }
      }, settings);
      // Another machine: another home, the same store. The dead attempt's process is this one,
      // still running: only warn lets its retry go on here.
      const ac = createAgentCheckpoint({
        home: tempHome(),
        env: {},
        settings: { ...settings, on_duplicate: "warn" },
      });
      try {
        const run = ac.startRun({ sessionId: "fleet-fx" });
        assert.equal(run.attempt, 2);
        assert.ok(run.preLlmCall()!.includes(`outcome is unknown: charge (effect key ${key}`));
        let ran = false;
        assert.equal(
          await run.effects.once("send_email", { to: "boss" }, () => (ran = true, "again")),
          "sent",
        );
        assert.equal(ran, false);
        await run.end();
      } finally {
        await ac.close();
      }
    } finally {
      await db.drop();
    }
  },
);

test("the web view's run detail carries the run's effects, those of unknown outcome first", async () => {
  const home = tempHome();
  await firstAttempt(home, "served", async (run) => {
    await run.effects.once("send_email", { to: "boss" }, () => ({ id: "msg_1" }));
    await run.effects.intent("deploy", { env: "prod" });
  });
  const { settings } = loadSettings({ home, env: {} });
  const store = openStore({ home, settings, mode: "read" })!;
  const server = await serveRuns({ store, settings, port: 0 });
  try {
    const body = await (await fetch(new URL("/api/runs/served", server.url))).json() as RunPayload;
    assert.deepEqual(body.effects.map((e) => [e.tool, e.receipt?.ok]), [
      ["deploy", undefined],
      ["send_email", true],
    ]);
    assert.equal(body.effectsTotal, 2);
    const page = await (await fetch(server.url)).text();
    assert.match(page, /Side effects/);
  } finally {
    await server.close();
    await store.close();
  }
});

test("two calls of once for the same tool and input at the same time run it once", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  try {
    const run = ac.startRun({ sessionId: "parallel" });
    let runs = 0;
    const send = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 20));
      return "sent";
    };
    const both = await Promise.all([
      run.effects.once("send_email", { to: "x" }, send),
      run.effects.once("send_email", { to: "x" }, send),
    ]);
    assert.deepEqual(both, ["sent", "sent"]);
    assert.equal(runs, 1);
    assert.equal(await run.effects.once("send_email", { to: "x" }, send), "sent");
    assert.equal(runs, 1);
  } finally {
    await ac.close();
  }
});

test("a ledger another process holds locked: intents wait and land once it lets go; past 10 s they resolve false, said in the log", async () => {
  const home = tempHome();
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: log.logger,
    settings: { watchdog: false },
  });
  try {
    const run = ac.startRun({ sessionId: "locked" });
    assert.equal(await run.effects.intent("warm", {}), true); // the ledger and its effects table exist
    // A short hold: the intent waits, and lands once the ledger is free.
    const short = locker(storeFile(home), "write");
    await short.locked;
    let settled = false;
    const landed = run.effects.intent("pay", { n: 1 }).then((v) => (settled = true, v));
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(settled, false, "not committed while another process holds the lock");
    await short.release();
    assert.equal(await landed, true);
    // A hold past the bound: false, and the log says what was not recorded.
    const long = locker(storeFile(home), "write");
    await long.locked;
    const lost = await run.effects.intent("pay", { n: 2 });
    await long.release();
    assert.equal(lost, false);
    assert.ok(
      log.records.some((r) =>
        /could not record 1 side effect\(s\) within 10s .*the intent of pay/.test(r.message)
      ),
      log.records.map((r) => r.message).join("\n"),
    );
    // And the next one lands again.
    assert.equal(await run.effects.intent("pay", { n: 3 }), true);
  } finally {
    await ac.close();
  }
});

test("once starts its tool only once the intent is durable: while another process holds the ledger's write lock the tool has not started, and when it starts the ledger holds the intent", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  try {
    const run = ac.startRun({ sessionId: "durable-first" });
    assert.equal(await run.effects.intent("warm", {}), true); // the ledger and its effects table exist
    const input = { to: "boss" };
    const key = run.effects.key("send_email", input);
    // The earlier attempts' effects are read now: once reads no more before its intent.
    assert.equal(await run.effects.state(key), undefined);
    const lock = locker(storeFile(home), "write");
    await lock.locked;
    const atStart: string[][] = []; // what the ledger held each time the tool started
    const sent = run.effects.once("send_email", input, () => {
      // Another connection reads what is durable when the tool starts (readers go on under the lock).
      atStart.push(stored(home, "durable-first").map((r) => r.key));
      return "sent";
    });
    // All once does before the intent's commit is done a turn of the event loop later: what
    // remains is the commit, which waits for the lock.
    await nextTurn();
    await nextTurn();
    assert.equal(atStart.length, 0, "the tool started while its intent could not be committed");
    await lock.release();
    assert.equal(await sent, "sent");
    assert.equal(atStart.length, 1);
    assert.ok(
      atStart[0]!.includes(key),
      `the intent was durable when the tool started: ${atStart[0]}`,
    );
  } finally {
    await ac.close();
  }
});

test("the fleet store: an intent whose connection is cut is committed on the next try", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const sql = await admin();
  try {
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      settings: { watchdog: false, store: db.url },
    });
    try {
      const run = ac.startRun({ sessionId: "cut" });
      assert.equal(await run.effects.intent("warm", {}), true);
      const cut = await sql.unsafe(
        `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
          WHERE application_name = $1 AND pid <> pg_backend_pid()`,
        [`agent-checkpoint ${db.schema}`],
      );
      assert.ok(Number(cut[0]?.n) >= 1, "the store's connection was cut");
      assert.equal(await run.effects.intent("pay", { n: 1 }), true);
      const reader = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
      try {
        assert.deepEqual((await reader.effects.read("cut")).map((e) => e.tool).sort(), [
          "pay",
          "warm",
        ]);
      } finally {
        await reader.close();
      }
    } finally {
      await ac.close();
    }
  } finally {
    await sql.end({ timeout: 1 });
    await db.drop();
  }
});

test("a retry whose ledger is locked at its start still replays what was done, once the ledger opens", async () => {
  const home = tempHome();
  let sent = 0;
  const send = () => (sent++, "sent");
  await firstAttempt(home, "locked-start", async (run) => {
    await run.effects.once("send_email", { to: "boss" }, send);
  });
  // Exclusive: the new keeper cannot even open the ledger, let alone read it.
  const lock = locker(storeFile(home), "exclusive");
  await lock.locked;
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: log.logger,
    settings: { watchdog: false },
  });
  try {
    const run = ac.startRun({ sessionId: "locked-start" }); // the ledger cannot say it is a retry
    const replayed = run.effects.once("send_email", { to: "boss" }, send);
    await new Promise((r) => setTimeout(r, 300));
    await lock.release();
    assert.equal(await replayed, "sent");
    assert.equal(sent, 1, "replayed from the receipt, not sent again");
  } finally {
    await ac.close();
  }
});
