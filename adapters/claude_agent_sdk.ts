// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * Checkpoints for the Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`):
 * {@linkcode checkpointedQuery} is the SDK's `query()` with the run's hooks
 * merged into `options.hooks`.
 *
 * A turn is one Messages API request of the main agent loop, the unit of the
 * SDK's `maxTurns`. The SDK has no hook per request, so the adapter counts
 * the two hooks that come right before one: `UserPromptSubmit` (the first
 * request of a prompt) and `PostToolBatch` (each request after a batch of
 * tool calls). Their `additionalContext` carries the checkpoint directive
 * into exactly the request it is due for.
 *
 * What the SDK does not show: a request with neither hook before it. One
 * that a host `Stop` hook causes (sending the agent back to work) is counted
 * late, at the next tool call or Stop, and a directive due there waits for
 * the next request with a hook; a subagent's own requests are not counted.
 * The CLI keeps a delivered directive in its transcript, so later requests
 * carry it as history.
 *
 * @example A one-line change to a `query()` loop
 * ```ts ignore
 * import { createAgentCheckpoint } from "agent-checkpoint";
 * import { checkpointedQuery } from "agent-checkpoint/claude-agent-sdk";
 *
 * const ac = createAgentCheckpoint();
 * for await (
 *   const message of checkpointedQuery(ac, { sessionId: "fix-tests", maxTurns: 40 }, {
 *     prompt: "Make the test suite pass",
 *     options: { allowedTools: ["Read", "Edit", "Bash"] },
 *   })
 * ) {
 *   if (message.type === "result") console.log(message.subtype);
 * }
 * await ac.close();
 * ```
 *
 * @module
 */
import {
  type HookCallbackMatcher,
  type HookEvent,
  type HookInput,
  type HookJSONOutput,
  type Options,
  type Query,
  query,
  type SDKMessage,
  type SDKUserMessage,
  type SessionKey,
  type SessionStore,
  type SessionStoreEntry,
} from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import type { AgentCheckpoint, EndStatus, Run } from "../mod.ts";
import {
  type AdapterInit,
  errorLine,
  guarded,
  logFault,
  PendingPrologue,
  startAdapterRun,
  thrownStatus,
} from "./_shared.ts";
import { transcripts } from "./_sessions.ts";
import type { SessionPath } from "../_ledger.ts";

export type { AdapterInit, Placement } from "./_shared.ts";
export { BudgetExceededError, RunRefusedError } from "../run.ts";

/**
 * The effect key of a call of a tool in an SDK MCP server, from inside the
 * tool: the same key the adapter records the call under and the host's hooks
 * get as `effect_key` (the CLI names the tool `mcp__<server>__<tool>`). Two
 * calls with different input get different keys, so parallel calls of one
 * tool are told apart; pass it to an API as its idempotency key.
 *
 * @param run The query's run (`q.run`).
 * @param server The MCP server's name, as given to `createSdkMcpServer`.
 * @param tool The tool's own name.
 * @param input The arguments the tool was called with.
 * @returns The call's effect key.
 *
 * @example Inside a tool's handler
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { mcpEffectKey } from "./claude_agent_sdk.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const run = ac.startRun({ sessionId: "mail-1" });
 * const args = { to: "boss@example.com" };
 * // In `tool("send_email", …, (args) => …)` of the server "mail", with `q.run` as the run:
 * const key = mcpEffectKey(run, "mail", "send_email", args);
 * assert.equal(key, run.effects.key("mcp__mail__send_email", args));
 * assert.notEqual(key, mcpEffectKey(run, "mail", "send_email", { to: "team@example.com" }));
 * await ac.close();
 * ```
 */
export function mcpEffectKey(run: Run, server: string, tool: string, input: unknown): string {
  return run.effects.key(`mcp__${server}__${tool}`, input);
}

/**
 * The run's init for {@linkcode checkpointedQuery}: the session and its caps, stated once.
 *
 * @example
 * ```ts
 * import type { ClaudeQueryInit } from "./claude_agent_sdk.ts";
 * import assert from "node:assert/strict";
 *
 * const init: ClaudeQueryInit = { sessionId: "fix-tests", maxTurns: 40, timeSeconds: 900 };
 * assert.equal(init.maxTurns, 40);
 * ```
 */
