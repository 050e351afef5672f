// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
import { test } from "node:test";
import assert from "node:assert/strict";
import { createAgent, createMiddleware } from "npm:langchain@1";
import { tool } from "npm:@langchain/core@1/tools";
import { AIMessage } from "npm:@langchain/core@1/messages";
import { createReactAgent } from "npm:@langchain/langgraph@1/prebuilt";
import {
  checkpointedReactAgent,
  checkpointMiddleware,
  recursionLimitForReactAgent,
  stepsForCreateAgent,
} from "../../adapters/langchain.ts";
import { blockFor, sleep, waitFor } from "../_helpers.ts";
import { make, type record } from "./_keeper.ts";
import { ScriptedChatModel, toolsThenAnswer } from "./_langchain_fake.ts";

const schema = {
  type: "object" as const,
  properties: { q: { type: "string" } },
  required: ["q"],
};
const ran: string[] = [];
const search = tool((args: { q: string }) => {
  ran.push(args.q);
  if (args.q === "fail") throw new Error("the index is down");
  return `found ${args.q}`;
}, { name: "search", description: "Search the notes.", schema });

const DIRECTIVE = /budget checkpoint/i;
const dueAt = (model: ScriptedChatModel) =>
  model.received.flatMap((sent, i) => DIRECTIVE.test(JSON.stringify(sent)) ? [i] : []);
const userInput = { messages: [{ role: "user", content: "Go" }] };

test("createAgent, cap 12: the prologue reaches the model at 6 and 10 turns used only, never the state", async () => {
  const { ac, recordOf } = make();
  const model = new ScriptedChatModel(toolsThenAnswer(11));
  const userSaw: string[] = [];
  const own = createMiddleware({
    name: "HostMiddleware",
    wrapModelCall: (request, handler) => {
      userSaw.push(JSON.stringify(request.messages));
      return handler(request);
    },
  });
  const agent = createAgent({
    model,
    tools: [search],
    systemPrompt: "Be brief.",
    middleware: [checkpointMiddleware(ac, { maxTurns: 12 }), own],
  });
  const state = await agent.invoke(userInput, {
    configurable: { thread_id: "lc-cap12" },
    recursionLimit: stepsForCreateAgent(12),
  });
  assert.equal(model.received.length, 12);
  assert.deepEqual(dueAt(model), [6, 10]);
  assert.match(JSON.stringify(model.received[6]), /you have used 6 of 12 turns/);
  assert.match(JSON.stringify(model.received[10]), /Final budget checkpoint/);
  assert.equal(userSaw.length, 12, "the host's middleware ran on every model call");
  assert.equal(model.received[0]![0]!.content, "Be brief.");
  assert.doesNotMatch(JSON.stringify(state.messages), DIRECTIVE);
  assert.equal(state.messages.at(-1)?.content, "all done");
  const r = recordOf("lc-cap12");
  assert.equal(r?.end?.status, "done");
  assert.equal(r?.turnsUsed, 12);
  await ac.close();
});

test("createAgent: the prologue can ride on the system prompt or the newest tool result", async () => {
  for (const placement of ["system", "tool-result"] as const) {
    const { ac } = make();
    const model = new ScriptedChatModel(toolsThenAnswer(11));
    const agent = createAgent({
      model,
      tools: [search],
      systemPrompt: "Be brief.",
      middleware: [checkpointMiddleware(ac, { maxTurns: 12, placement })],
    });
    const state = await agent.invoke(userInput, {
      configurable: { thread_id: `lc-${placement}` },
      recursionLimit: 40,
    });
    assert.deepEqual(dueAt(model), [6, 10], placement);
    const sent = model.received[6]!;
    if (placement === "system") {
      assert.equal(sent[0]!.type, "system");
      assert.match(sent[0]!.content, /^Be brief\.\n\nBudget checkpoint/);
    } else {
      assert.equal(sent.at(-1)!.type, "tool");
      assert.match(sent.at(-1)!.content, /^found q5\n\nBudget checkpoint/);
    }
    assert.doesNotMatch(JSON.stringify(state.messages), DIRECTIVE, placement);
    await ac.close();
  }
});

