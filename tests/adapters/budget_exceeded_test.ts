// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * One outcome for a run an enforced cap stopped, in every adapter, streamed or
 * not: a `BudgetExceededError` with the run's totals, thrown after at most the
 * one model call in flight, against each framework's own offline model
 * answering at once.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as ai5 from "npm:ai@5.0.277";
import { MockLanguageModelV2 } from "npm:ai@5.0.277/test";
import * as ai6 from "npm:ai@6.0.326";
import { MockLanguageModelV3 } from "npm:ai@6.0.326/test";
import * as ai7 from "npm:ai@7.0.173";
import { MockLanguageModelV4 } from "npm:ai@7.0.173/test";
import { BudgetExceededError, createAgentCheckpoint } from "../../mod.ts";
import * as aiAdapter from "../../adapters/ai_sdk.ts";
import { Agent, setTracingDisabled, tool as oaTool, Usage } from "npm:@openai/agents@0.x";
import { functionCall, modelResponder, ScriptedModel } from "npm:@openai/agents@0.x/testing";
import * as oaAdapter from "../../adapters/openai_agents.ts";
import { createAgent } from "npm:langchain@1";
import { tool as lcTool } from "npm:@langchain/core@1/tools";
import { AIMessage } from "npm:@langchain/core@1/messages";
import * as lcAdapter from "../../adapters/langchain.ts";
import { ScriptedChatModel } from "./_langchain_fake.ts";
import {
  createSdkMcpServer,
  type Options,
  tool as claudeTool,
} from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import * as claudeAdapter from "../../adapters/claude_agent_sdk.ts";
import {
  claudeOffline,
  type MessagesServer,
  startMessagesServer,
} from "../fixtures/messages_server.ts";
import { parseRecord } from "../../_record.ts";
import * as path from "node:path";
import { checkpointFileName } from "../../persist.ts";
import { tempHome } from "../_helpers.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

setTracingDisabled(true); // offline: no trace exporter

/** A session's checkpoint file, for a run the host never got back. */
const fileOf = (ac: ReturnType<typeof createAgentCheckpoint>, sessionId: string): string =>
  path.join(ac.settings.checkpoint_dir, checkpointFileName(sessionId));

/** 1,000 tokens a call against an enforced cap of 3,500: the 4th call passes it. */
const SETTINGS = { watchdog: false, enforce: ["tokens"] };
const TOKENS = 3_500;
const PASSED_AT = 4;

/** What every adapter's capped run must show. */
function assertCapped(error: unknown, calls: number, file: string): void {
  assert.ok(error instanceof BudgetExceededError, `a BudgetExceededError, got ${error}`);
  assert.equal(error.axis, "tokens");
  assert.equal(error.cap, TOKENS);
  assert.ok(error.totals.inputTokens + error.totals.outputTokens >= TOKENS);
  console.log(`model calls: ${calls}, the cap passed at call ${PASSED_AT}`);
  assert.ok(calls <= PASSED_AT + 1, `model calls: ${calls}, the cap passed at ${PASSED_AT}`);
  assert.ok(calls >= PASSED_AT, `model calls: ${calls}`);
  const r = parseRecord(fs.readFileSync(file))!;
  assert.equal(r.end?.status, "capped");
}

// ---------------------------------------------------------------------------
// AI SDK

const VERSIONS = [
  { name: "ai v5", ai: ai5 as Any, Mock: MockLanguageModelV2 as Any, nested: false },
  { name: "ai v6", ai: ai6 as Any, Mock: MockLanguageModelV3 as Any, nested: true },
  { name: "ai v7", ai: ai7 as Any, Mock: MockLanguageModelV4 as Any, nested: true },
];
type Version = typeof VERSIONS[number];

const usageOf = (v: Version, input: number, output: number) =>
  v.nested
    ? {
      inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: output, text: output, reasoning: 0 },
    }
    : { inputTokens: input, outputTokens: output, totalTokens: input + output };

