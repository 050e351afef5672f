// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * agent-checkpoint for LangChain (`langchain` v1 `createAgent`) and LangGraph
 * (`@langchain/langgraph` v1 `createReactAgent`): the turn cap stated once,
 * the budget prologue in the one model call it is due for, every tool call
 * reported, and the run ended with how it went.
 *
 * A turn is one model call. `createAgent` counts nothing itself, so the
 * middleware enforces `maxTurns`; LangGraph counts graph steps
 * (`recursionLimit`), where one turn is two steps (the model, then its tools).
 *
 * Each model call's `AIMessage.usage_metadata` is reported with
 * `run.usage()` (for `createReactAgent`, when the next model call, a
 * streamed chunk or the end of `invoke()` shows it), and each tool call's `config.signal` also aborts
 * at the call's deadline (`tool_timeout_seconds`).
 *
 * @example One line in createAgent's middleware
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointMiddleware } from "./langchain.ts";
 * import { createAgent } from "npm:langchain@1";
 * import { FakeListChatModel } from "npm:@langchain/core@1/utils/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const agent = createAgent({
 *   model: new FakeListChatModel({ responses: ["done"] }),
 *   middleware: [checkpointMiddleware(ac, { maxTurns: 8 })],
 * });
 * const state = await agent.invoke(
 *   { messages: [{ role: "user", content: "Hi" }] },
 *   { configurable: { thread_id: "chat-1" } },
 * );
 * assert.equal(state.messages.at(-1)?.content, "done");
 * await ac.close();
 * ```
 *
 * @module
 */
import type { AgentMiddleware } from "npm:langchain@1";
import {
  AIMessage,
  type BaseMessage,
  HumanMessage,
  SystemMessage,
  ToolMessage,
} from "npm:@langchain/core@1/messages";
import { IterableReadableStream } from "npm:@langchain/core@1/utils/stream";
import { getConfig, isGraphBubbleUp } from "npm:@langchain/langgraph@1";
import { createReactAgent } from "npm:@langchain/langgraph@1/prebuilt";
import { z } from "npm:zod@^4";
import type { AgentCheckpoint, Run } from "../mod.ts";
import {
  type AdapterInit,
  checkCap,
  logFault,
  PendingPrologue,
  type Placement,
  runSignal,
  startAdapterRun,
  tellOnce,
  thrownStatus,
  toolCallSignal,
} from "./_shared.ts";

export type { AdapterInit, Placement } from "./_shared.ts";

/**
 * Report a tool call's start to the run; returns what reports its end, with
 * the call id and the time it took.
 */
function reportTool(
  run: Run,
  name: string,
  callId: string | undefined,
  input: unknown,
): (ok: boolean, error?: string) => void {
  const id = callId !== undefined ? { callId } : {};
  run.preToolCall(name, { ...id, input });
  const started = performance.now();
  return (ok, error) =>
    run.postToolCall(name, {
      ok,
      durationMs: Math.round(performance.now() - started),
      ...id,
      ...(error !== undefined ? { error } : {}),
    });
}

/**
 * Report a model call's use from its `AIMessage.usage_metadata` (and the
 * model's name from `response_metadata`, for the `prices` setting).
 */
function reportUsage(run: Run, message: unknown): void {
  try {
    const m = message as {
      usage_metadata?: { input_tokens?: unknown; output_tokens?: unknown };
      response_metadata?: { model_name?: unknown; model?: unknown };
    } | undefined;
    const u = m?.usage_metadata;
    if (u === null || typeof u !== "object") return;
    const model = m?.response_metadata?.model_name ?? m?.response_metadata?.model;
    run.usage({
      inputTokens: Number(u.input_tokens ?? 0),
      outputTokens: Number(u.output_tokens ?? 0),
      ...(typeof model === "string" ? { model } : {}),
    });
  } catch (error) {
    logFault(run, "langchain: reporting usage", error);
  }
}

/**
 * A tool for one call whose `invoke` also aborts at the call's deadline
 * (`run.toolSignal`), joined to the graph's own signal in `config.signal`.
 */
function withToolSignal<T>(tool: T, run: Run, callId: string | undefined): T {
  if (callId === undefined || tool === null || typeof tool !== "object") return tool;
  const t = tool as unknown as { invoke?: unknown };
  if (typeof t.invoke !== "function") return tool;
  return new Proxy(tool as unknown as object, {
    get: (target, prop) => {
      const value = Reflect.get(target, prop, target);
      if (prop !== "invoke") return typeof value === "function" ? value.bind(target) : value;
      return (input: unknown, config?: { signal?: AbortSignal }) =>
        value.call(target, input, {
          ...config,
          signal: toolCallSignal(run, callId, config?.signal),
        });
    },
  }) as T;
}

/** What the LangChain adapters take: the run's init (session id optional) and its turn cap. */
export interface LangChainInit extends AdapterInit {
  /** The turn cap: the most model calls one invocation of the agent may make. */
  maxTurns: number;
}

/** The most invocations one middleware tracks at once before it ends the oldest. */
const MAX_OPEN = 256;
/** The private state key that ties an invocation to its run. */
const RUN_KEY = "_agentCheckpointRun";
/** LangChain marks middleware with this global symbol. */
const MIDDLEWARE_BRAND = Symbol.for("AgentMiddleware");

/** A run in flight, and what it needs between hooks. */
interface Live {
  run: Run;
  init: LangChainInit;
  cap: number;
  calls: number;
  capped: boolean;
  pending: PendingPrologue;
  signal: AbortSignal | undefined;
}

/**
 * LangGraph's `recursionLimit` when the caller gives none (LangChain fills it
 * into every config): enough for 10 turns through {@linkcode checkpointMiddleware}.
 *
 * @example
 * ```ts
 * import { DEFAULT_RECURSION_LIMIT, stepsForCreateAgent } from "./langchain.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(stepsForCreateAgent(10) <= DEFAULT_RECURSION_LIMIT);
 * assert.ok(stepsForCreateAgent(11) > DEFAULT_RECURSION_LIMIT);
 * ```
 */
export const DEFAULT_RECURSION_LIMIT = 25;

/**
 * Graph steps one `createAgent` invocation with this middleware takes for a
 * turn cap, measured: its before- and after-agent nodes (2), a model and a
 * tools step per turn (2 × cap), and the model step that stops the run at the
 * cap (1), plus the one step LangGraph's limit is short of.
 *
 * @example Give invoke() enough steps for the cap
 * ```ts
 * import { stepsForCreateAgent } from "./langchain.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(stepsForCreateAgent(12), 28); // LangGraph's default of 25 allows 10 turns
 * ```
 */
export const stepsForCreateAgent = (maxTurns: number): number => 2 * maxTurns + 4;

/**
 * The `recursionLimit` that lets `createReactAgent` make exactly `maxTurns`
 * model calls, measured: a model and a tools step per turn, so the tools the
 * last call asks for still run; the next model step raises `GraphRecursionError`.
 *
 * @example
 * ```ts
 * import { recursionLimitForReactAgent } from "./langchain.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(recursionLimitForReactAgent(12), 24); // LangGraph's default of 25 allows 13
 * ```
 */
export const recursionLimitForReactAgent = (maxTurns: number): number => 2 * maxTurns;

/** Check an init at the call: bad caps and placements are programming errors. */
function checkInit(init: LangChainInit): void {
  if (init === null || typeof init !== "object") {
    throw new TypeError(`init must be an object, got ${init === null ? "null" : typeof init}`);
  }
  checkCap("maxTurns", init.maxTurns, "turns");
  checkCap("timeSeconds", init.timeSeconds, "seconds", true);
  if (init.placement !== undefined && !["user", "system", "tool-result"].includes(init.placement)) {
    throw new TypeError(
      `placement must be "user", "system" or "tool-result", got ${JSON.stringify(init.placement)}`,
    );
  }
  if (init.sessionId !== undefined && (typeof init.sessionId !== "string" || !init.sessionId)) {
    throw new TypeError(`sessionId must be a non-empty string, got ${String(init.sessionId)}`);
  }
}

/** The session id: the host's, else the invocation's thread id, else a fresh one. */
function sessionOf(init: LangChainInit, configurable: unknown): string {
  if (init.sessionId) return init.sessionId;
  const thread = (configurable as { thread_id?: unknown } | undefined)?.thread_id;
  if ((typeof thread === "string" && thread) || typeof thread === "number") return String(thread);
  return `langchain-${crypto.randomUUID()}`;
}

function errorLine(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > 300 ? `${text.slice(0, 299)}…` : text;
}

const textOf = (content: unknown): string =>
  typeof content === "string" ? content : JSON.stringify(content);

/** Messages with the prologue placed; `system` may be replaced through `setSystem`. */
function placeInMessages(
  messages: BaseMessage[],
  placement: Placement,
  text: string | undefined,
  pending: PendingPrologue,
): BaseMessage[] {
  if (placement === "user") {
    return text === undefined ? messages : [...messages, new HumanMessage(text)];
  }
  if (placement === "system") {
    if (text === undefined) return messages;
    const first = messages[0];
    if (first !== undefined && SystemMessage.isInstance(first)) {
      const joined = `${textOf(first.content)}\n\n${text}`;
      return [new SystemMessage(joined), ...messages.slice(1)];
    }
    return [new SystemMessage(text), ...messages];
  }
  const last = messages.at(-1);
  const carrier = last !== undefined && ToolMessage.isInstance(last) ? last : undefined;
  const now = pending.take(text, carrier !== undefined);
  if (now === undefined || carrier === undefined) return messages;
  const carried = new ToolMessage({
    content: `${textOf(carrier.content)}\n\n${now}`,
    tool_call_id: carrier.tool_call_id,
    ...(carrier.name !== undefined ? { name: carrier.name } : {}),
    ...(carrier.status !== undefined ? { status: carrier.status } : {}),
  });
  return [...messages.slice(0, -1), carried];
}

/** How a tool call went, from what it returned. */
function toolOutcome(out: unknown): { ok: boolean; error?: string } {
  if (ToolMessage.isInstance(out) && out.status === "error") {
    return { ok: false, error: textOf(out.content).slice(0, 300) };
  }
  return { ok: true };
}

// ---------------------------------------------------------------------------
// createAgent middleware

/**
 * A `createAgent` middleware that makes each invocation of the agent a
 * checkpointed run. It starts the run before the agent (session id:
 * `init.sessionId`, else the invocation's `configurable.thread_id`), puts the
 * budget prologue into the model call it is due for (`wrapModelCall`; the
 * state's messages never keep it), reports each tool call with its call id
 * (`wrapToolCall`), and ends the run after the agent (`afterAgent`), or when
 * a model call throws.
 *
 * It enforces `maxTurns` itself: once the agent has made `maxTurns` model
 * calls and asks for another, the middleware answers in the model's place
 * with a short AI message that stops the agent, and the run ends `capped`.
 * Each invocation takes `2 × maxTurns + 4` graph steps at most: invoke the
 * agent with `middleware.withRecursionLimit(config)` (or that many as
 * `recursionLimit`). When the invocation's `recursionLimit` (LangGraph's
 * default is 25) allows fewer, the cap drops to what it allows, so the run
 * still ends `capped` instead of dying with `GraphRecursionError`; each such
 * run logs it, and the first in the process also says it on stderr.
 *
 * A tool that throws gives the model an error `ToolMessage`, as `createAgent`
 * does without middleware (a `wrapToolCall` middleware would otherwise make
 * the error fatal). Put this middleware first, so that its view of an error is
 * final. With `deadline: true`, a model or tool call still running at the
 * deadline is abandoned with the deadline's `TimeoutError`, and the run ends
 * `deadline`.
 *
 * @param ac The library instance.
 * @param init `maxTurns`, and optionally `sessionId`, `timeSeconds`, `placement`, `deadline` and the rest of startRun's init.
 * @returns The middleware, for `createAgent({ middleware: [...] })`.
 * @throws {TypeError} At the call, when a cap, the placement or the session id is unusable.
 *
 * @example The prologue reaches the model, never the state
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointMiddleware } from "./langchain.ts";
 * import { createAgent, createMiddleware } from "npm:langchain@1";
 * import { FakeListChatModel } from "npm:@langchain/core@1/utils/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const sent: string[] = [];
 * const spy = createMiddleware({ // the host's own middleware keeps working
 *   name: "Spy",
 *   wrapModelCall: (request, handler) => {
 *     sent.push(JSON.stringify(request.messages));
 *     return handler(request);
 *   },
 * });
 * const agent = createAgent({
 *   model: new FakeListChatModel({ responses: ["ok"] }),
 *   middleware: [checkpointMiddleware(ac, { maxTurns: 2 }), spy],
 * });
 * const state = await agent.invoke({ messages: [{ role: "user", content: "Go" }] });
 * assert.match(sent[0]!, /INCOMPLETE/); // two turns: the last checkpoint is due at the first call
 * assert.doesNotMatch(JSON.stringify(state.messages), /INCOMPLETE/);
 * assert.throws(() => checkpointMiddleware(ac, { maxTurns: Number.NaN }), TypeError);
 * await ac.close();
 * ```
 */