test("createAgent: the middleware stops the agent at maxTurns and the run ends capped", async () => {
  const { ac, log, recordOf } = make();
  const model = new ScriptedChatModel(toolsThenAnswer(100));
  const agent = createAgent({
    model,
    tools: [search],
    middleware: [checkpointMiddleware(ac, { maxTurns: 3 })],
  });
  const state = await agent.invoke(userInput, {
    configurable: { thread_id: "lc-capped" },
    recursionLimit: stepsForCreateAgent(3), // measured: exactly enough
  });
  assert.equal(model.received.length, 3);
  assert.match(String(state.messages.at(-1)?.content), /turn cap of 3 model calls/);
  assert.equal(recordOf("lc-capped")?.end?.status, "capped");
  assert.ok(!log.records.some((r) => /recursionLimit/.test(r.message)));
  await ac.close();
});

test("createAgent: a recursionLimit too small for maxTurns is a log line and a lower cap, not a crash", async () => {
  const { ac, log, recordOf } = make();
  const model = new ScriptedChatModel(toolsThenAnswer(100));
  const agent = createAgent({
    model,
    tools: [search],
    middleware: [checkpointMiddleware(ac, { maxTurns: 12 })],
  });
  // LangGraph's default recursionLimit of 25 allows 10 turns with this middleware.
  const state = await agent.invoke(userInput, { configurable: { thread_id: "lc-default" } });
  assert.equal(model.received.length, 10);
  assert.match(String(state.messages.at(-1)?.content), /turn cap of 10 model calls/);
  assert.ok(
    log.records.some((r) =>
      r.level === "warn" && /recursionLimit 25 cannot reach maxTurns 12/.test(r.message)
    ),
  );
  assert.equal(recordOf("lc-default")?.end?.status, "capped");
  await ac.close();
});

test("createAgent: tool calls are reported with call ids; a throwing tool is failed and the agent goes on", async () => {
  const { ac, recordOf } = make();
  const model = new ScriptedChatModel(
    toolsThenAnswer(2, "search", (i) => ({ q: i === 1 ? "fail" : `q${i}` })),
  );
  const agent = createAgent({
    model,
    tools: [search],
    middleware: [checkpointMiddleware(ac, { maxTurns: 4 })], // tier 2 from 2 turns used: a file
  });
  const state = await agent.invoke(userInput, { configurable: { thread_id: "lc-tools" } });
  const errorMessage = state.messages.find((m) =>
    m.getType() === "tool" && /index is down/.test(
      String(m.content),
    )
  );
  assert.ok(errorMessage, "the model was told about the error, as without middleware");
  const r = recordOf("lc-tools");
  assert.deepEqual(r?.tools.map((t) => [t.tool, t.callId, t.status]), [
    ["search", "call_0", "ok"],
    ["search", "call_1", "failed"],
  ]);
  assert.equal(r?.end?.status, "done");
  await ac.close();
});

test("createAgent: a run another middleware cut short is ended by the session's next invocation", async () => {
  const { ac, log, recordOf } = make();
  let stop = true;
  let modelVisits = 0;
  const stopper = createMiddleware({
    name: "Stopper",
    beforeModel: {
      canJumpTo: ["end"],
      hook: () => (++modelVisits === 2 && stop ? { jumpTo: "end" } : undefined),
    },
  });
  const agent = createAgent({
    model: new ScriptedChatModel((call) => toolsThenAnswer(1)(call === 0 ? 0 : 1)),
    tools: [search],
    middleware: [checkpointMiddleware(ac, { maxTurns: 2 }), stopper],
  });
  const config = { configurable: { thread_id: "lc-stale" } };
  await agent.invoke(userInput, config); // jumps to the end after one call: afterAgent is skipped
  const cut = recordOf("lc-stale");
  assert.ok(cut, "the first call wrote the file");
  assert.equal(cut.end, undefined, "the run did not end with its invocation");
  stop = false;
  await agent.invoke(userInput, config);
  const r = recordOf("lc-stale");
  assert.equal(r?.end?.status, "done");
  assert.equal(r?.attempt, 2, "the next run took over the cut-off run's file");
  assert.ok(!log.records.some((l) => /live/.test(l.message)), "no second live run of the session");
  await ac.close();
});

