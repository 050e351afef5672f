// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * A host for the test that a receipt is durable before the model sees the
 * tool's result: run with a framework's name and a home, it drives one run
 * (session `receipt`, `effect_tools: ["send_email"]`, no replay) whose first
 * model call asks for `send_email` and whose second prints `MODEL 2` on stdout
 * and then blocks the whole process, so nothing more is committed before the
 * test's SIGKILL lands.
 */
import process from "node:process";
import * as fs from "node:fs";
import { createAgentCheckpoint } from "../../mod.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const [framework, home] = process.argv.slice(2) as [string, string];
export const INPUT = { to: "boss@example.com", subject: "report" };
const ac = createAgentCheckpoint({
  home,
  env: {},
  settings: { effect_tools: ["send_email", "mcp__t__send_email"] },
  logger: () => {},
});

/** The second model call: say so, then freeze the process until it is killed. */
function secondCall(): never {
  fs.writeSync(1, "MODEL 2\n");
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 120_000);
  process.exit(3); // not killed in time: the test fails on the missing kill
}
const sent = () => "sent";

if (framework === "ai-sdk") {
  const ai = await import("npm:ai@7.0.173");
  const { MockLanguageModelV4 } = await import("npm:ai@7.0.173/test");
  const { checkpointed } = await import("../../adapters/ai_sdk.ts");
  let n = 0;
  const model = new MockLanguageModelV4({
    doGenerate: () => {
      if (n++ > 0) secondCall();
      return Promise.resolve({
        content: [{
          type: "tool-call",
          toolCallId: "c1",
          toolName: "send_email",
          input: JSON.stringify(INPUT),
        }],
        finishReason: { unified: "tool-calls", raw: "tool_use" },
        usage: {
          inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
          outputTokens: { total: 1, text: 1, reasoning: 0 },
        },
        warnings: [],
      } as Any);
    },
  });
  const cp = checkpointed(ac, { sessionId: "receipt", maxSteps: 5, ai: ai as Any });
  await cp.generateText({
    model,
    prompt: "Send the report.",
    tools: {
      send_email: ai.tool({ inputSchema: ai.jsonSchema({ type: "object" }), execute: sent }),
    },
  });
} else if (framework === "openai-agents") {
  const { Agent, setTracingDisabled, tool } = await import("npm:@openai/agents@0.x");
  const { functionCall, modelResponder, ScriptedModel } = await import(
    "npm:@openai/agents@0.x/testing"
  );
  const { checkpointedRun } = await import("../../adapters/openai_agents.ts");
  setTracingDisabled(true);
  const model = new ScriptedModel([
    [functionCall("send_email", INPUT, { callId: "c1" })],
    modelResponder(() => secondCall()),
  ]);
  const send = tool({
    name: "send_email",
    description: "Send an email.",
    parameters: {
      type: "object",
      properties: { to: { type: "string" }, subject: { type: "string" } },
      required: ["to", "subject"],
      additionalProperties: false,
    },
    strict: true,
    execute: sent,
  });
  const agent = new Agent({ name: "a", model, tools: [send] });
  await checkpointedRun(ac, { sessionId: "receipt", maxTurns: 5 }, agent, "Send the report.");
} else if (framework === "langchain" || framework === "langgraph") {
  const { tool } = await import("npm:@langchain/core@1/tools");
  const { AIMessage } = await import("npm:@langchain/core@1/messages");
  const { ScriptedChatModel } = await import("./_langchain_fake.ts");
  const lc = await import("../../adapters/langchain.ts");
  const model = new ScriptedChatModel((call) => {
    if (call > 0) secondCall();
    return new AIMessage({
      content: "",
      tool_calls: [{ id: "c1", name: "send_email", args: INPUT, type: "tool_call" }],
    });
  });
  const send = tool(sent, {
    name: "send_email",
    description: "Send an email.",
    schema: {
      type: "object" as const,
      properties: { to: { type: "string" }, subject: { type: "string" } },
    },
  });
  const input = { messages: [{ role: "user", content: "Send the report." }] };
  const config = { configurable: { thread_id: "receipt" } };
  if (framework === "langchain") {
    const { createAgent } = await import("npm:langchain@1");
    const checkpoint = lc.agentCheckpointMiddleware(ac, { maxTurns: 5 });
    const agent = createAgent({ model, tools: [send], middleware: [checkpoint] });
    await agent.invoke(input, checkpoint.withRecursionLimit(config));
  } else {
    const agent = lc.checkpointedReactAgent(ac, { maxTurns: 5 }, { llm: model, tools: [send] });
    await agent.invoke(input, config);
  }
} else if (framework === "claude-agent-sdk") {
  const { createSdkMcpServer, tool } = await import("npm:@anthropic-ai/claude-agent-sdk@0.x");
  const { claudeOffline, startMessagesServer } = await import("../fixtures/messages_server.ts");
  const { checkpointedQuery } = await import("../../adapters/claude_agent_sdk.ts");
  const server = await startMessagesServer((n) => {
    if (n > 1) secondCall();
    return { text: "sending", tools: [{ name: "mcp__t__send_email", input: INPUT }] };
  });
  const mcp = createSdkMcpServer({
    name: "t",
    alwaysLoad: true,
    tools: [
      tool(
        "send_email",
        "Send an email.",
        {},
        () => Promise.resolve({ content: [{ type: "text" as const, text: "sent" }] }),
      ),
    ],
  });
  const q = checkpointedQuery(ac, { sessionId: "receipt", maxTurns: 5 }, {
    prompt: "Send the report.",
    options: claudeOffline(server, home, {
      allowedTools: ["mcp__t__send_email"],
      mcpServers: { t: mcp },
    }),
  });
  for await (const _ of q) { /* the SDK's messages */ }
}
process.exit(4); // the second model call never came
