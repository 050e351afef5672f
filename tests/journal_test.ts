/**
 * The run journal: a retried own-loop agent answers its earlier attempt's
 * model and tool calls from the journal (the provider is not called, the
 * tool does not run) while they match, and goes live at the first request
 * that differs or past the journal's end; killed by SIGKILL mid-run in a
 * process of its own and retried in another, on the embedded store and on
 * PostgreSQL, the model receives one extra request per kill at most and the
 * conversation is the unkilled run's.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { spawn } from "node:child_process";
import { createAgentCheckpoint } from "../mod.ts";
import { captureLog, fixture, locker, scriptCommand, tempHome } from "./_helpers.ts";
import { freshSchema, privateServer, skipFleet, skipPrivateServer } from "./store/_pg.ts";
import { openPgStore } from "../store/postgres.ts";
import { EFFECT_GIVE_UP_MS, MAX_EFFECTS_WAITING } from "../_ledger.ts";
import { openSqliteStore, storeFile } from "../store/sqlite.ts";
import { selectOne, sqliteDriver } from "../_sqlite.ts";

const AGENT = fixture("journal_agent");

/** One process of the agent: to its end, or SIGKILLed once its model gets request `hangAt`. */
function agent(
  home: string,
  plan: Record<string, unknown>,
): Promise<{ killed: boolean; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const [cmd, argv] = scriptCommand(AGENT, [home, JSON.stringify(plan)]);
    const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    let killed = false;
    const hangAt = plan.hangAt as number | undefined;
    child.stdout.on("data", (chunk) => {
      out += chunk;
      if (!killed && hangAt !== undefined && out.includes(`MODEL ${hangAt}\n`)) {
        killed = true;
        child.kill("SIGKILL");
      }
    });
    child.stderr.on("data", (chunk) => err += chunk);
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      if (killed ? signal === "SIGKILL" : code === 0) resolve({ killed, out, err });
      else reject(new Error(`the agent ended ${code ?? signal}: ${err.slice(-2000)}`));
    });
  });
}

/** Files of one agent's run. */
function files(dir: string) {
  return {
    requests: path.join(dir, "requests.txt"),
    tools: path.join(dir, "tools.txt"),
    conversation: path.join(dir, "conversation.json"),
  };
}
const lines = (file: string) =>
  fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "") : [];

/** The agent killed at each step of `kills` (one process each), then run to its end. */
async function killedAndRetried(kills: number[], store?: string) {
  const home = tempHome();
  const f = files(home);
  const base = { sessionId: "journal-agent", ...f, ...(store ? { store } : {}) };
  for (const hangAt of kills) {
    const { killed } = await agent(home, { ...base, hangAt });
    assert.ok(killed, `killed at step ${hangAt}`);
  }
  const last = await agent(home, base);
  const done = /DONE (\d+) (\d+)/.exec(last.out);
  assert.ok(done, `the retry ran to its end: ${last.out}`);
  return {
    requests: lines(f.requests),
    tools: lines(f.tools),
    conversation: JSON.parse(fs.readFileSync(f.conversation, "utf8")),
    replayed: Number(done[1]),
    replayedTools: Number(done[2]),
    notes: [...last.out.matchAll(/NOTE (\d+)/g)].map((m) => Number(m[1])),
    log: last.err,
    home,
  };
}

/** The conversation of a run that was never killed, once per test process. */
let unkilled: Promise<unknown> | undefined;
function unkilledConversation(): Promise<unknown> {
  unkilled ??= (async () => {
    const home = tempHome();
    const f = files(home);
    await agent(home, { sessionId: "journal-agent", ...f });
    assert.equal(lines(f.requests).length, 10);
    return JSON.parse(fs.readFileSync(f.conversation, "utf8"));
  })();
  return unkilled;
}

const STEPS = Array.from({ length: 10 }, (_, i) => `step ${i}`);

test("an own-loop agent SIGKILLed at step 6 and retried: one extra request, each tool step once, the unkilled conversation", async () => {
  const got = await killedAndRetried([6]);
  // Requests 0..6 in the killed attempt; the retry asks again only for step 6, the call in flight.
  assert.deepEqual(got.requests, ["0", "1", "2", "3", "4", "5", "6", "6", "7", "8", "9"]);
  assert.ok(got.requests.length <= 10 + 1);
  assert.deepEqual(got.tools, STEPS);
  assert.equal(got.replayed, 6);
  assert.equal(got.replayedTools, 6);
  assert.match(got.log, /replayed 6 model call\(s\) and 6 tool call\(s\) of attempt 1/);
  assert.deepEqual(got.conversation, await unkilledConversation());
  // The resume text went before the first live call, not before a replayed one.
  assert.deepEqual(got.notes, [6]);
  // The retry's turns are its live calls only: the replayed ones are not counted again.
  const store = openSqliteStore({ file: storeFile(got.home), hostTimeoutSeconds: 30 });
  try {
    const latest = await store.latest("journal-agent");
    assert.equal(latest?.record.attempt, 2);
    assert.equal(latest?.record.turnsUsed, 4);
    assert.equal(latest?.record.status, "done");
  } finally {
    await store.close();
  }
});

