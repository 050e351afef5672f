// deno-lint-ignore-file no-import-prefix
/**
 * The Claude Agent SDK's `SessionStore` over the run store
 * (`RunStoreSessionStore`), against its documented contract on the embedded
 * store and on PostgreSQL: entries read back deep-equal and in order (nested
 * JSON, unicode), null for a key never written, a uuid kept once and entries
 * without one always kept, subagent transcripts apart and listed, deletes of
 * one subpath or the whole session, listings with write times; and a
 * transcript appended by one process read by another (on PostgreSQL, from
 * another home: a second machine), and the other way round. The SDK's own
 * session functions work through it: a local transcript imported (twice: kept
 * once), its messages read, the session listed, renamed and deleted.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  deleteSession,
  getSessionMessages,
  importSessionToStore,
  listSessions,
  renameSession,
  type SessionStoreEntry,
} from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { createAgentCheckpoint } from "../../mod.ts";
import { RunStoreSessionStore } from "../../adapters/claude_agent_sdk.ts";
import { sqliteDriver } from "../../_sqlite.ts";
import { fixture, runScript, tempHome } from "../_helpers.ts";
import { freshSchema, skipFleet } from "../store/_pg.ts";

/** A transcript as the CLI writes one: messages with uuids, and lines without (a title, a tag). */
const transcript = (prefix: string): SessionStoreEntry[] => [
  {
    type: "user",
    uuid: `${prefix}-1`,
    timestamp: "2026-12-04T10:00:00.000Z",
    sessionId: "s",
    message: { role: "user", content: "Réparer les tests ✓ — 修复测试 𝄞" },
  },
  {
    type: "assistant",
    uuid: `${prefix}-2`,
    parentUuid: `${prefix}-1`,
    message: {
      role: "assistant",
      content: [
        { type: "text", text: 'Running them.\n"quoted"\t\\' },
        { type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "npm test", n: 1.5 } },
      ],
      usage: { input_tokens: 12, output_tokens: 3, cache: null },
    },
    isSidechain: false,
  },
  { type: "custom-title", customTitle: "fix the tests", sessionId: "s" },
  { type: "tag", tag: "" },
];

