// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * agent-checkpoint for the OpenAI Agents SDK (`@openai/agents` 0.x): one call
 * runs an agent with the turn cap stated once, the budget prologue in the one
 * model call it is due for, every tool call reported, and the run ended with
 * how it went.
 *
 * A turn is one model call: `maxTurns: N` allows N model calls (the tools the
 * N-th call asks for still run; then the SDK throws `MaxTurnsExceededError`).
 *
 * @example One line around the SDK's own run()
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointedRun } from "./openai_agents.ts";
 * import { Agent } from "npm:@openai/agents@0.x";
 * import { ScriptedModel, assistantMessage } from "npm:@openai/agents@0.x/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const model = new ScriptedModel([[assistantMessage("done")]]);
 * const agent = new Agent({ name: "helper", instructions: "Be brief.", model });
 * const result = await checkpointedRun(ac, { sessionId: "chat-1", maxTurns: 12 }, agent, "Hi");
 * assert.equal(result.finalOutput, "done");
 * await ac.close();
 * ```
 *
 * @module
 */
import {
  type Agent,
  type AgentInputItem,
  type CallModelInputFilter,
  Handoff,
  type Model,
  type ModelInputData,
  type ModelRequest,
  type ModelResponse,
  type NonStreamRunOptions,
  RunContext,
  Runner,
  type RunResult,
  type RunState,
  type Session,
  type StreamedRunResult,
  type StreamEvent,
  type StreamRunOptions,
  type Tool,
  Usage,
} from "npm:@openai/agents@0.x";
import type { AgentCheckpoint, EndStatus, Run } from "../mod.ts";
import {
  type AdapterInit,
  effectful,
  effectInput,
  errorLine,
  guarded,
  PendingPrologue,
  type Placement,
  runSignal,
  startAdapterRun,
  toolCallSignal,
} from "./_shared.ts";
import { isThenable } from "../log.ts";
import { transcripts } from "./_sessions.ts";
import type { SessionPath } from "../_ledger.ts";
import { randomUUID } from "node:crypto";

export type { AdapterInit, Placement } from "./_shared.ts";
export { BudgetExceededError, RunRefusedError } from "../run.ts";

/**
 * What a function tool's `details` (its third argument) carries besides the
 * SDK's own, when the adapter runs it: the call's effect key, the same in
 * every attempt of the run for the same input (present for the tools the
 * adapter wraps: with `replay`, `effect_tools` or `tool_timeout_seconds`).
 *
 * @example Reading the key in a tool, type-checked
 * ```ts
 * import type { EffectKeyDetails } from "./openai_agents.ts";
 * import { tool } from "npm:@openai/agents@0.x";
 * import assert from "node:assert/strict";
 *
 * const pay = tool({
 *   name: "pay",
 *   description: "Pay an invoice.",
 *   parameters: { type: "object", properties: {}, required: [], additionalProperties: false },
 *   strict: true,
 *   execute: (_input, _context, details) => {
 *     const key = (details as EffectKeyDetails | undefined)?.effectKey;
 *     return `paid with idempotency key ${key}`;
 *   },
 * });
 * assert.equal(pay.name, "pay");
 * ```
 */
export interface EffectKeyDetails {
  /** The call's effect key (`run.effects.key(tool, input)`): pass it to an API as its idempotency key. */
  effectKey?: string;
}

/**
 * The SDK's result with the run it reported to as `run` (its id, attempt,
 * checkpoint file and signals), as the other adapters give it.
 */
export type WithRun<T> = T & {
  /** The run this call reported to. */
  readonly run: Run;
};

/** Any agent, whatever its context and output types. */
// deno-lint-ignore no-explicit-any
export type AnyAgent = Agent<any, any>;

/** What {@linkcode checkpointedRun} takes besides the agent: the run's init and its turn cap. */
export interface OpenAIAgentsInit extends AdapterInit {
  /** The run's session id: the conversation or job this run belongs to. */
  sessionId: string;
  /** The turn cap: the most model calls the run may make; passed to the SDK as `maxTurns`. */
  maxTurns: number;
}

/** The SDK's run options, plus the `Runner` to run with (default: a new one). */
export type CheckpointedRunOptions<TContext, TAgent extends AnyAgent> =
  & (NonStreamRunOptions<TContext, TAgent> | StreamRunOptions<TContext, TAgent>)
  & {
    /** The runner to run with; its own hooks and `callModelInputFilter` keep working. */
    runner?: Runner;
  };

/** What an agent can be run on, as for the SDK's `run()`: a string, input items, or a `RunState` to resume. */
export type RunInput<TContext, TAgent extends AnyAgent> =
  | string
  | AgentInputItem[]
  | RunState<TContext, TAgent>;
type Status = EndStatus;

/**
 * Run an agent through the SDK's own `Runner.run()` as a checkpointed run:
 * `maxTurns` goes to the SDK, the budget prologue goes into the model call it
 * is due for (after the host's own `callModelInputFilter`, and never into
 * `result.history`), each tool call is reported with its call id,
 * and the run ends `done`, `capped` (the SDK's `MaxTurnsExceededError`,
 * rethrown), `failed` (any other error, rethrown), `aborted` (the host's
 * `signal`) or `deadline` (with `deadline: true`, the run's deadline aborts
 * the SDK's run at the time cap). With `stream: true` the streamed result is
 * returned at once and the run ends when the stream completes.
 *
 * With a `session` the prologue placed as a user message would be stored
 * with the first call's input, and with `conversationId` or
 * `previousResponseId` the server keeps every input item: there the prologue
 * goes into the instructions instead.
 *
 * A tool call counts as failed when its result is the SDK's own error text
 * (its default error message, a timeout message, or an error rendered as
 * `XxxError: …`); the SDK reports no other outcome.
 *
 * Usage: each model response's `usage` is reported with `run.postLlmCall()`
 * before the next model call, with the model's name for the `prices` setting.
 * Tool deadlines: with `tool_timeout_seconds` set, the SDK runs a copy of the
 * agent (`agent.clone()`) whose function tools find the call's deadline signal
 * in `details.signal`; a call cut off by it tells the model that the tool
 * timed out, as the SDK's own tool timeouts do.
 *
 * The run journal: with the `journal` setting on (the default) and a run
 * ledger, the SDK runs copies of the agent and of every agent its handoffs
 * reach, and a copy of your runner (its config, its hooks heard by yours),
 * whose models (on an agent, or names your `modelProvider` resolves) make each
 * call through `run.journal.model()` (a stream journaled as its events once it
 * ended with its response) and whose function tools run through
 * `run.journal.tool()`. A retry replays its earlier attempt's calls from the
 * journal: the model is not asked again, the tools do not run, and a replayed
 * call counts no turn and no use and carries no prologue (the prologue is
 * placed in the live call's request, after your filter). Without the journal,
 * the prologue goes in through `callModelInputFilter` after yours, and only
 * the first agent is copied. A `RunState` input is not journaled.
 *
 * @param ac The library instance.
 * @param init The run's init, its `maxTurns` and optionally `timeSeconds`, `placement`, `deadline`.
 * @param agent The agent to start with.
 * @param input The input, as for the SDK's `run()`.
 * @param options The SDK's run options (their `maxTurns`, if given, must equal `init.maxTurns`), and `runner`.
 * @returns The SDK's result: a `RunResult`, or a `StreamedRunResult` with `stream: true`.
 * @throws {TypeError} At the call, when a cap, the placement or the session id is unusable.
 *
 * @example The prologue reaches the model, never the history
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointedRun } from "./openai_agents.ts";
 * import { Agent } from "npm:@openai/agents@0.x";
 * import { ScriptedModel, assistantMessage } from "npm:@openai/agents@0.x/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const model = new ScriptedModel([[assistantMessage("ok")]]);
 * const agent = new Agent({ name: "helper", model });
 * // A cap of two turns: tier 2 (the last checkpoint) is due at the first model call.
 * const result = await checkpointedRun(ac, { sessionId: "s1", maxTurns: 2 }, agent, "Go");
 * assert.match(JSON.stringify(model.calls[0]!.request.input), /INCOMPLETE/);
 * assert.doesNotMatch(JSON.stringify(result.history), /INCOMPLETE/);
 * assert.throws(() => checkpointedRun(ac, { sessionId: "s1", maxTurns: 0 }, agent, "Go"), TypeError);
 * await ac.close();
 * ```
 *
 * @example A retry replays its earlier attempt's calls from the journal
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointedRun } from "./openai_agents.ts";
 * import { Agent, tool } from "npm:@openai/agents@0.x";
 * import { assistantMessage, functionCall, ScriptedModel } from "npm:@openai/agents@0.x/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * let ran = 0;
 * const look = tool({
 *   name: "look",
 *   description: "Look around.",
 *   parameters: { type: "object", properties: {}, required: [], additionalProperties: false },
 *   strict: true,
 *   execute: () => `seen ${++ran}`,
 * });
 * const attempt = async (model: ScriptedModel) => {
 *   const ac = createAgentCheckpoint({ home, env: {} });
 *   const agent = new Agent({ name: "helper", model, tools: [look] });
 *   try {
 *     return await checkpointedRun(ac, { sessionId: "job-9", maxTurns: 5 }, agent, "Go");
 *   } finally {
 *     await ac.close();
 *   }
 * };
 * const call = functionCall("look", {}, { callId: "c1", id: "fc1" });
 * // The first attempt's model answers its first call, then fails.
 * const first = new ScriptedModel([[call]]);
 * await assert.rejects(attempt(first));
 * // The retry: the first call is answered from the journal and the tool does not run again.
 * const second = new ScriptedModel([[assistantMessage("done")]]);
 * const result = await attempt(second);
 * assert.equal(result.finalOutput, "done");
 * assert.equal(second.calls.length, 1); // only the call that failed was made again
 * assert.equal(ran, 1);
 * assert.equal(result.run.journal.replayed, 1);
 * ```
 */
export function checkpointedRun<TAgent extends AnyAgent, TContext = undefined>(
  ac: AgentCheckpoint,
  init: OpenAIAgentsInit,
  agent: TAgent,
  input: RunInput<TContext, TAgent>,
  options?: NonStreamRunOptions<TContext, TAgent> & { runner?: Runner },
): Promise<WithRun<RunResult<TContext, TAgent>>>;
/**
 * Run an agent as a checkpointed run with `stream: true`: the streamed result
 * comes back at once, and the run ends when its stream completes.
 *
 * @example
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointedRun } from "./openai_agents.ts";
 * import { Agent } from "npm:@openai/agents@0.x";
 * import { ScriptedModel, assistantMessage } from "npm:@openai/agents@0.x/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const agent = new Agent({ name: "helper", model: new ScriptedModel([[assistantMessage("hi")]]) });
 * const streamed = await checkpointedRun(ac, { sessionId: "s2", maxTurns: 4 }, agent, "Go", {
 *   stream: true,
 * });
 * let events = 0;
 * for await (const _event of streamed) events++; // show each event as it comes
 * assert.ok(events > 0);
 * await streamed.completed;
 * assert.equal(streamed.finalOutput, "hi");
 * await ac.close();
 * ```
 */