test("killed twice (at steps 3 and 7) and retried: a retry replays the attempt that got furthest, its replayed calls included", async () => {
  const got = await killedAndRetried([3, 7]);
  assert.deepEqual(got.requests, ["0", "1", "2", "3", "3", "4", "5", "6", "7", "7", "8", "9"]);
  assert.ok(got.requests.length <= 10 + 2);
  assert.deepEqual(got.tools, STEPS);
  assert.equal(got.replayed, 7);
  assert.deepEqual(got.conversation, await unkilledConversation());
});

test(
  "PostgreSQL: an own-loop agent SIGKILLed at step 5 and retried: one extra request, each tool step once",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    try {
      const got = await killedAndRetried([5], db.url);
      assert.deepEqual(got.requests, ["0", "1", "2", "3", "4", "5", "5", "6", "7", "8", "9"]);
      assert.deepEqual(got.tools, STEPS);
      assert.equal(got.replayed, 5);
      assert.deepEqual(got.conversation, await unkilledConversation());
    } finally {
      await db.drop();
    }
  },
);

/** A keeper over `home` whose log is captured; `warn` lets a retry in the same process go on. */
function keeperOf(home: string, settings: Record<string, unknown> = {}) {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { watchdog: false, on_duplicate: "warn", ...settings },
    logger: log.logger,
  });
  return { ac, log };
}

const keeper = keeperOf;

/** The stores the in-process tests run on: the embedded one, and PostgreSQL (a fresh schema). */
const STORES: [string, (() => Promise<{ url: string; drop(): Promise<void> }>) | undefined][] = [
  ["sqlite", undefined],
  ["postgres", freshSchema],
];

/** A fake model that counts its requests and answers each with its number. */
function fakeModel() {
  const seen: unknown[] = [];
  return {
    seen,
    call: (request: unknown) => () => {
      seen.push(request);
      return { n: seen.length - 1 };
    },
  };
}

