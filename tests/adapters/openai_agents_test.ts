// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Agent,
  type CallModelInputFilter,
  MaxTurnsExceededError,
  MemorySession,
  Runner,
  setTracingDisabled,
  tool,
} from "npm:@openai/agents@0.x";
import {
  assistantMessage,
  functionCall,
  modelResponder,
  ScriptedModel,
} from "npm:@openai/agents@0.x/testing";
import { checkpointedRun } from "../../adapters/openai_agents.ts";
import { blockFor, sleep, waitFor } from "../_helpers.ts";
import { make, type record } from "./_keeper.ts";

setTracingDisabled(true); // offline: no trace exporter

const params = {
  type: "object" as const,
  properties: { q: { type: "string" } },
  required: ["q"],
  additionalProperties: false as const,
};

/** A tool that answers at once, or throws for the query "fail". */
const search = tool({
  name: "search",
  description: "Search the notes.",
  parameters: params,
  strict: true,
  execute: (args: unknown) => {
    const q = (args as { q: string }).q;
    if (q === "fail") throw new Error("the index is down");
    return `found ${q}`;
  },
});

/**
 * A model that asks for `search` on each of its first `toolCalls` calls and
 * then answers; records the input each call received.
 */
function scripted(toolCalls: number, total = toolCalls + 1, query = (i: number) => `q${i}`) {
  const received: string[] = [];
  const model = new ScriptedModel(
    Array.from({ length: total }, (_, i) =>
      modelResponder((call) => {
        received.push(JSON.stringify([call.request.systemInstructions, call.request.input]));
        return i < toolCalls
          ? [functionCall("search", { q: query(i) }, { callId: `call_${i}` })]
          : [assistantMessage("all done")];
      })),
  );
  return { model, received };
}

/**
 * Wait until the watchdog worker runs (under `deno test` it is type-checked
 * as it starts, which can take seconds): a warm-up run with a short time cap
 * gets its file from the watchdog.
 */
async function watchdogUp(
  ac: ReturnType<typeof make>["ac"],
  recordOf: (runId: string) => ReturnType<typeof record>,
): Promise<void> {
  const warm = ac.startRun({ sessionId: "warm-up", caps: { timeSeconds: 0.2 } });
  warm.activity();
  assert.ok(await waitFor(() => recordOf("warm-up")?.source === "watchdog", 60_000));
  await warm.end();
}

const DIRECTIVE = /budget checkpoint/i;
const dueAt = (received: string[]) =>
  received.flatMap((input, i) => DIRECTIVE.test(input) ? [i] : []);

test("cap 12: the prologue reaches the model at 6 and 10 turns used only, and never the history", async () => {
  const { ac, recordOf } = make();
  const { model, received } = scripted(11, 12);
  const agent = new Agent({ name: "helper", instructions: "Be brief.", model, tools: [search] });
  const seenByUserFilter: string[] = [];
  const userFilter: CallModelInputFilter = ({ modelData }) => {
    seenByUserFilter.push(JSON.stringify(modelData.input));
    return { ...modelData, input: [...modelData.input, { role: "user", content: "USER NOTE" }] };
  };
  const result = await checkpointedRun(ac, { sessionId: "cap12", maxTurns: 12 }, agent, "Go", {
    callModelInputFilter: userFilter,
  });
  assert.equal(result.finalOutput, "all done");
  assert.equal(model.calls.length, 12);
  assert.deepEqual(dueAt(received), [6, 10]);
  assert.match(received[6]!, /you have used 6 of 12 turns/);
  assert.match(received[10]!, /Final budget checkpoint: you have used 10 of 12 turns/);
  // The host's filter ran on every call, before the prologue was added.
  assert.equal(seenByUserFilter.length, 12);
  assert.ok(seenByUserFilter.every((input) => !DIRECTIVE.test(input)));
  assert.ok(received.every((input) => input.includes("USER NOTE")));
  assert.doesNotMatch(JSON.stringify(result.history), DIRECTIVE);
  const r = recordOf("cap12");
  assert.equal(r?.end?.status, "done");
  assert.equal(r?.turnsUsed, 12);
  await ac.close();
});

test("the prologue can go into the system instructions or the newest tool result instead", async () => {
  for (const placement of ["system", "tool-result"] as const) {
    const { ac } = make();
    const { model, received } = scripted(11, 12);
    const agent = new Agent({ name: "helper", instructions: "Be brief.", model, tools: [search] });
    const result = await checkpointedRun(
      ac,
      { sessionId: `placed-${placement}`, maxTurns: 12, placement },
      agent,
      "Go",
    );
    assert.deepEqual(dueAt(received), [6, 10], placement);
    const sent = JSON.parse(received[6]!) as [string, Array<Record<string, unknown>>];
    if (placement === "system") {
      assert.match(sent[0], /^Be brief\.\n\nBudget checkpoint/);
    } else {
      const last = sent[1].at(-1)!;
      assert.equal(last.type, "function_call_result");
      assert.match(JSON.stringify(last.output), /found q5\\n\\nBudget checkpoint/);
    }
    assert.doesNotMatch(JSON.stringify(result.history), DIRECTIVE, placement);
    await ac.close();
  }
});