/** A mock model that always asks for the tool `look`: 1,000 tokens a call. */
function aiModel(v: Version): { model: Any; calls: () => number } {
  let n = 0;
  const finish = v.nested ? { unified: "tool-calls", raw: "tool_use" } : "tool-calls";
  const model = new v.Mock({
    doGenerate: () => {
      const i = n++;
      return Promise.resolve({
        content: [{ type: "tool-call", toolCallId: `c${i}`, toolName: "look", input: "{}" }],
        finishReason: finish,
        usage: usageOf(v, 600, 400),
        warnings: [],
      });
    },
    doStream: () => {
      const i = n++;
      const stream = new ReadableStream({
        start(controller) {
          controller.enqueue({ type: "stream-start", warnings: [] });
          controller.enqueue({
            type: "tool-call",
            toolCallId: `c${i}`,
            toolName: "look",
            input: "{}",
          });
          controller.enqueue({ type: "finish", finishReason: finish, usage: usageOf(v, 600, 400) });
          controller.close();
        },
      });
      return Promise.resolve({ stream });
    },
  });
  return { model, calls: () => n };
}

for (const v of VERSIONS) {
  for (const mode of ["generateText", "streamText"] as const) {
    test(`${v.name} ${mode}: a run an enforced cap stops rejects with BudgetExceededError, its steps so far, within the call in flight`, async () => {
      const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
      const { model, calls } = aiModel(v);
      const cp = aiAdapter.checkpointed(ac, {
        sessionId: "capped",
        maxSteps: 20,
        tokens: TOKENS,
        ai: v.ai,
      });
      const params = {
        model,
        tools: { look: { inputSchema: v.ai.jsonSchema({ type: "object" }), execute: () => "ok" } },
        prompt: "Go",
      };
      let error: unknown;
      try {
        if (mode === "generateText") await cp.generateText(params);
        else {
          const result = cp.streamText(params);
          for await (const _ of result.fullStream) { /* the host reads the stream */ }
          await result.steps;
        }
      } catch (e) {
        error = e;
      }
      assertCapped(error, calls(), cp.run.checkpointFile);
      assert.ok(
        aiAdapter.BudgetExceededError === BudgetExceededError,
        "re-exported by the adapter",
      );
      const steps = (error as BudgetExceededError).steps;
      assert.ok(Array.isArray(steps) && steps.length >= PASSED_AT - 1, "the steps so far");
      await ac.close();
    });
  }
}

// ---------------------------------------------------------------------------
// OpenAI Agents

function oaScripted(): { model: Any; calls: () => number } {
  let n = 0;
  const model = new ScriptedModel(
    Array.from({ length: 20 }, (_, i) =>
      modelResponder(() => {
        n++;
        return {
          output: [functionCall("search", { q: `q${i}` }, { callId: `call_${i}` })],
          usage: new Usage({ requests: 1, inputTokens: 600, outputTokens: 400, totalTokens: 1000 }),
        };
      })),
  );
  return { model, calls: () => n };
}

const search = oaTool({
  name: "search",
  description: "Search the notes.",
  parameters: {
    type: "object" as const,
    properties: { q: { type: "string" } },
    required: ["q"],
    additionalProperties: false as const,
  },
  strict: true,
  execute: () => "found",
});

for (const stream of [false, true]) {
  test(`openai-agents ${stream ? "streamed " : ""}run: a run an enforced cap stops rejects with BudgetExceededError within the call in flight`, async () => {
    const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
    const { model, calls } = oaScripted();
    const agent = new Agent({ name: "a", model, tools: [search] });
    const init = { sessionId: `oa-capped-${stream}`, maxTurns: 20, tokens: TOKENS };
    let error: unknown;
    let file = "";
    try {
      if (stream) {
        const result = await oaAdapter.checkpointedRun(ac, init, agent, "Go", { stream: true });
        file = result.run.checkpointFile;
        for await (const _ of result) { /* the host reads the stream */ }
        await result.completed;
      } else await oaAdapter.checkpointedRun(ac, init, agent, "Go");
    } catch (e) {
      error = e;
    }
    assertCapped(error, calls(), file || fileOf(ac, init.sessionId));
    assert.ok(oaAdapter.BudgetExceededError === BudgetExceededError, "re-exported by the adapter");
    await ac.close();
  });
}

// ---------------------------------------------------------------------------
// LangChain createAgent and LangGraph createReactAgent

const lcSearch = lcTool(() => "found", {
  name: "search",
  description: "Search.",
  schema: { type: "object" as const, properties: { q: { type: "string" } } },
});

