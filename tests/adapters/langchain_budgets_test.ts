// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * Tokens and tool deadlines through the LangChain adapters: the scripted chat
 * model's `AIMessage.usage_metadata`, and a tool that waits on `config.signal`.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createAgent } from "npm:langchain@1";
import { tool } from "npm:@langchain/core@1/tools";
import { AIMessage } from "npm:@langchain/core@1/messages";
import {
  agentCheckpointMiddleware,
  checkpointedReactAgent,
  stepsForCreateAgent,
} from "../../adapters/langchain.ts";
import { waitFor } from "../_helpers.ts";
import { make } from "./_keeper.ts";
import { ScriptedChatModel } from "./_langchain_fake.ts";

const schema = { type: "object" as const, properties: { q: { type: "string" } } };
const search = tool(() => "found", { name: "search", description: "Search.", schema });

/** A tool call on each of the first `toolCalls` calls, then an answer; 1,000 tokens a call. */
const withUsage = (toolCalls: number) => (call: number) =>
  new AIMessage({
    content: call < toolCalls ? "" : "all done",
    tool_calls: call < toolCalls
      ? [{ id: `call_${call}`, name: "search", args: { q: `q${call}` }, type: "tool_call" }]
      : [],
    usage_metadata: { input_tokens: 700, output_tokens: 300, total_tokens: 1000 },
    response_metadata: { model_name: "scripted-model" },
  } as never);

const firstWith = (model: ScriptedChatModel, re: RegExp) =>
  model.received.findIndex((sent) => re.test(JSON.stringify(sent)));

test("createAgent: usage_metadata reaches the token tiers at the right call", async () => {
  const { ac, recordOf } = make({ allow_tiny_tier1: false });
  const model = new ScriptedChatModel(withUsage(11));
  const agent = createAgent({
    model,
    tools: [search],
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 20, tokens: 10_000 })],
  });
  await agent.invoke({ messages: [{ role: "user", content: "Go" }] }, {
    configurable: { thread_id: "lc-tokens" },
    recursionLimit: stepsForCreateAgent(20),
  });
  assert.equal(model.received.length, 12);
  assert.equal(firstWith(model, /5000 of 10000 tokens/), 5);
  assert.equal(firstWith(model, /Final budget checkpoint.*9000 of 10000 tokens/), 9);
  assert.deepEqual(recordOf("lc-tokens")?.usage, { inputTokens: 8400, outputTokens: 3600 });
  await ac.close();
});

test("createReactAgent: usage_metadata reaches the dollar tiers, priced from the model's name", async () => {
  // $100 per million input and output tokens: $0.10 a call of 1,000 tokens.
  const { ac, recordOf } = make({
    allow_tiny_tier1: false,
    prices: { "scripted-model": { input: 100, output: 100 } },
  });
  const model = new ScriptedChatModel(withUsage(11));
  const agent = checkpointedReactAgent(ac, { maxTurns: 20, usd: 1 }, {
    llm: model,
    tools: [search],
  });
  await agent.invoke(
    { messages: [{ role: "user", content: "Go" }] },
    { configurable: { thread_id: "lc-usd" } },
  );
  assert.equal(model.received.length, 12);
  assert.equal(firstWith(model, /\$0\.50 of \$1\.00/), 5);
  assert.equal(firstWith(model, /Final budget checkpoint.*\$0\.90 of \$1\.00/), 9);
  const r = recordOf("lc-usd")!;
  assert.equal(r.usage?.inputTokens, 8400, "every call counted once, the last one too");
  assert.ok(Math.abs(r.usage!.usd! - 1.2) < 1e-9);
  await ac.close();
});

/** A tool that never ends by itself: it waits for its signal, and reports why it stopped. */
const hanging = (seen: unknown[]) =>
  tool((_args: unknown, config: { signal?: AbortSignal }) =>
    new Promise((_resolve, reject) => {
      config.signal?.addEventListener("abort", () => {
        seen.push(config.signal!.reason);
        reject(config.signal!.reason);
      });
    }), { name: "search", description: "Search.", schema });

for (const kind of ["createAgent", "createReactAgent"] as const) {
  test(`${kind}: a tool past its deadline is aborted through config.signal and recorded`, async () => {
    const { ac, recordOf, written } = make({ tool_timeout_seconds: 0.2 });
    const seen: unknown[] = [];
    const model = new ScriptedChatModel(withUsage(1));
    const input = { messages: [{ role: "user", content: "Go" }] };
    const alive = setInterval(() => {}, 50); // the host's own work keeps the process alive
    try {
      if (kind === "createAgent") {
        const agent = createAgent({
          model,
          tools: [hanging(seen)],
          middleware: [agentCheckpointMiddleware(ac, { maxTurns: 10 })],
        });
        await agent.invoke(input, { configurable: { thread_id: "lc-hang" } });
      } else {
        const agent = checkpointedReactAgent(ac, { maxTurns: 10 }, {
          llm: model,
          tools: [hanging(seen)],
        });
        await agent.invoke(input, { configurable: { thread_id: "lc-hang" } }).catch(() => {});
      }
    } finally {
      clearInterval(alive);
    }
    assert.equal((seen[0] as DOMException)?.name, "TimeoutError");
    // Written by the watchdog or the main thread's timer, whichever came first; the watchdog's
    // event reaches the listener once the main thread is free.
    assert.ok(await waitFor(() => written.some((w) => w.kind === "tool_timeout")));
    const r = recordOf("lc-hang")!;
    assert.deepEqual(r.tools.map((t) => [t.tool, t.callId, t.status, t.timedOut]), [
      ["search", "call_0", "failed", true],
    ]);
    await ac.close();
  });
}

for (const streamMode of ["updates", "values", "messages"] as const) {
  test(`createReactAgent stream (${streamMode}): every call's usage counted once, the last one too`, async () => {
    const { ac, recordOf } = make({ allow_tiny_tier1: false });
    const model = new ScriptedChatModel(withUsage(5));
    const agent = checkpointedReactAgent(ac, { maxTurns: 20, tokens: 10_000 }, {
      llm: model,
      tools: [search],
    });
    const stream = await agent.stream(
      { messages: [{ role: "user", content: "Go" }] },
      { configurable: { thread_id: `lc-stream-${streamMode}` }, streamMode },
    );
    for await (const _chunk of stream) { /* read to the end */ }
    assert.equal(model.received.length, 6);
    assert.equal(firstWith(model, /5000 of 10000 tokens/), 5);
    assert.deepEqual(recordOf(`lc-stream-${streamMode}`)?.usage, {
      inputTokens: 4200,
      outputTokens: 1800,
    });
    await ac.close();
  });
}

test("createAgent: an enforced token cap stops the run before its next model call, after the budget record", async () => {
  const { ac, recordOf, written } = make({ allow_tiny_tier1: false, enforce: ["tokens"] });
  const model = new ScriptedChatModel(withUsage(11));
  const agent = createAgent({
    model,
    tools: [search],
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 20, tokens: 5_000 })],
  });
  await assert.rejects(
    agent.invoke({ messages: [{ role: "user", content: "Go" }] }, {
      configurable: { thread_id: "lc-enforced" },
      recursionLimit: stepsForCreateAgent(20),
    }),
  );
  assert.equal(model.received.length, 5, "1,000 tokens a call: the fifth reaches the cap");
  // The budget record lands before the stop, and the end after it.
  assert.deepEqual(written.filter((w) => w.runId === "lc-enforced").map((w) => w.kind).slice(-2), [
    "budget",
    "end",
  ]);
  assert.equal(recordOf("lc-enforced")?.end?.status, "capped");
  await ac.close();
});