export function checkpointedRun<TAgent extends AnyAgent, TContext = undefined>(
  ac: AgentCheckpoint,
  init: OpenAIAgentsInit,
  agent: TAgent,
  input: RunInput<TContext, TAgent>,
  options: StreamRunOptions<TContext, TAgent> & { runner?: Runner },
): Promise<WithRun<StreamedRunResult<TContext, TAgent>>>;
export function checkpointedRun<TAgent extends AnyAgent, TContext = undefined>(
  ac: AgentCheckpoint,
  init: OpenAIAgentsInit,
  agent: TAgent,
  input: RunInput<TContext, TAgent>,
  options: CheckpointedRunOptions<TContext, TAgent> = {},
): Promise<WithRun<RunResult<TContext, TAgent> | StreamedRunResult<TContext, TAgent>>> {
  if (init === null || typeof init !== "object") {
    throw new TypeError(`init must be an object, got ${init === null ? "null" : typeof init}`);
  }
  if (options.maxTurns != null && options.maxTurns !== init.maxTurns) {
    throw new TypeError(
      `maxTurns is given twice (${options.maxTurns} in the options, ${init.maxTurns} in init): give it once, in init`,
    );
  }
  const run = startAdapterRun(ac, init, "maxTurns", init.maxTurns);
  const wraps = wrapsTools(ac.settings, init);
  // A RunState carries its own agents: its run is not journaled.
  const journal = guarded(
    run,
    "openai-agents: reading the journal setting",
    () => run.journal.on && !isRunState(input),
    () => false,
  );
  if (journal) {
    const journaled = guarded(run, "openai-agents: journaling the agents", () => {
      const journaling = new Journaling(
        run,
        placementFor(init.placement, options),
        wraps ? (t) => timedInvoke(run, init, t) : undefined,
      );
      return {
        journaling,
        agent: journaling.agent(agent),
        runner: journaling.runner(options.runner),
      };
    }, () => undefined);
    if (journaled) return drive(run, init, journaled.agent, input, options, journaled);
  }
  // Tool deadlines and effect keys reach the tools through a copy of the agent whose tools take them.
  const timed = wraps ? withToolDeadlines(agent, run, init) : agent;
  return drive(run, init, timed, input, options);
}