export function checkpointMiddleware(
  ac: AgentCheckpoint,
  init: LangChainInit,
): CheckpointMiddleware {
  checkInit(init);
  const placement = init.placement ?? "user";
  const runs = new Map<string, Live>();
  const liveOf = (state: unknown): [string, Live] | undefined => {
    const key = (state as Record<string, unknown> | undefined)?.[RUN_KEY];
    const live = typeof key === "string" ? runs.get(key) : undefined;
    return live && typeof key === "string" ? [key, live] : undefined;
  };
  const finish = async (key: string, live: Live, status: EndOutcome): Promise<void> => {
    if (runs.get(key) !== live) return;
    runs.delete(key);
    await live.run.end(status);
  };
  /**
   * An invocation that never reached afterAgent (the graph threw outside the
   * middleware's view, or another middleware jumped to the end) left its run
   * open; the next invocation of the session ends it, and a bound keeps the
   * table small when sessions never come back.
   */
  const endStale = async (sessionId: string): Promise<void> => {
    const stale = [...runs.entries()].filter(([key]) => key.startsWith(`${sessionId}#`));
    if (runs.size - stale.length >= MAX_OPEN) {
      const oldest = runs.entries().next().value;
      if (oldest) stale.push(oldest);
    }
    for (const [key, live] of stale) {
      await finish(key, live, {
        status: "failed",
        summary:
          "the invocation ended without passing afterAgent (an error outside the middleware, or another middleware jumped to the end)",
      });
    }
  };
  const failed = (live: Live, error: unknown, signal: AbortSignal | undefined): EndOutcome => ({
    status: thrownStatus(live.run, live.init.deadline, signal),
    summary: errorLine(error),
  });

  const middleware = {
    [MIDDLEWARE_BRAND]: true,
    name: "AgentCheckpointMiddleware",
    stateSchema: z.object({ [RUN_KEY]: z.string().optional() }),

    beforeAgent: async (
      _state: unknown,
      runtime: { configurable?: unknown; signal?: AbortSignal },
    ) => {
      const sessionId = sessionOf(init, runtime?.configurable);
      let cap = init.maxTurns;
      let warning: string | undefined;
      try {
        const limit = getConfig()?.recursionLimit;
        if (typeof limit === "number" && stepsForCreateAgent(cap) > limit) {
          const reachable = Math.max(1, Math.floor((limit - 4) / 2));
          const needed = stepsForCreateAgent(cap);
          warning =
            `recursionLimit ${limit} cannot reach maxTurns ${cap} (it needs ${needed} graph steps); this invocation stops at ${reachable} model calls. Pass recursionLimit: ${needed} or more to invoke(), or the config from withRecursionLimit() of this middleware`;
          cap = reachable;
          tellOnce(
            `langchain-recursion-limit`,
            `${
              limit === DEFAULT_RECURSION_LIMIT
                ? `LangGraph's default recursionLimit of ${limit}`
                : `recursionLimit ${limit}`
            } lets createAgent make only ${reachable} of the ${init.maxTurns} model calls of maxTurns: each such run is capped at ${reachable} turns. Fix: invoke the agent with checkpoint.withRecursionLimit(config), checkpoint being what checkpointMiddleware() returned, or pass recursionLimit: ${needed}. Said once per process; every such run logs it.`,
          );
        }
      } catch { /* no config: nothing to check */ }
      await endStale(sessionId);
      const run = startAdapterRun(ac, { ...init, sessionId }, "maxTurns", cap);
      if (warning !== undefined) run.log("warn", warning);
      const key = `${sessionId}#${crypto.randomUUID()}`;
      runs.set(key, {
        run,
        init,
        cap,
        calls: 0,
        capped: false,
        pending: new PendingPrologue(),
        signal: runSignal(run, init.deadline, undefined),
      });
      return { [RUN_KEY]: key };
    },

    wrapModelCall: async (
      request: ModelRequestLike,
      handler: (request: ModelRequestLike) => Promise<unknown>,
    ) => {
      const found = liveOf(request.state);
      if (!found) return handler(request);
      const [key, live] = found;
      if (live.calls >= live.cap) {
        live.capped = true;
        return new AIMessage(
          `Stopped: the turn cap of ${live.cap} model calls is reached; the work is unfinished.`,
        );
      }
      live.calls++;
      const text = live.run.preLlmCall();
      let placed = request;
      if (text !== undefined || live.pending.waiting) {
        try {
          placed = placeInRequest(request, placement, text, live.pending);
        } catch (error) {
          logFault(live.run, "langchain: placing the prologue", error);
        }
      }
      try {
        const out = await withDeadline(handler(placed), live.signal);
        reportUsage(live.run, out);
        return out;
      } catch (error) {
        await finish(key, live, failed(live, error, request.runtime?.signal));
        throw error;
      }
    },

    wrapToolCall: async (
      request: ToolRequestLike,
      handler: (request: ToolRequestLike) => Promise<unknown>,
    ) => {
      const found = liveOf(request.state);
      if (!found) return handler(request);
      const [key, live] = found;
      const name = String(request.toolCall?.name ?? "tool");
      const callId = typeof request.toolCall?.id === "string" ? request.toolCall.id : undefined;
      const post = reportTool(live.run, name, callId, request.toolCall?.args);
      try {
        const timed = request.tool === undefined
          ? request
          : { ...request, tool: withToolSignal(request.tool, live.run, callId) };
        const out = await withDeadline(handler(timed), live.signal);
        const outcome = toolOutcome(out);
        post(outcome.ok, outcome.error);
        return out;
      } catch (error) {
        post(false, errorLine(error));
        const aborted = request.runtime?.signal?.aborted || live.signal?.aborted;
        if (aborted) await finish(key, live, failed(live, error, request.runtime?.signal));
        if (aborted || isGraphBubbleUp(error) || (error as Error)?.name === "ToolInvocationError") {
          throw error;
        }
        // What createAgent's tool node answers for a throwing tool when no middleware wraps it.
        return new ToolMessage({
          content: `${error}\n Please fix your mistakes.`,
          tool_call_id: callId ?? "",
          name,
          status: "error",
        });
      }
    },

    afterAgent: async (state: unknown) => {
      const found = liveOf(state);
      if (found) {
        const [key, live] = found;
        await finish(key, live, { status: live.capped ? "capped" : "done" });
      }
      return undefined;
    },

    withRecursionLimit: <C extends object>(config?: C) => withRecursionLimit(init.maxTurns, config),
  };
  return middleware as unknown as CheckpointMiddleware;
}

/**
 * The invocation config with a `recursionLimit` that lets `createAgent` reach
 * `maxTurns` model calls through this middleware ({@linkcode stepsForCreateAgent}).
 * A larger limit of the caller's is kept; every other key of the config is kept.
 */
function withRecursionLimit<C extends object>(
  maxTurns: number,
  config?: C,
): C & { recursionLimit: number } {
  const given = (config as { recursionLimit?: unknown } | undefined)?.recursionLimit;
  const needed = stepsForCreateAgent(maxTurns);
  const recursionLimit = typeof given === "number" && given > needed ? given : needed;
  return { ...(config ?? {}) as C, recursionLimit };
}

/**
 * What {@linkcode checkpointMiddleware} returns: the middleware, and the config
 * its invocations need.
 *
 * @example Invoke with enough graph steps for the cap
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointMiddleware } from "./langchain.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const checkpoint = checkpointMiddleware(ac, { maxTurns: 12 });
 * const config = checkpoint.withRecursionLimit({ configurable: { thread_id: "job-7" } });
 * assert.deepEqual(config, { configurable: { thread_id: "job-7" }, recursionLimit: 28 });
 * // then: await agent.invoke(input, config)
 * await ac.close();
 * ```
 */
export type CheckpointMiddleware = AgentMiddleware & {
  /**
   * The invocation config (`configurable`, `signal`… kept) with a
   * `recursionLimit` high enough for `maxTurns` model calls (`2 × maxTurns +
   * 4`, or the config's own when larger). LangGraph's default of 25 allows 10.
   */
  withRecursionLimit<C extends object>(config?: C): C & { recursionLimit: number };
};

type EndOutcome = {
  status: "done" | "capped" | "failed" | "aborted" | "deadline";
  summary?: string;
};

interface ModelRequestLike {
  messages: BaseMessage[];
  systemPrompt?: string;
  state?: unknown;
  runtime?: { signal?: AbortSignal };
  [key: string]: unknown;
}

interface ToolRequestLike {
  toolCall?: { id?: string; name?: string; args?: unknown };
  state?: unknown;
  runtime?: { signal?: AbortSignal };
  [key: string]: unknown;
}

function placeInRequest(
  request: ModelRequestLike,
  placement: Placement,
  text: string | undefined,
  pending: PendingPrologue,
): ModelRequestLike {
  if (placement === "system") {
    if (text === undefined) return request;
    const prompt = request.systemPrompt ? `${request.systemPrompt}\n\n${text}` : text;
    return { ...request, systemPrompt: prompt };
  }
  const messages = placeInMessages(request.messages, placement, text, pending);
  return messages === request.messages ? request : { ...request, messages };
}

/** The call's result, or the deadline's reason when the deadline fires first. */
function withDeadline<T>(call: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return call;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const stop = () => reject(signal.reason);
    signal.addEventListener("abort", stop, { once: true });
    call.then(resolve, reject).finally(() => signal.removeEventListener("abort", stop));
  });
}