export interface ClaudeQueryInit extends AdapterInit {
  /** The run's session id (a run id for its checkpoint file). */
  sessionId: string;
  /**
   * The turn cap: model requests of the main agent loop. Passed to the SDK as
   * `options.maxTurns` and to the run as its turn cap.
   */
  maxTurns: number;
}

/**
 * What the SDK's `query()` takes: the prompt and its options.
 *
 * @example
 * ```ts
 * import type { ClaudeQueryParams } from "./claude_agent_sdk.ts";
 * import assert from "node:assert/strict";
 *
 * const params: ClaudeQueryParams = { prompt: "Fix the tests", options: { cwd: "." } };
 * assert.equal(params.prompt, "Fix the tests");
 * ```
 */
export interface ClaudeQueryParams {
  /** The prompt: a string, or the SDK's streaming input of user messages. */
  prompt: string | AsyncIterable<SDKUserMessage>;
  /** The SDK's options; the adapter adds its hooks and `maxTurns`. */
  options?: Options;
}

/**
 * The SDK's own `Query` object, with the run it reports to added as `run`.
 *
 * @example
 * ```ts
 * import type { CheckpointedQuery } from "./claude_agent_sdk.ts";
 * import assert from "node:assert/strict";
 *
 * const fileOf = (q: CheckpointedQuery): string => q.run.checkpointFile;
 * assert.equal(typeof fileOf, "function");
 * ```
 */
export type CheckpointedQuery = Query & {
  /** The run this query reports to: its checkpoint file, caps and hooks. */
  readonly run: Run;
};

/** How long after an enforced cap's stop the query is aborted, for a CLI that reached no hook. */
const BUDGET_ABORT_MS = 5000;
/** What the CLI is told when an enforced cap stops the run. */
const BUDGET_STOP = "agent-checkpoint: the run's enforced budget cap is passed";

const RESULT_STATUS: Record<string, EndStatus> = {
  success: "done",
  error_max_turns: "capped",
  error_max_budget_usd: "capped",
};

const str = (value: unknown): string | undefined =>
  typeof value === "string" && value !== "" ? value : undefined;

/**
 * Run the SDK's `query()` as a checkpointed run: the run starts here with the
 * turn cap `init.maxTurns` (also handed to the SDK as `options.maxTurns`) and
 * ends when the iterator does.
 *
 * - `UserPromptSubmit` and `PostToolBatch` each count one turn
 *   (`preLlmCall()`) and deliver a due directive as `additionalContext` to the
 *   request that follows. The SDK's CLI keeps that context in its own
 *   transcript, so later requests repeat it as history; it is added once.
 *   A request a host `Stop` hook causes has neither hook before it: it is
 *   counted late, when the next tool call or `Stop` shows it happened.
 * - `PreToolUse`, `PostToolUse` and `PostToolUseFailure` report each tool call
 *   with its `tool_use_id`, its input (so workspace snapshots cover `Write`,
 *   `Edit`, `MultiEdit`, `NotebookEdit` and `Bash`) and its duration. The
 *   host's own hooks of those events get the call's effect key in their
 *   input, as `effect_key`. A tool in the `effect_tools` setting or in
 *   `replay` (by its own name or its `mcp__<server>__<tool>` name) has its
 *   intent durable before the CLI runs it (our
 *   `PreToolUse` waits for it), and its receipt from `PostToolUse`; a
 *   retried run's call of a tool in `replay` whose receipt says it was done
 *   is not run again: `PreToolUse` denies it, the reason saying it was done
 *   and what it returned.
 * - Every message the iterator yields counts as activity. Each model
 *   request's usage (from the assistant messages: input tokens with the
 *   cache's, and the output tokens counted when the response began, which
 *   is all the SDK tells before the result) is reported with `run.postLlmCall()`
 *   as it comes; the result's `usage` and `total_cost_usd` complete it, the
 *   SDK's cost becoming the run's. The SDK gives no cost per request: a dollar cap
 *   counts per request through the `prices` setting. Tool deadlines are
 *   recorded (`tool_timeout`), but the SDK's tools run in its CLI, out of
 *   reach of an abort signal.
 * - `placement` is accepted as in every adapter, but on this SDK a directive
 *   can only travel as hook `additionalContext`: the CLI sends it as a system
 *   reminder after the newest tool results (with the prompt, on the first
 *   request), whatever the placement.
 * - The run ends `done` when the iterator finishes, `capped` on an
 *   `error_max_turns` (or `error_max_budget_usd`) result, `failed` on a result
 *   that reports an error (the model's API refused or failed the request, with
 *   its message as the summary), `aborted` when the host's `abortController`
 *   fired, `deadline` when `deadline: true` and the run's deadline fired, else
 *   `failed`; whatever the SDK threw is rethrown.
 *
 * The host's own hooks are kept; ours are appended per event. The returned
 * object is the SDK's own `Query` (its methods, such as `interrupt()`, work),
 * with `run` added.
 *
 * @param ac The process's `AgentCheckpoint`.
 * @param init The session id, `maxTurns`, and optionally `timeSeconds`,
 *   `deadline`, `placement`, `taskId`, `dialect`, `workspace` (default:
 *   `options.cwd`).
 * @param params What `query()` takes: `prompt` and `options`.
 * @returns The SDK's `Query`, iterated as usual.
 * @throws {TypeError} When `maxTurns` is not a whole number of at least 1,
 *   `timeSeconds` is not a positive number, the placement or session id is
 *   unusable, or `options.maxTurns` states a different cap.
 *
 * @example Bad caps are refused before anything starts
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointedQuery } from "./claude_agent_sdk.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * assert.throws(
 *   () => checkpointedQuery(ac, { sessionId: "s", maxTurns: 0 }, { prompt: "hi" }),
 *   TypeError,
 * );
 * await ac.close();
 * ```
 */