test("createAgent: a model error ends the run failed and reaches the caller", async () => {
  const { ac, recordOf } = make();
  const model = new ScriptedChatModel(() => {
    throw new Error("provider down");
  });
  const agent = createAgent({ model, middleware: [checkpointMiddleware(ac, { maxTurns: 2 })] });
  await assert.rejects(
    agent.invoke(userInput, { configurable: { thread_id: "lc-broken" } }),
    /provider down/,
  );
  assert.equal(recordOf("lc-broken")?.end?.status, "failed");
  await ac.close();
});

test("createAgent: a tool that blocks the main thread past a crossing still gets the watchdog's file", async () => {
  const { ac, recordOf } = make({ watchdog_poll_seconds: 0.05 });
  const warm = ac.startRun({ sessionId: "warm-up", caps: { timeSeconds: 0.2 } });
  warm.activity(); // wait until the watchdog runs (under deno test it is type-checked as it starts)
  assert.ok(await waitFor(() => recordOf("warm-up")?.source === "watchdog", 60_000));
  await warm.end();
  let blockedAt = 0;
  let freedAt = 0;
  let during: ReturnType<typeof record>;
  const compile = tool(() => {
    blockedAt = Date.now();
    blockFor(3000); // tier 1 at 2 s of a 4 s cap crosses during the block
    freedAt = Date.now();
    during = recordOf("lc-blocked");
    return "built";
  }, { name: "compile", description: "Compile.", schema });
  const model = new ScriptedChatModel(toolsThenAnswer(1, "compile"));
  const agent = createAgent({
    model,
    tools: [compile],
    middleware: [checkpointMiddleware(ac, { maxTurns: 12, timeSeconds: 4 })],
  });
  await agent.invoke(userInput, { configurable: { thread_id: "lc-blocked" }, recursionLimit: 40 });
  assert.ok(during, "the file existed when the block ended");
  assert.equal(during.source, "watchdog");
  const persisted = Date.parse(during.persistedAt);
  assert.ok(persisted >= blockedAt && persisted <= freedAt, "persisted during the block");
  assert.deepEqual(during.tools.map((t) => [t.tool, t.callId, t.status]), [
    ["compile", "call_0", "in flight"],
  ]);
  await ac.close();
});

test("createAgent: deadline: true stops the run at the time cap with a deadline record", async () => {
  const { ac, recordOf, written } = make();
  const wait = tool(async () => {
    await sleep(6000);
    return "waited";
  }, { name: "wait", description: "Wait.", schema });
  const model = new ScriptedChatModel(toolsThenAnswer(1, "wait"));
  const agent = createAgent({
    model,
    tools: [wait],
    middleware: [checkpointMiddleware(ac, { maxTurns: 2, timeSeconds: 1, deadline: true })],
  });
  const started = Date.now();
  await assert.rejects(agent.invoke(userInput, { configurable: { thread_id: "lc-deadline" } }));
  assert.ok(Date.now() - started < 5500, "stopped before the tool finished");
  assert.equal(recordOf("lc-deadline")?.end?.status, "deadline");
  assert.ok(
    await waitFor(() => written.some((e) => e.runId === "lc-deadline" && e.kind === "deadline")),
    "a deadline checkpoint was written",
  );
  await ac.close();
});

