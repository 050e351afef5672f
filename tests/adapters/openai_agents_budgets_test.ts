// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * Tokens, dollars and tool deadlines through the OpenAI Agents adapter: the
 * SDK's `ScriptedModel` returns each response's `Usage`, and a tool waits on
 * the `details.signal` the SDK hands it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Agent, Runner, setTracingDisabled, tool, Usage } from "npm:@openai/agents@0.x";
import {
  assistantMessage,
  functionCall,
  modelResponder,
  ScriptedModel,
} from "npm:@openai/agents@0.x/testing";
import { checkpointedRun } from "../../adapters/openai_agents.ts";
import { waitFor } from "../_helpers.ts";
import { make } from "./_keeper.ts";

setTracingDisabled(true); // offline: no trace exporter

const params = {
  type: "object" as const,
  properties: { q: { type: "string" } },
  required: ["q"],
  additionalProperties: false as const,
};
const search = tool({
  name: "search",
  description: "Search the notes.",
  parameters: params,
  strict: true,
  execute: () => "found",
});

/** A tool call on each of the first `toolCalls` calls, then an answer; 1,000 tokens a call. */
function scripted(toolCalls: number) {
  const received: string[] = [];
  const model = new ScriptedModel(
    Array.from({ length: toolCalls + 1 }, (_, i) =>
      modelResponder((call) => {
        received.push(JSON.stringify(call.request.input));
        return {
          output: i < toolCalls
            ? [functionCall("search", { q: `q${i}` }, { callId: `call_${i}` })]
            : [assistantMessage("all done")],
          usage: new Usage({ requests: 1, inputTokens: 700, outputTokens: 300, totalTokens: 1000 }),
        };
      })),
  );
  return { model, received };
}

const firstWith = (received: string[], re: RegExp) => received.findIndex((r) => re.test(r));

for (const stream of [false, true]) {
  test(`checkpointedRun${stream ? " (stream)" : ""}: each response's usage reaches the token tiers at the right call`, async () => {
    const { ac, recordOf } = make({ allow_tiny_tier1: false });
    const { model, received } = scripted(11);
    const agent = new Agent({ name: "a", model, tools: [search] });
    const init = { sessionId: `oa-tokens-${stream}`, maxTurns: 20, tokens: 10_000 };
    if (stream) {
      const result = await checkpointedRun(ac, init, agent, "Go", { stream: true });
      await result.completed;
    } else await checkpointedRun(ac, init, agent, "Go");
    assert.equal(received.length, 12);
    assert.equal(firstWith(received, /5000 of 10000 tokens/), 5);
    assert.equal(firstWith(received, /Final budget checkpoint.*9000 of 10000 tokens/), 9);
    // Every call counted once, the last one at the end of the run.
    assert.deepEqual(recordOf(init.sessionId)?.usage, { inputTokens: 8400, outputTokens: 3600 });
    await ac.close();
  });
}

test("checkpointedRun: a dollar cap priced from the agent's model name", async () => {
  // $100 per million input and output tokens: $0.10 a call of 1,000 tokens.
  const { ac } = make({
    allow_tiny_tier1: false,
    prices: { "gpt-test": { input: 100, output: 100 } },
  });
  const { model, received } = scripted(11);
  const agent = new Agent({ name: "a", model: "gpt-test", tools: [search] });
  const runner = new Runner({ modelProvider: { getModel: () => model } });
  await checkpointedRun(ac, { sessionId: "oa-usd", maxTurns: 20, usd: 1 }, agent, "Go", {
    runner,
  });
  assert.equal(firstWith(received, /\$0\.50 of \$1\.00/), 5);
  assert.equal(firstWith(received, /Final budget checkpoint.*\$0\.90 of \$1\.00/), 9);
  await ac.close();
});

test("checkpointedRun: a tool past its deadline is aborted through details.signal and recorded", async () => {
  const { ac, recordOf, written } = make({ tool_timeout_seconds: 0.2 });
  const seen: unknown[] = [];
  const hang = tool({
    name: "search",
    description: "Search the notes.",
    parameters: params,
    strict: true,
    execute: (_args, _ctx, details) =>
      new Promise((_resolve, reject) => {
        const signal = (details as { signal?: AbortSignal } | undefined)?.signal;
        signal?.addEventListener("abort", () => {
          seen.push(signal.reason);
          reject(signal.reason);
        });
      }),
  });
  const { model } = scripted(1);
  const agent = new Agent({ name: "a", model, tools: [hang] });
  const alive = setInterval(() => {}, 50); // the host's own work keeps the process alive
  try {
    const result = await checkpointedRun(ac, { sessionId: "oa-hang", maxTurns: 10 }, agent, "Go");
    assert.equal(result.finalOutput, "all done");
  } finally {
    clearInterval(alive);
  }
  assert.equal((seen[0] as DOMException)?.name, "TimeoutError");
  // Written by the watchdog or the main thread's timer, whichever came first; the watchdog's
  // event reaches the listener once the main thread is free.
  assert.ok(await waitFor(() => written.some((w) => w.kind === "tool_timeout")));
  const r = recordOf("oa-hang")!;
  assert.deepEqual(r.tools.map((t) => [t.tool, t.callId, t.status, t.timedOut]), [
    ["search", "call_0", "failed", true],
  ]);
  await ac.close();
});

test("checkpointedRun: an enforced token cap stops the SDK's run through its signal, after the budget record", async () => {
  const { ac, recordOf } = make({ allow_tiny_tier1: false, enforce: ["tokens"] });
  const init = { sessionId: "oa-enforced", maxTurns: 20, tokens: 5_000 };
  let calls = 0;
  let kindAtAbort: string | undefined;
  const model = new ScriptedModel(
    Array.from({ length: 12 }, (_, i) =>
      modelResponder((call) => {
        calls++;
        // The signal the SDK hands each model request: the run's budget signal joins it.
        call.request.signal?.addEventListener("abort", () => {
          kindAtAbort ??= recordOf(init.sessionId)?.kind;
        }, { once: true });
        return {
          output: [functionCall("search", { q: `q${i}` }, { callId: `call_${i}` })],
          usage: new Usage({ requests: 1, inputTokens: 700, outputTokens: 300, totalTokens: 1000 }),
        };
      })),
  );
  const agent = new Agent({ name: "a", model, tools: [search] });
  await assert.rejects(checkpointedRun(ac, init, agent, "Go"));
  assert.equal(calls, 5, "1,000 tokens a call: the fifth reaches the cap, and no sixth starts");
  assert.equal(kindAtAbort, "budget", "the budget record was in the file at the abort");
  assert.equal(recordOf(init.sessionId)?.end?.status, "capped");
  await ac.close();
});