/** Whether the input is a `RunState` to resume (an object, not an array of items). */
const isRunState = (input: unknown): boolean =>
  typeof input === "object" && input !== null && !Array.isArray(input);

/** A function tool's `invoke`. */
type Invoke = (ctx: unknown, input: unknown, details?: unknown) => unknown;

/**
 * A function tool's `invoke` that gives the tool, in its `details.signal`,
 * the SDK's signal joined to the call's deadline signal
 * (`run.time.toolSignal`), and its effect key in `details.effectKey`; a tool
 * in `replay` runs through `run.once`, one in `effect_tools` after its intent
 * is durable.
 */
function timedInvoke(run: Run, init: OpenAIAgentsInit, tool: { invoke: Invoke }): Invoke {
  const invoke = tool.invoke;
  const name = String((tool as { name?: unknown }).name ?? "tool");
  return async (ctx: unknown, input: unknown, details?: unknown) => {
    const d = details as
      | { toolCall?: { callId?: unknown }; signal?: AbortSignal | undefined }
      | undefined;
    const callId = typeof d?.toolCall?.callId === "string" ? d.toolCall.callId : undefined;
    const call = async (key: string) => {
      if (d) (d as { effectKey?: string }).effectKey = key;
      if (!d || callId === undefined) return await invoke.call(tool, ctx, input, details);
      // The details object is the SDK's own for this one call; its signal is put back after.
      const theirs = d.signal;
      const own = run.time.toolSignal(callId);
      const started = performance.now();
      d.signal = toolCallSignal(run, callId, theirs);
      try {
        return await invoke.call(tool, ctx, input, details);
      } catch (error) {
        // The SDK takes an aborted signal for the run's end; a deadline is the call's
        // alone, so the model hears of it as the SDK words its own tool timeouts.
        if (own.aborted && !theirs?.aborted) {
          return `Tool '${name}' timed out after ${Math.round(performance.now() - started)}ms.`;
        }
        throw error;
      } finally {
        d.signal = theirs;
      }
    };
    return (await effectful(run, init, name, effectInput(input), callId, call)).value;
  };
}

/** Whether the adapter wraps function tools for their deadlines and effects. */
const wrapsTools = (settings: AgentCheckpoint["settings"], init: OpenAIAgentsInit): boolean =>
  settings.tool_timeout_seconds !== undefined || (init.replay?.length ?? 0) > 0 ||
  settings.effect_tools.length > 0;

/** A tool that is a function tool the SDK calls through `invoke`. */
const isFunctionTool = (t: unknown): t is { type: "function"; invoke: Invoke; name?: unknown } =>
  (t as { type?: unknown })?.type === "function" &&
  typeof (t as { invoke?: unknown }).invoke === "function";

/** The host's own `agent.on(...)` listeners, before and after the copy is made, hear its events. */
function forwardEvents(agent: AnyAgent, copy: AnyAgent): void {
  type Emits = { emit?: (type: string, ...args: unknown[]) => unknown };
  const own = agent as unknown as Emits;
  if (typeof own.emit === "function") {
    (copy as unknown as Emits).emit = (type, ...args) => own.emit!(type, ...args);
  }
}

/**
 * A copy of the agent (`agent.clone()`) whose function tools get their
 * deadline signal and effect key ({@linkcode timedInvoke}); the agent itself
 * when it has no function tool.
 */
function withToolDeadlines<TAgent extends AnyAgent>(
  agent: TAgent,
  run: Run,
  init: OpenAIAgentsInit,
): TAgent {
  return guarded(run, "openai-agents: giving tools their deadlines", () => {
    const a = agent as unknown as { tools?: unknown; clone?: (config: object) => unknown };
    if (!Array.isArray(a.tools) || typeof a.clone !== "function") return agent;
    let wrapped = false;
    const tools = a.tools.map((t) => {
      if (!isFunctionTool(t)) return t;
      wrapped = true;
      return { ...t, invoke: timedInvoke(run, init, t) };
    });
    if (!wrapped) return agent;
    const copy = a.clone({ tools }) as TAgent;
    forwardEvents(agent, copy);
    return copy;
  }, () => agent);
}

/**
 * Reports the model calls' usage as the run context's usage grows: what was
 * added since the last report is one model call's (or, at the end, the last
 * one's).
 */