// ---------------------------------------------------------------------------
// createReactAgent

/** `createReactAgent`'s parameters, as this adapter reads them. */
export type ReactAgentParams = Parameters<typeof createReactAgent>[0];

/**
 * The compiled graph `createReactAgent` returns.
 *
 * @example
 * ```ts
 * import type { CheckpointedReactAgent, ReactAgentGraph } from "./langchain.ts";
 * import assert from "node:assert/strict";
 *
 * const graphOf = (agent: CheckpointedReactAgent): ReactAgentGraph => agent.graph;
 * assert.equal(typeof graphOf, "function");
 * ```
 */
export type ReactAgentGraph = ReturnType<typeof createReactAgent>;

/**
 * What {@linkcode checkpointedReactAgent} returns: the compiled graph itself,
 * its whole interface, with `invoke`, `stream` and `streamEvents` each running
 * one checkpointed invocation, plus the graph as built and its `recursionLimit`.
 *
 * @example
 * ```ts
 * import type { CheckpointedReactAgent } from "./langchain.ts";
 * import assert from "node:assert/strict";
 *
 * const limitOf = (agent: CheckpointedReactAgent): number => agent.recursionLimit;
 * assert.equal(typeof limitOf, "function");
 * ```
 */
export type CheckpointedReactAgent = ReactAgentGraph & {
  /** The compiled graph, as `createReactAgent` built it (with the prompt and tools wrapped). */
  readonly graph: ReactAgentGraph;
  /** The `recursionLimit` that allows exactly `maxTurns` model calls (`2 × maxTurns`). */
  readonly recursionLimit: number;
};