test("with a session, a prologue due at the first call goes into the instructions, not the session", async () => {
  const { ac } = make();
  const session = new MemorySession();
  const model = new ScriptedModel([[assistantMessage("ok")]]);
  const agent = new Agent({ name: "helper", instructions: "Be brief.", model });
  // A cap of two turns: the last checkpoint is due at the first call, whose input a session keeps.
  await checkpointedRun(ac, { sessionId: "with-session", maxTurns: 2 }, agent, "Go", { session });
  assert.match(model.calls[0]!.request.systemInstructions ?? "", /^Be brief\.\n\nFinal budget/);
  assert.doesNotMatch(JSON.stringify(model.calls[0]!.request.input), DIRECTIVE);
  assert.doesNotMatch(JSON.stringify(await session.getItems()), DIRECTIVE);
  await ac.close();
});

test("a fault while placing the prologue is a log line", async () => {
  // Without the journal the prologue is placed by a filter after the host's own.
  const { ac, log } = make({ journal: false });
  const model = new ScriptedModel([[assistantMessage("ok")]]);
  const agent = new Agent({ name: "helper", model });
  // The host's filter returns no input array: placing fails (a log line); the SDK then refuses it.
  const broken = (() => ({ instructions: "x" })) as unknown as CallModelInputFilter;
  await assert.rejects(
    checkpointedRun(ac, { sessionId: "faulty", maxTurns: 2 }, agent, "Go", {
      callModelInputFilter: broken,
    }),
    /callModelInputFilter must return/,
  );
  assert.ok(log.records.some((r) => /openai-agents: placing the prologue failed/.test(r.message)));
  await ac.close();
});

test("tool calls are reported with their call ids, a tool that threw as failed; host hooks still fire", async () => {
  const { ac, recordOf } = make();
  const { model } = scripted(2, 3, (i) => i === 1 ? "fail" : `q${i}`);
  const agent = new Agent({ name: "helper", model, tools: [search] });
  const runner = new Runner();
  const hostSaw: string[] = [];
  runner.on("agent_tool_end", (_c, _a, t) => void hostSaw.push(t.name));
  // A cap of 4: tier 2 is due from 2 turns used, so the file is written before the last tool.
  await checkpointedRun(ac, { sessionId: "tools", maxTurns: 4 }, agent, "Go", { runner });
  assert.deepEqual(hostSaw, ["search", "search"]);
  const r = recordOf("tools");
  assert.ok(r, "the run has its file");
  assert.deepEqual(
    r.tools.map((t) => [t.tool, t.callId, t.status]),
    [["search", "call_0", "ok"], ["search", "call_1", "failed"]],
  );
  assert.equal(r.end?.status, "done");
  await ac.close();
});

test("max-turns exhaustion ends the run capped and the SDK's error reaches the caller", async () => {
  const { ac, recordOf } = make();
  const { model } = scripted(3, 3);
  const agent = new Agent({ name: "helper", model, tools: [search] });
  await assert.rejects(
    checkpointedRun(ac, { sessionId: "exhausted", maxTurns: 3 }, agent, "Go"),
    (error: unknown) => error instanceof MaxTurnsExceededError,
  );
  assert.equal(model.calls.length, 3);
  const r = recordOf("exhausted");
  assert.equal(r?.end?.status, "capped");
  assert.match(r?.end?.summary ?? "", /MaxTurnsExceededError/);
  await ac.close();
});

test("an error the SDK throws ends the run failed and is rethrown", async () => {
  const { ac, recordOf } = make();
  const model = new ScriptedModel([modelResponder(() => {
    throw new Error("provider down");
  })]);
  const agent = new Agent({ name: "helper", model });
  await assert.rejects(
    // A cap of 2: tier 2 is due at the first call, so the run has a file to end in.
    checkpointedRun(ac, { sessionId: "broken", maxTurns: 2 }, agent, "Go"),
    /provider down/,
  );
  assert.equal(recordOf("broken")?.end?.status, "failed");
  await ac.close();
});