function usageReporter(
  run: Run,
  context: { usage?: { inputTokens?: unknown; outputTokens?: unknown } } | undefined,
  model: unknown,
): () => void {
  let input = 0;
  let output = 0;
  return () =>
    guarded(run, "openai-agents: reporting usage", () => {
      const usage = context?.usage;
      if (!usage) return;
      const i = Number(usage.inputTokens ?? 0) - input;
      const o = Number(usage.outputTokens ?? 0) - output;
      if (!(i > 0 || o > 0)) return;
      input += i;
      output += o;
      run.postLlmCall({
        inputTokens: i,
        outputTokens: o,
        ...(typeof model === "string" ? { model } : {}),
      });
    }, () => {});
}

async function drive<TAgent extends AnyAgent, TContext>(
  run: Run,
  init: OpenAIAgentsInit,
  agent: TAgent,
  input: RunInput<TContext, TAgent>,
  options: CheckpointedRunOptions<TContext, TAgent>,
  journaled?: { journaling: Journaling; runner: Runner },
): Promise<WithRun<RunResult<TContext, TAgent> | StreamedRunResult<TContext, TAgent>>> {
  const { runner: given, ...rest } = options;
  let capped = false;
  let detach = () => {};
  try {
    const placement = placementFor(init.placement, rest);
    // With the journal, the agents and the runner are the run's own copies whose models and
    // tools go through it, and the prologue, turns and use are the live calls' only.
    const journaling = journaled?.journaling;
    const runner = journaled?.runner ?? given ?? new Runner();
    const userFilter = rest.callModelInputFilter ?? runner.config.callModelInputFilter;
    const context = runContextOf(input, rest.context);
    detach = reportTools(
      run,
      runner,
      given ? context : undefined,
      init.replay ?? [],
      journaling?.starts,
    );
    const signal = runSignal(run, init.deadline, rest.signal);
    const reportUsage = journaling ? () => {} : usageReporter(
      run,
      context ?? (input as { _context?: RunContext<unknown> })?._context,
      (agent as { model?: unknown }).model,
    );
    const sdkOptions = {
      ...rest,
      maxTurns: init.maxTurns,
      ...(!journaling
        ? { callModelInputFilter: prologueFilter(run, placement, userFilter, reportUsage) }
        : userFilter
        ? { callModelInputFilter: userFilter }
        : {}),
      ...(context ? { context } : {}),
      ...(signal ? { signal } : {}),
      ...(rest.errorHandlers
        ? { errorHandlers: noteCapped(rest.errorHandlers, () => capped = true) }
        : {}),
    };
    if (!sdkOptions.stream) {
      const result = await runner.run(
        agent,
        input,
        sdkOptions as NonStreamRunOptions<TContext, TAgent>,
      );
      detach();
      reportUsage();
      await run.end({ status: capped ? "capped" : "done" });
      return withRun(result, run);
    }
    const streamed = await runner.run(
      agent,
      input,
      sdkOptions as StreamRunOptions<TContext, TAgent>,
    );
    countStreamActivity(run, streamed);
    const completed = streamed.completed.then(
      async () => {
        detach();
        reportUsage();
        // The SDK ends a stream its signal aborted quietly: a run an enforced cap stopped
        // rejects as the non-streamed one throws.
        const stopped = run.budget.error();
        await run.end({ status: capped || stopped ? "capped" : "done" });
        if (stopped) throw stopped;
      },
      async (error: unknown) => {
        detach();
        await run.end(ended(run, init, rest.signal, error));
        throw run.budget.error(error) ?? error;
      },
    );
    completed.catch(() => {/* the host's to see, through `completed` */});
    guarded(run, "openai-agents: the stream's end", () => {
      Object.defineProperty(streamed, "completed", { value: completed, configurable: true });
    }, () => {});
    return withRun(streamed, run);
  } catch (error) {
    detach();
    await run.end(ended(run, init, rest.signal, error));
    throw run.budget.error(error) ?? error;
  }
}

/** The SDK's result with the run as `run`. */
function withRun<T extends object>(result: T, run: Run): WithRun<T> {
  if (!("run" in result)) {
    Object.defineProperty(result, "run", { value: run, enumerable: false, configurable: true });
  }
  return result as WithRun<T>;
}

/**
 * Where the prologue can go without being kept: a session stores the first
 * call's input items, and a server-managed conversation (`conversationId`,
 * `previousResponseId`) stores every input item sent, so there it goes into
 * the instructions, which neither keeps.
 */
function placementFor(
  asked: Placement | undefined,
  options: { session?: unknown; conversationId?: unknown; previousResponseId?: unknown },
): Placement {
  if (options.conversationId || options.previousResponseId) return "system";
  if (options.session && (asked ?? "user") === "user") return "system";
  return asked ?? "user";
}

/** The run context the SDK will use, so tool events of this run can be told apart on a shared runner. */
function runContextOf<TContext, TAgent extends AnyAgent>(
  input: RunInput<TContext, TAgent>,
  context: TContext | RunContext<TContext> | undefined,
): RunContext<TContext> | undefined {
  if (typeof input === "object" && !Array.isArray(input)) return undefined; // a RunState has its own
  return context instanceof RunContext ? context : new RunContext(context as TContext);
}

/** How a run whose SDK call threw ended. */
function ended(
  run: Run,
  init: OpenAIAgentsInit,
  userSignal: AbortSignal | undefined,
  error: unknown,
): { status: Status; summary?: string } {
  const summary = errorLine(error);
  if (isMaxTurns(error) || run.budget.stopped) return { status: "capped", summary };
  if (init.deadline && run.stopReason?.kind === "deadline") return { status: "deadline", summary };
  if (userSignal?.aborted) return { status: "aborted", summary };
  return { status: "failed", summary };
}

const isMaxTurns = (error: unknown): boolean =>
  error instanceof Error && error.name === "MaxTurnsExceededError";

/** Wrap the host's error handlers so a handled max-turns error still ends the run `capped`. */
function noteCapped<T extends Record<string, unknown>>(handlers: T, onCapped: () => void): T {
  const out: Record<string, unknown> = { ...handlers };
  for (const [kind, handler] of Object.entries(handlers)) {
    if (typeof handler !== "function") continue;
    out[kind] = async (input: { error?: unknown }) => {
      const handled = await handler(input);
      if (handled !== undefined && isMaxTurns(input?.error)) onCapped();
      return handled;
    };
  }
  return out as T;
}

