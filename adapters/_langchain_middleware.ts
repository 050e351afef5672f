// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The LangChain adapter's `createAgent` middleware ({@linkcode agentCheckpointMiddleware}),
 * and what the LangGraph agent (`_langgraph_agent.ts`) takes from it: the init
 * and its check, the session id, the prologue's place among the messages, and
 * the reports of tool calls and model use. The public entry is `langchain.ts`.
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
import { getConfig, isGraphBubbleUp } from "npm:@langchain/langgraph@1";
import { z } from "npm:zod@^4";
import type { AgentCheckpoint, EndStatus, Run } from "../mod.ts";
import {
  type AdapterInit,
  checkCap,
  effectful,
  errorLine,
  guarded,
  PendingPrologue,
  type Placement,
  runSignal,
  startAdapterRun,
  tellOnce,
  thrownStatus,
  toolCallSignal,
} from "./_shared.ts";

// ---------------------------------------------------------------------------
// What the createAgent middleware and the LangGraph agent share

/**
 * Report a tool call's start to the run; returns what reports its end, with
 * the call id and the time it took.
 */
export function reportTool(
  run: Run,
  name: string,
  callId: string | undefined,
  input: unknown,
  replayed = false,
): (ok: boolean, error?: string, result?: unknown) => void {
  const id = callId !== undefined ? { callId } : {};
  // A tool in replay has its intent and receipt from run.once.
  run.preToolCall(name, { ...id, input, ...(replayed ? { effect: false } : {}) });
  const started = performance.now();
  return (ok, error, result) =>
    run.postToolCall(name, {
      ok,
      durationMs: Math.round(performance.now() - started),
      ...id,
      ...(error !== undefined ? { error } : {}),
      ...(result !== undefined ? { result } : {}),
    });
}

/** What a tool's output keeps in a receipt: a tool message's content, else the output. */
export function toolContent(out: unknown): unknown {
  const content = (out as { content?: unknown } | null | undefined)?.content;
  return content !== undefined ? content : out;
}

/**
 * Report a model call's use from its `AIMessage.usage_metadata` (and the
 * model's name from `response_metadata`, for the `prices` setting).
 */
export function reportUsage(run: Run, message: unknown): void {
  guarded(run, "langchain: reporting usage", () => {
    const m = message as {
      usage_metadata?: { input_tokens?: unknown; output_tokens?: unknown };
      response_metadata?: { model_name?: unknown; model?: unknown };
    } | undefined;
    const u = m?.usage_metadata;
    if (u === null || typeof u !== "object") return;
    const model = m?.response_metadata?.model_name ?? m?.response_metadata?.model;
    run.postLlmCall({
      inputTokens: Number(u.input_tokens ?? 0),
      outputTokens: Number(u.output_tokens ?? 0),
      ...(typeof model === "string" ? { model } : {}),
    });
  }, () => {});
}

/** What the LangChain adapters take: the run's init (session id optional) and its turn cap. */
export interface LangChainInit extends AdapterInit {
  /** The turn cap: the most model calls one invocation of the agent may make. */
  maxTurns: number;
}

