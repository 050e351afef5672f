// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The AI SDK adapter, driven by the SDK's own mock models, for each of `ai`
 * v5, v6 and v7 (each passed as `ai`), and once through the default `ai`.
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
import { type AgentCheckpoint, createAgentCheckpoint } from "../../mod.ts";
import { checkpointed } from "../../adapters/ai_sdk.ts";
import { parseRecord } from "../../_record.ts";
import { blockUntil, captureLog, sleep, tempHome, waitFor } from "../_helpers.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

/** One scripted model turn: tool calls, or text. */
interface Turn {
  calls?: { id: string; name: string; input?: unknown }[];
  text?: string;
  /** Stream the text as this many deltas, one every `gapMs`. */
  deltas?: number;
  gapMs?: number;
}

/** What differs between the majors: the module, its mock model and the result shapes. */
interface Version {
  name: string;
  ai: Any;
  Mock: Any;
  nested: boolean;
}

const VERSIONS: Version[] = [
  { name: "ai v5", ai: ai5, Mock: MockLanguageModelV2, nested: false },
  { name: "ai v6", ai: ai6, Mock: MockLanguageModelV3, nested: true },
  { name: "ai v7", ai: ai7, Mock: MockLanguageModelV4, nested: true },
];

const TIER1 = /write everything you have found so far/;
const TIER2 = /Final budget checkpoint/;

function shapes(v: Version) {
  const usage = v.nested
    ? {
      inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: 1, text: 1, reasoning: 0 },
    }
    : { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
  const finish = (reason: string) => v.nested ? { unified: reason, raw: reason } : reason;
  return { usage, finish };
}

/** A mock model of version `v` that plays `script(i, options)` for call `i`. */
function scripted(v: Version, script: (i: number, options: Any) => Turn | Promise<Turn>): Any {
  const { usage, finish } = shapes(v);
  let i = 0;
  const content = (turn: Turn) =>
    turn.calls?.length
      ? turn.calls.map((c) => ({
        type: "tool-call",
        toolCallId: c.id,
        toolName: c.name,
        input: JSON.stringify(c.input ?? {}),
      }))
      : [{ type: "text", text: turn.text ?? "done" }];
  return new v.Mock({
    doGenerate: async (options: Any) => {
      const turn = await script(i++, options);
      return {
        content: content(turn),
        finishReason: finish(turn.calls?.length ? "tool-calls" : "stop"),
        usage,
        warnings: [],
      };
    },
    doStream: async (options: Any) => {
      const turn = await script(i++, options);
      const stream = new ReadableStream({
        async start(controller) {
          controller.enqueue({ type: "stream-start", warnings: [] });
          if (turn.calls?.length) {
            for (const part of content(turn)) controller.enqueue(part);
          } else {
            controller.enqueue({ type: "text-start", id: "t" });
            const deltas = turn.deltas ?? 1;
            for (let d = 0; d < deltas; d++) {
              if (turn.gapMs) await sleep(turn.gapMs);
              controller.enqueue({ type: "text-delta", id: "t", delta: turn.text ?? "done" });
            }
            controller.enqueue({ type: "text-end", id: "t" });
          }
          controller.enqueue({
            type: "finish",
            finishReason: finish(turn.calls?.length ? "tool-calls" : "stop"),
            usage,
          });
          controller.close();
        },
      });
      return { stream };
    },
  });
}

/** A tool for version `v`'s SDK with an open input schema. */
function tool(v: Version, execute: (input: Any, options: Any) => unknown): Any {
  return { inputSchema: v.ai.jsonSchema({ type: "object" }), execute };
}

/** Every model call's prompt, as text. */
const prompts = (model: Any): string[] =>
  [...model.doGenerateCalls, ...model.doStreamCalls].map((c: Any) => JSON.stringify(c.prompt));

/** A keeper in a fresh home, with the checkpoints it writes, as events and from the file. */
function keeper(settings: Record<string, unknown> = {}) {
  const events: Any[] = [];
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings,
    logger: log.logger,
    onCheckpoint: (event) => events.push(event),
  });
  return { ac, events, logs: log.records };
}

/** The statuses the adapter ended the run with, each once its end is recorded. */
function endings(run: Any): string[] {
  const statuses: string[] = [];
  const end = run.end.bind(run);
  run.end = async (outcome?: Any) => {
    await end(outcome);
    statuses.push(outcome?.status ?? "done");
  };
  return statuses;
}