/**
 * The `callModelInputFilter` that puts the prologue into the one model call
 * it is due for: the host's filter runs first, then `preLlmCall()` once.
 */
function prologueFilter(
  run: Run,
  placement: Placement,
  userFilter: CallModelInputFilter | undefined,
  beforeCall: () => void = () => {},
): CallModelInputFilter {
  const pending = new PendingPrologue();
  const filter: CallModelInputFilter = async (args) => {
    const data = userFilter ? await userFilter(args) : args.modelData;
    // The tool results this call carries are in the ledger before the model sees them.
    await run.effects.durable();
    beforeCall(); // the previous call's usage, so a tier it crossed reaches this call
    const text = run.preLlmCall();
    if (text === undefined && !pending.waiting) return data;
    return guarded(
      run,
      "openai-agents: placing the prologue",
      () => place(data, placement, text, pending),
      () => data,
    );
  };
  if (userFilter?.preserveInputIdentity) filter.preserveInputIdentity = true;
  return filter;
}

function place(
  data: ModelInputData,
  placement: Placement,
  text: string | undefined,
  pending: PendingPrologue,
): ModelInputData {
  if (placement === "system") {
    if (text === undefined) return data;
    return { ...data, instructions: data.instructions ? `${data.instructions}\n\n${text}` : text };
  }
  if (placement === "user") {
    if (text === undefined) return data;
    return { ...data, input: [...data.input, { role: "user", content: text }] };
  }
  // The newest tool result not yet sent: the SDK sends a call's results right after it.
  const last = data.input.length - 1;
  const item = data.input[last];
  const carrier = item?.type === "function_call_result" ? item : undefined;
  const now = pending.take(text, carrier !== undefined);
  if (now === undefined || carrier === undefined) return data;
  const input = [...data.input];
  input[last] = { ...carrier, output: appendText(carrier.output, now) } as AgentInputItem;
  return { ...data, input };
}

type ResultOutput = Extract<AgentInputItem, { type: "function_call_result" }>["output"];

function appendText(output: ResultOutput, text: string): ResultOutput {
  if (typeof output === "string") return `${output}\n\n${text}`;
  if (Array.isArray(output)) return [...output, { type: "input_text", text }] as ResultOutput;
  if (output.type === "text") return { ...output, text: `${output.text}\n\n${text}` };
  return [output, { type: "input_text", text }] as unknown as ResultOutput;
}

/** The SDK's own texts for a tool that threw, timed out or was aborted. */
const FAILED_TOOL =
  /^(An error occurred while running the tool|Tool '[^']*' timed out after \d+ms|aborted$|\w*Error: )/;

/**
 * Report the runner's tool starts and ends to the run, with call ids and
 * durations; returns the function that stops listening. On a runner the host
 * shares, only the events of this run's context count.
 */
function reportTools(
  run: Run,
  runner: Runner,
  context: RunContext<unknown> | undefined,
  replay: readonly string[],
  held?: HeldStarts,
): () => void {
  const started = new Map<string, number>();
  const ours = (ctx: unknown) => context === undefined || ctx === context;
  const callIdOf = (call: unknown): string | undefined => {
    const c = call as { callId?: unknown; id?: unknown } | undefined;
    const id = c?.callId ?? c?.id;
    return typeof id === "string" ? id : undefined;
  };
  const onStart = (
    ctx: unknown,
    _agent: unknown,
    tool: { name?: string },
    details?: { toolCall?: unknown },
  ) =>
    guarded(run, "openai-agents: agent_tool_start", () => {
      if (!ours(ctx)) return;
      const callId = callIdOf(details?.toolCall);
      const call = details?.toolCall as { arguments?: unknown } | undefined;
      const name = String(tool?.name ?? "tool");
      const report = () => {
        if (callId !== undefined) started.set(callId, performance.now());
        run.preToolCall(name, {
          ...(callId !== undefined ? { callId } : {}),
          ...(call?.arguments !== undefined ? { input: effectInput(call.arguments) } : {}),
          // A tool in replay has its intent and receipt from run.once.
          ...(replay.includes(name) ? { effect: false } : {}),
        });
      };
      // A journaled tool's call is reported once it runs live: a replayed one is not.
      if (held?.tools.has(tool) && callId !== undefined) held.hold(callId, report);
      else report();
    }, () => {});
  const onEnd = (
    ctx: unknown,
    _agent: unknown,
    tool: { name?: string },
    result: unknown,
    details?: { toolCall?: unknown },
  ) =>
    guarded(run, "openai-agents: agent_tool_end", () => {
      if (!ours(ctx)) return;
      const callId = callIdOf(details?.toolCall);
      if (held?.tools.has(tool) && callId !== undefined && !held.ended(callId)) return;
      const start = callId !== undefined ? started.get(callId) : undefined;
      if (callId !== undefined) started.delete(callId);
      const ok = !(typeof result === "string" && FAILED_TOOL.test(result));
      run.postToolCall(String(tool?.name ?? "tool"), {
        ok,
        ...(start !== undefined ? { durationMs: Math.round(performance.now() - start) } : {}),
        ...(callId !== undefined ? { callId } : {}),
        ...(ok ? { result } : { error: String(result).slice(0, 300) }),
      });
    }, () => {});
  // deno-lint-ignore no-explicit-any
  const hooks = runner as any;
  hooks.on("agent_tool_start", onStart);
  hooks.on("agent_tool_end", onEnd);
  let attached = true;
  return () => {
    if (!attached) return;
    attached = false;
    hooks.off("agent_tool_start", onStart);
    hooks.off("agent_tool_end", onEnd);
  };
}

/** Streamed events count as activity: the SDK queues each through the result's `_addItem`. */
function countStreamActivity(run: Run, streamed: unknown): void {
  guarded(run, "openai-agents: counting streamed activity", () => {
    const target = streamed as { _addItem?: (item: unknown) => unknown };
    const add = target._addItem;
    if (typeof add !== "function") return;
    target._addItem = function (item: unknown) {
      run.activity();
      return add.call(this, item);
    };
  }, () => {});
}

