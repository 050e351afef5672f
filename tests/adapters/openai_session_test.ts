// deno-lint-ignore-file no-import-prefix
/**
 * The OpenAI Agents `Session` over the run store (`RunStoreSession`), on the
 * embedded store and on PostgreSQL: items in order, the last N, a pop, a
 * clear, sessions apart by id and scope, items as `MemorySession` keeps them;
 * and the SDK's own `run()` with it: a second run (in a second keeper: on
 * PostgreSQL another home, a second machine) sends the model the first run's
 * conversation.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Agent, type AgentInputItem, MemorySession, run, tool } from "npm:@openai/agents@0.x";
import { assistantMessage, functionCall, ScriptedModel } from "npm:@openai/agents@0.x/testing";
import { z } from "npm:zod@^4";
import { createAgentCheckpoint } from "../../mod.ts";
import { RunStoreSession } from "../../adapters/openai_agents.ts";
import { sqliteDriver } from "../../_sqlite.ts";
import { tempHome } from "../_helpers.ts";
import { freshSchema, skipFleet } from "../store/_pg.ts";

const say = (content: string): AgentInputItem => ({ role: "user", content });

for (
  const [where, skip] of [
    ["the embedded store", !sqliteDriver() && "no SQLite driver"],
    ["PostgreSQL", skipFleet],
  ] as const
) {
  const onPg = where === "PostgreSQL";

  test(`RunStoreSession keeps items in order, the last N, a pop and a clear on ${where}`, {
    skip,
  }, async () => {
    const db = onPg ? await freshSchema() : undefined;
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      settings: db ? { store: db.url } : {},
    });
    try {
      const session = new RunStoreSession(ac, { sessionId: "chat" });
      assert.equal(await session.getSessionId(), "chat");
      assert.deepEqual(await session.getItems(), []);
      assert.equal(await session.popItem(), undefined);
      const items: AgentInputItem[] = [
        say("one ✓"),
        {
          type: "message",
          role: "assistant",
          status: "completed",
          id: "m1",
          content: [
            { type: "output_text", text: "deux — 二 𝄞" },
          ],
        },
        {
          type: "function_call",
          callId: "c1",
          name: "look",
          arguments: '{"q":"x"}',
          status: "completed",
        },
        {
          type: "function_call_result",
          callId: "c1",
          name: "look",
          status: "completed",
          output: { type: "text", text: "found" },
        },
      ];
      await session.addItems(items.slice(0, 1));
      await session.addItems([]);
      await session.addItems(items.slice(1));
      await session.addItems([say("one ✓")]); // the same item again: kept again
      assert.deepEqual(await session.getItems(), [...items, say("one ✓")]);
      assert.deepEqual(await session.getItems(2), [items[3], say("one ✓")]);
      assert.deepEqual(await session.getItems(99), [...items, say("one ✓")]);
      assert.deepEqual(await session.getItems(0), []);

      // Apart: another id, and the same id in another scope.
      const other = new RunStoreSession(ac, { sessionId: "other" });
      const scoped = new RunStoreSession(ac, { sessionId: "chat", scope: "tenant-2" });
      await other.addItems([say("elsewhere")]);
      assert.deepEqual(await scoped.getItems(), []);
      assert.notEqual(
        await new RunStoreSession(ac).getSessionId(),
        await new RunStoreSession(ac).getSessionId(),
        "a session without an id gets one of its own",
      );

      assert.deepEqual(await session.popItem(), say("one ✓"));
      assert.deepEqual(await session.popItem(), items[3]);
      assert.deepEqual(await session.getItems(), items.slice(0, 3));

      // The same calls on the SDK's MemorySession: the same answers.
      const memory = new MemorySession({ sessionId: "m" });
      await memory.addItems([...items, say("one ✓")]);
      await memory.popItem();
      await memory.popItem();
      assert.deepEqual(await session.getItems(), await memory.getItems());
      assert.deepEqual(await session.getItems(2), await memory.getItems(2));

      await session.clearSession();
      assert.deepEqual(await session.getItems(), []);
      assert.equal(await session.popItem(), undefined);
      assert.deepEqual(await other.getItems(), [say("elsewhere")]);
      await session.addItems([say("after the clear")]);
      assert.deepEqual(await session.getItems(), [say("after the clear")]);
    } finally {
      await ac.close();
      await db?.drop();
    }
  });

  test(
    `run() with a RunStoreSession: a second run in a second keeper sees the first run's items on ${where}${
      onPg ? " (another home: a second machine)" : ""
    }`,
    { skip },
    async () => {
      const db = onPg ? await freshSchema() : undefined;
      const home = tempHome();
      const keeper = () =>
        createAgentCheckpoint({
          home: db ? tempHome() : home,
          env: {},
          settings: db ? { store: db.url } : {},
        });
      const lookups: string[] = [];
      const look = tool({
        name: "look",
        description: "Look a word up",
        parameters: z.object({ word: z.string() }),
        execute: ({ word }) => {
          lookups.push(word);
          return `${word}: a small bird`;
        },
      });
      const first = keeper();
      let second: ReturnType<typeof keeper> | undefined;
      try {
        const model1 = new ScriptedModel([
          [functionCall("look", { word: "wren" }, { callId: "c1" })],
          [assistantMessage("A wren is a small bird.")],
        ]);
        const agent1 = new Agent({ name: "a", model: model1, tools: [look] });
        const one = await run(agent1, "What is a wren?", {
          session: new RunStoreSession(first, { sessionId: "birds" }),
        });
        assert.equal(one.finalOutput, "A wren is a small bird.");
        await first.close();

        second = keeper();
        const model2 = new ScriptedModel([[assistantMessage("You asked about a wren.")]]);
        const agent2 = new Agent({ name: "a", model: model2, tools: [look] });
        const session = new RunStoreSession(second, { sessionId: "birds" });
        const two = await run(agent2, "What did I ask?", { session });
        assert.equal(two.finalOutput, "You asked about a wren.");
        // The model's one request of the second run: the first run's conversation, then the question.
        const input = model2.firstCall!.request.input as AgentInputItem[];
        const shown = input.map((item) =>
          "role" in item
            ? `${item.role}: ${
              typeof item.content === "string"
                ? item.content
                : (item.content as { text?: string }[]).map((c) => c.text).join("")
            }`
            : item.type
        );
        assert.deepEqual(shown, [
          "user: What is a wren?",
          "function_call",
          "function_call_result",
          "assistant: A wren is a small bird.",
          "user: What did I ask?",
        ]);
        assert.deepEqual(lookups, ["wren"], "the tool ran once, in the first run");
        const kept = await session.getItems();
        assert.equal(kept.length, 6);
        assert.deepEqual(kept.slice(-2).map((i) => "role" in i ? i.role : i.type), [
          "user",
          "assistant",
        ]);
      } finally {
        await first.close();
        await second?.close();
        await db?.drop();
      }
    },
  );
}