/**
 * Start the watchdog and wait until it writes (a first start compiles it, which
 * may take seconds), so a test of what it does meanwhile cannot pass without it.
 */
async function watchdogRunning(ac: AgentCheckpoint): Promise<void> {
  const warm = ac.startRun({ sessionId: `warm-${Math.random()}`, caps: { timeSeconds: 0.2 } });
  warm.activity();
  assert.ok(await waitFor(() => fs.existsSync(warm.checkpointFile), 60_000), "the watchdog runs");
  await warm.end();
}

const record = (file: string) => parseRecord(fs.readFileSync(file)) as Any;

async function closing<T>(ac: AgentCheckpoint, body: () => Promise<T>): Promise<T> {
  try {
    return await body();
  } finally {
    await ac.close();
  }
}

for (const v of VERSIONS) {
  test(`${v.name}: a cap of 12 steps allows 12 model calls, with tier 1 at step 6 and tier 2 at step 10 only`, async () => {
    const { ac } = keeper({ allow_tiny_tier1: true, watchdog: false });
    await closing(ac, async () => {
      const model = scripted(v, (i) => ({ calls: [{ id: `c${i}`, name: "look" }] }));
      const other = scripted(v, (i) => ({ calls: [{ id: `o${i}`, name: "look" }] }));
      const cp = checkpointed(ac, { sessionId: `cap12-${v.name}`, maxSteps: 12, ai: v.ai });
      const statuses = endings(cp.run);
      const seen: number[] = [];
      const result = await cp.generateText({
        model,
        prompt: "Survey the repository.",
        tools: { look: tool(v, () => "nothing new") },
        // The host's own prepareStep: a tool choice at step 2, another model from step 8.
        prepareStep: ({ stepNumber }: Any) => {
          seen.push(stepNumber);
          if (stepNumber === 2) return { toolChoice: "required" };
          if (stepNumber >= 8) return { model: other };
          return undefined;
        },
      });
      const all = [...prompts(model), ...prompts(other)];
      assert.equal(all.length, 12);
      assert.equal(result.steps.length, 12);
      assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
      assert.deepEqual(all.map((p) => TIER1.test(p)), all.map((_, i) => i === 6));
      assert.deepEqual(all.map((p) => TIER2.test(p)), all.map((_, i) => i === 10));
      // The directive is a trailing user message of that call only.
      const step10 = (other.doGenerateCalls[2].prompt as Any[]).at(-1);
      assert.equal(step10.role, "user");
      assert.match(step10.content[0].text, TIER2);
      assert.equal(model.doGenerateCalls[2].toolChoice.type, "required");
      const history = JSON.stringify([result.response.messages, result.steps]);
      assert.doesNotMatch(history, /budget checkpoint/);
      assert.deepEqual(statuses, ["capped"]);
      assert.equal(record(cp.run.checkpointFile).end?.status, "capped");
    });
  });

  test(`${v.name}: the host's own stopWhen still ends the run, which is done`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      const model = scripted(v, (i) => ({ calls: [{ id: `c${i}`, name: "look" }] }));
      const cp = checkpointed(ac, { sessionId: `stop-${v.name}`, maxSteps: 12, ai: v.ai });
      const statuses = endings(cp.run);
      const result = await cp.generateText({
        model,
        prompt: "Look three times.",
        tools: { look: tool(v, () => "seen") },
        stopWhen: ({ steps }: Any) => steps.length >= 3,
      });
      assert.equal(result.steps.length, 3);
      assert.equal(model.doGenerateCalls.length, 3);
      assert.deepEqual(statuses, ["done"]);
    });
  });

  test(`${v.name}: a tool that blocks the main thread past tier 2 gets the watchdog's file, and the next step tier 2`, async () => {
    const { ac } = keeper({ allow_tiny_tier1: true, watchdog_poll_seconds: 0.05 });
    await closing(ac, async () => {
      await watchdogRunning(ac);
      const model = scripted(v, (i) => i === 0 ? { calls: [{ id: "b1", name: "build" }] } : {});
      const cp = checkpointed(ac, {
        sessionId: `block-${v.name}`,
        maxSteps: 20,
        timeSeconds: 3,
        ai: v.ai,
      });
      let during: Any;
      let blockEnded = 0;
      const result = await cp.generateText({
        model,
        prompt: "Build it.",
        tools: {
          build: tool(v, () => {
            // Past tier 2 of a 3 s cap (2.4 s), until the watchdog's file shows it (bounded).
            const file = cp.run.checkpointFile;
            blockUntil(() => fs.existsSync(file) && record(file).tier === 2, 60_000);
            blockEnded = Date.now();
            during = record(cp.run.checkpointFile);
            return "built";
          }),
        },
      });
      assert.equal(result.steps.length, 2);
      assert.equal(during.source, "watchdog");
      assert.equal(during.tier, 2);
      assert.ok(Date.parse(during.persistedAt) < blockEnded);
      const all = prompts(model);
      assert.doesNotMatch(all[0]!, /budget checkpoint/);
      assert.match(all[1]!, TIER2);
    });
  });

  test(`${v.name}: streamText with a streaming tool: in flight until its stream ends, chunks and text are activity`, async () => {
    const { ac, events } = keeper({
      stall_window_seconds: 2,
      watchdog_poll_seconds: 0.05,
    });
    await closing(ac, async () => {
      await watchdogRunning(ac);
      const model = scripted(
        v,
        (i) =>
          i === 0
            ? { calls: [{ id: "s1", name: "count" }] }
            : { text: "tick ", deltas: 80, gapMs: 50 },
      );
      const cp = checkpointed(ac, { sessionId: `stream-${v.name}`, maxSteps: 20, ai: v.ai });
      const statuses = endings(cp.run);
      let midStream: Any;
      const result = cp.streamText({
        model,
        prompt: "Count slowly.",
        tools: {
          count: tool(v, async function* () {
            for (let n = 0; n < 80; n++) {
              if (n === 40) {
                await cp.run.checkpoint("half way");
                midStream = record(cp.run.checkpointFile);
              }
              await sleep(50);
              yield { counted: n };
            }
          }),
        },
      });
      let text = "";
      for await (const delta of result.textStream) text += delta;
      assert.equal(text, "tick ".repeat(80));
      const steps = await result.steps;
      assert.equal(steps.length, 2);
      // Streamed parts and tool chunks kept the run alive through 4 s silences past a 2 s window
      // (a chunk every 50 ms: a 40-fold margin for a busy machine).
      assert.deepEqual(events.filter((e) => e.kind === "stall" && e.runId === cp.run.runId), []);
      const call = midStream.tools.find((t: Any) => t.callId === "s1");
      assert.equal(call?.status, "in flight");
      assert.ok(await waitFor(() => statuses.length > 0));
      assert.deepEqual(statuses, ["done"]);
      const ended = record(cp.run.checkpointFile);
      assert.equal(ended.end?.status, "done");
      const done = ended.tools.find((t: Any) => t.callId === "s1");
      assert.equal(done?.status, "ok");
      assert.ok(done.durationMs >= 80 * 40);
    });
  });

  test(`${v.name}: placement tool-result appends the directive to the newest unsent tool result`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      // A cap of 2 makes tier 2 due at the first call, which has no tool result yet.
      const model = scripted(v, (i) => i === 0 ? { calls: [{ id: "r1", name: "read" }] } : {});
      const cp = checkpointed(ac, {
        sessionId: `placement-${v.name}`,
        maxSteps: 2,
        placement: "tool-result",
        ai: v.ai,
      });
      const result = await cp.generateText({
        model,
        prompt: "Read the file.",
        tools: { read: tool(v, () => ({ lines: 3 })) },
      });
      const calls = model.doGenerateCalls as Any[];
      assert.equal(calls.length, 2);
      assert.doesNotMatch(JSON.stringify(calls[0].prompt), /budget checkpoint/);
      const second = calls[1].prompt as Any[];
      assert.equal(second.at(-1).role, "tool");
      const output = second.at(-1).content[0].output;
      assert.equal(output.type, "text");
      assert.match(output.value, /^\{"lines":3\}\n\n/);
      assert.match(output.value, TIER2);
      assert.equal(second.filter((m) => m.role === "user").length, 1);
      assert.doesNotMatch(
        JSON.stringify([result.response.messages, result.steps]),
        /budget checkpoint/,
      );
    });
  });

  test(`${v.name}: placement system puts the directive after the system prompt`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      const model = scripted(v, () => ({}));
      const cp = checkpointed(ac, {
        sessionId: `system-${v.name}`,
        maxSteps: 2,
        placement: "system",
        ai: v.ai,
      });
      await cp.generateText({ model, system: "You are careful.", prompt: "Go." });
      const prompt = model.doGenerateCalls[0].prompt as Any[];
      assert.deepEqual(prompt.map((m) => m.role), ["system", "system", "user"]);
      assert.equal(prompt[0].content, "You are careful.");
      assert.match(prompt[1].content, TIER2);
    });
  });

  test(`${v.name}: two parallel calls of one tool are told apart by their call ids`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      const model = scripted(v, (i) =>
        i === 0
          ? {
            calls: [
              { id: "p1", name: "search", input: { q: "a" } },
              { id: "p2", name: "search", input: { q: "b" } },
            ],
          }
          : {});
      const cp = checkpointed(ac, { sessionId: `parallel-${v.name}`, maxSteps: 12, ai: v.ai });
      let started = 0;
      let both: () => void = () => {};
      const together = new Promise<void>((resolve) => both = resolve);
      let inFlight: Any;
      await cp.generateText({
        model,
        prompt: "Search twice.",
        tools: {
          search: tool(v, async ({ q }: Any) => {
            if (++started === 2) {
              await cp.run.checkpoint("both searching");
              inFlight = record(cp.run.checkpointFile);
              both();
            }
            await together;
            if (q === "b") throw new Error("no results");
            return "found";
          }),
        },
      });
      const byId = (r: Any, id: string) => r.tools.find((t: Any) => t.callId === id);
      assert.equal(byId(inFlight, "p1")?.status, "in flight");
      assert.equal(byId(inFlight, "p2")?.status, "in flight");
      const ended = record(cp.run.checkpointFile);
      assert.equal(byId(ended, "p1")?.status, "ok");
      assert.equal(byId(ended, "p2")?.status, "failed");
      assert.equal(byId(ended, "p2")?.tool, "search");
    });
  });

  test(`${v.name}: deadline: true aborts at the time cap with a deadline record`, async () => {
    const { ac, events } = keeper({ watchdog_poll_seconds: 0.05 });
    await closing(ac, async () => {
      const model = scripted(v, () => ({ calls: [{ id: "w1", name: "wait" }] }));
      const cp = checkpointed(ac, {
        sessionId: `deadline-${v.name}`,
        maxSteps: 12,
        timeSeconds: 1,
        deadline: true,
        ai: v.ai,
      });
      const statuses = endings(cp.run);
      await assert.rejects(cp.generateText({
        model,
        prompt: "Wait for it.",
        tools: {
          wait: tool(v, (_input: Any, { abortSignal }: Any) =>
            new Promise((_resolve, reject) => {
              const timer = setTimeout(() => reject(new Error("not aborted")), 30_000);
              abortSignal?.addEventListener("abort", () => {
                clearTimeout(timer);
                reject(abortSignal.reason);
              });
            })),
        },
      }));
      assert.deepEqual(statuses, ["deadline"]);
      // Written by the main thread or the watchdog, whose event comes when the thread is free.
      assert.ok(await waitFor(() => events.some((e) => e.kind === "deadline")));
      assert.equal(record(cp.run.checkpointFile).end?.status, "deadline");
    });
  });

  test(`${v.name}: the host's own abort signal ends the run as aborted`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      const controller = new AbortController();
      const model = scripted(v, async (i, options) => {
        if (i === 1) {
          controller.abort();
          await sleep(1);
          options.abortSignal?.throwIfAborted();
        }
        return { calls: [{ id: `a${i}`, name: "look" }] };
      });
      const cp = checkpointed(ac, { sessionId: `abort-${v.name}`, maxSteps: 12, ai: v.ai });
      const statuses = endings(cp.run);
      await assert.rejects(cp.generateText({
        model,
        prompt: "Look.",
        tools: { look: tool(v, () => "x") },
        abortSignal: controller.signal,
      }));
      assert.deepEqual(statuses, ["aborted"]);
    });
  });

  test(`${v.name}: an error the SDK throws is rethrown and ends the run as failed`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      const model = scripted(v, () => {
        throw new Error("provider down");
      });
      const cp = checkpointed(ac, { sessionId: `fail-${v.name}`, maxSteps: 12, ai: v.ai });
      const statuses = endings(cp.run);
      await assert.rejects(
        cp.generateText({ model, prompt: "Go.", maxRetries: 0 }),
        /provider down/,
      );
      assert.deepEqual(statuses, ["failed"]);
    });
  });

  test(`${v.name}: streamText that errors ends the run as failed`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      const model = new v.Mock({
        doStream: () =>
          Promise.resolve({
            stream: new ReadableStream({
              start(controller) {
                controller.enqueue({ type: "stream-start", warnings: [] });
                controller.error(new Error("connection reset"));
              },
            }),
          }),
      });
      const cp = checkpointed(ac, { sessionId: `stream-fail-${v.name}`, maxSteps: 5, ai: v.ai });
      const statuses = endings(cp.run);
      const result = cp.streamText({ model, prompt: "Go.", onError: () => {} });
      await assert.rejects(async () => {
        for await (const _ of result.fullStream) { /* drain */ }
      }, /connection reset/);
      assert.ok(await waitFor(() => statuses.length > 0));
      assert.deepEqual(statuses, ["failed"]);
    });
  });
}