/**
 * LangGraph's `recursionLimit` when the caller gives none (LangChain fills it
 * into every config): enough for 10 turns through {@linkcode agentCheckpointMiddleware}.
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

/** Check an init at the call: bad caps and placements are programming errors. */
export function checkInit(init: LangChainInit): void {
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
export function sessionOf(init: LangChainInit, configurable: unknown): string {
  if (init.sessionId) return init.sessionId;
  const thread = (configurable as { thread_id?: unknown } | undefined)?.thread_id;
  if ((typeof thread === "string" && thread) || typeof thread === "number") return String(thread);
  return `langchain-${crypto.randomUUID()}`;
}

const textOf = (content: unknown): string =>
  typeof content === "string" ? content : JSON.stringify(content);

/** Messages with the prologue placed; `system` may be replaced through `setSystem`. */
export function placeInMessages(
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
export function toolOutcome(out: unknown): { ok: boolean; error?: string } {
  if (ToolMessage.isInstance(out) && out.status === "error") {
    return { ok: false, error: textOf(out.content).slice(0, 300) };
  }
  return { ok: true };
}

/** How an invocation's run ends: its status, and why when it did not end well. */
export type EndOutcome = {
  status: EndStatus;
  summary?: string;
};

// ---------------------------------------------------------------------------
// createAgent middleware

/**
 * A tool for one call whose `invoke` also aborts at the call's deadline
 * (`run.time.toolSignal`), joined to the graph's own signal in `config.signal`.
 */
function withToolSignal<T>(tool: T, run: Run, callId: string | undefined, effectKey: string): T {
  if (tool === null || typeof tool !== "object") return tool;
  const t = tool as unknown as { invoke?: unknown };
  if (typeof t.invoke !== "function") return tool;
  return new Proxy(tool as unknown as object, {
    get: (target, prop) => {
      const value = Reflect.get(target, prop, target);
      if (prop !== "invoke") return typeof value === "function" ? value.bind(target) : value;
      return (
        input: unknown,
        config?: { signal?: AbortSignal; configurable?: Record<string, unknown> },
      ) =>
        value.call(target, input, {
          ...config,
          ...(callId === undefined ? {} : { signal: toolCallSignal(run, callId, config?.signal) }),
          // The tool reads its effect key from its config: `config.configurable.effectKey`.
          configurable: { ...config?.configurable, effectKey },
        });
    },
  }) as T;
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
 * import { agentCheckpointMiddleware } from "./langchain.ts";
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
 *   middleware: [agentCheckpointMiddleware(ac, { maxTurns: 2 }), spy],
 * });
 * const state = await agent.invoke({ messages: [{ role: "user", content: "Go" }] });
 * assert.match(sent[0]!, /INCOMPLETE/); // two turns: the last checkpoint is due at the first call
 * assert.doesNotMatch(JSON.stringify(state.messages), /INCOMPLETE/);
 * assert.throws(() => agentCheckpointMiddleware(ac, { maxTurns: Number.NaN }), TypeError);
 * await ac.close();
 * ```
 */
export function agentCheckpointMiddleware(
  ac: AgentCheckpoint,
  init: LangChainInit,
): AgentCheckpointMiddleware {
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
            } lets createAgent make only ${reachable} of the ${init.maxTurns} model calls of maxTurns: each such run is capped at ${reachable} turns. Fix: invoke the agent with checkpoint.withRecursionLimit(config), checkpoint being what agentCheckpointMiddleware() returned, or pass recursionLimit: ${needed}. Said once per process; every such run logs it.`,
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
      const stopped = live.run.budget.error();
      if (stopped) {
        // Stopped during a tool call: no further model call.
        await finish(key, live, { status: "capped", summary: errorLine(stopped) });
        throw stopped;
      }
      if (live.calls >= live.cap) {
        live.capped = true;
        return new AIMessage(
          `Stopped: the turn cap of ${live.cap} model calls is reached; the work is unfinished.`,
        );
      }
      live.calls++;
      // The tool results this call carries are in the ledger before the model sees them.
      await live.run.effects.durable();
      const text = live.run.preLlmCall();
      const placed = text !== undefined || live.pending.waiting
        ? guarded(
          live.run,
          "langchain: placing the prologue",
          () => placeInRequest(request, placement, text, live.pending),
          () => request,
        )
        : request;
      try {
        const out = await withDeadline(handler(placed), live.signal);
        reportUsage(live.run, out);
        return out;
      } catch (error) {
        await finish(key, live, failed(live, error, request.runtime?.signal));
        throw live.run.budget.error(error) ?? error;
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
      const args = request.toolCall?.args;
      const post = reportTool(
        live.run,
        name,
        callId,
        args,
        live.init.replay?.includes(name) === true,
      );
      try {
        let ran: unknown;
        const call = async (effectKey: string) => {
          const given = request.tool === undefined
            ? request
            : { ...request, tool: withToolSignal(request.tool, live.run, callId, effectKey) };
          ran = await withDeadline(handler(given), live.signal);
          return toolContent(ran);
        };
        const { value, replayed } = await effectful(live.run, live.init, name, args, callId, call);
        // Replayed: the tool message its earlier attempt's call gave, from the receipt.
        const out = replayed
          ? new ToolMessage({
            content: typeof value === "string" ? value : JSON.stringify(value),
            tool_call_id: callId ?? "",
            name,
          })
          : ran;
        const outcome = toolOutcome(out);
        post(outcome.ok, outcome.error, outcome.ok ? toolContent(out) : undefined);
        return out;
      } catch (error) {
        post(false, errorLine(error));
        const aborted = request.runtime?.signal?.aborted || live.signal?.aborted;
        if (aborted) await finish(key, live, failed(live, error, request.runtime?.signal));
        if (aborted || isGraphBubbleUp(error) || (error as Error)?.name === "ToolInvocationError") {
          throw live.run.budget.error(error) ?? error;
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
  return middleware as unknown as AgentCheckpointMiddleware;
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
 * What {@linkcode agentCheckpointMiddleware} returns: the middleware, and the config
 * its invocations need.
 *
 * @example Invoke with enough graph steps for the cap
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { agentCheckpointMiddleware } from "./langchain.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const checkpoint = agentCheckpointMiddleware(ac, { maxTurns: 12 });
 * const config = checkpoint.withRecursionLimit({ configurable: { thread_id: "job-7" } });
 * assert.deepEqual(config, { configurable: { thread_id: "job-7" }, recursionLimit: 28 });
 * // then: await agent.invoke(input, config)
 * await ac.close();
 * ```
 */
export type AgentCheckpointMiddleware = AgentMiddleware & {
  /**
   * The invocation config (`configurable`, `signal`… kept) with a
   * `recursionLimit` high enough for `maxTurns` model calls (`2 × maxTurns +
   * 4`, or the config's own when larger). LangGraph's default of 25 allows 10.
   */
  withRecursionLimit<C extends object>(config?: C): C & { recursionLimit: number };
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
