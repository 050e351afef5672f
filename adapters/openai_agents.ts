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
  type ModelInputData,
  type NonStreamRunOptions,
  RunContext,
  Runner,
  type RunResult,
  type RunState,
  type StreamedRunResult,
  type StreamRunOptions,
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
 * is due for (through `callModelInputFilter`, after the host's own filter, and
 * never into `result.history`), each tool call is reported with its call id,
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
 * Usage: what each model response adds to the run context's `usage` is
 * reported with `run.postLlmCall()` before the next model call (and the last at the
 * end), with the agent's model name for the `prices` setting. Tool deadlines:
 * with `tool_timeout_seconds` set, the SDK runs a copy of the agent
 * (`agent.clone()`) whose function tools find the call's deadline signal in
 * `details.signal`; a call cut off by it tells the model that the tool timed
 * out, as the SDK's own tool timeouts do. Handoffs' agents are not copied.
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
  // Tool deadlines and effect keys reach the tools through a copy of the agent whose tools take them.
  const settings = ac.settings;
  const timed = settings.tool_timeout_seconds === undefined && !init.replay?.length &&
      settings.effect_tools.length === 0
    ? agent
    : withToolDeadlines(agent, run, init);
  return drive(run, init, timed, input, options);
}

/**
 * A copy of the agent (`agent.clone()`) whose function tools get, in their
 * `details.signal`, the SDK's signal joined to the call's deadline signal
 * (`run.time.toolSignal`); the agent itself when it has no function tool.
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
      const tool = t as { type?: unknown; invoke?: unknown };
      if (tool?.type !== "function" || typeof tool.invoke !== "function") return t;
      wrapped = true;
      const invoke = tool.invoke as (ctx: unknown, input: unknown, details?: unknown) => unknown;
      const name = String((tool as { name?: unknown }).name ?? "tool");
      return {
        ...tool,
        invoke: async (ctx: unknown, input: unknown, details?: unknown) => {
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
                return `Tool '${name}' timed out after ${
                  Math.round(performance.now() - started)
                }ms.`;
              }
              throw error;
            } finally {
              d.signal = theirs;
            }
          };
          return (await effectful(run, init, name, effectInput(input), callId, call)).value;
        },
      };
    });
    if (!wrapped) return agent;
    const copy = a.clone({ tools }) as TAgent;
    // The host's own agent.on(...) listeners, before and after this, hear the copy's events.
    type Emits = { emit?: (type: string, ...args: unknown[]) => unknown };
    const own = agent as unknown as Emits;
    if (typeof own.emit === "function") {
      (copy as unknown as Emits).emit = (type, ...args) => own.emit!(type, ...args);
    }
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
): Promise<WithRun<RunResult<TContext, TAgent> | StreamedRunResult<TContext, TAgent>>> {
  const { runner: given, ...rest } = options;
  let capped = false;
  let detach = () => {};
  try {
    const runner = given ?? new Runner();
    const userFilter = rest.callModelInputFilter ?? runner.config.callModelInputFilter;
    const context = runContextOf(input, rest.context);
    detach = reportTools(run, runner, given ? context : undefined, init.replay ?? []);
    const signal = runSignal(run, init.deadline, rest.signal);
    const reportUsage = usageReporter(
      run,
      context ?? (input as { _context?: RunContext<unknown> })?._context,
      (agent as { model?: unknown }).model,
    );
    const sdkOptions = {
      ...rest,
      maxTurns: init.maxTurns,
      callModelInputFilter: prologueFilter(
        run,
        placementFor(init.placement, rest),
        userFilter,
        reportUsage,
      ),
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
      if (callId !== undefined) started.set(callId, performance.now());
      const call = details?.toolCall as { arguments?: unknown } | undefined;
      const name = String(tool?.name ?? "tool");
      run.preToolCall(name, {
        ...(callId !== undefined ? { callId } : {}),
        ...(call?.arguments !== undefined ? { input: effectInput(call.arguments) } : {}),
        // A tool in replay has its intent and receipt from run.once.
        ...(replay.includes(name) ? { effect: false } : {}),
      });
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