for (const v of VERSIONS) {
  test(`${v.name}: streamText stopped at the step cap ends the run as capped`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      const model = scripted(v, (i) => ({ calls: [{ id: `k${i}`, name: "look" }] }));
      const cp = checkpointed(ac, { sessionId: `stream-cap-${v.name}`, maxSteps: 3, ai: v.ai });
      const statuses = endings(cp.run);
      const result = cp.streamText({ model, prompt: "Look.", tools: { look: tool(v, () => "x") } });
      await result.consumeStream();
      assert.equal((await result.steps).length, 3);
      assert.equal(model.doStreamCalls.length, 3);
      assert.match(prompts(model)[1]!, TIER2);
      assert.ok(await waitFor(() => statuses.length > 0));
      assert.deepEqual(statuses, ["capped"]);
    });
  });

  test(`${v.name}: streamText aborted by the host's signal ends the run as aborted`, async () => {
    const { ac } = keeper({ watchdog: false });
    await closing(ac, async () => {
      const controller = new AbortController();
      const model = scripted(v, () => ({ text: "word ", deltas: 100, gapMs: 5 }));
      const cp = checkpointed(ac, { sessionId: `stream-abort-${v.name}`, maxSteps: 3, ai: v.ai });
      const statuses = endings(cp.run);
      const result = cp.streamText({ model, prompt: "Talk.", abortSignal: controller.signal });
      let deltas = 0;
      try {
        for await (const _ of result.textStream) if (++deltas === 3) controller.abort();
      } catch { /* some versions throw the abort, some end the stream */ }
      assert.ok(await waitFor(() => statuses.length > 0));
      assert.deepEqual(statuses, ["aborted"]);
    });
  });
}

