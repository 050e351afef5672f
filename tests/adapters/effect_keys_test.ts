// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * A tool reads its effect key through an exported type (this file is
 * type-checked under the strict compiler options), Claude tool names match by
 * their own name in `effect_tools` and `replay`, and every adapter gives the
 * host its run.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as ai7 from "npm:ai@7.0.173";
import { MockLanguageModelV4 } from "npm:ai@7.0.173/test";
import { Agent, setTracingDisabled, tool as oaTool } from "npm:@openai/agents@0.x";
import { assistantMessage, functionCall, ScriptedModel } from "npm:@openai/agents@0.x/testing";
import {
  createSdkMcpServer,
  type HookCallback,
  tool as claudeTool,
} from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import { z } from "npm:zod@^4";
import { createAgentCheckpoint } from "../../mod.ts";
import { checkpointed, type EffectKeyOptions } from "../../adapters/ai_sdk.ts";
import { checkpointedRun, type EffectKeyDetails } from "../../adapters/openai_agents.ts";
import { checkpointedQuery, mcpEffectKey } from "../../adapters/claude_agent_sdk.ts";
import { claudeOffline, startMessagesServer } from "../fixtures/messages_server.ts";
import { tempHome } from "../_helpers.ts";

setTracingDisabled(true); // offline: no trace exporter

const SETTINGS = { watchdog: false, effect_tools: ["pay"] };

test("ai-sdk: a tool reads options.effectKey through EffectKeyOptions", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  let n = 0;
  const model = new MockLanguageModelV4({
    doGenerate: () =>
      Promise.resolve(
        n++ === 0
          ? {
            content: [{
              type: "tool-call",
              toolCallId: "c1",
              toolName: "pay",
              input: '{"cents":5}',
            }],
            finishReason: { unified: "tool-calls", raw: "tool_use" },
            usage: {
              inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
              outputTokens: { total: 1, text: 1, reasoning: 0 },
            },
            warnings: [],
          }
          : {
            content: [{ type: "text", text: "done" }],
            finishReason: { unified: "stop", raw: "end_turn" },
            usage: {
              inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
              outputTokens: { total: 1, text: 1, reasoning: 0 },
            },
            warnings: [],
          },
      ),
  });
  const keys: string[] = [];
  const pay = ai7.tool({
    inputSchema: ai7.jsonSchema<{ cents: number }>({ type: "object" }),
    execute: (_input, options) => {
      keys.push((options as typeof options & EffectKeyOptions).effectKey);
      return "paid";
    },
  });
  const cp = checkpointed(ac, { sessionId: "keys-ai", maxSteps: 4, ai: ai7 });
  await cp.generateText({ model, prompt: "Pay", tools: { pay } });
  assert.deepEqual(keys, [cp.run.effects.key("pay", { cents: 5 })]);
  await ac.close();
});

test("openai-agents: a tool reads details.effectKey through EffectKeyDetails, and the result carries the run", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  const keys: (string | undefined)[] = [];
  const pay = oaTool({
    name: "pay",
    description: "Pay.",
    parameters: {
      type: "object",
      properties: { cents: { type: "number" } },
      required: ["cents"],
      additionalProperties: false,
    },
    strict: true,
    execute: (_input, _context, details) => {
      keys.push((details as EffectKeyDetails | undefined)?.effectKey);
      return "paid";
    },
  });
  const model = new ScriptedModel([
    [functionCall("pay", { cents: 5 }, { callId: "c1" })],
    [assistantMessage("done")],
  ]);
  const agent = new Agent({ name: "a", model, tools: [pay] });
  const result = await checkpointedRun(ac, { sessionId: "keys-oa", maxTurns: 4 }, agent, "Pay");
  assert.equal(result.run.runId, "keys-oa");
  assert.deepEqual(keys, [result.run.effects.key("pay", { cents: 5 })]);
  await ac.close();
});

test("claude-agent-sdk: effect_tools name an MCP tool by its own name, and the tool reads the key its hooks see", async () => {
  const home = tempHome();
  const server = await startMessagesServer((n) =>
    n === 1
      ? {
        text: "paying",
        tools: [
          { name: "mcp__bank__pay", input: { cents: 5 } },
          { name: "mcp__bank__pay", input: { cents: 7 } },
        ],
      }
      : { text: "done" }
  );
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: SETTINGS });
  const inTool: string[] = [];
  const inHook: string[] = [];
  let q: ReturnType<typeof checkpointedQuery> | undefined;
  const bank = createSdkMcpServer({
    name: "bank",
    alwaysLoad: true,
    tools: [claudeTool("pay", "Pay.", { cents: z.number() }, (args) => {
      inTool.push(mcpEffectKey(q!.run, "bank", "pay", args));
      return Promise.resolve({ content: [{ type: "text" as const, text: "paid" }] });
    })],
  });
  const hook: HookCallback = (input) => {
    inHook.push((input as { effect_key?: string }).effect_key ?? "");
    return Promise.resolve({});
  };
  // After the call, before its receipt: what the ledger holds of it (an intent: "unknown").
  const states: (string | undefined)[] = [];
  const after: HookCallback = async (input) => {
    states.push(
      (await q!.run.effects.state((input as { effect_key?: string }).effect_key ?? ""))?.state,
    );
    return {};
  };
  try {
    q = checkpointedQuery(ac, { sessionId: "keys-claude", maxTurns: 4 }, {
      prompt: "Pay",
      options: claudeOffline(server, home, {
        allowedTools: ["mcp__bank__pay"],
        mcpServers: { bank },
        hooks: { PreToolUse: [{ hooks: [hook] }], PostToolUse: [{ hooks: [after] }] },
      }),
    });
    for await (const _ of q) { /* the SDK's messages */ }
    const run = q.run;
    const keys = [5, 7].map((cents) => run.effects.key("mcp__bank__pay", { cents }));
    assert.notEqual(keys[0], keys[1], "two parallel calls, two keys");
    assert.deepEqual([...inTool].sort(), [...keys].sort(), "the tool reads its call's key");
    assert.deepEqual([...inHook].sort(), [...keys].sort(), "the same the host's hook gets");
    assert.deepEqual(states, ["unknown", "unknown"], 'effect_tools: ["pay"] matched both calls');
  } finally {
    await server.close();
    await ac.close();
  }
});
