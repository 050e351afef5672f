// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The host's own hooks, callbacks, listeners and middleware keep firing with
 * everything the adapters add switched on at once: replay, effect tools, tool
 * deadlines and an enforced cap (not reached), in each framework's own
 * package and offline model.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as ai7 from "npm:ai@7.0.173";
import { MockLanguageModelV4 } from "npm:ai@7.0.173/test";
import { Agent, Runner, setTracingDisabled, tool as oaTool } from "npm:@openai/agents@0.x";
import { assistantMessage, functionCall, ScriptedModel } from "npm:@openai/agents@0.x/testing";
import { createAgent, createMiddleware } from "npm:langchain@1";
import { tool as lcTool } from "npm:@langchain/core@1/tools";
import { AIMessage } from "npm:@langchain/core@1/messages";
import { createSdkMcpServer, tool as claudeTool } from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import { createAgentCheckpoint } from "../../mod.ts";
import { checkpointedQuery } from "../../adapters/claude_agent_sdk.ts";
import { claudeOffline, startMessagesServer } from "../fixtures/messages_server.ts";
import { checkpointed } from "../../adapters/ai_sdk.ts";
import { checkpointedRun } from "../../adapters/openai_agents.ts";
import { agentCheckpointMiddleware, checkpointedReactAgent } from "../../adapters/langchain.ts";
import { ScriptedChatModel } from "./_langchain_fake.ts";
import { tempHome } from "../_helpers.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

setTracingDisabled(true); // offline: no trace exporter

/** Everything on: replay, an effect tool, tool deadlines, an enforced cap far away. */
const SETTINGS = {
  watchdog: false,
  effect_tools: ["charge"],
  tool_timeout_seconds: 30,
  enforce: ["tokens"],
};
const INIT = { tokens: 1_000_000, replay: ["send_email"] };

/** What fired, by hook name. */
function counter() {
  const fired: Record<string, number> = {};
  const hit = (name: string) => () => void (fired[name] = (fired[name] ?? 0) + 1);
  return { fired, hit };
}

/** Every hook named fired at least once. */
function assertAllFired(fired: Record<string, number>, names: string[]): void {
  const missing = names.filter((n) => !(fired[n]! > 0));
  assert.deepEqual(missing, [], `hooks that never fired: ${missing.join(", ")}`);
}

test("ai-sdk v7: the host's prepareStep, stopWhen, onStepFinish, onFinish, tool execution callbacks and stream transform keep firing", async () => {
  const { fired, hit } = counter();
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  const calls = [
    { toolName: "send_email", input: { to: "a" } },
    { toolName: "charge", input: { cents: 1 } },
  ];
  let n = 0;
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  const content = () => {
    const call = calls[n++];
    return call
      ? [{
        type: "tool-call",
        toolCallId: `c${n}`,
        toolName: call.toolName,
        input: JSON.stringify(call.input),
      }]
      : [{ type: "text", text: "done" }];
  };
  const model = new MockLanguageModelV4({
    doStream: () => {
      const parts = content();
      const stream = new ReadableStream({
        start(controller) {
          controller.enqueue({ type: "stream-start", warnings: [] });
          for (const part of parts) {
            if (part.type === "text") {
              controller.enqueue({ type: "text-start", id: "t" });
              controller.enqueue({ type: "text-delta", id: "t", delta: "done" });
              controller.enqueue({ type: "text-end", id: "t" });
            } else controller.enqueue(part);
          }
          const reason = parts[0]!.type === "text" ? "stop" : "tool-calls";
          controller.enqueue({
            type: "finish",
            finishReason: { unified: reason, raw: reason },
            usage,
          });
          controller.close();
        },
      });
      return Promise.resolve({ stream });
    },
  } as Any);
  const tool = (name: string) =>
    ai7.tool({
      inputSchema: ai7.jsonSchema({ type: "object" }),
      execute: () => {
        hit(`tool ${name}`)();
        return "ok";
      },
    });
  const cp = checkpointed(ac, { sessionId: "hooks-ai", maxSteps: 10, ...INIT, ai: ai7 });
  const result = cp.streamText({
    model,
    prompt: "Go",
    tools: { send_email: tool("send_email"), charge: tool("charge") },
    prepareStep: () => (hit("prepareStep")(), undefined),
    stopWhen: () => (hit("stopWhen")(), false),
    onStepFinish: hit("onStepFinish"),
    onFinish: hit("onFinish"),
    onChunk: hit("onChunk"),
    experimental_onToolExecutionStart: hit("onToolExecutionStart"),
    experimental_onToolExecutionEnd: hit("onToolExecutionEnd"),
    onToolExecutionStart: hit("onToolExecutionStart"),
    onToolExecutionEnd: hit("onToolExecutionEnd"),
    experimental_transform: () =>
      new TransformStream({
        transform(part, controller) {
          hit("experimental_transform")();
          controller.enqueue(part);
        },
      }),
  } as Any);
  await result.consumeStream();
  await result.steps;
  assertAllFired(fired, [
    "prepareStep",
    "stopWhen",
    "onStepFinish",
    "onFinish",
    "onChunk",
    "onToolExecutionStart",
    "onToolExecutionEnd",
    "experimental_transform",
    "tool send_email",
    "tool charge",
  ]);
  await ac.close();
});