const REACT_KEY = "__agent_checkpoint_run";

/** One checkpointed invocation: the config the graph gets, and the ways its run ends (once). */
interface Invocation {
  config: Record<string, unknown>;
  /** A sign of life; `chunk`, when given, is what the graph streamed. */
  activity(chunk?: unknown): void;
  /** The run ended well; `out` is the graph's output, when it gives one. */
  done(out?: unknown): Promise<void>;
  failed(error: unknown): Promise<void>;
  abandoned(): Promise<void>;
}

/**
 * LangGraph's prebuilt `createReactAgent` as checkpointed runs: sets `prompt`
 * (the host's own prompt, then the budget prologue in the model call it is
 * due for), wraps the tools so each call is reported with its call id, and
 * derives `recursionLimit` from `maxTurns` (a turn is two graph steps).
 *
 * The result is the compiled graph with its whole interface (`getState`,
 * `getGraph`, `batch`, `withConfig`…). Each call of `invoke`, `stream` or
 * `streamEvents` is one run, with the derived `recursionLimit`. A run ends
 * `done` when the graph finishes (for a stream: when its last chunk is read),
 * `capped` on `GraphRecursionError` (rethrown), `failed`, `aborted` (the
 * host's `signal`, or a stream the host stopped reading: a `break`, a
 * `return()` or a `cancel()`, which also stops the graph) or `deadline`.
 * Every chunk a stream yields counts as activity.
 *
 * @param ac The library instance.
 * @param init `maxTurns`, and optionally `sessionId` (else the invocation's `thread_id`), `timeSeconds`, `placement`, `deadline`.
 * @param params `createReactAgent`'s parameters.
 * @returns The compiled graph, checkpointed, with `graph` and `recursionLimit` added.
 * @throws {TypeError} At the call, when a cap, the placement or the session id is unusable;
 *   at an invocation, when its config gives another `recursionLimit`.
 *
 * @example Invoke it, or stream it as any LangGraph agent
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointedReactAgent } from "./langchain.ts";
 * import { FakeListChatModel } from "npm:@langchain/core@1/utils/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const model = new FakeListChatModel({ responses: ["done", "streamed"] });
 * model.bindTools = () => model;
 * const agent = checkpointedReactAgent(ac, { maxTurns: 12 }, { llm: model, tools: [] });
 * assert.equal(agent.recursionLimit, 24);
 * const state = await agent.invoke({ messages: [{ role: "user", content: "Hi" }] });
 * assert.equal(state.messages.at(-1)?.content, "done");
 * const updates = [];
 * for await (
 *   const chunk of await agent.stream({ messages: [{ role: "user", content: "Hi" }] }, {
 *     streamMode: "updates",
 *   })
 * ) updates.push(Object.keys(chunk));
 * assert.deepEqual(updates, [["agent"]]);
 * await ac.close();
 * ```
 */
