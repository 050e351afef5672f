// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * Tokens and dollars through the Claude Agent SDK adapter, end to end: the
 * SDK's CLI talks to the scripted Messages server, whose `message_start` and
 * `message_delta` events carry each reply's usage.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { createSdkMcpServer, type Options, tool } from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import { createAgentCheckpoint } from "../../mod.ts";
import { parseRecord } from "../../_record.ts";
import { checkpointedQuery } from "../../adapters/claude_agent_sdk.ts";
import {
  claudeOffline,
  type MessagesServer,
  startMessagesServer,
} from "../fixtures/messages_server.ts";
import { tempHome } from "../_helpers.ts";

const TIER1 = "CHECKPOINT-TIER-ONE";
const TIER2 = "CHECKPOINT-TIER-TWO";

const offline = (server: MessagesServer, cwd: string, extra: Options = {}): Options =>
  claudeOffline(server, cwd, extra);

const quick = createSdkMcpServer({
  name: "t",
  alwaysLoad: true,
  tools: [
    tool(
      "ping",
      "Answer pong",
      {},
      () => Promise.resolve({ content: [{ type: "text" as const, text: "pong" }] }),
    ),
  ],
});

test("each request's usage reaches the token tiers, and the result's cost becomes the run's", async () => {
  const cwd = tempHome();
  // 999 input tokens and 1 output token a request; the 12th answers. The SDK's
  // assistant messages carry the output tokens counted when a response began
  // (message_start's), the rest only at the result: one output token keeps the
  // two the same, so the tiers land where the whole figures put them.
  const server = await startMessagesServer((n) =>
    n < 12
      ? {
        text: `step ${n}`,
        tools: [{ name: "mcp__t__ping", input: {} }],
        usage: { input_tokens: 999, output_tokens: 1 },
      }
      : { text: "all done", usage: { input_tokens: 999, output_tokens: 1 } }
  );
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { tier1_template: TIER1, tier2_template: TIER2 },
  });
  try {
    const q = checkpointedQuery(ac, { sessionId: "claude-tokens", maxTurns: 30, tokens: 10_000 }, {
      prompt: "work in twelve steps",
      options: offline(server, cwd, { allowedTools: ["mcp__t__ping"], mcpServers: { t: quick } }),
    });
    let cost: number | undefined;
    let reported: { input_tokens: number; output_tokens: number } | undefined;
    for await (const m of q) {
      if (m.type === "result") {
        cost = m.total_cost_usd;
        reported = m.usage as typeof reported;
      }
    }
    assert.equal(server.requests.length, 12);
    // 1,000 tokens a request: 5,000 after request 4 (from 0), 9,000 after request 8.
    const first = (needle: string) => server.requests.findIndex((r) => r.raw.includes(needle));
    assert.equal(first(TIER1), 5);
    assert.equal(first(TIER2), 9);
    const r = parseRecord(fs.readFileSync(q.run.checkpointFile))!;
    assert.equal(r.end?.status, "done");
    assert.equal(r.usage!.inputTokens + r.usage!.outputTokens, 12_000);
    assert.deepEqual(
      [r.usage!.inputTokens, r.usage!.outputTokens],
      [reported!.input_tokens, reported!.output_tokens],
      "the run's tokens are the SDK's own figures",
    );
    assert.equal(typeof cost, "number");
    assert.equal(r.usage!.usd, cost, "the SDK's total_cost_usd");
  } finally {
    await server.close();
    await ac.close();
  }
});

test("an enforced token cap stops the query at its next hook, then its abort controller, after the budget record", async () => {
  const cwd = tempHome();
  const server = await startMessagesServer((n) =>
    n < 12
      ? {
        text: `step ${n}`,
        tools: [{ name: "mcp__t__ping", input: {} }],
        usage: { input_tokens: 999, output_tokens: 1 },
      }
      : { text: "all done", usage: { input_tokens: 999, output_tokens: 1 } }
  );
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { enforce: ["tokens"] },
  });
  try {
    const q = checkpointedQuery(ac, { sessionId: "claude-enforced", maxTurns: 30, tokens: 5_000 }, {
      prompt: "work in twelve steps",
      options: offline(server, cwd, { allowedTools: ["mcp__t__ping"], mcpServers: { t: quick } }),
    });
    let kindAtAbort: string | undefined;
    q.run.signal.addEventListener("abort", () => {
      kindAtAbort = parseRecord(fs.readFileSync(q.run.checkpointFile))?.kind;
    });
    try {
      for await (const _ of q) { /* the SDK's messages */ }
    } catch { /* the abort may reach the SDK as an error */ }
    // 1,000 tokens a request: the fifth reaches the cap; the CLI may have sent one more.
    assert.ok(
      server.requests.length >= 5 && server.requests.length <= 6,
      `${server.requests.length} requests`,
    );
    assert.equal(kindAtAbort, "budget", "the budget record was in the file at the abort");
    const r = parseRecord(fs.readFileSync(q.run.checkpointFile))!;
    assert.equal(r.end?.status, "capped");
  } finally {
    await server.close();
    await ac.close();
  }
});