test("openai-agents: the host's agent.on and runner.on listeners and its callModelInputFilter keep firing", async () => {
  const { fired, hit } = counter();
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  const model = new ScriptedModel([
    [functionCall("send_email", { to: "a" }, { callId: "c1" })],
    [functionCall("charge", { cents: 1 }, { callId: "c2" })],
    [assistantMessage("done")],
  ]);
  const params = (key: string) => ({
    type: "object" as const,
    properties: { [key]: { type: key === "cents" ? "number" : "string" } },
    required: [key],
    additionalProperties: false as const,
  });
  const send = oaTool({
    name: "send_email",
    description: "Send.",
    parameters: params("to"),
    strict: true,
    execute: () => (hit("tool send_email")(), "sent"),
  } as Any);
  const charge = oaTool({
    name: "charge",
    description: "Charge.",
    parameters: params("cents"),
    strict: true,
    execute: () => (hit("tool charge")(), "charged"),
  } as Any);
  const agent = new Agent({ name: "a", model, tools: [send, charge] });
  const events = ["agent_start", "agent_end", "agent_tool_start", "agent_tool_end"];
  for (const e of events) agent.on(e as Any, hit(`agent.on ${e}`));
  const runner = new Runner({
    callModelInputFilter: (args: Any) => (hit("callModelInputFilter")(), args.modelData),
  });
  for (const e of events) runner.on(e as Any, hit(`runner.on ${e}`));
  const result = await checkpointedRun(
    ac,
    { sessionId: "hooks-oa", maxTurns: 10, ...INIT },
    agent,
    "Go",
    {
      runner,
    },
  );
  assert.equal(result.finalOutput, "done");
  assertAllFired(fired, [
    ...events.map((e) => `agent.on ${e}`),
    ...events.map((e) => `runner.on ${e}`),
    "callModelInputFilter",
    "tool send_email",
    "tool charge",
  ]);
  await ac.close();
});

/** A tool call of send_email, then charge, then an answer. */
const lcModel = () =>
  new ScriptedChatModel((call) =>
    call === 0
      ? new AIMessage({
        content: "",
        tool_calls: [{ id: "c1", name: "send_email", args: { to: "a" }, type: "tool_call" }],
      })
      : call === 1
      ? new AIMessage({
        content: "",
        tool_calls: [{ id: "c2", name: "charge", args: { cents: 1 }, type: "tool_call" }],
      })
      : new AIMessage("done")
  );

const lcTools = (hit: (name: string) => () => void) =>
  ["send_email", "charge"].map((name) =>
    lcTool(() => (hit(`tool ${name}`)(), "ok"), {
      name,
      description: name,
      schema: { type: "object" as const, properties: {} },
    })
  );

/** Callbacks a host passes in the invocation's config. */
const callbacks = (hit: (name: string) => () => void) => [{
  handleChatModelStart: hit("callbacks handleChatModelStart"),
  handleLLMEnd: hit("callbacks handleLLMEnd"),
  handleToolStart: hit("callbacks handleToolStart"),
  handleToolEnd: hit("callbacks handleToolEnd"),
}];