export function checkpointedReactAgent(
  ac: AgentCheckpoint,
  init: LangChainInit,
  params: ReactAgentParams,
): CheckpointedReactAgent {
  checkInit(init);
  // deno-lint-ignore no-explicit-any
  const p = params as any;
  if (p.messageModifier !== undefined) {
    throw new TypeError("messageModifier is not supported here: give prompt instead");
  }
  const placement = init.placement ?? "user";
  const recursionLimit = recursionLimitForReactAgent(init.maxTurns);
  const runs = new Map<string, ReactLive>();
  const liveOf = (config: unknown) => {
    const key = (config as { configurable?: Record<string, unknown> } | undefined)
      ?.configurable?.[REACT_KEY];
    return typeof key === "string" ? runs.get(key) : undefined;
  };
  const userPrompt = p.prompt ?? p.stateModifier;

  const prompt = async (state: { messages: BaseMessage[] }, config: unknown) => {
    const messages = await promptMessages(userPrompt, state, config);
    const live = liveOf(config);
    if (!live) return messages;
    // The previous model call's usage is in its AIMessage, now in the state.
    reportNewUsage(live, state.messages);
    const text = live.run.preLlmCall();
    if (text === undefined && !live.pending.waiting) return messages;
    try {
      return placeInMessages(messages, placement, text, live.pending);
    } catch (error) {
      logFault(live.run, "langchain: placing the prologue", error);
      return messages;
    }
  };

  const tools = Array.isArray(p.tools) ? p.tools.map((t: unknown) => wrapTool(t, liveOf)) : p.tools;
  const { stateModifier: _s, ...rest } = p;

  /** Start an invocation's run; throws the TypeError for a recursionLimit of the host's. */
  const begin = (graph: ReactAgentGraph, given: unknown): Invocation => {
    const config = (given ?? {}) as Record<string, unknown>;
    const bound = (graph.config ?? {}) as Record<string, unknown>; // from withConfig()
    // LangChain's own batch() and withConfig() fill in the default: that is not the host's.
    const limit = config.recursionLimit ?? bound.recursionLimit;
    if (limit !== undefined && limit !== DEFAULT_RECURSION_LIMIT && limit !== recursionLimit) {
      throw new TypeError(
        `recursionLimit is derived from maxTurns (${recursionLimit} for ${init.maxTurns}): do not pass it, got ${
          String(limit)
        }`,
      );
    }
    const configurable = (config.configurable ?? {}) as Record<string, unknown>;
    const run = startAdapterRun(
      ac,
      {
        ...init,
        sessionId: sessionOf(init, {
          ...(bound.configurable as Record<string, unknown> | undefined),
          ...configurable,
        }),
      },
      "maxTurns",
      init.maxTurns,
    );
    const key = `${run.runId}#${crypto.randomUUID()}`;
    const live: ReactLive = { run, pending: new PendingPrologue(), reported: new Set() };
    runs.set(key, live);
    const userSignal = config.signal as AbortSignal | undefined;
    const signal = runSignal(run, init.deadline, userSignal);
    let ending: Promise<void> | undefined;
    const end = (outcome: EndOutcome): Promise<void> => {
      if (ending === undefined) {
        runs.delete(key);
        ending = run.end(outcome).catch((error: unknown) =>
          logFault(run, "langgraph: ending the run", error)
        );
      }
      return ending;
    };
    return {
      config: {
        ...config,
        recursionLimit,
        configurable: { ...configurable, [REACT_KEY]: key },
        ...(signal ? { signal } : {}),
      },
      activity: (chunk?: unknown) => {
        run.activity();
        // A streamed chunk may show the newest model call's message, usage and all.
        if (chunk !== undefined) reportNewUsage(live, messagesIn(chunk));
      },
      done: (out?: unknown) => {
        // The last model call's usage: no prompt comes after it.
        reportNewUsage(live, (out as { messages?: unknown } | undefined)?.messages);
        return end({ status: "done" });
      },
      failed: (error) =>
        end({
          status: (error as Error)?.name === "GraphRecursionError"
            ? "capped"
            : thrownStatus(run, init.deadline, userSignal),
          summary: errorLine(error),
        }),
      abandoned: () =>
        end({ status: "aborted", summary: "the host stopped reading the stream before its end" }),
    };
  };

  /** The graph as a checkpointed agent: its whole interface, three entry points checkpointed. */
  function checkpointed(graph: ReactAgentGraph): CheckpointedReactAgent {
    const invoke = async (input: unknown, config?: unknown) => {
      const call = begin(graph, config);
      try {
        const out = await graph.invoke(input as never, call.config as never);
        await call.done(out);
        return out;
      } catch (error) {
        await call.failed(error);
        throw error;
      }
    };

    const stream = async (input: unknown, config?: unknown) => {
      const call = begin(graph, config);
      let source: ReadableStream<unknown>;
      try {
        source = await graph.stream(input as never, call.config as never);
      } catch (error) {
        await call.failed(error);
        throw error;
      }
      return new ObservedStream(source, call);
    };

    // Sync for versions "v1" and "v2" (a stream), a promise for "v3" (a run stream with `output`).
    const streamEvents = (input: unknown, options?: unknown, streamOptions?: unknown) => {
      const call = begin(graph, options);
      let out: unknown;
      try {
        out = (graph.streamEvents as (...args: unknown[]) => unknown)(
          input,
          call.config,
          streamOptions,
        );
      } catch (error) {
        void call.failed(error);
        throw error;
      }
      if (out instanceof Promise) {
        return out.then((value) => observeEvents(value, call), async (error) => {
          await call.failed(error);
          throw error;
        });
      }
      return observeEvents(out, call);
    };

    const own: Record<PropertyKey, unknown> = {
      graph,
      recursionLimit,
      invoke,
      stream,
      streamEvents,
      // The graph's withConfig() makes a new graph: checkpointed in turn.
      withConfig: (config: Parameters<ReactAgentGraph["withConfig"]>[0]) =>
        checkpointed(graph.withConfig(config) as ReactAgentGraph),
    };
    // The graph's own methods see the proxy as `this`, so `batch` and `pipe`
    // reach the checkpointed `invoke` and `stream`.
    return new Proxy(graph, {
      get: (target, prop, receiver) =>
        Object.hasOwn(own, prop) ? own[prop] : Reflect.get(target, prop, receiver),
      has: (target, prop) => Object.hasOwn(own, prop) || Reflect.has(target, prop),
    }) as CheckpointedReactAgent;
  }

  return checkpointed(createReactAgent({ ...rest, prompt, tools }));
}