export function checkpointedQuery(
  ac: AgentCheckpoint,
  init: ClaudeQueryInit,
  params: ClaudeQueryParams,
): CheckpointedQuery {
  const options: Options = { ...(params?.options ?? {}) };
  const maxTurns = init?.maxTurns;
  if (options.maxTurns !== undefined && options.maxTurns !== maxTurns) {
    throw new TypeError(
      `options.maxTurns (${options.maxTurns}) differs from maxTurns (${maxTurns}): state the turn cap once, as maxTurns`,
    );
  }
  const workspace = init.workspace ?? (typeof options.cwd === "string" ? options.cwd : undefined);
  const run = startAdapterRun(
    ac,
    workspace === undefined ? init : { ...init, workspace },
    "maxTurns",
    maxTurns,
  );
  const cap = maxTurns as number;

  // --- turns: one per model request of the main loop ---
  let turns = 0;
  // A directive due at a request no hook came before waits for the next one.
  const waiting = new PendingPrologue();
  const turn = (event: "UserPromptSubmit" | "PostToolBatch"): HookJSONOutput => {
    turns++;
    afterStop = false;
    const text = waiting.take(run.preLlmCall(), true);
    return text === undefined
      ? {}
      : { hookSpecificOutput: { hookEventName: event, additionalContext: text } };
  };
  // A Stop hook (the host's) may send the agent back to work: the CLI then
  // makes a request with neither hook before it. Seen afterwards, from the
  // next tool call or Stop, it is counted late.
  let afterStop = false;
  const missed = (main: boolean) => {
    if (!main) return;
    if (afterStop) {
      turns++;
      waiting.take(run.preLlmCall(), false);
    }
  };

  // --- tools: started calls by id, for durations the SDK does not give ---
  const open = new Map<string, { tool: string; at: number }>();
  const ended = (
    input: { tool_name?: unknown; tool_use_id?: unknown },
    ok: boolean | undefined,
    extra: {
      durationMs?: unknown;
      error?: unknown;
      result?: unknown;
    },
  ) => {
    const callId = str(input.tool_use_id);
    const started = callId === undefined ? undefined : open.get(callId);
    if (callId !== undefined) open.delete(callId);
    const tool = str(input.tool_name) ?? started?.tool ?? "unknown";
    const durationMs = typeof extra.durationMs === "number" && Number.isFinite(extra.durationMs)
      ? extra.durationMs
      : started
      ? Date.now() - started.at
      : undefined;
    run.postToolCall(tool, {
      ...(ok === undefined ? {} : { ok }),
      ...(durationMs === undefined ? {} : { durationMs }),
      ...(callId === undefined ? {} : { callId }),
      ...(extra.error === undefined ? {} : { error: extra.error }),
      ...(extra.result === undefined ? {} : { result: extra.result }),
    });
  };

  // --- side effects: the tools in replay, and those in effect_tools ---
  const replay = init.replay ?? [];
  // `replay` and `effect_tools` name a tool of an SDK MCP server by its own name or by the
  // `mcp__<server>__<tool>` name the CLI gives it.
  const inReplay = (tool: string) => replay.includes(tool) || replay.includes(shortName(tool));
  const isEffect = (tool: string) =>
    run.effects.isEffectTool(tool) || run.effects.isEffectTool(shortName(tool));
  /**
   * A tool call that acts on the world, before the CLI runs it: denied when a
   * receipt says an earlier attempt did it (a tool in replay), else once its
   * intent is durable.
   */
  const effectGate = async (
    tool: string,
    input: unknown,
    callId: string | undefined,
  ): Promise<HookJSONOutput> => {
    if (inReplay(tool)) {
      const key = run.effects.key(tool, input);
      const known = await run.effects.state(key);
      if (known?.state === "done" && known.ok) {
        if (callId !== undefined) open.delete(callId);
        run.postToolCall(tool, { ok: true, ...(callId === undefined ? {} : { callId }) });
        run.log(
          "info",
          `${tool} (effect key ${key}) replayed from attempt ${known.attempt}'s receipt; not run again`,
        );
        const result = typeof known.result === "string"
          ? known.result
          : JSON.stringify(known.result);
        return {
          hookSpecificOutput: {
            hookEventName: "PreToolUse",
            permissionDecision: "deny",
            permissionDecisionReason:
              `Already done by attempt ${known.attempt} of this run (effect key ${key}); not run again. Its result: ${result}`,
          },
        };
      }
    }
    await run.effects.intent(tool, input, callId === undefined ? undefined : { callId });
    return {};
  };

  const ours: Partial<
    Record<HookEvent, (input: HookInput) => HookJSONOutput | Promise<HookJSONOutput>>
  > = {
    UserPromptSubmit: (input) =>
      (input as { agent_id?: unknown }).agent_id === undefined ? turn("UserPromptSubmit") : {},
    PostToolBatch: (input) => {
      const batch = input as { agent_id?: unknown; tool_calls?: unknown };
      // A call that got no PostToolUse(Failure) did not run to its end (denied, interrupted).
      if (Array.isArray(batch.tool_calls)) {
        for (const call of batch.tool_calls) {
          if (open.has(str(call?.tool_use_id) ?? "")) {
            ended(call, false, { error: "ended without a result (denied or interrupted)" });
          }
        }
      }
      // A subagent's batch feeds the subagent's model, not a request of the main loop.
      if (batch.agent_id !== undefined) return {};
      // At the cap no request follows: the SDK ends with error_max_turns.
      if (turns >= cap) return {};
      return turn("PostToolBatch");
    },
    Stop: (input) => {
      missed((input as { agent_id?: unknown }).agent_id === undefined);
      afterStop = true;
      return {};
    },
    PreToolUse: (input) => {
      const i = input as {
        tool_name?: unknown;
        tool_use_id?: unknown;
        tool_input?: unknown;
        agent_id?: unknown;
      };
      missed(i.agent_id === undefined);
      afterStop = false;
      const tool = str(i.tool_name) ?? "unknown";
      const callId = str(i.tool_use_id);
      if (callId !== undefined) open.set(callId, { tool, at: Date.now() });
      const replayed = inReplay(tool);
      run.preToolCall(tool, {
        ...(callId === undefined ? {} : { callId }),
        input: i.tool_input,
        // A tool in replay: its intent is made once it is known not to be done (effectGate).
        ...(replayed ? { effect: false } : {}),
      });
      if (!replayed && !isEffect(tool)) return {};
      return effectGate(tool, i.tool_input, callId);
    },
    // The CLI waits for these hooks' answers: the receipt is in the ledger before the model
    // sees the tool's result.
    PostToolUse: async (input) => {
      const i = input as { duration_ms?: unknown; tool_response?: unknown };
      ended(input as never, true, { durationMs: i.duration_ms, result: i.tool_response });
      await run.effects.durable();
      return {};
    },
    PostToolUseFailure: async (input) => {
      const i = input as { duration_ms?: unknown; error?: unknown };
      ended(input as never, false, { durationMs: i.duration_ms, error: i.error });
      await run.effects.durable();
      return {};
    },
    PermissionDenied: (input) => {
      const i = input as { reason?: unknown; tool_use_id?: unknown };
      if (open.has(str(i.tool_use_id) ?? "")) {
        ended(input as never, false, {
          error: `permission denied: ${str(i.reason) ?? "no reason"}`,
        });
      }
      return {};
    },
  };

  const hooks: Partial<Record<HookEvent, HookCallbackMatcher[]>> = { ...(options.hooks ?? {}) };
  // The host's tool hooks see each call's effect key in their input (`effect_key`).
  for (const event of ["PreToolUse", "PostToolUse", "PostToolUseFailure"] as HookEvent[]) {
    const theirs = hooks[event];
    if (theirs) hooks[event] = theirs.map((matcher) => withEffectKey(run, matcher));
  }
  for (
    const [event, handle] of Object.entries(ours) as [
      HookEvent,
      (i: HookInput) => HookJSONOutput | Promise<HookJSONOutput>,
    ][]
  ) {
    const callback = (input: HookInput): Promise<HookJSONOutput> =>
      guarded(
        run,
        `claude-agent-sdk ${event} hook`,
        () =>
          Promise.resolve(handle(input)).then(
            // Past an enforced cap the CLI stops at its next hook, its own way, before another
            // request: the abort controller reaches a CLI that runs ahead of the messages too late.
            (out) =>
              run.budget.stopped ? { ...out, continue: false, stopReason: BUDGET_STOP } : out,
            (error) => {
              logFault(run, `claude-agent-sdk ${event} hook`, error);
              return {};
            },
          ),
        () => Promise.resolve({}),
      );
    hooks[event] = [...(hooks[event] ?? []), { hooks: [callback] }];
  }
  options.hooks = hooks;
  options.maxTurns = cap;

  // --- the host's abort, and the run's deadline when asked for ---
  const userController = options.abortController;
  // One signal for the run's stops: its deadline when asked for, an enforced cap.
  if (init.deadline) run.time.stopAtDeadline();
  const stops = init.deadline || run.budget.enforced ? run.signal : undefined;
  if (stops) {
    const controller = new AbortController();
    const follow = (signal: AbortSignal, afterMs: () => number) => {
      const abort = () => {
        const wait = afterMs();
        if (wait === 0) controller.abort(signal.reason);
        else setTimeout(() => controller.abort(signal.reason), wait).unref?.();
      };
      if (signal.aborted) abort();
      else signal.addEventListener("abort", abort, { once: true });
    };
    if (userController) follow(userController.signal, () => 0);
    // Past an enforced cap the CLI is stopped at its next hook (`continue: false`), which lets it
    // end its turn as it does; an abort now would leave its hooks unanswered while it runs on.
    // The abort follows for a CLI that reaches no hook. The deadline aborts at once.
    follow(stops, () => run.stopReason?.kind === "budget" ? BUDGET_ABORT_MS : 0);
    options.abortController = controller;
  }

  let q: Query;
  try {
    q = query({ prompt: params.prompt, options });
  } catch (error) {
    void run.end({ status: "failed", summary: errorLine(error, "message") });
    throw error;
  }

  // --- the run's end, from what the iterator does ---
  let resultStatus: EndStatus | undefined;
  let resultSummary: string | undefined;
  let ending: Promise<void> | undefined;
  const end = (status: EndStatus, summary?: string): Promise<void> => {
    if (run.budget.stopped) status = "capped";
    if (ending === undefined) {
      ending = run.end(summary === undefined ? { status } : { status, summary }).catch(
        (error: unknown) => logFault(run, "claude-agent-sdk end", error),
      );
    }
    return ending;
  };
  const reportUsage = usageReporter(run);
  // The SDK shows each message to a frame observer as it reads it, ahead of the host's loop
  // (which may lag the CLI by several requests): usage counted there passes an enforced cap
  // before the CLI's next hook, which answers with the stop. (An abort at once was tried: the
  // CLI, its hooks unanswered, ran on for 9 more requests.)
  const frames = q as unknown as { setFrameObserver?: (observer: (m: SDKMessage) => void) => void };
  const early = guarded(run, "claude-agent-sdk frame observer", () => {
    if (typeof frames.setFrameObserver !== "function") return false;
    frames.setFrameObserver((message) => reportUsage(message));
    return true;
  }, () => false);
  const seen = (message: SDKMessage | undefined): void =>
    guarded(run, "claude-agent-sdk message", () => {
      run.activity();
      if (!early) reportUsage(message);
      if (message?.type === "result") {
        const result = message as { subtype?: unknown; is_error?: unknown; errors?: unknown };
        const subtype = String(result.subtype);
        // An API error (HTTP 4xx, a stream's error event) arrives as a "success"
        // result with is_error set, the error's text as its result.
        const apiError = subtype === "success" && result.is_error === true;
        resultStatus = apiError ? "failed" : RESULT_STATUS[subtype] ?? "failed";
        const errors = result.errors;
        resultSummary = Array.isArray(errors) && errors.length > 0
          ? String(errors[0])
          : apiError
          ? errorLine(
            str((message as { result?: unknown }).result) ?? "the model's API failed",
            "message",
          )
          : subtype === "success"
          ? undefined
          : subtype;
      }
    }, () => {});
  const observe = async (
    step: Promise<IteratorResult<SDKMessage, void>>,
  ): Promise<IteratorResult<SDKMessage, void>> => {
    let result: IteratorResult<SDKMessage, void>;
    try {
      result = await step;
    } catch (error) {
      const thrown = thrownStatus(run, init.deadline, userController?.signal);
      // The SDK throws after an error result; the result says why.
      const status = thrown === "failed" ? resultStatus ?? "failed" : thrown;
      await end(status, status === resultStatus ? resultSummary : errorLine(error, "message"));
      throw run.budget.error(error) ?? error;
    }
    if (result.done) {
      await end(resultStatus ?? "done", resultSummary);
      // A query an enforced cap stopped ends as in every adapter: with the error.
      const stopped = run.budget.error();
      if (stopped) throw stopped;
    } else seen(result.value);
    return result;
  };
  /** An early `return()` (a `break` out of the loop): the host stopped it, unless a result came. */
  const stopped = () => end(resultStatus ?? "aborted", resultSummary);

  type Step = IteratorResult<SDKMessage, void>;
  /** Iterator methods that report to the run, over the SDK's own. */
  const observed = (inner: {
    next(...args: [] | [unknown]): Promise<Step>;
    return?(value?: void): Promise<Step>;
    throw?(error?: unknown): Promise<Step>;
  }) => ({
    next: (...args: [] | [unknown]): Promise<Step> => observe(inner.next(...args)),
    return: async (value?: void): Promise<Step> => {
      try {
        return inner.return ? await inner.return(value) : { done: true, value };
      } finally {
        await stopped();
      }
    },
    throw: (error?: unknown): Promise<Step> =>
      inner.throw ? observe(inner.throw(error)) : Promise.reject(error),
  });
  const own = observed({
    next: q.next.bind(q),
    return: q.return.bind(q),
    throw: q.throw.bind(q),
  });
  const iterate = q[Symbol.asyncIterator].bind(q);
  Object.assign(q, {
    ...own,
    // `for await` takes the SDK's inner generator from here, not `q.next`.
    [Symbol.asyncIterator]: () => {
      const wrapped: AsyncIterableIterator<SDKMessage> = {
        ...observed(iterate()),
        [Symbol.asyncIterator]: () => wrapped,
      };
      return wrapped;
    },
    run,
  });
  return q as CheckpointedQuery;
}

