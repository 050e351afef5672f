// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * Side effects across attempts, through each adapter and its framework's own
 * offline model: a run whose first attempt dies inside a tool call is retried;
 * the tool that was done is replayed from its receipt (not run again), the one
 * whose outcome is unknown runs again with the same effect key, and the resume
 * text names both keys.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as ai7 from "npm:ai@7.0.173";
import { MockLanguageModelV4 } from "npm:ai@7.0.173/test";
import { createAgentCheckpoint } from "../../mod.ts";
import { openStore, storeFile } from "../../store/mod.ts";
import { checkpointed } from "../../adapters/ai_sdk.ts";
import { Agent, setTracingDisabled, tool as oaTool } from "npm:@openai/agents@0.x";
import {
  assistantMessage,
  functionCall,
  modelResponder,
  ScriptedModel,
} from "npm:@openai/agents@0.x/testing";
import { checkpointedRun } from "../../adapters/openai_agents.ts";
import { createAgent } from "npm:langchain@1";
import { tool as lcTool } from "npm:@langchain/core@1/tools";
import { AIMessage } from "npm:@langchain/core@1/messages";
import { agentCheckpointMiddleware, checkpointedReactAgent } from "../../adapters/langchain.ts";
import { ScriptedChatModel } from "./_langchain_fake.ts";
import {
  createSdkMcpServer,
  type Options,
  tool as claudeTool,
} from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import { checkpointedQuery } from "../../adapters/claude_agent_sdk.ts";
import {
  claudeOffline,
  type MessagesServer,
  startMessagesServer,
} from "../fixtures/messages_server.ts";
import * as fs from "node:fs";
import { captureLog, tempHome, waitFor } from "../_helpers.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

setTracingDisabled(true); // offline: no trace exporter

/** What the tools of both attempts saw: the effect key of each call, by tool. */
interface Seen {
  send_email: string[];
  charge: string[];
}

/** A hanging call: the attempt dies inside it (the keeper closes while it runs). */
const hang = () => new Promise<never>(() => {});

/**
 * Two attempts of one run: the first sends an email, then dies inside `charge`
 * (its intent durable, no receipt); the second is given the same model script.
 * `attempt(n, seen)` runs attempt n through the adapter and resolves to the
 * text of its model calls' prompts once the first attempt is inside `charge`
 * or the second has finished.
 */
async function retried(
  attempt: (
    ac: ReturnType<typeof createAgentCheckpoint>,
    n: 1 | 2,
    seen: Seen,
  ) => Promise<string>,
  extra: Record<string, unknown> = {},
): Promise<{ seen: Seen; resumed: string; logs: string[] }> {
  const home = tempHome();
  const seen: Seen = { send_email: [], charge: [] };
  const log = captureLog();
  const settings = { watchdog: false, ...extra };
  const first = createAgentCheckpoint({ home, env: {}, settings, logger: log.logger });
  void attempt(first, 1, seen).catch(() => {});
  assert.ok(await waitFor(() => seen.charge.length === 1, 60_000), "attempt 1 is inside charge");
  await first.close(); // the process dies here, as far as the ledger knows
  // The first keeper's threads may hold the ledger's lock a moment longer: the retry starts once
  // it is free, as a retry in a new process would (a ledger locked at a start is tested elsewhere).
  assert.ok(
    await waitFor(() => ledgerClosed(home), 30_000),
    "the first keeper let go of the ledger",
  );
  // The dead attempt's process is this one, still running: only warn lets its retry go on here.
  const second = createAgentCheckpoint({
    home,
    env: {},
    settings: { ...settings, on_duplicate: "warn" },
    logger: log.logger,
  });
  try {
    const resumed = await attempt(second, 2, seen);
    return { seen, resumed, logs: log.records.map((r) => r.message) };
  } finally {
    await second.close();
  }
}

/**
 * Whether every connection to the home's ledger is closed: the last one to close copies the
 * write-ahead log into the database and removes it.
 */
const ledgerClosed = (home: string): boolean => !fs.existsSync(`${storeFile(home)}-wal`);

