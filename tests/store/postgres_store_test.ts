// The fleet store's backend against the real server: its schema, its starts under many
// connections at once, the same answers as the embedded store, and the command line over it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { admin, freshSchema, skipFleet } from "./_pg.ts";
import { openPgStore, PG_SCHEMA_VERSION, type PgRunStore } from "../../store/postgres.ts";
import type { HostId, RunRecord } from "../../store/types.ts";
import { thisHost } from "../../store/_host.ts";
import { tempHome } from "../_helpers.ts";
import { auditCommand, lsCommand, showCommand } from "../../cli/_checkpoints.ts";
import { memoryIo } from "../../cli/_io.ts";

const record = (runId: string, host: HostId, at: number, extra: Partial<RunRecord> = {}) => ({
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

test("many processes opening one new schema at once: created once, versioned", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const stores = Array.from(
    { length: 8 },
    () => openPgStore({ url: db.url, hostTimeoutSeconds: 30 }),
  );
  try {
    await Promise.all(stores.map((s) => s.ping()));
    const sql = await admin();
    try {
      const rows = await sql.unsafe(`SELECT value FROM "${db.schema}".meta WHERE key = 'schema'`);
      assert.deepEqual(rows.map((r) => Number(r.value)), [PG_SCHEMA_VERSION]);
      // A schema from a newer library is left alone, and said so.
      await sql.unsafe(`UPDATE "${db.schema}".meta SET value = '99' WHERE key = 'schema'`);
    } finally {
      await sql.end({ timeout: 1 });
    }
    const later = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
    await assert.rejects(later.ping(), /schema version 99, newer than this library's/);
    await later.close();
  } finally {
    await Promise.all(stores.map((s) => s.close()));
    await db.drop();
  }
});

test("starts of one run id over many connections at once get distinct attempts, one newest", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const stores = Array.from(
    { length: 10 },
    () => openPgStore({ url: db.url, hostTimeoutSeconds: 30 }),
  );
  try {
    await stores[0]!.ping();
    const now = Date.now();
    const started = await Promise.all(
      stores.map((s, i) =>
        s.startAttempt(record("kanban-9", { machine: `m${i}`, pid: 100 + i, start: "" }, now), {
          heartbeat: {
            host: { machine: `m${i}`, pid: 100 + i, start: "" },
            at: now,
            intervalSeconds: 1,
          },
        })
      ),
    );
    assert.deepEqual(started.map((s) => s.attempt).sort((a, b) => a - b), [
      1,
      2,
      3,
      4,
      5,
      6,
      7,
      8,
      9,
      10,
    ]);
    // Each start but the first was told of the one before it, live on its machine.
    for (const s of started) {
      if (s.attempt === 1) assert.equal(s.previous, undefined);
      else {
        assert.equal(s.previous?.record.attempt, s.attempt - 1);
        assert.equal(s.previous?.state, "live");
      }
    }
    const all = await stores[0]!.list({ runId: "kanban-9" });
    assert.equal(all.length, 10);
    assert.equal((await stores[0]!.list()).length, 1);
    assert.equal((await stores[0]!.latest("kanban-9"))?.record.attempt, 10);
  } finally {
    await Promise.all(stores.map((s) => s.close()));
    await db.drop();
  }
});

// The same answers as the embedded store (and the in-memory one): the store's contract,
// tests/store/contract_test.ts.

test("file content is kept, bounded by store_file_max_kb, and an end never undone across batches", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const store: PgRunStore = openPgStore({ url: db.url, hostTimeoutSeconds: 30, fileMaxKb: 4 });
  try {
    const me = thisHost();
    const t = Date.now();
    await store.startAttempt(record("f", me, t));
    await store.write({
      records: [record("f", me, t, { fileContent: "small\n", updatedAt: t + 1 })],
    });
    assert.equal(await store.fileContent("f", 1), "small\n");
    // A record without content leaves the content stored before.
    await store.write({ records: [record("f", me, t, { turnsUsed: 2, updatedAt: t + 2 })] });
    assert.equal(await store.fileContent("f", 1), "small\n");
    await store.writeFiles(me, [{
      runId: "f",
      content: "line of the agent's text\n".repeat(1000),
    }]);
    const big = await store.fileContent("f", 1);
    assert.ok(new TextEncoder().encode(big!).length <= 4096);
    assert.match(big!, /cut at 4 KiB/);
    await store.write({
      records: [
        record("f", me, t, {
          status: "aborted",
          end: { status: "aborted", at: t + 3 },
          updatedAt: t + 3,
        }),
      ],
    });
    await store.write({ records: [record("f", me, t, { turnsUsed: 5, updatedAt: t + 4 })] });
    const view = await store.latest("f");
    assert.equal(view?.record.status, "aborted");
    assert.equal(view?.state, "ended");
  } finally {
    await store.close();
    await db.drop();
  }
});