/** An MCP tool's own name: `send_email` of `mcp__mail__send_email`; any other name as it is. */
const shortName = (tool: string): string => {
  const parts = tool.split("__");
  return parts.length >= 3 && parts[0] === "mcp" ? parts.slice(2).join("__") : tool;
};

/** Anthropic's token counts: input includes the cache's writes and reads, which are billed too. */
interface ApiUsage {
  input_tokens?: unknown;
  output_tokens?: unknown;
  cache_creation_input_tokens?: unknown;
  cache_read_input_tokens?: unknown;
}
const tokens = (n: unknown) => (typeof n === "number" && Number.isFinite(n) && n > 0 ? n : 0);
const inputOf = (u: ApiUsage) =>
  tokens(u.input_tokens) + tokens(u.cache_creation_input_tokens) +
  tokens(u.cache_read_input_tokens);

/**
 * Report each model request's usage from the assistant messages (one API
 * message may come as several, with its usage growing: what grew is
 * reported), and, at the result, the rest of the query's `usage` and its
 * `total_cost_usd` as the run's cost.
 */
function usageReporter(run: Run): (message: SDKMessage | undefined) => void {
  let lastId: unknown;
  let last = { input: 0, output: 0 };
  const sum = { input: 0, output: 0 };
  const add = (input: number, output: number, extra: { model?: string; totalUsd?: number }) => {
    sum.input += input;
    sum.output += output;
    if (input > 0 || output > 0 || extra.totalUsd !== undefined) {
      run.postLlmCall({ inputTokens: input, outputTokens: output, ...extra });
    }
  };
  return (message) =>
    guarded(run, "claude-agent-sdk usage", () => {
      if (message?.type === "assistant") {
        const m = (message as { message?: { id?: unknown; model?: unknown; usage?: ApiUsage } })
          .message;
        const u = m?.usage;
        if (!u) return;
        if (m.id !== lastId) {
          lastId = m.id;
          last = { input: 0, output: 0 };
        }
        const input = Math.max(0, inputOf(u) - last.input);
        const output = Math.max(0, tokens(u.output_tokens) - last.output);
        last = { input: last.input + input, output: last.output + output };
        add(input, output, typeof m.model === "string" ? { model: m.model } : {});
      } else if (message?.type === "result") {
        const r = message as { usage?: ApiUsage; total_cost_usd?: unknown };
        const u = r.usage ?? {};
        const cost = r.total_cost_usd;
        add(
          Math.max(0, inputOf(u) - sum.input),
          Math.max(0, tokens(u.output_tokens) - sum.output),
          typeof cost === "number" && Number.isFinite(cost) ? { totalUsd: cost } : {},
        );
      }
    }, () => {});
}