for (
  const [where, skip] of [
    ["the embedded store", !sqliteDriver() && "no SQLite driver"],
    ["PostgreSQL", skipFleet],
  ] as const
) {
  const onPg = where === "PostgreSQL";

  test(`RunStoreSessionStore keeps the SessionStore contract on ${where}`, { skip }, async () => {
    const db = onPg ? await freshSchema() : undefined;
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      settings: db ? { store: db.url } : {},
    });
    try {
      const store = new RunStoreSessionStore(ac);
      const main = { projectKey: "-work-app", sessionId: "s" };
      const sub = { ...main, subpath: "subagents/agent-a1" };
      assert.equal(await store.load(main), null, "never written: null");
      assert.deepEqual(await store.listSessions("-work-app"), []);
      assert.deepEqual(await store.listSubkeys(main), []);

      const before = Date.now();
      const entries = transcript("m");
      await store.append(main, entries.slice(0, 2));
      await store.append(main, entries.slice(2));
      assert.deepEqual(await store.load(main), entries, "deep-equal, in the order appended");

      // A retry of a batch: the entries with a uuid are kept once, those without again.
      await store.append(main, entries);
      assert.deepEqual(await store.load(main), [...entries, ...entries.slice(2)]);
      // A uuid repeated within one batch: the first kept.
      await store.append(main, [{ type: "user", uuid: "new" }, {
        type: "user",
        uuid: "new",
        x: 1,
      }]);
      const kept = (await store.load(main))!;
      assert.deepEqual(kept.at(-1), { type: "user", uuid: "new" });
      assert.equal(kept.length, 7);

      // A subagent's transcript: apart from the main one, and listed.
      await store.append(sub, transcript("a"));
      await store.append({ ...main, subpath: "subagents/agent-b2" }, [{ type: "user" }]);
      assert.deepEqual(await store.load(sub), transcript("a"));
      assert.equal((await store.load(main))!.length, 7);
      assert.deepEqual((await store.listSubkeys(main)).sort(), [
        "subagents/agent-a1",
        "subagents/agent-b2",
      ]);

      // Another session and another project.
      await store.append({ projectKey: "-work-app", sessionId: "t" }, [{ type: "user" }]);
      await store.append({ projectKey: "-other", sessionId: "s" }, [{ type: "user" }]);
      const listed = await store.listSessions("-work-app");
      assert.deepEqual(listed.map((s) => s.sessionId).sort(), ["s", "t"]);
      for (const s of listed) {
        assert.ok(Number.isInteger(s.mtime), "mtime: integer ms");
        assert.ok(s.mtime >= before - 1 && s.mtime <= Date.now() + 1, "mtime: when it was written");
      }

      // A subpath deleted alone; then the session with every subpath; others untouched.
      await store.delete(sub);
      assert.equal(await store.load(sub), null);
      assert.equal((await store.load(main))!.length, 7);
      assert.deepEqual(await store.listSubkeys(main), ["subagents/agent-b2"]);
      await store.delete(main);
      assert.equal(await store.load(main), null);
      assert.equal(await store.load({ ...main, subpath: "subagents/agent-b2" }), null);
      assert.deepEqual(await store.listSubkeys(main), []);
      assert.deepEqual((await store.listSessions("-work-app")).map((s) => s.sessionId), ["t"]);
      assert.deepEqual(await store.load({ projectKey: "-other", sessionId: "s" }), [
        { type: "user" },
      ]);
    } finally {
      await ac.close();
      await db?.drop();
    }
  });

  test(`the SDK's own session functions work through RunStoreSessionStore on ${where}`, {
    skip,
  }, async () => {
    const db = onPg ? await freshSchema() : undefined;
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      settings: db ? { store: db.url } : {},
    });
    // A local transcript as the CLI keeps it, under a config dir of the test's own.
    const config = tempHome();
    const dir = "/work/app";
    const sid = "11111111-1111-4111-8111-111111111111";
    const line = (uuid: string, parentUuid: string | null, role: string, content: unknown) => ({
      type: role,
      uuid,
      parentUuid,
      sessionId: sid,
      timestamp: "2026-12-04T10:00:00.000Z",
      cwd: dir,
      message: { role, content },
      isSidechain: false,
      userType: "external",
      version: "2.0.0",
    });
    const lines = [
      line("aaaaaaaa-1111-4111-8111-111111111111", null, "user", "Fix the tests ✓"),
      line(
        "bbbbbbbb-1111-4111-8111-111111111111",
        "aaaaaaaa-1111-4111-8111-111111111111",
        "assistant",
        [
          { type: "text", text: "Done: 修复" },
        ],
      ),
    ];
    fs.mkdirSync(path.join(config, "projects", "-work-app"), { recursive: true });
    fs.writeFileSync(
      path.join(config, "projects", "-work-app", `${sid}.jsonl`),
      lines.map((l) => JSON.stringify(l)).join("\n") + "\n",
    );
    const was = process.env.CLAUDE_CONFIG_DIR;
    process.env.CLAUDE_CONFIG_DIR = config;
    try {
      const sessionStore = new RunStoreSessionStore(ac);
      await importSessionToStore(sid, sessionStore, { dir });
      await importSessionToStore(sid, sessionStore, { dir }); // a replay: its uuids kept once
      const key = { projectKey: "-work-app", sessionId: sid };
      assert.deepEqual(await sessionStore.load(key), lines);
      const messages = await getSessionMessages(sid, { dir, sessionStore });
      assert.deepEqual(messages.map((m) => [m.type, m.uuid, m.message]), [
        ["user", lines[0]!.uuid, lines[0]!.message],
        ["assistant", lines[1]!.uuid, lines[1]!.message],
      ]);
      await renameSession(sid, "tests fixed", { dir, sessionStore });
      const [listed] = await listSessions({ dir, sessionStore });
      assert.equal(listed?.sessionId, sid);
      assert.equal(listed?.customTitle, "tests fixed");
      assert.equal(listed?.firstPrompt, "Fix the tests ✓");
      await deleteSession(sid, { dir, sessionStore });
      assert.deepEqual(await listSessions({ dir, sessionStore }), []);
      assert.equal(await sessionStore.load(key), null);
    } finally {
      if (was === undefined) delete process.env.CLAUDE_CONFIG_DIR;
      else process.env.CLAUDE_CONFIG_DIR = was;
      await ac.close();
      await db?.drop();
    }
  });

  test(
    `a transcript appended in one process is loaded in another on ${where}${
      onPg ? " (another home: a second machine)" : ""
    }`,
    { skip },
    async () => {
      const db = onPg ? await freshSchema() : undefined;
      const home = tempHome();
      const url = db?.url ?? "";
      const key = { projectKey: "-srv-agent", sessionId: "resume-me" };
      const ac = createAgentCheckpoint({
        home: db ? tempHome() : home,
        env: {},
        settings: db ? { store: db.url } : {},
      });
      try {
        const theirs = transcript("p");
        const appended = await runScript(fixture("session_store_peer"), [
          home,
          url,
          "append",
          JSON.stringify(key),
          JSON.stringify(theirs),
        ], { timeoutMs: 120_000 });
        assert.equal(appended.code, 0, appended.stderr);
        assert.match(appended.stdout, /APPENDED/);
        const store = new RunStoreSessionStore(ac);
        assert.deepEqual(await store.load(key), theirs, "this process loads what the other kept");

        const mine = [{ type: "assistant", uuid: "here", message: { content: "from here ✓" } }];
        // The peer's messages again (their uuids: kept once), then one of this process.
        await store.append(key, [theirs[0]!, theirs[1]!, ...mine]);
        const loaded = await runScript(fixture("session_store_peer"), [
          home,
          url,
          "load",
          JSON.stringify(key),
        ], { timeoutMs: 120_000 });
        assert.equal(loaded.code, 0, loaded.stderr);
        assert.deepEqual(JSON.parse(loaded.stdout.trim().split("\n").at(-1)!), [
          ...theirs,
          ...mine,
        ]);
      } finally {
        await ac.close();
        await db?.drop();
      }
    },
  );
}