/** What every adapter's retried run must show. */
function assertReplayed(
  out: { seen: Seen; resumed: string; logs: string[] },
  prefix = "",
): void {
  const { seen, resumed, logs } = out;
  assert.equal(seen.send_email.length, 1, "send_email is replayed, not run again");
  assert.match(seen.send_email[0]!, /^ek_[0-9a-f]{32}$/);
  assert.equal(seen.charge.length, 2, "charge, of unknown outcome, runs again");
  assert.equal(seen.charge[1], seen.charge[0], "with the same effect key");
  assert.ok(
    resumed.includes(`outcome is unknown: ${prefix}charge (effect key ${seen.charge[0]}`),
    "the resume text names the call of unknown outcome by its key",
  );
  assert.ok(
    resumed.includes(`${prefix}send_email (effect key ${seen.send_email[0]}, attempt 1): ok`),
    "and the call done, by its key",
  );
  assert.ok(logs.some((l) => l.includes("replayed from attempt 1's receipt")));
}

// ---------------------------------------------------------------------------
// AI SDK

/** A mock model that calls send_email, then charge, then answers. */
function aiModel(): Any {
  let i = 0;
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  const calls = [
    { toolName: "send_email", input: { to: "boss@example.com", subject: "report" } },
    { toolName: "charge", input: { cents: 1200, account: "acct_9" } },
  ];
  return new MockLanguageModelV4({
    doGenerate: () => {
      const call = calls[i];
      const n = i++;
      return Promise.resolve({
        content: call
          ? [{
            type: "tool-call",
            toolCallId: `c${n}`,
            toolName: call.toolName,
            input: JSON.stringify(call.input),
          }]
          : [{ type: "text", text: "done" }],
        finishReason: { unified: call ? "tool-calls" : "stop", raw: "x" },
        usage,
        warnings: [],
      });
    },
  });
}

test("ai-sdk: a retried run replays the tool done from its receipt, and the tool of unknown outcome sees the same key", async () => {
  const out = await retried(async (ac, n, seen) => {
    const model = aiModel();
    const cp = checkpointed(ac, {
      sessionId: "fx-ai",
      maxSteps: 6,
      ai: ai7,
      replay: ["send_email", "charge"],
    });
    const tool = (execute: (input: Any, options: Any) => unknown) => ({
      inputSchema: ai7.jsonSchema({ type: "object" }),
      execute,
    });
    await cp.generateText({
      model,
      prompt: "Send the report, then charge the account.",
      tools: {
        send_email: tool((_input, options) => {
          seen.send_email.push(options.effectKey);
          return { id: `msg_${seen.send_email.length}` };
        }),
        charge: tool((_input, options) => {
          seen.charge.push(options.effectKey);
          return n === 1 ? hang() : "charged";
        }),
      },
    });
    const prompts = model.doGenerateCalls.map((c: Any) => JSON.stringify(c.prompt));
    // The replayed call's result is the one recorded, as the model sees it.
    assert.match(prompts[1], /msg_1/);
    return prompts[0];
  });
  assertReplayed(out);
});

// ---------------------------------------------------------------------------
// OpenAI Agents

test("openai-agents: a retried run replays the tool done from its receipt, and the tool of unknown outcome sees the same key", async () => {
  const out = await retried(async (ac, n, seen) => {
    const received: string[] = [];
    const script = [
      () => [functionCall("send_email", { to: "boss@example.com" }, { callId: "call_0" })],
      () => [functionCall("charge", { cents: 1200 }, { callId: "call_1" })],
      () => [assistantMessage("all done")],
    ];
    const model = new ScriptedModel(script.map((reply) =>
      modelResponder((call) => {
        received.push(JSON.stringify(call.request.input));
        return reply();
      })
    ));
    const open = {
      type: "object" as const,
      properties: { to: { type: "string" }, cents: { type: "number" } },
      required: [],
      additionalProperties: true as const,
    };
    const keyOf = (details: unknown) => String((details as { effectKey?: unknown })?.effectKey);
    const tools = [
      oaTool({
        name: "send_email",
        description: "Send an email.",
        parameters: open,
        strict: false,
        execute: (_args: unknown, _ctx: unknown, details: unknown) => {
          seen.send_email.push(keyOf(details));
          return `sent msg_${seen.send_email.length}`;
        },
      }),
      oaTool({
        name: "charge",
        description: "Charge the account.",
        parameters: open,
        strict: false,
        execute: (_args: unknown, _ctx: unknown, details: unknown) => {
          seen.charge.push(keyOf(details));
          return n === 1 ? hang() : "charged";
        },
      }),
    ];
    const agent = new Agent({ name: "clerk", instructions: "Be brief.", model, tools });
    await checkpointedRun(
      ac,
      { sessionId: "fx-oa", maxTurns: 6, replay: ["send_email", "charge"] },
      agent,
      "Send the report, then charge the account.",
    );
    // The replayed call's result is the one recorded, as the model sees it.
    assert.match(received[1]!, /sent msg_1/);
    return received[0]!;
    // With the journal, the done tool is answered from it before its receipt is looked at
    // (tests/adapters/openai_agents_journal_test.ts): here, the receipts alone.
  }, { journal: false });
  assertReplayed(out);
});