/**
 * The graph's stream as a stream of the same kind that ends the invocation's
 * run when it ends, fails or is abandoned (a `break`, `return()` or `cancel()`,
 * the last also while it is being read, as LangGraph's own stream allows);
 * abandoning it cancels the graph's stream, which stops the graph.
 */
class ObservedStream<T> extends IterableReadableStream<T> {
  readonly #abandon: (reason: unknown) => Promise<void>;

  constructor(source: ReadableStream<T>, call: Invocation) {
    const reader = source.getReader();
    const abandon = async (reason: unknown) => {
      await call.abandoned();
      // The graph's stream may reject its cancel with the abort it caused: the host asked for that.
      await reader.cancel(reason).catch(() => {});
    };
    super({
      async pull(controller) {
        let step: Awaited<ReturnType<typeof reader.read>>;
        try {
          step = await reader.read();
        } catch (error) {
          await call.failed(error);
          controller.error(error);
          return;
        }
        if (step.done) {
          await call.done();
          controller.close();
          return;
        }
        call.activity(step.value);
        controller.enqueue(step.value);
      },
      cancel: abandon,
    });
    this.#abandon = abandon;
  }

  override cancel(reason?: unknown): Promise<void> {
    return this.locked ? this.#abandon(reason) : super.cancel(reason);
  }
}

