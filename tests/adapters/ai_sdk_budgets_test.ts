// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * Tokens, dollars and tool deadlines through the AI SDK adapter, driven by
 * each major's own mock model reporting usage in its own shape.
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
import { createAgentCheckpoint } from "../../mod.ts";
import { checkpointed } from "../../adapters/ai_sdk.ts";
import { parseRecord } from "../../_record.ts";
import { tempHome } from "../_helpers.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const VERSIONS = [
  { name: "ai v5", ai: ai5 as Any, Mock: MockLanguageModelV2 as Any, nested: false },
  { name: "ai v6", ai: ai6 as Any, Mock: MockLanguageModelV3 as Any, nested: true },
  { name: "ai v7", ai: ai7 as Any, Mock: MockLanguageModelV4 as Any, nested: true },
];
type Version = typeof VERSIONS[number];

/** One call's usage in the version's own shape. */
const usageOf = (v: Version, input: number, output: number) =>
  v.nested
    ? {
      inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: output, text: output, reasoning: 0 },
    }
    : { inputTokens: input, outputTokens: output, totalTokens: input + output };

/**
 * A mock model that asks for the tool `look` on every call but the last of
 * `calls`, each call using 600 input and 400 output tokens.
 */
function model(v: Version, calls: number): Any {
  let i = 0;
  const finish = (r: string) => v.nested ? { unified: r, raw: r } : r;
  const turn = () => {
    const n = i++;
    const last = n >= calls - 1;
    const content = last
      ? [{ type: "text", text: "done" }]
      : [{ type: "tool-call", toolCallId: `call_${n}`, toolName: "look", input: "{}" }];
    return { content, finishReason: finish(last ? "stop" : "tool-calls") };
  };
  return new v.Mock({
    doGenerate: () => Promise.resolve({ ...turn(), usage: usageOf(v, 600, 400), warnings: [] }),
    doStream: () => {
      const { content, finishReason } = turn();
      const stream = new ReadableStream({
        start(controller) {
          controller.enqueue({ type: "stream-start", warnings: [] });
          for (const part of content) {
            if (part.type === "text") {
              controller.enqueue({ type: "text-start", id: "t" });
              controller.enqueue({ type: "text-delta", id: "t", delta: "done" });
              controller.enqueue({ type: "text-end", id: "t" });
            } else controller.enqueue(part);
          }
          controller.enqueue({ type: "finish", finishReason, usage: usageOf(v, 600, 400) });
          controller.close();
        },
      });
      return Promise.resolve({ stream });
    },
  });
}

const prompts = (m: Any): string[] =>
  [...m.doGenerateCalls, ...m.doStreamCalls].map((c: Any) => JSON.stringify(c.prompt));
const firstWith = (texts: string[], re: RegExp) => texts.findIndex((t) => re.test(t));

for (const v of VERSIONS) {
  for (const mode of ["generateText", "streamText"] as const) {
    test(`${v.name} ${mode}: the model's usage reaches the token tiers at the right call`, async () => {
      const ac = createAgentCheckpoint({
        home: tempHome(),
        env: {},
        settings: { watchdog: false },
      });
      const m = model(v, 12);
      const cp = checkpointed(ac, { sessionId: "tokens", maxSteps: 12, tokens: 10_000, ai: v.ai });
      const params = {
        model: m,
        tools: { look: { inputSchema: v.ai.jsonSchema({ type: "object" }), execute: () => "ok" } },
        prompt: "Go",
      };
      if (mode === "generateText") await cp.generateText(params);
      else await cp.streamText(params).consumeStream();
      // 1,000 tokens a call: 5,000 after call 4 (0-based), 9,000 after call 8.
      const texts = prompts(m);
      assert.equal(texts.length, 12);
      assert.equal(firstWith(texts, /5000 of 10000 tokens \(5000 left\)/), 5);
      assert.equal(firstWith(texts, /Final budget checkpoint: .*9000 of 10000 tokens/), 9);
      const r = parseRecord(fs.readFileSync(cp.run.checkpointFile))!;
      assert.deepEqual(r.usage, { inputTokens: 7200, outputTokens: 4800 });
      await ac.close();
    });
  }
}

test("ai v7: a dollar cap priced from the model's id through the prices setting", async () => {
  const v = VERSIONS[2]!;
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    // $100 per million input and output tokens: $0.10 a call of 1,000 tokens.
    settings: { watchdog: false, prices: { "mock-model-id": { input: 100, output: 100 } } },
  });
  const m = model(v, 12);
  const cp = checkpointed(ac, { sessionId: "usd", maxSteps: 20, usd: 1, ai: v.ai });
  await cp.generateText({
    model: m,
    tools: { look: { inputSchema: v.ai.jsonSchema({ type: "object" }), execute: () => "ok" } },
    prompt: "Go",
  });
  const texts = prompts(m);
  assert.equal(firstWith(texts, /\$0\.50 of \$1\.00/), 5);
  assert.equal(firstWith(texts, /Final budget checkpoint: .*\$0\.90 of \$1\.00/), 9);
  await ac.close();
});

for (const v of VERSIONS) {
  test(`${v.name}: a tool past its deadline is aborted through its abortSignal and recorded`, async () => {
    const events: string[] = [];
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      settings: { watchdog: false, tool_timeout_seconds: 0.2 },
      onCheckpoint: (e) => events.push(e.kind),
    });
    let reason: unknown;
    const hang = (_input: unknown, options: Any) =>
      new Promise((_resolve, reject) => {
        options.abortSignal.addEventListener("abort", () => {
          reason = options.abortSignal.reason;
          reject(reason);
        });
      });
    const cp = checkpointed(ac, { sessionId: "hang", maxSteps: 10, ai: v.ai });
    const alive = setInterval(() => {}, 50); // the host's own work keeps the process alive
    try {
      await cp.generateText({
        model: model(v, 2),
        tools: { look: { inputSchema: v.ai.jsonSchema({ type: "object" }), execute: hang } },
        prompt: "Go",
      });
    } finally {
      clearInterval(alive);
    }
    assert.equal((reason as DOMException)?.name, "TimeoutError");
    assert.deepEqual(events, ["tool_timeout", "end"]);
    const r = parseRecord(fs.readFileSync(cp.run.checkpointFile))!;
    assert.deepEqual(r.tools.map((t) => [t.tool, t.callId, t.status, t.timedOut]), [
      ["look", "call_0", "failed", true],
    ]);
    await ac.close();
  });
}

for (const v of VERSIONS) {
  test(`${v.name}: an enforced token cap stops generateText through its abortSignal, after the budget record`, async () => {
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      settings: { watchdog: false, enforce: ["tokens"] },
    });
    const m = model(v, 12);
    const cp = checkpointed(ac, { sessionId: "enforced", maxSteps: 12, tokens: 5_000, ai: v.ai });
    let atAbort: string | undefined;
    cp.run.signal.addEventListener("abort", () => {
      atAbort = fs.readFileSync(cp.run.checkpointFile, "utf8");
    });
    const params = {
      model: m,
      tools: { look: { inputSchema: v.ai.jsonSchema({ type: "object" }), execute: () => "ok" } },
      prompt: "Go",
    };
    await assert.rejects(cp.generateText(params));
    // 1,000 tokens a call: the fifth reaches the cap, and no sixth starts.
    assert.equal(prompts(m).length, 5);
    assert.match(atAbort ?? "", /enforced budget cap passed; checkpoint persisted before the stop/);
    const r = parseRecord(fs.readFileSync(cp.run.checkpointFile))!;
    assert.equal(r.end?.status, "capped");
    await ac.close();
  });
}
