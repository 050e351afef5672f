// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { createAgent, createMiddleware } from "npm:langchain@1";
import { tool } from "npm:@langchain/core@1/tools";
import { AIMessage } from "npm:@langchain/core@1/messages";
import { CompiledStateGraph, MemorySaver } from "npm:@langchain/langgraph@1";
import { createReactAgent } from "npm:@langchain/langgraph@1/prebuilt";
import {
  agentCheckpointMiddleware,
  checkpointedReactAgent,
  recursionLimitForReactAgent,
  stepsForCreateAgent,
} from "../../adapters/langchain.ts";
import { blockFor, runScript, sleep, waitFor } from "../_helpers.ts";
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
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 12 }), own],
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
      middleware: [agentCheckpointMiddleware(ac, { maxTurns: 12, placement })],
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
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 3 })],
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
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 12 })],
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

test("createAgent: LangGraph's default recursionLimit is said on stderr once per process, and withRecursionLimit() avoids it", async () => {
  const host = fileURLToPath(
    new URL(
      `./_recursion_limit_host${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`,
      import.meta.url,
    ),
  );
  const { code, stdout, stderr } = await runScript(host, [], { timeoutMs: 120_000 });
  assert.equal(code, 0, stderr);
  assert.deepEqual(JSON.parse(stdout), [10, 10, 12], "model calls: default, default, fixed");
  const told = stderr.split("\n").filter((line) => line.startsWith("agent-checkpoint:"));
  assert.equal(told.length, 1, stderr);
  assert.match(told[0]!, /default recursionLimit of 25 lets createAgent make only 10 of the 12/);
  assert.match(told[0]!, /withRecursionLimit\(config\)/);
  assert.match(told[0]!, /recursionLimit: 28/);
});