test("createAgent: bad caps are a TypeError at the call", async () => {
  const { ac } = make();
  for (const maxTurns of [0, Number.NaN, "12", -1, 1.5, undefined]) {
    assert.throws(
      () => checkpointMiddleware(ac, { maxTurns: maxTurns as number }),
      TypeError,
      String(maxTurns),
    );
  }
  assert.throws(() => checkpointMiddleware(ac, { maxTurns: 3, timeSeconds: -1 }), /timeSeconds/);
  assert.throws(
    () => checkpointMiddleware(ac, { maxTurns: 3, placement: "top" as "user" }),
    /placement/,
  );
  await ac.close();
});

test("createReactAgent counts two graph steps a turn: the recursionLimit mapping, measured", async () => {
  const measure = async (recursionLimit: number) => {
    ran.length = 0;
    const model = new ScriptedChatModel(toolsThenAnswer(100));
    const graph = createReactAgent({ llm: model, tools: [search] });
    const error = await graph.invoke(userInput, { recursionLimit }).then(() => undefined, (e) => e);
    return { calls: model.received.length, tools: ran.length, error: (error as Error)?.name };
  };
  // 2N - 1: N calls and the last call's tools do not run; 2N: N calls and N tool runs.
  assert.deepEqual(await measure(23), { calls: 12, tools: 11, error: "GraphRecursionError" });
  assert.deepEqual(await measure(24), { calls: 12, tools: 12, error: "GraphRecursionError" });
  assert.deepEqual(await measure(25), { calls: 13, tools: 12, error: "GraphRecursionError" });
  assert.equal(recursionLimitForReactAgent(12), 24);
});

test("checkpointedReactAgent, cap 12: prologue at 6 and 10 turns used, 12 calls, capped and rethrown", async () => {
  const { ac, recordOf } = make();
  const model = new ScriptedChatModel(toolsThenAnswer(100));
  const agent = checkpointedReactAgent(ac, { maxTurns: 12 }, {
    llm: model,
    tools: [search],
    prompt: "Be brief.",
  });
  let thrown: unknown;
  const state = await agent.invoke(userInput, { configurable: { thread_id: "react-12" } })
    .catch((e: unknown) => thrown = e);
  assert.equal(
    (thrown as Error)?.name,
    "GraphRecursionError",
    "the graph's error reaches the caller",
  );
  assert.ok(state === thrown);
  assert.equal(model.received.length, 12);
  assert.deepEqual(dueAt(model), [6, 10]);
  assert.ok(model.received.every((sent) => sent[0]?.content === "Be brief."), "the host's prompt");
  const r = recordOf("react-12");
  assert.equal(r?.end?.status, "capped");
  assert.ok(r && r.tools.length > 0);
  assert.ok(r.tools.every((t) => t.callId?.startsWith("call_") && t.status === "ok"));
  assert.equal(r.tools.at(-1)?.callId, "call_11", "the last call's tools ran");
  await ac.close();
});

test("checkpointedReactAgent: a run that finishes ends done and keeps no prologue in its state", async () => {
  const { ac, recordOf } = make();
  const model = new ScriptedChatModel(toolsThenAnswer(11));
  const agent = checkpointedReactAgent(ac, { sessionId: "react-done", maxTurns: 12 }, {
    llm: model,
    tools: [search],
  });
  const state = await agent.invoke(userInput);
  assert.equal(model.received.length, 12);
  assert.deepEqual(dueAt(model), [6, 10]);
  assert.doesNotMatch(JSON.stringify(state.messages), DIRECTIVE);
  assert.ok(state.messages.at(-1) instanceof AIMessage);
  assert.equal(recordOf("react-done")?.end?.status, "done");
  assert.throws(
    () => checkpointedReactAgent(ac, { maxTurns: 0 }, { llm: model, tools: [] }),
    TypeError,
  );
  await ac.close();
});
