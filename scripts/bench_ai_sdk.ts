// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The time the AI SDK adapter adds per step: the same scripted agent loop
 * (a mock model that calls one tool per step) run through the bare SDK and
 * through `checkpointed()`, interleaved in one process, for `ai` v5, v6 and v7.
 *
 *   deno run -A scripts/bench_ai_sdk.ts [--steps 50] [--runs 40]
 *
 * The adapter's figure includes everything a host pays: starting and ending
 * the run, the model wrapper, the tool reports, and the checkpoint files
 * written at tier 1 and tier 2 (settings as shipped, watchdog on).
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as ai5 from "npm:ai@5.0.277";
import { MockLanguageModelV2 } from "npm:ai@5.0.277/test";
import * as ai6 from "npm:ai@6.0.326";
import { MockLanguageModelV3 } from "npm:ai@6.0.326/test";
import * as ai7 from "npm:ai@7.0.173";
import { MockLanguageModelV4 } from "npm:ai@7.0.173/test";
import { createAgentCheckpoint } from "../mod.ts";
import { checkpointed } from "../adapters/ai_sdk.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const arg = (name: string, fallback: number): number => {
  const i = Deno.args.indexOf(`--${name}`);
  return i >= 0 ? Number(Deno.args[i + 1]) : fallback;
};
const STEPS = arg("steps", 50);
const RUNS = arg("runs", 40);

const versions = [
  { name: "ai 5.0.277", ai: ai5 as Any, Mock: MockLanguageModelV2 as Any, nested: false },
  { name: "ai 6.0.326", ai: ai6 as Any, Mock: MockLanguageModelV3 as Any, nested: true },
  { name: "ai 7.0.173", ai: ai7 as Any, Mock: MockLanguageModelV4 as Any, nested: true },
];

function model(v: (typeof versions)[number]): Any {
  const usage = v.nested
    ? {
      inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: 1, text: 1, reasoning: 0 },
    }
    : { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
  let n = 0;
  return new v.Mock({
    doGenerate: () =>
      Promise.resolve({
        content: [{ type: "tool-call", toolCallId: `c${n++}`, toolName: "look", input: "{}" }],
        finishReason: v.nested ? { unified: "tool-calls", raw: "tool_use" } : "tool-calls",
        usage,
        warnings: [],
      }),
  });
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};

const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-ai-"));
const ac = createAgentCheckpoint({ home, env: {} });
// The adapter's own machinery, with the library's hooks switched off.
const off = createAgentCheckpoint({ home, env: {}, settings: { enabled: false } });
console.log(`${STEPS} steps per run, ${RUNS} runs each, interleaved; median per step`);
for (const v of versions) {
  const tools = {
    look: { inputSchema: v.ai.jsonSchema({ type: "object" }), execute: () => "seen" },
  };
  const bare: number[] = [];
  const wired: number[] = [];
  const machinery: number[] = [];
  for (let r = 0; r < RUNS + 3; r++) {
    let t = performance.now();
    const a = await v.ai.generateText({
      model: model(v),
      prompt: "Look.",
      tools,
      stopWhen: v.ai.stepCountIs(STEPS),
    });
    const bareMs = performance.now() - t;
    t = performance.now();
    const cp = checkpointed(ac, { sessionId: `bench-${v.name}-${r}`, maxSteps: STEPS, ai: v.ai });
    const b = await cp.generateText({ model: model(v), prompt: "Look.", tools });
    const wiredMs = performance.now() - t;
    t = performance.now();
    const cpOff = checkpointed(off, { sessionId: `off-${v.name}-${r}`, maxSteps: STEPS, ai: v.ai });
    const c = await cpOff.generateText({ model: model(v), prompt: "Look.", tools });
    const offMs = performance.now() - t;
    if ([a, b, c].some((x) => x.steps.length !== STEPS)) throw new Error("wrong step count");
    if (r < 3) continue; // warm-up
    bare.push(bareMs / STEPS);
    wired.push(wiredMs / STEPS);
    machinery.push(offMs / STEPS);
  }
  const b = median(bare);
  const w = median(wired);
  const m = median(machinery);
  const us = (x: number) => `${(x * 1000).toFixed(0)} µs`;
  console.log(
    `${v.name}: bare ${us(b)}/step; adapter ${us(w)}/step, added ${us(w - b)}/step ` +
      `(of which the adapter's wrapping alone, library off: ${us(m - b)})`,
  );
}
await ac.close();
await off.close();
fs.rmSync(home, { recursive: true, force: true });