/**
 * Tool starts held back until the tool runs live: a call the journal answers
 * (it does not run) is not reported to the run.
 */
class HeldStarts {
  /** The journaled tools. */
  readonly tools = new WeakSet<object>();
  readonly #waiting = new Map<string, () => void>();
  readonly #begun = new Set<string>();

  /** The SDK started the call: its report waits for the tool to run. */
  hold(callId: string, report: () => void): void {
    this.#waiting.set(callId, report);
  }

  /** The call runs live: its start is reported now. */
  begin(callId: string | undefined): void {
    if (callId === undefined) return;
    const report = this.#waiting.get(callId);
    this.#waiting.delete(callId);
    this.#begun.add(callId);
    report?.();
  }

  /** The SDK ended the call: whether it ran live (its end is reported then). */
  ended(callId: string): boolean {
    this.#waiting.delete(callId);
    return this.#begun.delete(callId);
  }
}

/** Resolves `liveReady` in a journaled stream: the call went live. */
const LIVE = Symbol("live");

const isModel = (value: unknown): value is Model =>
  value !== null && typeof value === "object" &&
  typeof (value as { getResponse?: unknown }).getResponse === "function";

/** The call id of a tool call's `details`. */
const detailsCallId = (details: unknown): string | undefined => {
  const id = (details as { toolCall?: { callId?: unknown } } | undefined)?.toolCall?.callId;
  return typeof id === "string" ? id : undefined;
};

/**
 * A model request as the journal keys it: the request without what differs
 * from process to process (its abort signal, the tracing flag and the SDK's
 * internal tracing parent), with the model's name when it has one.
 */
function journalRequest(request: ModelRequest, name: string | undefined): unknown {
  const { signal: _signal, tracing: _tracing, ...rest } = request;
  delete (rest as { _internal?: unknown })._internal;
  return { model: name ?? null, request: rest };
}

/** A model response's token counts. */
function usageOf(usage: unknown): { inputTokens: number; outputTokens: number } | undefined {
  const u = usage as { inputTokens?: unknown; outputTokens?: unknown } | undefined;
  if (!u || typeof u !== "object") return undefined;
  return { inputTokens: Number(u.inputTokens ?? 0), outputTokens: Number(u.outputTokens ?? 0) };
}

type ResponseDone = Extract<StreamEvent, { type: "response_done" }>;

/** The `response_done` event of a stream's events. */
const doneOf = (events: unknown): ResponseDone | undefined =>
  Array.isArray(events)
    ? events.find((e): e is ResponseDone => (e as { type?: unknown })?.type === "response_done")
    : undefined;

/**
 * The run journal for one run: the run's own copies of its agents (the start
 * agent and every agent its handoffs reach) and of its runner, through which
 * every model call goes through `run.journal.model()` (a model on an agent,
 * the runner's `model`, or a name the runner's `modelProvider` resolves), and
 * every function tool's `invoke` through `run.journal.tool()`. The prologue,
 * the turn and the use are a live call's only: a replayed call never
 * reaches them.
 */
class Journaling {
  readonly #run: Run;
  readonly #placement: Placement;
  readonly #pending = new PendingPrologue();
  /** The tools' own wrapper (deadlines, effects), when the settings ask for one. */
  readonly #timed: ((tool: { invoke: Invoke }) => Invoke) | undefined;
  readonly #models = new WeakMap<object, Model>();
  readonly #agents = new Map<object, AnyAgent>();
  /** Starts of journaled tools, reported once they run live. */
  readonly starts = new HeldStarts();

  constructor(
    run: Run,
    placement: Placement,
    timed: ((tool: { invoke: Invoke }) => Invoke) | undefined,
  ) {
    this.#run = run;
    this.#placement = placement;
    this.#timed = timed;
  }

  /** The run's copy of an agent, and of every agent its handoffs reach. */
  agent<T extends AnyAgent>(agent: T): T {
    return this.#copy(agent) as T;
  }

  /**
   * The run's own runner: the host's runner's config (or a new runner's), its
   * model provider and model wrapped, its events heard by the host's runner.
   */
  runner(given: Runner | undefined): Runner {
    const base = given ?? new Runner();
    const config = base.config;
    const provider = config.modelProvider;
    const own = new Runner({
      ...config,
      modelProvider: {
        getModel: (name?: string) => {
          const model = provider.getModel(name);
          return isThenable(model)
            ? Promise.resolve(model).then((m) => this.model(m, name))
            : this.model(model, name);
        },
      },
      ...(isModel(config.model) ? { model: this.model(config.model, undefined) } : {}),
    });
    // The trace's own names, as the host's runner gives them (the SDK keeps them private).
    type Traced = { traceOverrides: unknown };
    (own as unknown as Traced).traceOverrides = (base as unknown as Traced).traceOverrides;
    if (given) {
      // One emitter: the host's listeners on its runner hear this run's events.
      type Hooks = { eventEmitter: unknown };
      (own as unknown as Hooks).eventEmitter = (given as unknown as Hooks).eventEmitter;
    }
    return own;
  }