for (const [engine, url] of STORES) {
  test(
    `${engine}: a request that differs from the journal's goes live at that call, and every call after it`,
    {
      skip: engine === "postgres" && skipFleet,
    },
    async () => {
      const home = tempHome();
      const db = url ? await url() : undefined;
      const keeper = (home: string) => keeperOf(home, db ? { store: db.url } : {});
      try {
        const model = fakeModel();
        const first = keeper(home);
        const a = first.ac.startRun({ sessionId: "differs" });
        for (const q of ["a", "b", "c", "d"]) await a.journal.model({ q }, model.call({ q }));
        await first.ac.close();
        assert.equal(model.seen.length, 4);

        const second = keeper(home);
        const b = second.ac.startRun({ sessionId: "differs" });
        assert.equal(b.attempt, 2);
        assert.equal(b.journal.live, false);
        assert.deepEqual(await b.journal.model({ q: "a" }, model.call({ q: "a" })), { n: 0 });
        assert.deepEqual(await b.journal.model({ q: "b" }, model.call({ q: "b" })), { n: 1 });
        assert.equal(model.seen.length, 4, "replayed: the provider was not called");
        assert.equal(b.journal.live, false);
        assert.deepEqual(await b.journal.model({ q: "X" }, model.call({ q: "X" })), { n: 4 });
        assert.equal(b.journal.live, true);
        // The same request as the earlier attempt's call 3: live all the same, from the mismatch on.
        assert.deepEqual(await b.journal.model({ q: "d" }, model.call({ q: "d" })), { n: 5 });
        assert.equal(b.journal.replayed, 2);
        assert.ok(
          second.log.records.some((r) =>
            /replayed 2 model call\(s\).*live from model call 2 \(its request differs/.test(
              r.message,
            )
          ),
        );
        await b.end();
        await second.ac.close();
      } finally {
        await db?.drop();
      }
    },
  );

  test(
    `${engine}: tool calls of the replayed prefix return their recorded results without running; past it they run`,
    {
      skip: engine === "postgres" && skipFleet,
    },
    async () => {
      const home = tempHome();
      const db = url ? await url() : undefined;
      const keeper = (home: string) => keeperOf(home, db ? { store: db.url } : {});
      try {
        const model = fakeModel();
        let ran = 0;
        const tool = (x: number) => () => ({ x, ran: ++ran });
        const first = keeper(home);
        const a = first.ac.startRun({ sessionId: "tools" });
        await a.journal.model({ q: 0 }, model.call({ q: 0 }));
        assert.deepEqual(await a.journal.tool("t", { x: 0 }, tool(0)), { x: 0, ran: 1 });
        await first.ac.close();

        const second = keeper(home);
        const b = second.ac.startRun({ sessionId: "tools" });
        await b.journal.model({ q: 0 }, model.call({ q: 0 }));
        assert.deepEqual(
          await b.journal.tool("t", { x: 0 }, tool(0)),
          { x: 0, ran: 1 },
          "replayed",
        );
        assert.equal(ran, 1);
        // A call the journal does not have (the one in flight when the attempt died): it runs.
        assert.deepEqual(await b.journal.tool("t", { x: 1 }, tool(1)), { x: 1, ran: 2 });
        assert.equal(b.journal.replayedTools, 1);
        await b.end();
        await second.ac.close();
      } finally {
        await db?.drop();
      }
    },
  );
}

test("with the journal off a run calls through: nothing is journaled and a retry calls the model again", async () => {
  const home = tempHome();
  const model = fakeModel();
  for (let attempt = 1; attempt <= 2; attempt++) {
    const { ac } = keeper(home, { journal: false });
    const run = ac.startRun({ sessionId: "off" });
    assert.equal(run.attempt, attempt);
    assert.equal(run.journal.live, true);
    await run.journal.model({ q: 1 }, model.call({ q: 1 }));
    assert.equal(await run.journal.tool("t", {}, () => "ran"), "ran");
    assert.equal(run.journal.replayed, 0);
    await ac.close();
  }
  assert.equal(model.seen.length, 2);
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  try {
    assert.deepEqual(await store.journal.read("off"), []);
  } finally {
    await store.close();
  }
});

test("with the ledger off the journal calls through", async () => {
  const home = tempHome();
  const model = fakeModel();
  const { ac } = keeper(home, { ledger: false });
  const run = ac.startRun({ sessionId: "no-ledger" });
  assert.deepEqual(await run.journal.model({ q: 1 }, model.call({ q: 1 })), { n: 0 });
  assert.equal(run.journal.live, true);
  await run.end();
  await ac.close();
});

test("past journal_max_bytes: one log line, the run goes on unjournaled, and a retry replays what was journaled", async () => {
  const home = tempHome();
  const model = fakeModel();
  const big = (n: number) => () => {
    model.seen.push(n);
    return { text: "x".repeat(100), n };
  };
  const first = keeper(home, { journal_max_bytes: 400 });
  const a = first.ac.startRun({ sessionId: "capped" });
  for (let n = 0; n < 5; n++) assert.equal((await a.journal.model({ n }, big(n))).n, n);
  const lines = first.log.records.filter((r) => /journal_max_bytes/.test(r.message));
  assert.equal(lines.length, 1, "one log line");
  assert.match(lines[0]!.message, /at its model call 2/);
  await first.ac.close();
  assert.equal(model.seen.length, 5);

  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  try {
    const entries = await store.journal.read("capped");
    assert.deepEqual(entries.map((e) => [e.attempt, e.kind, e.index]), [
      [1, "model", 0],
      [1, "model", 1],
    ]);
  } finally {
    await store.close();
  }

  const second = keeper(home, { journal_max_bytes: 400 });
  const b = second.ac.startRun({ sessionId: "capped" });
  for (let n = 0; n < 5; n++) assert.equal((await b.journal.model({ n }, big(n))).n, n);
  assert.equal(b.journal.replayed, 2);
  assert.equal(model.seen.length, 8, "calls 2, 3 and 4 live again");
  await b.end();
  await second.ac.close();
});

test("a journal entry is committed before the response is returned, and its body is kept once", async () => {
  const home = tempHome();
  const { ac } = keeper(home);
  const run = ac.startRun({ sessionId: "durable" });
  const long = { text: "the same long answer ".repeat(500) };
  await run.journal.model({ q: 1 }, () => long, {
    usage: () => ({ inputTokens: 7, outputTokens: 3 }),
  });
  await run.journal.model({ q: 2 }, () => long);
  // Read from another connection, before anything else happens: both are there.
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  try {
    const entries = await store.journal.read("durable");
    assert.equal(entries.length, 2);
    assert.deepEqual(JSON.parse(entries[0]!.body), long);
    assert.deepEqual(JSON.parse(entries[0]!.usage!), { inputTokens: 7, outputTokens: 3 });
    assert.equal(entries[0]!.body, entries[1]!.body);
  } finally {
    await store.close();
  }
  const bodies = selectOne(
    sqliteDriver()!,
    storeFile(home),
    "SELECT count(*) AS n, sum(length(packed)) AS bytes FROM journal_bodies",
  )!;
  assert.equal(Number(bodies.n), 1, "one body for both calls");
  assert.ok(Number(bodies.bytes) < JSON.stringify(long).length / 10, `compressed: ${bodies.bytes}`);
  await run.end();
  await ac.close();
});

/**
 * Five journaled calls while the store cannot take them: they go on (the
 * first held at most a second, the rest at once: well inside one intent's
 * give-up time, where each used to wait for it), their entries wait in
 * memory and land once the store takes them again, and a retry replays all.
 */
async function storeAway(
  home: string,
  settings: Record<string, unknown>,
  away: () => void | Promise<void>,
  back: () => void | Promise<void>,
  journaled: () => Promise<number | undefined>,
) {
  const model = fakeModel();
  const first = keeperOf(home, settings);
  const a = first.ac.startRun({ sessionId: "away" });
  await a.journal.model({ q: 0 }, model.call({ q: 0 })); // the journal's tables exist
  assert.equal(await journaled(), 1);
  await away();
  const began = Date.now();
  for (let q = 1; q <= 5; q++) await a.journal.model({ q }, model.call({ q }));
  const took = Date.now() - began;
  assert.ok(took < EFFECT_GIVE_UP_MS, `5 calls with the store away took ${took} ms`);
  assert.equal(model.seen.length, 6);
  const meanwhile = await journaled(); // undefined: a server away cannot say
  if (meanwhile !== undefined) assert.equal(meanwhile, 1, "nothing committed while away");
  await back();
  let count: number | undefined = 0;
  const end = Date.now() + 60_000;
  while (((count = await journaled()) ?? 0) < 6 && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(count, 6, "the entries that waited in memory landed once the store was back");
  await first.ac.close(); // cut off

  const second = keeperOf(home, settings);
  const b = second.ac.startRun({ sessionId: "away" });
  for (let q = 0; q <= 5; q++) {
    assert.deepEqual(await b.journal.model({ q }, model.call({ q })), { n: q });
  }
  assert.equal(b.journal.replayed, 6);
  assert.equal(model.seen.length, 6, "the retry called the model for none of them");
  await b.end();
  await second.ac.close();
  return first.log;
}

test("a ledger another process holds locked: journaled calls go on, their entries wait in memory and land once it lets go", async () => {
  const home = tempHome();
  let lock: ReturnType<typeof locker> | undefined;
  const journaled = async () => {
    const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
    try {
      return (await store.journal.read("away")).length;
    } finally {
      await store.close();
    }
  };
  try {
    await storeAway(home, {}, async () => {
      lock = locker(storeFile(home), "write");
      await lock.locked;
    }, async () => {
      await lock!.release();
    }, journaled);
  } finally {
    await lock?.release();
  }
});

test(
  "postgres: a server stopped mid-run: journaled calls go on, their entries wait in memory and land once it is back",
  {
    skip: skipPrivateServer,
  },
  async () => {
    const server = privateServer(4409);
    const reader = openPgStore({ url: server.url, hostTimeoutSeconds: 30 });
    try {
      const log = await storeAway(
        tempHome(),
        { store: server.url },
        () => server.ctl("-w", "-m", "fast", "stop"),
        () => server.ctl("-w", "start"),
        async () => (await reader.journal!.read("away").catch(() => undefined))?.length,
      );
      assert.ok(
        !log.records.some((r) => /not recorded/.test(r.message)),
        log.records.map((r) => r.message).join("\n"),
      );
    } finally {
      await reader.close().catch(() => {});
      server.remove();
    }
  },
);

test("a replay of more calls than the ledger's queue holds journals every one again, and says none was lost", async () => {
  const home = tempHome();
  const n = MAX_EFFECTS_WAITING + 500;
  const first = keeperOf(home);
  const a = first.ac.startRun({ sessionId: "long" });
  // Recorded in batches that share commits (each call takes its place as it is made).
  for (let from = 0; from < n; from += 500) {
    await Promise.all(
      Array.from({ length: 500 }, (_, i) => a.journal.model({ q: from + i }, () => from + i)),
    );
  }
  await first.ac.close(); // cut off

  const second = keeperOf(home);
  const b = second.ac.startRun({ sessionId: "long" });
  for (let q = 0; q < n; q++) {
    if (await b.journal.model({ q }, () => -1) !== q) assert.fail(`call ${q} was not replayed`);
  }
  assert.equal(b.journal.replayed, n);
  await b.end();
  await second.ac.close();
  const lost = second.log.records.filter((r) => /not recorded|not journaled/.test(r.message));
  assert.deepEqual(lost.map((r) => r.message), []);
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  try {
    const again = (await store.journal.read("long")).filter((e) => e.attempt === 2);
    assert.equal(again.length, n, "the retry journaled every replayed call as its own");
    assert.ok(again.every((e) => e.replayed === 1));
  } finally {
    await store.close();
  }
});