test("ls, audit and show read the fleet store with --store and filter by --host", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
  try {
    const t = Date.now();
    const hosts = ["ci-runner-1", "ci-runner-2"].map((machine, i) => ({
      machine,
      pid: 500 + i,
      start: "",
    }));
    for (const [i, host] of hosts.entries()) {
      await store.startAttempt(record(`job-${i}`, host, t), {
        heartbeat: { host, at: t, intervalSeconds: 1 },
      });
      // An earlier process of that machine, long gone.
      await store.startAttempt(record(`old-${i}`, { ...host, pid: 900 + i }, t - 3_600_000));
    }
    await store.write({
      records: [
        record("job-1", hosts[1]!, t, {
          status: "done",
          end: { status: "done", at: t + 5 },
          updatedAt: t + 5,
        }),
      ],
    });
    const home = tempHome();
    const ls = memoryIo();
    assert.equal(
      await lsCommand.run(
        ["--home", home, "--store", db.url, "--host", "ci-runner-1", "--json"],
        ls.io,
      ),
      0,
    );
    const listed = JSON.parse(ls.stdout()) as { runs: { runId: string; state: string }[] };
    assert.deepEqual(listed.runs.map((r) => [r.runId, r.state]).sort(), [
      ["job-0", "live"],
      ["old-0", "cut-off"],
    ]);
    const audit = memoryIo();
    assert.equal(await auditCommand.run(["--home", home, "--store", db.url], audit.io), 0);
    assert.match(audit.stdout(), /on ci-runner-1\s+live 1 · ended 0 · cut off 1/);
    assert.match(audit.stdout(), /on ci-runner-2\s+live 0 · ended 1 · cut off 1/);
    const one = memoryIo();
    assert.equal(
      await auditCommand.run(
        ["--home", home, "--store", db.url, "--host", "ci-runner-2", "--json"],
        one.io,
      ),
      0,
    );
    const summary = JSON.parse(one.stdout());
    assert.equal(summary.total, 2);
    assert.deepEqual(Object.keys(summary.byMachine), ["ci-runner-2"]);
    // The setting (here from the environment) names the store when --store is not given.
    const show = memoryIo({ env: { AGENT_CHECKPOINT_STORE: db.url } });
    assert.equal(await showCommand.run(["job-0", "--home", home], show.io), 0);
    assert.match(show.stdout(), /Run job-0: live/);
    assert.match(show.stdout(), /ci-runner-1, pid 500/);
    // A run whose file is on another machine: shown as the store keeps it.
    await store.writeFiles(hosts[0]!, [{ runId: "job-0", content: "## Agent notes\nhalfway\n" }]);
    const elsewhere = memoryIo();
    assert.equal(
      await showCommand.run(["job-0", "--home", home, "--store", db.url], elsewhere.io),
      0,
    );
    assert.match(elsewhere.stdout(), /as the fleet store keeps it; written on ci-runner-1/);
    assert.match(elsewhere.stdout(), /## Agent notes\nhalfway/);
    const bad = memoryIo();
    await assert.rejects(
      lsCommand.run(["--home", home, "--store", "mysql://x"], bad.io),
      /--store takes a postgres:\/\/ URL/,
    );
  } finally {
    await store.close();
    await db.drop();
  }
});

test("a schema of version 1 is brought up to the current one on open and keeps its runs", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  const first = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
  const now = Date.now();
  try {
    await first.write({
      records: [
        record("kept", thisHost(), now, { status: "failed", end: { status: "failed", at: now } }),
      ],
    });
  } finally {
    await first.close();
  }
  const sql = await admin();
  try {
    // Version 1 is version 2 without the index that counts runs by status and machine.
    await sql.unsafe(`DROP INDEX "${db.schema}".runs_state`);
    await sql.unsafe(`UPDATE "${db.schema}".meta SET value = '1' WHERE key = 'schema'`);
    const stores = Array.from(
      { length: 4 },
      () => openPgStore({ url: db.url, hostTimeoutSeconds: 30 }),
    );
    try {
      const summaries = await Promise.all(stores.map((s) => s.summary()));
      for (const summary of summaries) assert.deepEqual(summary.byEnd, { failed: 1 });
      assert.equal((await stores[0]!.latest("kept"))?.record.status, "failed");
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
    const version = await sql.unsafe(`SELECT value FROM "${db.schema}".meta WHERE key = 'schema'`);
    assert.deepEqual(version.map((r) => Number(r.value)), [PG_SCHEMA_VERSION]);
    const index = await sql.unsafe(
      `SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'runs_state'`,
      [db.schema],
    );
    assert.equal(index.length, 1);
  } finally {
    await sql.end({ timeout: 1 });
    await db.drop();
  }
});

test(
  "a schema of version 4 whose journal table lacks replayed and ms gets them on open; its rows still read",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    const entry = {
      runId: "j",
      attempt: 1,
      kind: "model" as const,
      index: 0,
      key: "k",
      body: '{"text":"hi"}',
      at: Date.now(),
    };
    const first = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
    try {
      await first.journal.write({ entries: [entry] });
    } finally {
      await first.close();
    }
    const sql = await admin();
    try {
      // Version 4's journal table: no replayed, no ms.
      await sql.unsafe(`ALTER TABLE "${db.schema}".journal DROP COLUMN replayed, DROP COLUMN ms`);
      await sql.unsafe(`UPDATE "${db.schema}".meta SET value = '4' WHERE key = 'schema'`);
      const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
      try {
        assert.deepEqual(
          (await store.journal.read("j")).map((e) => [e.body, e.replayed, e.ms]),
          [['{"text":"hi"}', undefined, undefined]],
        );
        const columns = await sql.unsafe(
          `SELECT column_name FROM information_schema.columns
          WHERE table_schema = $1 AND table_name = 'journal' AND column_name IN ('replayed', 'ms')`,
          [db.schema],
        );
        assert.equal(columns.length, 2);
        await store.journal.write({ entries: [{ ...entry, attempt: 2, replayed: 1 }] });
        assert.deepEqual((await store.journal.read("j")).map((e) => [e.attempt, e.replayed]), [
          [1, undefined],
          [2, 1],
        ]);
      } finally {
        await store.close();
      }
      const version = await sql.unsafe(
        `SELECT value FROM "${db.schema}".meta WHERE key = 'schema'`,
      );
      assert.deepEqual(version.map((r) => Number(r.value)), [PG_SCHEMA_VERSION]);
    } finally {
      await sql.end({ timeout: 1 });
      await db.drop();
    }
  },
);