test("langchain createAgent: the host's own middleware (every hook) and callbacks keep firing", async () => {
  const { fired, hit } = counter();
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  const theirs = createMiddleware({
    name: "HostMiddleware",
    beforeAgent: () => (hit("beforeAgent")(), undefined),
    beforeModel: () => (hit("beforeModel")(), undefined),
    afterModel: () => (hit("afterModel")(), undefined),
    afterAgent: () => (hit("afterAgent")(), undefined),
    wrapModelCall: (request: Any, handler: Any) => (hit("wrapModelCall")(), handler(request)),
    wrapToolCall: (request: Any, handler: Any) => (hit("wrapToolCall")(), handler(request)),
  } as Any);
  const checkpoint = agentCheckpointMiddleware(ac, { maxTurns: 10, ...INIT });
  const agent = createAgent({
    model: lcModel(),
    tools: lcTools(hit),
    middleware: [theirs, checkpoint] as Any,
  });
  await agent.invoke(
    { messages: [{ role: "user", content: "Go" }] },
    checkpoint.withRecursionLimit({
      configurable: { thread_id: "hooks-lc" },
      callbacks: callbacks(hit),
    }),
  );
  assertAllFired(fired, [
    "beforeAgent",
    "beforeModel",
    "afterModel",
    "afterAgent",
    "wrapModelCall",
    "wrapToolCall",
    "callbacks handleChatModelStart",
    "callbacks handleLLMEnd",
    "callbacks handleToolStart",
    "callbacks handleToolEnd",
    "tool send_email",
    "tool charge",
  ]);
  await ac.close();
});

test("langgraph createReactAgent: the host's prompt, pre- and post-model hooks and callbacks keep firing", async () => {
  const { fired, hit } = counter();
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  const agent = checkpointedReactAgent(ac, { maxTurns: 10, ...INIT }, {
    llm: lcModel(),
    tools: lcTools(hit),
    prompt: (state: Any) => (hit("prompt")(), state.messages),
    preModelHook: (state: Any) => (hit("preModelHook")(), { messages: state.messages.slice(-0) }),
    postModelHook: () => (hit("postModelHook")(), {}),
  } as Any);
  await agent.invoke(
    { messages: [{ role: "user", content: "Go" }] },
    { configurable: { thread_id: "hooks-lg" }, callbacks: callbacks(hit) } as Any,
  );
  assertAllFired(fired, [
    "prompt",
    "preModelHook",
    "postModelHook",
    "callbacks handleChatModelStart",
    "callbacks handleLLMEnd",
    "callbacks handleToolStart",
    "callbacks handleToolEnd",
    "tool send_email",
    "tool charge",
  ]);
  await ac.close();
});

test("claude-agent-sdk: the host's own hooks of every event the adapter uses keep firing", async () => {
  const { fired, hit } = counter();
  const home = tempHome();
  const server = await startMessagesServer((n) =>
    n === 1
      ? { text: "mailing", tools: [{ name: "mcp__t__send_email", input: {} }] }
      : n === 2
      ? { text: "charging", tools: [{ name: "mcp__t__charge", input: {} }] }
      : { text: "done" }
  );
  const tools = createSdkMcpServer({
    name: "t",
    alwaysLoad: true,
    tools: ["send_email", "charge"].map((name) =>
      claudeTool(name, name, {}, () => {
        hit(`tool ${name}`)();
        return Promise.resolve({ content: [{ type: "text" as const, text: "ok" }] });
      })
    ),
  });
  const events = ["UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolBatch", "Stop"];
  const hooks = Object.fromEntries(
    events.map((e) => [e, [{ hooks: [() => (hit(`hook ${e}`)(), Promise.resolve({}))] }]]),
  );
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  try {
    const q = checkpointedQuery(ac, { sessionId: "hooks-claude", maxTurns: 10, ...INIT }, {
      prompt: "Go",
      options: claudeOffline(server, home, {
        allowedTools: ["mcp__t__send_email", "mcp__t__charge"],
        mcpServers: { t: tools },
        hooks: hooks as Any,
      }),
    });
    for await (const _ of q) { /* the SDK's messages */ }
    assertAllFired(fired, [...events.map((e) => `hook ${e}`), "tool send_email", "tool charge"]);
  } finally {
    await server.close();
    await ac.close();
  }
});