/** A tool call on every call: 1,000 tokens a call. */
const lcModel = () =>
  new ScriptedChatModel((call) =>
    new AIMessage({
      content: "",
      tool_calls: [{
        id: `call_${call}`,
        name: "search",
        args: { q: `q${call}` },
        type: "tool_call",
      }],
      usage_metadata: { input_tokens: 600, output_tokens: 400, total_tokens: 1000 },
    } as never)
  );

test("langchain createAgent: a run an enforced cap stops rejects with BudgetExceededError (as the cause of LangChain's MiddlewareError) within the call in flight", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  const model = lcModel();
  const checkpoint = lcAdapter.agentCheckpointMiddleware(ac, { maxTurns: 20, tokens: TOKENS });
  const agent = createAgent({ model, tools: [lcSearch], middleware: [checkpoint] });
  let error: unknown;
  try {
    await agent.invoke(
      { messages: [{ role: "user", content: "Go" }] },
      checkpoint.withRecursionLimit({ configurable: { thread_id: "lc-capped" } }),
    );
  } catch (e) {
    error = e;
  }
  // createAgent wraps whatever a middleware throws; the error names itself and carries ours.
  assert.equal((error as Error)?.name, "BudgetExceededError");
  assertCapped(BudgetExceededError.of(error), model.received.length, fileOf(ac, "lc-capped"));
  assert.ok(lcAdapter.BudgetExceededError === BudgetExceededError, "re-exported by the adapter");
  await ac.close();
});

for (const mode of ["invoke", "stream"] as const) {
  test(`langgraph createReactAgent ${mode}: a run an enforced cap stops rejects with BudgetExceededError within the call in flight`, async () => {
    const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
    const model = lcModel();
    const agent = lcAdapter.checkpointedReactAgent(
      ac,
      { maxTurns: 20, tokens: TOKENS },
      { llm: model, tools: [lcSearch] },
    );
    const config = { configurable: { thread_id: `lg-capped-${mode}` } };
    const input = { messages: [{ role: "user", content: "Go" }] };
    let error: unknown;
    try {
      if (mode === "invoke") await agent.invoke(input, config);
      else for await (const _ of await agent.stream(input, config)) { /* the host reads it */ }
    } catch (e) {
      error = e;
    }
    assertCapped(error, model.received.length, fileOf(ac, `lg-capped-${mode}`));
    await ac.close();
  });
}

// ---------------------------------------------------------------------------
// Claude Agent SDK, its CLI against the local scripted Messages API

const offline = (server: MessagesServer, cwd: string, extra: Options = {}): Options =>
  claudeOffline(server, cwd, extra);

test("claude-agent-sdk: a query an enforced cap stops throws BudgetExceededError, its CLI making no request past the one in flight", async () => {
  const cwd = tempHome();
  // Answers at once, always asking for a tool: 1,000 tokens a request (the SDK's assistant
  // messages carry the output tokens counted when a response began: one keeps them whole).
  const server = await startMessagesServer(() => ({
    text: "working",
    tools: [{ name: "mcp__t__ping", input: {} }],
    usage: { input_tokens: 999, output_tokens: 1 },
  }));
  const ping = createSdkMcpServer({
    name: "t",
    alwaysLoad: true,
    tools: [
      claudeTool(
        "ping",
        "Answer pong",
        {},
        () => Promise.resolve({ content: [{ type: "text" as const, text: "pong" }] }),
      ),
    ],
  });
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  try {
    const q = claudeAdapter.checkpointedQuery(ac, {
      sessionId: "claude-capped",
      maxTurns: 20,
      tokens: TOKENS,
    }, {
      prompt: "work until told to stop",
      options: offline(server, cwd, { allowedTools: ["mcp__t__ping"], mcpServers: { t: ping } }),
    });
    let error: unknown;
    try {
      for await (const _ of q) {
        // A host slower than the CLI (it shows each message in a UI, say): the CLI runs ahead.
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } catch (e) {
      error = e;
    }
    assertCapped(error, server.requests.length, q.run.checkpointFile);
    assert.ok(
      claudeAdapter.BudgetExceededError === BudgetExceededError,
      "re-exported by the adapter",
    );
  } finally {
    await server.close();
    await ac.close();
  }
});