test("a streamed run ends when its stream completes", async () => {
  const { ac, recordOf } = make();
  const { model, received } = scripted(11, 12);
  const agent = new Agent({ name: "helper", model, tools: [search] });
  const streamed = await checkpointedRun(ac, { sessionId: "streamed", maxTurns: 12 }, agent, "Go", {
    stream: true,
  });
  let events = 0;
  for await (const _ of streamed) events++;
  await streamed.completed;
  assert.ok(events > 12);
  assert.deepEqual(dueAt(received), [6, 10]);
  assert.doesNotMatch(JSON.stringify(streamed.history), DIRECTIVE);
  assert.ok(await waitFor(() => recordOf("streamed")?.end !== undefined), "the run ended");
  assert.equal(recordOf("streamed")?.end?.status, "done");
  await ac.close();
});

test("a tool that blocks the main thread past a crossing still gets the watchdog's file", async () => {
  const { ac, recordOf } = make({ watchdog_poll_seconds: 0.05 });
  await watchdogUp(ac, recordOf);
  let blockedAt = 0;
  let freedAt = 0;
  const slow = tool({
    name: "compile",
    description: "Compile the project.",
    parameters: params,
    strict: true,
    execute: () => {
      blockedAt = Date.now();
      blockFor(3000); // tier 1 at 2 s and tier 2 at 3.2 s of a 4 s cap: 2 s crosses during the block
      freedAt = Date.now();
      return "built";
    },
  });
  const model = new ScriptedModel([
    [functionCall("compile", { q: "all" }, { callId: "call_c" })],
    [assistantMessage("built it")],
  ]);
  const agent = new Agent({ name: "builder", model, tools: [slow] });
  let during: ReturnType<typeof record>;
  const runner = new Runner();
  runner.on("agent_tool_end", (_ctx, _agent, _tool, _result, details) => {
    // The first moment the main thread is free after the block: read what the watchdog wrote.
    if ((details.toolCall as { callId?: string }).callId === "call_c") during = recordOf("blocked");
  });
  await checkpointedRun(ac, { sessionId: "blocked", maxTurns: 12, timeSeconds: 4 }, agent, "Go", {
    runner,
  });
  assert.ok(during, "the file existed when the block ended");
  assert.equal(during.source, "watchdog");
  const persisted = Date.parse(during.persistedAt);
  assert.ok(persisted >= blockedAt && persisted <= freedAt, "persisted during the block");
  assert.deepEqual(during.tools.map((t) => [t.tool, t.callId, t.status]), [
    ["compile", "call_c", "in flight"],
  ]);
  await ac.close();
});

test("deadline: true aborts the SDK's run at the time cap and ends it with a deadline record", async () => {
  const { ac, recordOf, written } = make();
  const waits = tool({
    name: "wait",
    description: "Wait for the build.",
    parameters: params,
    strict: true,
    execute: async (_args: unknown, _ctx: unknown, details?: { signal?: AbortSignal }) => {
      const signal = details?.signal;
      for (let i = 0; i < 300 && !signal?.aborted; i++) await sleep(20);
      return "waited";
    },
  });
  const model = new ScriptedModel([
    [functionCall("wait", { q: "build" }, { callId: "call_w" })],
    [assistantMessage("never reached")],
  ]);
  const agent = new Agent({ name: "waiter", model, tools: [waits] });
  const started = Date.now();
  await assert.rejects(
    checkpointedRun(
      ac,
      { sessionId: "deadline", maxTurns: 2, timeSeconds: 1, deadline: true },
      agent,
      "Go",
    ),
  );
  assert.ok(Date.now() - started < 5500, "stopped well before the tool would have finished");
  const r = recordOf("deadline");
  assert.equal(r?.end?.status, "deadline");
  assert.ok(
    await waitFor(() => written.some((e) => e.runId === "deadline" && e.kind === "deadline")),
    "a deadline checkpoint was written",
  );
  await ac.close();
});

test("bad caps are a TypeError at the call, before any run starts", async () => {
  const { ac } = make();
  const agent = new Agent({ name: "helper", model: new ScriptedModel([]) });
  for (const maxTurns of [0, Number.NaN, "12", -3, 2.5, undefined]) {
    assert.throws(
      () =>
        checkpointedRun(
          ac,
          { sessionId: "bad", maxTurns: maxTurns as number },
          agent,
          "Go",
        ),
      TypeError,
      String(maxTurns),
    );
  }
  assert.throws(
    () => checkpointedRun(ac, { sessionId: "bad", maxTurns: 5, timeSeconds: 0 }, agent, "Go"),
    /timeSeconds/,
  );
  assert.throws(
    () => checkpointedRun(ac, { sessionId: "bad", maxTurns: 5 }, agent, "Go", { maxTurns: 9 }),
    /maxTurns is given twice/,
  );
  await ac.close();
});