/** A host's hook matcher whose callbacks get the tool call's effect key in their input. */
function withEffectKey(run: Run, matcher: HookCallbackMatcher): HookCallbackMatcher {
  if (!Array.isArray(matcher?.hooks)) return matcher;
  return {
    ...matcher,
    hooks: matcher.hooks.map((callback) =>
      ((input: HookInput, ...rest: unknown[]) => {
        const i = input as { tool_name?: unknown; tool_input?: unknown };
        const keyed = typeof i?.tool_name === "string"
          ? guarded(
            run,
            "claude-agent-sdk: the effect key",
            () => ({ ...input, effect_key: run.effects.key(i.tool_name as string, i.tool_input) }),
            () => input,
          )
          : input;
        return (callback as (...args: unknown[]) => unknown)(keyed, ...rest);
      }) as typeof callback
    ),
  };
}

/** A session key as the run store keeps it: the main transcript's subpath is `""`. */
const pathOf = (key: SessionKey): SessionPath => ({
  scope: key.projectKey,
  sessionId: key.sessionId,
  subpath: key.subpath ?? "",
});

/**
 * The Claude Agent SDK's `SessionStore` kept in the run store of an
 * agent-checkpoint keeper: its embedded ledger (`<home>/agent-checkpoint/runs.db`),
 * or the PostgreSQL fleet store when the keeper's `store` setting names one.
 * Pass it as `options.sessionStore`: the SDK mirrors each session's transcript
 * into it, and a `resume` loads the transcript from it, in any process or on
 * any machine whose keeper shares the store.
 *
 * Each entry is kept as its JSON text and read back deep-equal, in the order
 * appended; an entry whose `uuid` the transcript already holds is left out
 * (the SDK's retries and `importSessionToStore()` replays), one without a
 * uuid is always kept. Subagents' transcripts (`subpath`) are kept apart and
 * listed by `listSubkeys`; `delete` of the main key removes them too.
 *
 * @example A transcript mirrored by one keeper and loaded by a second one
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { RunStoreSessionStore } from "./claude_agent_sdk.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * const key = { projectKey: "my-app", sessionId: "fix-tests" };
 * const first = createAgentCheckpoint({ home, env: {} });
 * // In `query({ prompt, options: { sessionStore: new RunStoreSessionStore(first) } })`:
 * await new RunStoreSessionStore(first).append(key, [
 *   { type: "user", uuid: "a1", message: { role: "user", content: "hi" } },
 * ]);
 * await first.close();
 *
 * const second = createAgentCheckpoint({ home, env: {} });
 * const store = new RunStoreSessionStore(second);
 * assert.deepEqual(await store.load(key), [
 *   { type: "user", uuid: "a1", message: { role: "user", content: "hi" } },
 * ]);
 * assert.equal(await store.load({ ...key, sessionId: "unknown" }), null);
 * await second.close();
 * ```
 */