// ---------------------------------------------------------------------------
// LangChain: createAgent's middleware, and LangGraph's createReactAgent

/** A chat model that calls send_email, then charge, then answers. */
function chatModel(): ScriptedChatModel {
  const calls = [
    { name: "send_email", args: { to: "boss@example.com" } },
    { name: "charge", args: { cents: 1200 } },
  ];
  return new ScriptedChatModel((i) => {
    const call = calls[i];
    return call
      ? new AIMessage({
        content: "",
        tool_calls: [{ id: `call_${i}`, name: call.name, args: call.args, type: "tool_call" }],
      })
      : new AIMessage("all done");
  });
}

/** The two tools, reading their effect key from their config. */
function lcTools(n: 1 | 2, seen: Seen) {
  const schema = { type: "object" as const, properties: {}, additionalProperties: true };
  const keyOf = (config: unknown) =>
    String((config as { configurable?: { effectKey?: unknown } })?.configurable?.effectKey);
  return [
    lcTool((_args: unknown, config: unknown) => {
      seen.send_email.push(keyOf(config));
      return `sent msg_${seen.send_email.length}`;
    }, { name: "send_email", description: "Send an email.", schema }),
    lcTool((_args: unknown, config: unknown) => {
      seen.charge.push(keyOf(config));
      return n === 1 ? hang() : "charged";
    }, { name: "charge", description: "Charge the account.", schema }),
  ];
}

const promptOf = (model: ScriptedChatModel, call: number) =>
  JSON.stringify(model.received[call] ?? []);

test("langchain createAgent: a retried run replays the tool done from its receipt, and the tool of unknown outcome sees the same key", async () => {
  const out = await retried(async (ac, n, seen) => {
    const model = chatModel();
    const checkpoint = agentCheckpointMiddleware(ac, {
      sessionId: "fx-lc",
      maxTurns: 6,
      replay: ["send_email", "charge"],
    });
    const agent = createAgent({ model, tools: lcTools(n, seen), middleware: [checkpoint] });
    await agent.invoke(
      { messages: [{ role: "user", content: "Send the report, then charge the account." }] },
      checkpoint.withRecursionLimit(),
    );
    // The replayed call's result is the one recorded, as the model sees it.
    assert.match(promptOf(model, 1), /sent msg_1/);
    return promptOf(model, 0);
  });
  assertReplayed(out);
});

test("langgraph createReactAgent: a retried run replays the tool done from its receipt, and the tool of unknown outcome sees the same key", async () => {
  const out = await retried(async (ac, n, seen) => {
    const model = chatModel();
    const agent = checkpointedReactAgent(
      ac,
      { sessionId: "fx-lg", maxTurns: 6, replay: ["send_email", "charge"] },
      { llm: model, tools: lcTools(n, seen) },
    );
    await agent.invoke({
      messages: [{ role: "user", content: "Send the report, then charge the account." }],
    });
    assert.match(promptOf(model, 1), /sent msg_1/);
    return promptOf(model, 0);
  });
  assertReplayed(out);
});

// ---------------------------------------------------------------------------
// Claude Agent SDK: its CLI, offline, against a scripted Messages API

/** Options that keep the SDK's CLI offline, in its own temp config, talking to `server`. */
const offlineClaude = (server: MessagesServer, cwd: string, extra: Options = {}): Options =>
  claudeOffline(server, cwd, extra);

