// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * What the OpenAI Agents and LangChain adapters cost per model call, against
 * the bare framework driven by the same scripted model:
 *
 *   deno run -A scripts/bench_frameworks.ts [runs]
 *
 * Each run is one agent invocation of 12 model calls (11 tool calls, then an
 * answer), with the library's defaults (the watchdog on), in two cases:
 * under a turn cap of 1000, where no tier is due (the hooks alone), and under
 * a turn cap of 12, where two tiers fire and the file is written durably
 * three times (tier 1, tier 2, the end). Bare and adapted runs alternate
 * after a warm-up; the figure is (adapted − bare) / model calls, from the
 * medians.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { Agent, Runner, setTracingDisabled, tool as oaTool } from "npm:@openai/agents@0.x";
import { assistantMessage, functionCall, ScriptedModel } from "npm:@openai/agents@0.x/testing";
import { createAgent, createMiddleware } from "npm:langchain@1";
import { z } from "npm:zod@^4";
import { tool as lcTool } from "npm:@langchain/core@1/tools";
import { createReactAgent } from "npm:@langchain/langgraph@1/prebuilt";
import { createAgentCheckpoint } from "../mod.ts";
import { checkpointedRun } from "../adapters/openai_agents.ts";
import { agentCheckpointMiddleware, checkpointedReactAgent } from "../adapters/langchain.ts";
import { ScriptedChatModel, toolsThenAnswer } from "../tests/adapters/_langchain_fake.ts";

setTracingDisabled(true);
const CALLS = 12;
const runs = Number(process.argv[2] ?? Deno?.args?.[0] ?? 40);
const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-fw-"));
const ac = createAgentCheckpoint({ home, env: {} });

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};

async function compare(
  name: string,
  cap: number,
  bare: (i: number) => Promise<unknown>,
  adapted: (i: number) => Promise<unknown>,
): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await bare(-1 - i);
    await adapted(-1 - i);
  }
  const a: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < runs; i++) {
    let t = performance.now();
    await bare(i);
    b.push(performance.now() - t);
    t = performance.now();
    await adapted(i);
    a.push(performance.now() - t);
  }
  const perCall = (median(a) - median(b)) / CALLS;
  console.log(
    `${name.padEnd(28)} cap ${String(cap).padEnd(4)} bare ${median(b).toFixed(2)} ms/run, adapted ${
      median(a).toFixed(2)
    } ms/run: ${(perCall * 1000).toFixed(0)} µs per model call (${runs} runs of ${CALLS} calls)`,
  );
}

// --- OpenAI Agents SDK
const params = {
  type: "object" as const,
  properties: { q: { type: "string" } },
  required: ["q"],
  additionalProperties: false as const,
};
const search = oaTool({
  name: "search",
  description: "Search.",
  parameters: params,
  strict: true,
  execute: (args: unknown) => `found ${(args as { q: string }).q}`,
});
const oaModel = () =>
  new ScriptedModel(
    Array.from({ length: CALLS }, (_, i) =>
      i < CALLS - 1
        ? [functionCall("search", { q: `q${i}` }, { callId: `call_${i}` })]
        : [assistantMessage("done")]),
  );
const runner = new Runner();
for (const cap of [1000, CALLS]) {
  await compare(
    "@openai/agents run()",
    cap,
    () =>
      runner.run(new Agent({ name: "a", model: oaModel(), tools: [search] }), "Go", {
        maxTurns: CALLS,
      }),
    (i) =>
      checkpointedRun(
        ac,
        { sessionId: `oa-${cap}-${i}`, maxTurns: cap },
        new Agent({ name: "a", model: oaModel(), tools: [search] }),
        "Go",
        { runner },
      ),
  );

  // --- langchain createAgent
  const lcSearch = lcTool((args: { q: string }) => `found ${args.q}`, {
    name: "search",
    description: "Search.",
    schema: { type: "object" as const, properties: { q: { type: "string" } }, required: ["q"] },
  });
  const input = { messages: [{ role: "user", content: "Go" }] };
  await compare(
    "langchain createAgent",
    cap,
    () =>
      createAgent({ model: new ScriptedChatModel(toolsThenAnswer(CALLS - 1)), tools: [lcSearch] })
        .invoke(input, { recursionLimit: 2 * cap + 4 }),
    (i) =>
      createAgent({
        model: new ScriptedChatModel(toolsThenAnswer(CALLS - 1)),
        tools: [lcSearch],
        middleware: [agentCheckpointMiddleware(ac, { sessionId: `lc-${cap}-${i}`, maxTurns: cap })],
      }).invoke(input, { recursionLimit: 2 * cap + 4 }),
  );

  // What langchain itself spends on a middleware of the same shape that does nothing.
  if (cap === CALLS) {
    const noop = () =>
      createMiddleware({
        name: "Noop",
        stateSchema: z.object({ _run: z.string().optional() }),
        beforeAgent: () => ({ _run: "x" }),
        wrapModelCall: (request, handler) => handler(request),
        wrapToolCall: (request, handler) => handler(request),
        afterAgent: () => undefined,
      });
    await compare(
      "createAgent + no-op middleware",
      cap,
      () =>
        createAgent({ model: new ScriptedChatModel(toolsThenAnswer(CALLS - 1)), tools: [lcSearch] })
          .invoke(input, { recursionLimit: 2 * cap + 4 }),
      () =>
        createAgent({
          model: new ScriptedChatModel(toolsThenAnswer(CALLS - 1)),
          tools: [lcSearch],
          middleware: [noop()],
        }).invoke(input, { recursionLimit: 2 * cap + 4 }),
    );
  }

  // --- @langchain/langgraph createReactAgent
  await compare(
    "langgraph createReactAgent",
    cap,
    () =>
      createReactAgent({
        llm: new ScriptedChatModel(toolsThenAnswer(CALLS - 1)),
        tools: [lcSearch],
      })
        .invoke(input, { recursionLimit: 2 * cap }),
    (i) =>
      checkpointedReactAgent(ac, { sessionId: `lg-${cap}-${i}`, maxTurns: cap }, {
        llm: new ScriptedChatModel(toolsThenAnswer(CALLS - 1)),
        tools: [lcSearch],
      }).invoke(input),
  );
}

await ac.close();
fs.rmSync(home, { recursive: true, force: true });