  /** A model whose calls go through the journal; `name` when a provider resolved it. */
  model(model: Model, name: string | undefined): Model {
    const known = this.#models.get(model);
    if (known) return known;
    const wrapped = new Proxy(model, {
      get: (target, prop) => {
        if (prop === "getResponse") {
          return (request: ModelRequest) => this.#generate(target, name, request);
        }
        if (prop === "getStreamedResponse") {
          return (request: ModelRequest) => this.#stream(target, name, request);
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    this.#models.set(model, wrapped);
    this.#models.set(wrapped, wrapped);
    return wrapped;
  }

  #copy(agent: AnyAgent): AnyAgent {
    const known = this.#agents.get(agent);
    if (known) return known;
    const a = agent as unknown as { tools?: unknown; model?: unknown; handoffs?: unknown };
    const copy = agent.clone({
      ...(Array.isArray(a.tools) ? { tools: a.tools.map((t) => this.#tool(t)) as Tool[] } : {}),
      ...(isModel(a.model) ? { model: this.model(a.model, undefined) } : {}),
    }) as AnyAgent;
    // The copy sends the same tools' flag to the model as the agent.
    type Explicit = { _toolsExplicitlyConfigured?: unknown };
    (copy as unknown as Explicit)._toolsExplicitlyConfigured =
      (agent as unknown as Explicit)._toolsExplicitlyConfigured;
    forwardEvents(agent, copy);
    this.#agents.set(agent, copy);
    this.#agents.set(copy, copy);
    // After the copy is known: a handoff may lead back to this agent.
    if (Array.isArray(a.handoffs)) {
      (copy as unknown as { handoffs: unknown[] }).handoffs = a.handoffs.map((h) =>
        this.#handoff(h)
      );
    }
    return copy;
  }

  #handoff(h: unknown): unknown {
    if (h instanceof Handoff) {
      return h.clone({
        agent: this.#copy(h.agent),
        onInvokeHandoff: async (context, args) =>
          this.#copy(await h.onInvokeHandoff(context, args)),
      });
    }
    return typeof (h as { clone?: unknown })?.clone === "function" ? this.#copy(h as AnyAgent) : h;
  }

  /**
   * A function tool whose `invoke` goes through the journal: in a retry, a
   * call of the replayed stretch returns its recorded result and does not run
   * (nor is it reported); live, its result is journaled before it is returned.
   */
  #tool(t: unknown): unknown {
    if (!isFunctionTool(t)) return t;
    const invoke = this.#timed ? this.#timed(t) : t.invoke;
    const name = String(t.name ?? "tool");
    const wrapped = {
      ...t,
      invoke: async (ctx: unknown, input: unknown, details?: unknown) => {
        const recorded = await this.#run.journal.tool(name, effectInput(input), async () => {
          this.starts.begin(detailsCallId(details));
          return { result: await invoke.call(t, ctx, input, details) };
        });
        return (recorded as { result?: unknown } | null)?.result;
      },
    };
    this.starts.tools.add(wrapped);
    return wrapped;
  }

  /**
   * Before a live call: the tool results it carries durable, its turn
   * counted (`preLlmCall()`) and the prologue placed in the request sent.
   */
  async #before(request: ModelRequest): Promise<ModelRequest> {
    await this.#run.effects.durable();
    const text = this.#run.preLlmCall();
    return guarded(this.#run, "openai-agents: placing the prologue", () => {
      if (text === undefined && !this.#pending.waiting) return request;
      const data: ModelInputData = {
        input: Array.isArray(request.input)
          ? request.input
          : [{ role: "user", content: request.input }],
        ...(request.systemInstructions !== undefined
          ? { instructions: request.systemInstructions }
          : {}),
      };
      const out = place(data, this.#placement, text, this.#pending);
      if (out === data) return request;
      return {
        ...request,
        input: out.input,
        ...(out.instructions !== undefined ? { systemInstructions: out.instructions } : {}),
      };
    }, () => request);
  }

  /** Report a live call's use, with the model's name for the `prices` setting. */
  #report(usage: unknown, name: string | undefined): void {
    guarded(this.#run, "openai-agents: reporting usage", () => {
      const used = usageOf(usage);
      if (!used || !(used.inputTokens > 0 || used.outputTokens > 0)) return;
      this.#run.postLlmCall({ ...used, ...(name !== undefined ? { model: name } : {}) });
    }, () => {});
  }

  async #generate(
    model: Model,
    name: string | undefined,
    request: ModelRequest,
  ): Promise<ModelResponse> {
    let live = false;
    const response = await this.#run.journal.model(
      journalRequest(request, name),
      async () => {
        const answer = await model.getResponse(await this.#before(request));
        live = true;
        this.#report(answer?.usage, name);
        return answer;
      },
      { usage: (r) => usageOf(r?.usage) },
    );
    // A replayed response is its JSON read back: its usage a `Usage` again.
    return live ? response : {
      ...response,
      usage: new Usage(response?.usage as ConstructorParameters<typeof Usage>[0]),
    };
  }

  /**
   * A streamed call through the journal: live, its events pass through as
   * they come and are journaled once the stream has ended with its response
   * (a stream cut off or failing is not journaled, so a retry makes the call
   * again); the stream ends once its entry is in the ledger. Replayed, the
   * recorded events.
   */
  async *#stream(
    model: Model,
    name: string | undefined,
    request: ModelRequest,
  ): AsyncGenerator<StreamEvent> {
    let live: AsyncIterable<StreamEvent> | undefined;
    let started!: () => void;
    const liveReady = new Promise<typeof LIVE>((resolve) => started = () => resolve(LIVE));
    let finish!: (events: StreamEvent[]) => void;
    let fail!: (error: unknown) => void;
    const finished = new Promise<StreamEvent[]>((resolve, reject) => {
      finish = resolve;
      fail = reject;
    });
    finished.catch(() => {/* the stream's own error reaches the SDK */});
    const journaled = this.#run.journal.model(
      journalRequest(request, name),
      async () => {
        live = this.#liveStream(model, name, request);
        started();
        return { events: await finished };
      },
      { usage: (r) => usageOf(doneOf(r.events)?.response.usage) },
    );
    journaled.catch(() => {/* the stream's own error reaches the SDK */});
    const first = await Promise.race([liveReady, journaled]);
    if (first !== LIVE || live === undefined) {
      const events = (first as { events?: unknown } | undefined)?.events;
      if (Array.isArray(events)) yield* events as StreamEvent[];
      return;
    }
    const events: StreamEvent[] = [];
    let ended = false;
    try {
      for await (const event of live as AsyncIterable<StreamEvent>) {
        events.push(event);
        yield event;
      }
      ended = true;
    } catch (error) {
      fail(error);
      throw error;
    } finally {
      if (!ended) fail(new Error("the stream was cut off"));
    }
    if (doneOf(events)) finish(events);
    else fail(new Error("the stream ended without its response"));
    await journaled.then(() => {}, () => {});
  }

  /** A live stream: its call prepared as {@linkcode Journaling.#before} does, its use reported. */
  async *#liveStream(
    model: Model,
    name: string | undefined,
    request: ModelRequest,
  ): AsyncGenerator<StreamEvent> {
    const sent = await this.#before(request);
    for await (const event of model.getStreamedResponse(sent)) {
      if (event?.type === "response_done") this.#report(event.response?.usage, name);
      yield event;
    }
  }
}