/** What `streamEvents` returned, observed: a stream (v1, v2), or a run stream whose `output` settles (v3). */
function observeEvents(out: unknown, call: Invocation): unknown {
  if (out instanceof ReadableStream) return new ObservedStream(out, call);
  const output = (out as { output?: unknown } | null)?.output;
  // A v3 run stream runs the graph to its end whether or not it is read.
  if (output instanceof Promise) output.then(() => call.done(), (error) => call.failed(error));
  else void call.done();
  return out;
}

/**
 * The messages a streamed chunk holds: a state's (`streamMode: "values"`),
 * a node's update's (`"updates"`), an event's output's, or a message itself
 * (`"messages"`, as `[message, metadata]`).
 */
function messagesIn(chunk: unknown): unknown[] {
  const out: unknown[] = [];
  const visit = (v: unknown, depth: number) => {
    if (v === null || typeof v !== "object" || depth > 3) return;
    const o = v as { messages?: unknown; usage_metadata?: unknown };
    if (o.usage_metadata !== undefined) out.push(v);
    else if (Array.isArray(o.messages)) out.push(...o.messages);
    else if (Array.isArray(v)) { for (const x of v.slice(0, 4)) visit(x, depth + 1); }
    else for (const x of Object.values(o).slice(0, 8)) visit(x, depth + 1);
  };
  visit(chunk, 0);
  return out;
}