test("a fault while placing the directive is a log line, and a later tool result carries it", async () => {
  // v5 passes a malformed tool output through to the model; v6 and v7 refuse it themselves.
  const v = VERSIONS[0]!;
  const { ac, logs } = keeper({ watchdog: false });
  await closing(ac, async () => {
    const model = scripted(
      v,
      (i) =>
        i === 0
          ? { calls: [{ id: "n1", name: "count" }] }
          : i === 1
          ? { calls: [{ id: "r1", name: "read" }] }
          : {},
    );
    // A cap of 3: tier 2 is due at the second call, whose tool result cannot carry it.
    const cp = checkpointed(ac, {
      sessionId: `fault-${v.name}`,
      maxSteps: 3,
      placement: "tool-result",
      ai: v.ai,
    });
    const result = await cp.generateText({
      model,
      prompt: "Count, then read.",
      tools: {
        // An output no provider could take: placing the directive in it fails.
        count: { ...tool(v, () => 10), toModelOutput: () => ({ type: "content", value: 10 }) },
        read: tool(v, () => "three lines"),
      },
    });
    assert.equal(result.text, "done");
    assert.deepEqual(prompts(model).map((p) => TIER2.test(p)), [false, false, true]);
    const last = (model.doGenerateCalls[2].prompt as Any[]).at(-1);
    assert.equal(last.content[0].toolCallId, "r1");
    assert.match(last.content[0].output.value, /^three lines\n\n/);
    assert.ok(logs.some((r) => /placing the checkpoint directive failed/.test(r.message)));
  });
});

