// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * A task picked up twice, with the default settings: while one attempt of a
 * run id is live, an adapter given that run id does not call its framework.
 * It throws `RunRefusedError`, naming the holder, and the model is called 0
 * times. One test per framework.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as path from "node:path";
import process from "node:process";
import * as ai6 from "npm:ai@6.0.326";
import { MockLanguageModelV3 } from "npm:ai@6.0.326/test";
import { Agent, setTracingDisabled } from "npm:@openai/agents@0.x";
import { assistantMessage, modelResponder, ScriptedModel } from "npm:@openai/agents@0.x/testing";
import { createAgent } from "npm:langchain@1";
import { AIMessage } from "npm:@langchain/core@1/messages";
import { type AgentCheckpoint, createAgentCheckpoint, RunRefusedError } from "../../mod.ts";
import { checkpointed, RunRefusedError as FromAiSdk } from "../../adapters/ai_sdk.ts";
import { checkpointedRun, RunRefusedError as FromOpenAI } from "../../adapters/openai_agents.ts";
import {
  checkpointedQuery,
  RunRefusedError as FromClaude,
} from "../../adapters/claude_agent_sdk.ts";
import {
  agentCheckpointMiddleware,
  checkpointedReactAgent,
  RunRefusedError as FromLangChain,
  stepsForCreateAgent,
} from "../../adapters/langchain.ts";
import { claudeOffline, startMessagesServer } from "../fixtures/messages_server.ts";
import { ScriptedChatModel } from "./_langchain_fake.ts";
import { captureLog, tempHome } from "../_helpers.ts";

setTracingDisabled(true);

/**
 * Two library instances on one home, with the default settings: the first
 * holds `runId` (a live attempt); the second is the task's second pickup.
 */
function pickedUpTwice(runId: string) {
  const home = tempHome();
  const make = () =>
    createAgentCheckpoint({
      home,
      env: {},
      logger: captureLog().logger,
      settings: { checkpoint_dir: path.join(home, "checkpoints") },
    });
  const first = make();
  const holder = first.startRun({ sessionId: runId });
  assert.equal(holder.refused, undefined, "the first pickup runs");
  const second = make();
  return {
    second,
    /** The error the second pickup threw is the holder's, named. */
    check(thrown: unknown) {
      assert.ok(thrown instanceof RunRefusedError, `a RunRefusedError, got ${String(thrown)}`);
      assert.equal(thrown.refused.host.pid, process.pid);
      assert.equal(thrown.refused.attempt, holder.attempt);
      assert.match(
        thrown.message,
        new RegExp(
          `run id ${runId} is held by attempt 1 on \\S+ \\(pid ${process.pid}\\) since \\d{4}-`,
        ),
      );
      assert.match(
        thrown.message,
        /lease frees when that attempt ends or its process dies, at the latest by \d{4}-/,
      );
    },
    async close() {
      await holder.end();
      await first.close();
      await second.close();
    },
  };
}

/** Call `fn`, sync or async, and return what it threw. */
async function thrownBy(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

test("every adapter exports the one RunRefusedError", () => {
  for (const e of [FromAiSdk, FromOpenAI, FromClaude, FromLangChain]) {
    assert.equal(e, RunRefusedError);
  }
});

test("AI SDK: a refused run makes 0 model calls and throws RunRefusedError", async () => {
  const two = pickedUpTwice("twice-ai-sdk");
  let calls = 0;
  const model = new MockLanguageModelV3({
    doGenerate: () => {
      calls++;
      return Promise.resolve({
        content: [{ type: "text", text: "done" }],
        finishReason: { unified: "stop", raw: "stop" },
        usage: {
          inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
          outputTokens: { total: 1, text: 1, reasoning: 0 },
        },
        warnings: [],
      });
    },
  });
  const thrown = await thrownBy(async () => {
    const cp = checkpointed(two.second as AgentCheckpoint, {
      sessionId: "twice-ai-sdk",
      maxSteps: 4,
      ai: ai6,
    });
    await cp.generateText({ model, prompt: "Go" });
  });
  two.check(thrown);
  assert.equal(calls, 0);
  await two.close();
});

test("OpenAI Agents: a refused run makes 0 model calls and throws RunRefusedError", async () => {
  const two = pickedUpTwice("twice-openai");
  const model = new ScriptedModel([modelResponder(() => [assistantMessage("done")])]);
  const agent = new Agent({ name: "a", instructions: "Be brief.", model });
  const thrown = await thrownBy(() =>
    checkpointedRun(two.second, { sessionId: "twice-openai", maxTurns: 4 }, agent, "Go")
  );
  two.check(thrown);
  assert.equal(model.calls.length, 0);
  await two.close();
});

test("LangChain createAgent: a refused run makes 0 model calls and throws RunRefusedError", async () => {
  const two = pickedUpTwice("twice-createagent");
  const model = new ScriptedChatModel(() => new AIMessage("done"));
  const agent = createAgent({
    model,
    tools: [],
    middleware: [agentCheckpointMiddleware(two.second, { maxTurns: 4 })],
  });
  const thrown = await thrownBy(() =>
    agent.invoke({ messages: [{ role: "user", content: "Go" }] }, {
      configurable: { thread_id: "twice-createagent" },
      recursionLimit: stepsForCreateAgent(4),
    })
  );
  two.check(thrown);
  assert.equal(model.received.length, 0);
  await two.close();
});

test("LangGraph createReactAgent: a refused run makes 0 model calls and throws RunRefusedError", async () => {
  const two = pickedUpTwice("twice-react");
  const model = new ScriptedChatModel(() => new AIMessage("done"));
  const agent = checkpointedReactAgent(two.second, { sessionId: "twice-react", maxTurns: 4 }, {
    llm: model,
    tools: [],
  });
  const thrown = await thrownBy(() =>
    agent.invoke({ messages: [{ role: "user", content: "Go" }] })
  );
  two.check(thrown);
  assert.equal(model.received.length, 0);
  await two.close();
});

test("Claude Agent SDK: a refused run makes 0 model calls and throws RunRefusedError", async () => {
  const two = pickedUpTwice("twice-claude");
  const server = await startMessagesServer(() => ({ text: "done" }));
  const cwd = tempHome();
  try {
    const thrown = await thrownBy(async () => {
      const q = checkpointedQuery(two.second, { sessionId: "twice-claude", maxTurns: 4 }, {
        prompt: "Go",
        options: claudeOffline(server, cwd),
      });
      for await (const _ of q) { /* drained */ }
    });
    two.check(thrown);
    assert.equal(server.requests.length, 0);
  } finally {
    await server.close();
    await two.close();
  }
});