test("claude-agent-sdk: a retried run replays the tool done from its receipt, and the tool of unknown outcome sees the same key in the hook input", async () => {
  const cwd = tempHome();
  const out = await retried(async (ac, n, seen) => {
    const server = await startMessagesServer([
      { tools: [{ name: "mcp__t__send_email", input: { to: "boss@example.com" } }] },
      { tools: [{ name: "mcp__t__charge", input: { cents: 1200 } }] },
      { text: "all done" },
    ]);
    // The host's own PreToolUse hook: what it is given is the key the tool's API gets.
    const keyFor: Record<string, string> = {};
    const hostHook = (input: Any) => {
      keyFor[input.tool_name] = input.effect_key;
      return Promise.resolve({});
    };
    const mcp = createSdkMcpServer({
      name: "t",
      alwaysLoad: true,
      tools: [
        claudeTool("send_email", "Send an email", {}, () => {
          seen.send_email.push(keyFor["mcp__t__send_email"]!);
          const text = `sent msg_${seen.send_email.length}`;
          return Promise.resolve({ content: [{ type: "text" as const, text }] });
        }),
        claudeTool("charge", "Charge the account", {}, () => {
          seen.charge.push(keyFor["mcp__t__charge"]!);
          return n === 1
            ? hang()
            : Promise.resolve({ content: [{ type: "text" as const, text: "charged" }] });
        }),
      ],
    });
    const controller = new AbortController();
    try {
      const q = checkpointedQuery(ac, {
        sessionId: "fx-claude",
        maxTurns: 6,
        replay: ["mcp__t__send_email", "mcp__t__charge"],
      }, {
        prompt: "Send the report, then charge the account.",
        options: offlineClaude(server, cwd, {
          allowedTools: ["mcp__t__send_email", "mcp__t__charge"],
          mcpServers: { t: mcp },
          abortController: controller,
          hooks: { PreToolUse: [{ hooks: [hostHook] }] },
        }),
      });
      const drained = (async () => {
        for await (const _ of q) { /* drain */ }
      })();
      if (n === 1) {
        // The attempt dies inside charge: the CLI is stopped once attempt 1's keeper has closed.
        await waitFor(() => seen.charge.length === 1, 60_000);
        void drained.catch(() => {});
        setTimeout(() => {
          controller.abort();
          void server.close();
        }, 2000);
        return "";
      }
      await drained;
      assert.match(server.requests[1]!.raw, /sent msg_1/);
      return server.requests[0]!.raw;
    } finally {
      if (n === 2) await server.close();
    }
  });
  assertReplayed(out, "mcp__t__");
});

test("ai-sdk: a tool in effect_tools runs only once its intent is in the ledger, and its receipt follows", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { watchdog: false, effect_tools: ["send_email"] },
  });
  const intentsSeen: number[] = [];
  const keys: string[] = [];
  const ledger = () => {
    const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" })!;
    try {
      return store.effectsSync("fx-durable");
    } finally {
      store.closeSync();
    }
  };
  try {
    const cp = checkpointed(ac, { sessionId: "fx-durable", maxSteps: 4, ai: ai7 });
    await cp.generateText({
      model: aiModel(),
      prompt: "Send the report.",
      tools: {
        send_email: {
          inputSchema: ai7.jsonSchema({ type: "object" }),
          execute: (_input: Any, options: Any) => {
            keys.push(options.effectKey);
            // Another connection finds the call's intent before the tool does anything.
            intentsSeen.push(ledger().filter((e) => e.key === options.effectKey).length);
            return { id: "msg_1" };
          },
        },
        charge: { inputSchema: ai7.jsonSchema({ type: "object" }), execute: () => "charged" },
      },
    });
    assert.deepEqual(intentsSeen, [1]);
    await waitFor(() => ledger().some((e) => e.key === keys[0] && e.receipt !== undefined));
    const row = ledger().find((e) => e.key === keys[0])!;
    assert.equal(row.receipt?.result, '{"id":"msg_1"}');
    // charge is no effect tool: nothing of it in the ledger.
    assert.deepEqual(ledger().map((e) => e.tool), ["send_email"]);
  } finally {
    await ac.close();
  }
});