test("a retried model call carries the directive its failed attempt lost", async () => {
  const { ac } = keeper({ watchdog: false });
  await closing(ac, async () => {
    const v = VERSIONS[2]!;
    let attempts = 0;
    const model = scripted(v, () => {
      if (++attempts === 1) {
        throw new ai7.APICallError({
          message: "overloaded",
          url: "http://model.test",
          requestBodyValues: {},
          statusCode: 529,
          isRetryable: true,
        });
      }
      return {};
    });
    // A cap of 2: tier 2 is due at the first call.
    const cp = checkpointed(ac, { sessionId: "retry", maxSteps: 2, ai: v.ai });
    const result = await cp.generateText({ model, prompt: "Go.", maxRetries: 1 });
    assert.equal(result.text, "done");
    const all = prompts(model);
    assert.equal(all.length, 2);
    assert.match(all[0]!, TIER2);
    assert.match(all[1]!, TIER2);
  });
});

test("a second call on one checkpointed() run is a warning in the log, and still works", async () => {
  const { ac, logs } = keeper({ watchdog: false });
  await closing(ac, async () => {
    const v = VERSIONS[2]!;
    const cp = checkpointed(ac, { sessionId: "twice", maxSteps: 3, ai: v.ai });
    await cp.generateText({ model: scripted(v, () => ({})), prompt: "One." });
    const again = await cp.generateText({ model: scripted(v, () => ({})), prompt: "Two." });
    assert.equal(again.text, "done");
    assert.ok(logs.some((r) => r.level === "warn" && /once per generateText/.test(r.message)));
  });
});