/** Where a {@linkcode RunStoreSession} keeps its items. */
export interface RunStoreSessionInit {
  /** The session's id. @default {a new random UUID} */
  sessionId?: string;
  /** The scope its id is kept under (sessions of two scopes never meet). @default {"openai-agents"} */
  scope?: string;
}

/**
 * An OpenAI Agents `Session` (conversation memory) kept in the run store of
 * an agent-checkpoint keeper: its embedded ledger (`<home>/agent-checkpoint/runs.db`),
 * or the PostgreSQL fleet store when the keeper's `store` setting names one.
 * Pass it as `session` to `run()` (or `checkpointedRun()`): each run starts
 * from the items the session's earlier runs kept, in any process or on any
 * machine whose keeper shares the store.
 *
 * Items are kept as their JSON, in order, as `MemorySession` keeps them:
 * `getItems(n)` gives the last `n`, `popItem()` removes and returns the last
 * one (in one commit), `clearSession()` removes them all.
 *
 * @example A second run sees the first run's conversation
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { RunStoreSession } from "./openai_agents.ts";
 * import { Agent, run } from "npm:@openai/agents@0.x";
 * import { assistantMessage, ScriptedModel } from "npm:@openai/agents@0.x/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const model = new ScriptedModel([[assistantMessage("Hi Ada")], [assistantMessage("Ada")]]);
 * const agent = new Agent({ name: "assistant", model });
 * const session = new RunStoreSession(ac, { sessionId: "chat-1" });
 * await run(agent, "My name is Ada", { session });
 * const second = await run(agent, "What is my name?", { session });
 * assert.equal(second.finalOutput, "Ada");
 * assert.equal((await session.getItems()).length, 4); // two questions, two answers
 * await ac.close();
 * ```
 */
export class RunStoreSession implements Session {
  readonly #ac: AgentCheckpoint;
  readonly #key: SessionPath;

  /**
   * A session over a keeper's run store.
   *
   * @param ac The keeper whose run store keeps the items.
   * @param init The session's id and scope.
   */
  constructor(ac: AgentCheckpoint, init: RunStoreSessionInit = {}) {
    this.#ac = ac;
    this.#key = {
      scope: init.scope ?? "openai-agents",
      sessionId: init.sessionId ?? randomUUID(),
      subpath: "",
    };
  }

  /**
   * The session's id.
   *
   * @returns The id it was made with (or the random one it got).
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSession } from "./openai_agents.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * assert.equal(await new RunStoreSession(ac, { sessionId: "s" }).getSessionId(), "s");
   * await ac.close();
   * ```
   */
  getSessionId(): Promise<string> {
    return Promise.resolve(this.#key.sessionId);
  }

  /**
   * The session's items, the oldest first: all of them, or the last `limit`.
   *
   * @param limit How many of the newest items, at most.
   * @returns The items.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSession } from "./openai_agents.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const session = new RunStoreSession(ac);
   * await session.addItems([
   *   { role: "user", content: "one" }, { role: "user", content: "two" }, { role: "user", content: "three" },
   * ]);
   * assert.deepEqual(await session.getItems(2), [
   *   { role: "user", content: "two" }, { role: "user", content: "three" },
   * ]);
   * await ac.close();
   * ```
   */
  async getItems(limit?: number): Promise<AgentInputItem[]> {
    if (limit !== undefined && limit <= 0) return [];
    const texts = await transcripts(this.#ac, (s) => s.load(this.#key, limit));
    return (texts ?? []).map((text) => JSON.parse(text) as AgentInputItem);
  }

  /**
   * Keep items at the end of the session, in one durable commit.
   *
   * @param items The new items.
   * @returns Once they are committed.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSession } from "./openai_agents.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const session = new RunStoreSession(ac);
   * await session.addItems([{ role: "user", content: "hello" }]);
   * assert.equal((await session.getItems()).length, 1);
   * await ac.close();
   * ```
   */
  addItems(items: AgentInputItem[]): Promise<void> {
    if (items.length === 0) return Promise.resolve();
    const entries = items.map((item) => ({ json: JSON.stringify(item) }));
    return transcripts(this.#ac, (s) => s.append(this.#key, entries));
  }

  /**
   * Remove the session's newest item and return it, in one commit.
   *
   * @returns The item, or undefined when the session has none.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSession } from "./openai_agents.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const session = new RunStoreSession(ac);
   * await session.addItems([{ role: "user", content: "a" }, { role: "user", content: "b" }]);
   * assert.deepEqual(await session.popItem(), { role: "user", content: "b" });
   * assert.deepEqual(await session.getItems(), [{ role: "user", content: "a" }]);
   * await ac.close();
   * ```
   */
  async popItem(): Promise<AgentInputItem | undefined> {
    const text = await transcripts(this.#ac, (s) => s.pop(this.#key));
    return text === undefined ? undefined : JSON.parse(text) as AgentInputItem;
  }

  /**
   * Remove every item of the session.
   *
   * @returns Once they are removed.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSession } from "./openai_agents.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const session = new RunStoreSession(ac);
   * await session.addItems([{ role: "user", content: "a" }]);
   * await session.clearSession();
   * assert.deepEqual(await session.getItems(), []);
   * await ac.close();
   * ```
   */
  clearSession(): Promise<void> {
    return transcripts(this.#ac, (s) => s.delete(this.#key));
  }
}