/** A createReactAgent invocation in flight. */
interface ReactLive {
  run: Run;
  pending: PendingPrologue;
  /** Messages (by id, else by identity) whose usage was reported, or that came with the input. */
  reported: Set<unknown>;
  primed?: boolean;
}

/**
 * Report the usage of the model calls whose messages are new in the state
 * since the last look; the messages the invocation started with are history.
 */
function reportNewUsage(live: ReactLive, messages: unknown): void {
  if (!Array.isArray(messages)) return;
  for (const m of messages) {
    if (m === null || typeof m !== "object") continue;
    // By identity and by id: a streamed message may get its id in the state later.
    const id = (m as { id?: unknown }).id;
    const named = typeof id === "string" && id !== "";
    if (live.reported.has(m) || (named && live.reported.has(id))) continue;
    live.reported.add(m);
    if (named) live.reported.add(id);
    if (live.primed) reportUsage(live.run, m);
  }
  live.primed = true;
}

/** The messages the host's own prompt makes of the state, as createReactAgent would. */
async function promptMessages(
  prompt: unknown,
  state: { messages: BaseMessage[] },
  config: unknown,
): Promise<BaseMessage[]> {
  if (prompt == null) return state.messages;
  if (typeof prompt === "string") return [new SystemMessage(prompt), ...state.messages];
  if (SystemMessage.isInstance(prompt)) return [prompt, ...state.messages];
  let out: unknown;
  if (typeof prompt === "function") out = await prompt(state, config);
  else if (typeof (prompt as { invoke?: unknown }).invoke === "function") {
    out = await (prompt as { invoke(s: unknown, c: unknown): unknown }).invoke(state, config);
  } else throw new TypeError(`prompt must be a string, a SystemMessage, a function or a Runnable`);
  const value = out as { toChatMessages?: () => BaseMessage[] };
  return typeof value?.toChatMessages === "function"
    ? value.toChatMessages()
    : out as BaseMessage[];
}

/**
 * The host's tool, whose `invoke` reports each call to its invocation's run.
 * It stays the same tool (a proxy, not a tool around it), so callbacks and
 * `streamEvents` see one tool run per call, as without the adapter.
 */
function wrapTool(
  original: unknown,
  liveOf: (config: unknown) => { run: Run } | undefined,
): unknown {
  const t = original as { name?: unknown; invoke?: unknown };
  if (typeof t?.invoke !== "function" || typeof t.name !== "string") return original;
  const name = t.name;
  const invoke = t.invoke as (input: unknown, config?: unknown) => Promise<unknown>;
  const reported = async function (this: unknown, input: unknown, config?: unknown) {
    const live = liveOf(config);
    if (!live) return invoke.call(original, input, config);
    const call = input as { id?: unknown; args?: unknown; type?: unknown } | undefined;
    const isCall = call?.type === "tool_call";
    const callId = isCall && typeof call.id === "string" ? call.id : undefined;
    const post = reportTool(live.run, name, callId, isCall ? call.args : input);
    try {
      const signal = (config as { signal?: AbortSignal } | undefined)?.signal;
      const timed = callId === undefined
        ? config
        : { ...(config as object), signal: toolCallSignal(live.run, callId, signal) };
      const out = await invoke.call(original, input, timed);
      const outcome = toolOutcome(out);
      post(outcome.ok, outcome.error);
      return out;
    } catch (error) {
      post(false, errorLine(error));
      throw error;
    }
  };
  return new Proxy(original as object, {
    get: (target, prop, receiver) =>
      prop === "invoke" ? reported : Reflect.get(target, prop, receiver),
  });
}