test("the default ai (v7) drives a v5 model too", async () => {
  (globalThis as Any).AI_SDK_LOG_WARNINGS = false;
  const { ac } = keeper({ watchdog: false });
  await closing(ac, async () => {
    const v5 = VERSIONS[0]!;
    const model = scripted(v5, (i) => i < 3 ? { calls: [{ id: `d${i}`, name: "look" }] } : {});
    const cp = checkpointed(ac, { sessionId: "default-ai", maxSteps: 4 });
    const result = await cp.generateText({
      model,
      prompt: "Look.",
      tools: {
        look: ai7.tool({ inputSchema: ai7.jsonSchema({ type: "object" }), execute: () => "x" }),
      },
    });
    assert.equal(result.steps.length, 4);
    assert.deepEqual(prompts(model).map((p) => TIER2.test(p)), [false, false, true, false]);
  });
});

test("checkpointed() refuses a step cap that is not a whole number of at least 1", async () => {
  const { ac } = keeper({ watchdog: false });
  await closing(ac, () => {
    for (const maxSteps of [0, NaN, -3, "12", 2.5, Infinity, undefined, null]) {
      assert.throws(
        () => checkpointed(ac, { sessionId: "bad", maxSteps: maxSteps as Any, ai: ai7 }),
        (error: Error) =>
          error instanceof TypeError && /^maxSteps must be/.test(error.message) &&
          error.message.includes(typeof maxSteps === "string" ? `"12"` : String(maxSteps)),
      );
    }
    return Promise.resolve();
  });
});

test("checkpointed() refuses a bad time cap, placement, deadline, session or ai module", async () => {
  const { ac } = keeper({ watchdog: false });
  await closing(ac, () => {
    const good = { sessionId: "s", maxSteps: 5, ai: ai7 };
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ timeSeconds: "60" }, /^timeSeconds must be/],
      [{ timeSeconds: 0 }, /^timeSeconds must be/],
      [{ placement: "bottom" }, /^placement must be/],
      [{ deadline: "yes" }, /^deadline must be/],
      [{ sessionId: "" }, /^sessionId must be/],
      [{ ai: {} }, /^ai must be the AI SDK module/],
    ];
    for (const [change, message] of bad) {
      assert.throws(() => checkpointed(ac, { ...good, ...change } as Any), (error: Error) => {
        return error instanceof TypeError && message.test(error.message);
      });
    }
    assert.throws(() => checkpointed({} as Any, good), TypeError);
    return Promise.resolve();
  });
});

test("after close() the run's hooks are no-ops and the SDK call still works", async () => {
  const { ac } = keeper({ watchdog: false });
  await ac.close();
  const v = VERSIONS[2]!;
  const model = scripted(v, (i) => i < 2 ? { calls: [{ id: `z${i}`, name: "look" }] } : {});
  const cp = checkpointed(ac, { sessionId: "closed", maxSteps: 3, ai: v.ai });
  const result = await cp.generateText({
    model,
    prompt: "Look.",
    tools: { look: tool(v, () => "x") },
  });
  assert.equal(result.steps.length, 3);
  assert.equal(result.text, "done");
  assert.deepEqual(prompts(model).map((p) => /budget checkpoint/.test(p)), [false, false, false]);
});