export class RunStoreSessionStore implements SessionStore {
  readonly #ac: AgentCheckpoint;

  /**
   * A session store over a keeper's run store.
   *
   * @param ac The keeper whose run store keeps the transcripts.
   */
  constructor(ac: AgentCheckpoint) {
    this.#ac = ac;
  }

  /**
   * Keep a batch of transcript entries at the end of its transcript, in one
   * durable commit; an entry whose `uuid` is kept already is left out.
   *
   * @param key The transcript.
   * @param entries Its new entries.
   * @returns Once they are committed.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSessionStore } from "./claude_agent_sdk.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const store = new RunStoreSessionStore(ac);
   * const key = { projectKey: "p", sessionId: "s" };
   * await store.append(key, [{ type: "user", uuid: "u1" }, { type: "title", title: "t" }]);
   * await store.append(key, [{ type: "user", uuid: "u1" }, { type: "title", title: "t" }]);
   * assert.deepEqual(await store.load(key), [
   *   { type: "user", uuid: "u1" }, { type: "title", title: "t" }, { type: "title", title: "t" },
   * ]);
   * await ac.close();
   * ```
   */
  append(key: SessionKey, entries: SessionStoreEntry[]): Promise<void> {
    if (entries.length === 0) return Promise.resolve();
    const kept = entries.map((entry) => ({
      json: JSON.stringify(entry),
      ...(typeof entry.uuid === "string" ? { uuid: entry.uuid } : {}),
    }));
    return transcripts(this.#ac, (s) => s.append(pathOf(key), kept));
  }

  /**
   * A transcript's entries, in the order appended; null for one never written
   * (or deleted).
   *
   * @param key The transcript.
   * @returns Its entries, or null.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSessionStore } from "./claude_agent_sdk.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const store = new RunStoreSessionStore(ac);
   * assert.equal(await store.load({ projectKey: "p", sessionId: "none" }), null);
   * await ac.close();
   * ```
   */
  async load(key: SessionKey): Promise<SessionStoreEntry[] | null> {
    const texts = await transcripts(this.#ac, (s) => s.load(pathOf(key)));
    return texts && texts.map((text) => JSON.parse(text) as SessionStoreEntry);
  }

  /**
   * The sessions of a project and when each was last written (ms since the epoch).
   *
   * @param projectKey The project.
   * @returns Each session's id and mtime, in no order.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSessionStore } from "./claude_agent_sdk.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const store = new RunStoreSessionStore(ac);
   * await store.append({ projectKey: "p", sessionId: "s" }, [{ type: "user" }]);
   * const [only] = await store.listSessions("p");
   * assert.equal(only?.sessionId, "s");
   * assert.ok(only!.mtime <= Date.now());
   * await ac.close();
   * ```
   */
  listSessions(projectKey: string): Promise<{ sessionId: string; mtime: number }[]> {
    return transcripts(this.#ac, (s) => s.list(projectKey));
  }

  /**
   * Remove a transcript: the main key's removes the session's subagent
   * transcripts too; a key with a subpath removes that one alone.
   *
   * @param key The transcript.
   * @returns Once it is removed.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSessionStore } from "./claude_agent_sdk.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const store = new RunStoreSessionStore(ac);
   * const key = { projectKey: "p", sessionId: "s" };
   * await store.append({ ...key, subpath: "subagents/a" }, [{ type: "user" }]);
   * await store.delete(key);
   * assert.equal(await store.load({ ...key, subpath: "subagents/a" }), null);
   * await ac.close();
   * ```
   */
  delete(key: SessionKey): Promise<void> {
    return transcripts(this.#ac, (s) => s.delete(pathOf(key)));
  }

  /**
   * The subpaths of a session's subagent transcripts.
   *
   * @param key The session.
   * @returns Each subpath that holds entries.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import { RunStoreSessionStore } from "./claude_agent_sdk.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const store = new RunStoreSessionStore(ac);
   * const key = { projectKey: "p", sessionId: "s" };
   * await store.append(key, [{ type: "user" }]);
   * await store.append({ ...key, subpath: "subagents/agent-1" }, [{ type: "user" }]);
   * assert.deepEqual(await store.listSubkeys(key), ["subagents/agent-1"]);
   * await ac.close();
   * ```
   */
  listSubkeys(key: { projectKey: string; sessionId: string }): Promise<string[]> {
    return transcripts(this.#ac, (s) => s.subkeys(key.projectKey, key.sessionId));
  }
}