test("createAgent: the middleware's withRecursionLimit() gives the invocation enough steps, keeping the rest of its config", async () => {
  const { ac, log, recordOf } = make();
  const checkpoint = agentCheckpointMiddleware(ac, { maxTurns: 12 });
  const config = { configurable: { thread_id: "lc-limit" }, tags: ["mine"] };
  const fixed = checkpoint.withRecursionLimit(config);
  assert.deepEqual(fixed, { ...config, recursionLimit: stepsForCreateAgent(12) });
  assert.equal(checkpoint.withRecursionLimit({ recursionLimit: 100 }).recursionLimit, 100);
  assert.equal(checkpoint.withRecursionLimit().recursionLimit, 28);
  const model = new ScriptedChatModel(toolsThenAnswer(100));
  const agent = createAgent({ model, tools: [search], middleware: [checkpoint] });
  await agent.invoke(userInput, fixed);
  assert.equal(model.received.length, 12);
  assert.deepEqual(dueAt(model), [6, 10]);
  assert.equal(recordOf("lc-limit")?.end?.status, "capped");
  assert.equal(recordOf("lc-limit")?.turnsUsed, 12);
  assert.ok(!log.records.some((r) => /recursionLimit/.test(r.message)));
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
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 4 })], // tier 2 from 2 turns used: a file
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
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 2 }), stopper],
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
  const agent = createAgent({
    model,
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 2 })],
  });
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
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 12, timeSeconds: 4 })],
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
    middleware: [agentCheckpointMiddleware(ac, { maxTurns: 2, timeSeconds: 1, deadline: true })],
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
      () => agentCheckpointMiddleware(ac, { maxTurns: maxTurns as number }),
      TypeError,
      String(maxTurns),
    );
  }
  assert.throws(
    () => agentCheckpointMiddleware(ac, { maxTurns: 3, timeSeconds: -1 }),
    /timeSeconds/,
  );
  assert.throws(
    () => agentCheckpointMiddleware(ac, { maxTurns: 3, placement: "top" as "user" }),
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

test("checkpointedReactAgent: stream() with a streamMode is one checkpointed run: prologue, tool calls, end", async () => {
  const { ac, recordOf } = make();
  const model = new ScriptedChatModel(toolsThenAnswer(11));
  const agent = checkpointedReactAgent(ac, { maxTurns: 12 }, { llm: model, tools: [search] });
  const nodes: string[] = [];
  for await (
    const chunk of await agent.stream(userInput, {
      streamMode: "updates",
      configurable: { thread_id: "react-stream" },
    })
  ) nodes.push(...Object.keys(chunk));
  assert.deepEqual(nodes, [...Array(11).fill(["agent", "tools"]).flat(), "agent"]);
  assert.equal(model.received.length, 12);
  assert.deepEqual(dueAt(model), [6, 10]);
  const r = recordOf("react-stream");
  assert.equal(r?.end?.status, "done");
  assert.equal(r?.turnsUsed, 12);
  assert.ok(r && r.tools.length > 0);
  assert.ok(r.tools.every((t) => t.callId?.startsWith("call_") && t.status === "ok"));
  assert.equal(r.tools.at(-1)?.callId, "call_10", "the record keeps the newest calls");

  // Several modes at once, as LangGraph streams them: [mode, chunk] pairs.
  const modes = new Set<string>();
  const small = checkpointedReactAgent(ac, { maxTurns: 2 }, { // tier 2 at the first call: a file
    llm: new ScriptedChatModel(toolsThenAnswer(1)),
    tools: [search],
  });
  const both = await small.stream(userInput, {
    streamMode: ["values", "messages"],
    configurable: { thread_id: "react-modes" },
  });
  for await (const [mode] of both) modes.add(mode);
  assert.deepEqual([...modes].sort(), ["messages", "values"]);
  assert.equal(recordOf("react-modes")?.end?.status, "done");
  await ac.close();
});

test("checkpointedReactAgent: a stream past the cap ends capped, and a model error failed, both thrown to the reader", async () => {
  const { ac, recordOf } = make();
  const endless = checkpointedReactAgent(ac, { maxTurns: 3 }, {
    llm: new ScriptedChatModel(toolsThenAnswer(100)),
    tools: [search],
  });
  const capped = await endless.stream(userInput, { configurable: { thread_id: "react-s-cap" } });
  await assert.rejects(async () => {
    for await (const _ of capped) { /* drain */ }
  }, { name: "GraphRecursionError" });
  assert.equal(recordOf("react-s-cap")?.end?.status, "capped");

  const broken = checkpointedReactAgent(ac, { maxTurns: 3 }, {
    llm: new ScriptedChatModel((call) => {
      if (call === 1) throw new Error("provider down");
      return toolsThenAnswer(1)(call);
    }),
    tools: [search],
  });
  const failing = await broken.stream(userInput, { configurable: { thread_id: "react-s-fail" } });
  await assert.rejects(async () => {
    for await (const _ of failing) { /* drain */ }
  }, /provider down/);
  const r = recordOf("react-s-fail");
  assert.equal(r?.end?.status, "failed");
  assert.match(r?.end?.summary ?? "", /provider down/);
  await ac.close();
});

test("checkpointedReactAgent: a stream the host stops reading ends the run aborted and stops the graph", async () => {
  const { ac, recordOf } = make();
  const stopped: string[] = [];
  const started: string[] = [];
  const wait = tool((args: { q: string }, config) =>
    new Promise<string>((resolve) => {
      const signal = (config as { signal?: AbortSignal }).signal;
      signal?.addEventListener("abort", () => {
        stopped.push(args.q);
        resolve("stopped");
      }, { once: true });
      started.push(args.q);
    }), { name: "wait", description: "Wait until stopped.", schema });
  const agent = checkpointedReactAgent(ac, { maxTurns: 2 }, { // tier 2 at the first call: a file
    llm: new ScriptedChatModel(toolsThenAnswer(1, "wait", () => ({ q: "break" }))),
    tools: [wait],
  });
  const stream = await agent.stream(userInput, {
    streamMode: "updates",
    configurable: { thread_id: "react-s-break" },
  });
  for await (const chunk of stream) {
    assert.deepEqual(Object.keys(chunk), ["agent"]); // the model asked for the tool
    assert.ok(await waitFor(() => started.includes("break"), 30_000)); // it runs: stop reading
    break;
  }
  const r = recordOf("react-s-break");
  assert.equal(r?.end?.status, "aborted");
  assert.match(r?.end?.summary ?? "", /stopped reading the stream/);
  assert.ok(await waitFor(() => stopped.includes("break"), 30_000), "the tool saw the abort");

  // cancel() while the stream is being read, as LangGraph's own stream allows.
  const other = checkpointedReactAgent(ac, { maxTurns: 2 }, {
    llm: new ScriptedChatModel(toolsThenAnswer(1, "wait", () => ({ q: "cancel" }))),
    tools: [wait],
  });
  const events = other.streamEvents(userInput, {
    version: "v2",
    configurable: { thread_id: "react-s-cancel" },
  });
  for await (const event of events) {
    if (event.event !== "on_tool_start") continue;
    assert.ok(await waitFor(() => started.includes("cancel"), 30_000));
    await events.cancel("enough");
    break;
  }
  assert.equal(recordOf("react-s-cancel")?.end?.status, "aborted");
  assert.ok(await waitFor(() => stopped.includes("cancel"), 30_000), "the tool saw the abort");
  await ac.close();
});

test("checkpointedReactAgent: a tool that blocks the main thread during stream() still gets the watchdog's file", async () => {
  const { ac, recordOf } = make({ watchdog_poll_seconds: 0.05 });
  const warm = ac.startRun({ sessionId: "react-warm-up", caps: { timeSeconds: 0.2 } });
  warm.activity(); // wait until the watchdog runs (under deno test it is type-checked as it starts)
  assert.ok(await waitFor(() => recordOf("react-warm-up")?.source === "watchdog", 60_000));
  await warm.end();
  let blockedAt = 0;
  let during: ReturnType<typeof record>;
  const compile = tool(() => {
    blockedAt = Date.now();
    blockFor(3000); // tier 1 at 2 s of a 4 s cap crosses during the block
    during = recordOf("react-blocked");
    return "built";
  }, { name: "compile", description: "Compile.", schema });
  const agent = checkpointedReactAgent(ac, { maxTurns: 12, timeSeconds: 4 }, {
    llm: new ScriptedChatModel(toolsThenAnswer(1, "compile")),
    tools: [compile],
  });
  const stream = await agent.stream(userInput, { configurable: { thread_id: "react-blocked" } });
  for await (const _ of stream) { /* drain */ }
  assert.ok(during, "the file existed when the block ended");
  assert.equal(during.source, "watchdog");
  assert.ok(Date.parse(during.persistedAt) >= blockedAt, "persisted during the block");
  assert.deepEqual(during.tools.map((t) => [t.tool, t.callId, t.status]), [
    ["compile", "call_0", "in flight"],
  ]);
  assert.equal(recordOf("react-blocked")?.end?.status, "done");
  await ac.close();
});

test("checkpointedReactAgent: streamEvents() is one checkpointed run, with one tool event per call", async () => {
  const { ac, recordOf } = make();
  const model = new ScriptedChatModel(toolsThenAnswer(11));
  const agent = checkpointedReactAgent(ac, { maxTurns: 12 }, { llm: model, tools: [search] });
  const events: string[] = [];
  for await (
    const event of agent.streamEvents(userInput, {
      version: "v2",
      configurable: { thread_id: "react-events" },
    })
  ) events.push(`${event.event}:${event.name}`);
  // One tool run per call, as without the adapter: the tools are the host's own, proxied.
  assert.equal(events.filter((e) => e === "on_tool_start:search").length, 11);
  assert.equal(events.filter((e) => e === "on_tool_end:search").length, 11);
  assert.equal(events.filter((e) => e.startsWith("on_chat_model_end")).length, 12);
  assert.equal(events.at(-1), "on_chain_end:LangGraph");
  assert.deepEqual(dueAt(model), [6, 10]);
  const r = recordOf("react-events");
  assert.equal(r?.end?.status, "done");
  assert.equal(r?.tools.at(-1)?.callId, "call_10");

  // Version "v3" returns a run stream whose output settles when the graph ends.
  const small = checkpointedReactAgent(ac, { maxTurns: 2 }, { // tier 2 at the first call: a file
    llm: new ScriptedChatModel(toolsThenAnswer(1)),
    tools: [search],
  });
  const v3 = await small.streamEvents(userInput, {
    version: "v3",
    configurable: { thread_id: "react-events-v3" },
  });
  const final = await v3.output;
  assert.equal(final.messages.at(-1)?.content, "all done");
  assert.ok(await waitFor(() => recordOf("react-events-v3")?.end?.status === "done"));
  await ac.close();
});

test("checkpointedReactAgent: the compiled graph's whole interface is there, batch() and withConfig() included", async () => {
  const { ac, recordOf } = make();
  const agent = checkpointedReactAgent(ac, { maxTurns: 2 }, { // tier 2 at the first call: a file
    llm: new ScriptedChatModel(toolsThenAnswer(0)),
    tools: [search],
    checkpointer: new MemorySaver(),
  });
  assert.ok(agent instanceof CompiledStateGraph);
  assert.deepEqual(Object.keys(agent.getGraph().nodes).sort(), [
    "__end__",
    "__start__",
    "agent",
    "tools",
  ]);
  const outs = await agent.batch([userInput, userInput], [
    { configurable: { thread_id: "react-b1" } },
    { configurable: { thread_id: "react-b2" } },
  ]);
  assert.equal(outs.length, 2);
  assert.equal(recordOf("react-b1")?.end?.status, "done");
  assert.equal(recordOf("react-b2")?.end?.status, "done");
  const state = await agent.getState({ configurable: { thread_id: "react-b1" } });
  assert.equal(state.values.messages.at(-1)?.content, "all done");
  await agent.withConfig({ configurable: { thread_id: "react-bound" } }).invoke(userInput);
  assert.equal(recordOf("react-bound")?.end?.status, "done");
  await assert.rejects(
    agent.stream(userInput, { recursionLimit: 100, configurable: { thread_id: "x" } }),
    /recursionLimit is derived from maxTurns/,
  );
  await ac.close();
});
