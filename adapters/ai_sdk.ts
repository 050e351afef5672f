// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The Vercel AI SDK (`ai` v5, v6 and v7) with checkpoints: one line gives a
 * `generateText` / `streamText` whose steps are the run's turns.
 *
 * ```ts ignore
 * const cp = checkpointed(ac, { sessionId, maxSteps: 40, timeSeconds: 900 });
 * const result = await cp.generateText({ model, tools, prompt });
 * ```
 *
 * What it merges into the parameters you pass, composing with your own:
 * - `stopWhen`: the step cap (your own conditions still stop the run);
 * - `model`: a wrapper that calls `preLlmCall()` once per model call and puts
 *   a due checkpoint directive into that call's prompt only (never into
 *   `response.messages` or the returned steps); a model your `prepareStep`
 *   returns is wrapped the same way;
 * - `tools`: each `execute` reports its call (with the SDK's `toolCallId`),
 *   its outcome and its duration; a tool returning an async iterable stays in
 *   flight until the iterable ends, each chunk counting as activity;
 * - `experimental_transform` (streamText): streamed parts count as activity,
 *   and the end of the stream ends the run;
 * - `abortSignal`: with `deadline: true`, the run's deadline joins yours.
 *
 * With the `journal` setting on (the default) and a run ledger, the model is
 * also wrapped with the SDK's own `wrapLanguageModel`, its middleware making
 * each call through `run.journal.model()` (a stream journaled as its parts
 * once it has ended), and each tool's `execute` goes through
 * `run.journal.tool()`: a retry replays its earlier attempt's steps without
 * calling the model, counting no turn and no use for them.
 *
 * Each model call's usage (`inputTokens`, `outputTokens`, from the result or
 * the stream's `finish` part) is reported with `run.postLlmCall()`, with the
 * model's id for the `prices` setting (the SDK gives no cost). Each tool's
 * `abortSignal` also aborts when the call runs past its deadline
 * (`tool_timeout_seconds`), through `run.time.toolSignal()`.
 *
 * @module
 */
import * as aiDefault from "npm:ai@^7.0.0";
import type { AgentCheckpoint, EndStatus, Run } from "../mod.ts";
import {
  type AdapterInit,
  effectful,
  guarded,
  logFault,
  PendingPrologue,
  type Placement,
  runSignal,
  startAdapterRun,
  thrownStatus,
  toolCallSignal,
} from "./_shared.ts";
import { failOpen, failOpenAsync, isThenable } from "../log.ts";

export type { AdapterInit, Placement } from "./_shared.ts";
export { BudgetExceededError, RunRefusedError } from "../run.ts";

/**
 * What a tool's `execute` options (its second argument) carry besides the
 * SDK's own when the adapter runs it: the call's effect key, the same in every
 * attempt of the run for the same tool and input.
 *
 * @example Reading the key in a tool, type-checked
 * ```ts
 * import type { EffectKeyOptions } from "./ai_sdk.ts";
 * import { jsonSchema, tool } from "npm:ai@^7.0.0";
 * import assert from "node:assert/strict";
 *
 * const pay = tool({
 *   inputSchema: jsonSchema<{ cents: number }>({ type: "object" }),
 *   execute: (input, options) => {
 *     const { effectKey } = options as typeof options & EffectKeyOptions;
 *     return `paid ${input.cents} with idempotency key ${effectKey}`;
 *   },
 * });
 * assert.equal(typeof pay.execute, "function");
 * ```
 */
export interface EffectKeyOptions {
  /** The call's effect key (`run.effects.key(tool, input)`): pass it to an API as its idempotency key. */
  effectKey: string;
}

/**
 * What the adapter needs of an `ai` module: its `generateText` and
 * `streamText` (and `gateway`, to resolve a model given by its id). Pass
 * `import * as ai from "ai"` of any supported major version.
 *
 * @example Any major version's module is one
 * ```ts
 * import type { AiSdkModule } from "./ai_sdk.ts";
 * import * as ai from "npm:ai@^7.0.0";
 * import assert from "node:assert/strict";
 *
 * const sdk: AiSdkModule = ai;
 * assert.equal(typeof sdk.streamText, "function");
 * ```
 */
export interface AiSdkModule {
  /** The SDK's `generateText`. */
  // deno-lint-ignore no-explicit-any
  generateText: (params: any) => PromiseLike<any>;
  /** The SDK's `streamText`. */
  // deno-lint-ignore no-explicit-any
  streamText: (params: any) => any;
  /** The SDK's default provider, for models given as a string id. */
  gateway?: unknown;
  /**
   * The SDK's `wrapLanguageModel`: the run journal rides on it as a
   * middleware. Without it the model calls are not journaled.
   */
  // deno-lint-ignore no-explicit-any
  wrapLanguageModel?: (options: any) => any;
}

/**
 * The init of {@linkcode checkpointed}: `startRun`'s, with the caps in the SDK's unit.
 *
 * @example A 30-step run with a hard stop at ten minutes, its directive riding on tool results
 * ```ts
 * import type { AiSdkInit } from "./ai_sdk.ts";
 * import assert from "node:assert/strict";
 *
 * const init: AiSdkInit = {
 *   sessionId: "triage-1234",
 *   maxSteps: 30,
 *   timeSeconds: 600,
 *   placement: "tool-result",
 *   deadline: true,
 * };
 * assert.equal(init.maxSteps, 30);
 * ```
 */
export interface AiSdkInit<M extends AiSdkModule = typeof aiDefault> extends AdapterInit {
  /** The conversation's session id; names the run and its checkpoint file. */
  sessionId: string;
  /**
   * The turn cap, in steps: a step is one model call. The run's turn cap, and
   * the SDK's `stopWhen` step limit.
   */
  maxSteps: number;
  /**
   * The `ai` module to drive: the one you import `generateText` from
   * (`import * as ai from "ai"`), when it is not the one this module resolves.
   * @default {the `ai` peer dependency in Node; ai ^7 from npm in Deno}
   */
  ai?: M;
}

/**
 * What {@linkcode checkpointed} returns: the run and the SDK's two loops, wired to it.
 *
 * @example The run starts with `checkpointed()`, with the step cap as its turn cap
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointed, type Checkpointed } from "./ai_sdk.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const cp: Checkpointed = checkpointed(ac, { sessionId: "s-1", maxSteps: 25 });
 * assert.deepEqual(cp.run.caps.turns, { value: 25, source: "host" });
 * assert.ok(cp.run.checkpointFile.endsWith("s-1.md"));
 * await cp.run.end();
 * await ac.close();
 * ```
 */
export interface Checkpointed<M extends AiSdkModule = typeof aiDefault> {
  /** The run: its id, caps, checkpoint file and hooks. */
  readonly run: Run;
  /**
   * The SDK's `generateText`, with the step cap, the directive, tool reports
   * and the deadline merged into its parameters. The run ends when it
   * settles; what it throws is rethrown.
   */
  generateText: M["generateText"];
  /**
   * The SDK's `streamText`, merged like `generateText`. The run ends when the
   * stream finishes, errors or is aborted; consume the stream (as the SDK
   * requires) or the run stays open.
   */
  streamText: M["streamText"];
}

// deno-lint-ignore no-explicit-any
type Any = any;
type Part = Record<string, Any>;

const describe = (value: unknown): string =>
  typeof value === "string" ? JSON.stringify(value) : value === null ? "null" : typeof value;

/**
 * Wire the AI SDK to a run: start the run now and return `generateText` and
 * `streamText` that drive it. One `checkpointed()` is one run; call it again
 * for the next run.
 *
 * @param ac The process's {@linkcode AgentCheckpoint}.
 * @param init The session id, `maxSteps`, and optionally `timeSeconds`,
 *   `placement`, `deadline`, `ai` and the rest of `startRun`'s init.
 * @returns The run and the SDK's `generateText` / `streamText`.
 * @throws {TypeError} When `maxSteps` is not a whole number ≥ 1, `timeSeconds`
 *   not a number > 0, `placement` unknown, `sessionId` empty or `ai` not the SDK.
 *
 * @example Tier 2 reaches the penultimate step's prompt, and only that one
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointed } from "./ai_sdk.ts";
 * import * as ai from "npm:ai@^7.0.0";
 * import { MockLanguageModelV4 } from "npm:ai@^7.0.0/test";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const usage = {
 *   inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
 *   outputTokens: { total: 1, text: 1, reasoning: 0 },
 * };
 * let n = 0;
 * const model = new MockLanguageModelV4({
 *   doGenerate: () => {
 *     n++;
 *     return Promise.resolve({
 *       content: [{ type: "tool-call", toolCallId: `c${n}`, toolName: "look", input: "{}" }],
 *       finishReason: { unified: "tool-calls", raw: "tool_use" },
 *       usage,
 *       warnings: [],
 *     });
 *   },
 * });
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const cp = checkpointed(ac, { sessionId: "doc-ai-sdk", maxSteps: 4, ai });
 * const result = await cp.generateText({
 *   model,
 *   prompt: "Look around.",
 *   tools: { look: ai.tool({ inputSchema: ai.jsonSchema({ type: "object" }), execute: () => "ok" }) },
 * });
 * assert.equal(result.steps.length, 4); // the cap, stated once
 * const prompts = model.doGenerateCalls.map((call) => JSON.stringify(call.prompt));
 * assert.deepEqual(prompts.map((p) => p.includes("Final budget checkpoint")), [false, false, true, false]);
 * assert.ok(!JSON.stringify(result.response.messages).includes("budget checkpoint"));
 * await ac.close();
 * ```
 */
export function checkpointed<M extends AiSdkModule = typeof aiDefault>(
  ac: AgentCheckpoint,
  init: AiSdkInit<M>,
): Checkpointed<M> {
  if (ac === null || typeof ac !== "object" || typeof ac.startRun !== "function") {
    throw new TypeError(`ac must be an AgentCheckpoint, got ${describe(ac)}`);
  }
  if (init === null || typeof init !== "object") {
    throw new TypeError(`init must be an object, got ${describe(init)}`);
  }
  const { maxSteps, ai, ...rest } = init;
  const sdk: AiSdkModule = ai ?? aiDefault;
  if (
    sdk === null || typeof sdk !== "object" || typeof sdk.generateText !== "function" ||
    typeof sdk.streamText !== "function"
  ) {
    throw new TypeError(
      `ai must be the AI SDK module (with generateText and streamText), got ${describe(ai)}`,
    );
  }
  if (rest.deadline !== undefined && typeof rest.deadline !== "boolean") {
    throw new TypeError(`deadline must be true or false, got ${describe(rest.deadline)}`);
  }
  const run = startAdapterRun(ac, rest, "maxSteps", maxSteps);
  const wired = new Wiring(
    run,
    sdk,
    maxSteps,
    rest.placement ?? "user",
    rest.deadline === true,
    rest.replay ?? [],
  );
  return {
    run,
    generateText: ((params: Any) => wired.generateText(params)) as M["generateText"],
    streamText: ((params: Any) => wired.streamText(params)) as M["streamText"],
  };
}

const isObject = (value: unknown): value is Record<string | symbol, Any> =>
  value !== null && (typeof value === "object" || typeof value === "function");

const isAsyncIterable = (value: unknown): value is AsyncIterable<unknown> =>
  isObject(value) && typeof value[Symbol.asyncIterator] === "function";

const asArray = <T>(value: T | T[] | undefined): T[] =>
  value === undefined ? [] : Array.isArray(value) ? value : [value];

/** The state of one `checkpointed()` run: its model calls, its prologue and how it ends. */
class Wiring {
  readonly #run: Run;
  readonly #sdk: AiSdkModule;
  readonly #maxSteps: number;
  readonly #placement: Placement;
  readonly #deadline: boolean;
  /** The tools replayed from their receipt in a retried run. */
  readonly #replay: string[];
  readonly #pending = new PendingPrologue();
  /** Tool results of this run's tools not yet in a model call that succeeded. */
  readonly #unsent = new Set<string>();
  readonly #models = new WeakMap<object, unknown>();
  #calls = 0;
  /** The steps finished so far, for the error of a run an enforced cap stopped. */
  readonly #steps: unknown[] = [];
  #capped = false;
  #used = false;
  #ended = false;
  #userSignal: AbortSignal | undefined;
  /** Whether model and tool calls go through the run journal (decided at the start). */
  readonly #journaling: boolean;

  constructor(
    run: Run,
    sdk: AiSdkModule,
    maxSteps: number,
    placement: Placement,
    deadline: boolean,
    replay: string[],
  ) {
    this.#replay = replay;
    this.#run = run;
    this.#sdk = sdk;
    this.#maxSteps = maxSteps;
    this.#placement = placement;
    this.#deadline = deadline;
    this.#journaling = this.#guard(
      "reading the journal setting",
      () => typeof sdk.wrapLanguageModel === "function" && run.journal.on,
      () => false,
    );
  }

  /** A fault inside the adapter: a log line, never an error for the host ({@linkcode logFault}). */
  #fault(where: string, error: unknown): void {
    logFault(this.#run, `ai-sdk adapter: ${where}`, error);
  }

  /** The adapters' one guard ({@linkcode guarded}) around the adapter's own work. */
  #guard<T>(where: string, body: () => T, fallback: () => T): T {
    return guarded(this.#run, `ai-sdk adapter: ${where}`, body, fallback);
  }

  async generateText(params: Any): Promise<unknown> {
    const merged = this.#merge(params, false);
    let result;
    try {
      result = await this.#sdk.generateText(merged);
    } catch (error) {
      await this.#end(this.#thrownStatus(error));
      throw this.#run.budget.error(error, [...this.#steps]) ?? error;
    }
    await this.#end(this.#capped ? "capped" : "done");
    return result;
  }

  streamText(params: Any): unknown {
    const merged = this.#merge(params, true);
    try {
      return this.#sdk.streamText(merged);
    } catch (error) {
      void this.#end(this.#thrownStatus(error));
      throw error;
    }
  }

  async #end(status: EndStatus): Promise<void> {
    if (this.#ended) return;
    this.#ended = true;
    await failOpenAsync(
      () => this.#run.end({ status }),
      (error) => this.#fault("ending the run", error),
    );
  }

  /** How the run ended when the SDK threw `error` (or the stream ended with it). */
  #thrownStatus(error: unknown): EndStatus {
    return failOpen((): EndStatus => {
      const status = thrownStatus(this.#run, this.#deadline, this.#userSignal);
      if (status !== "failed") return status;
      // An abort that is neither ours nor the host's signal: the SDK's own timeout.
      const name = isObject(error) ? error.name : undefined;
      return name === "AbortError" || name === "TimeoutError" ? "aborted" : "failed";
    }, () => "failed");
  }

  /** The host's parameters with ours merged in; on a fault, theirs as given. */
  #merge(params: Any, streaming: boolean): Any {
    if (this.#used) {
      // Logging is the last line of defence.
      failOpen(() =>
        this.#run.log(
          "warn",
          "ai-sdk adapter: this checkpointed() run has already ended; call checkpointed() once per generateText or streamText call",
        ), () => {});
    }
    this.#used = true;
    if (!isObject(params)) return params;
    return this.#guard("merging the parameters", () => {
      const merged: Any = { ...params };
      merged.model = this.#wrapModel(params.model);
      merged.stopWhen = [this.#stopCondition, ...asArray(params.stopWhen)];
      const onStepFinish = params.onStepFinish;
      merged.onStepFinish = (step: unknown) => {
        this.#steps.push(step);
        return typeof onStepFinish === "function" ? onStepFinish(step) : undefined;
      };
      if (typeof params.prepareStep === "function") {
        merged.prepareStep = this.#prepareStep(params.prepareStep);
      }
      if (isObject(params.tools)) merged.tools = this.#wrapTools(params.tools);
      if (params.abortSignal instanceof AbortSignal) this.#userSignal = params.abortSignal;
      if (this.#deadline || this.#run.budget.enforced) {
        merged.abortSignal = runSignal(this.#run, this.#deadline, this.#userSignal);
      }
      if (streaming) {
        merged.experimental_transform = [
          this.#transform,
          ...asArray(params.experimental_transform),
        ];
      }
      return merged;
    }, () => params);
  }

  /** Ours in `stopWhen`: the step cap (and as many model calls, retries included). */
  readonly #stopCondition = ({ steps }: { steps: Part[] }): boolean =>
    this.#guard("stopWhen", () => {
      const reached = steps.length >= this.#maxSteps || this.#calls >= this.#maxSteps;
      const last = steps[steps.length - 1];
      if (reached && Array.isArray(last?.toolCalls) && last.toolCalls.length > 0) {
        this.#capped = true;
      }
      return reached;
    }, () => steps.length >= this.#maxSteps);

  /** The host's `prepareStep`, with a model it returns wrapped like the main one. */
  #prepareStep(user: (options: Any) => Any): (options: Any) => Promise<Any> {
    return async (options) => {
      const result = await user(options);
      if (!isObject(result) || result.model === undefined) return result;
      return { ...result, model: this.#wrapModel(result.model) };
    };
  }

  /** The model, with `preLlmCall()` and the directive on each call. */
  #wrapModel(model: unknown): unknown {
    return this.#guard("wrapping the model", () => {
      let target = model;
      if (typeof target === "string") {
        const provider = (globalThis as Any).AI_SDK_DEFAULT_PROVIDER ?? this.#sdk.gateway;
        target = provider.languageModel(target);
      }
      if (!isObject(target) || typeof target.doGenerate !== "function") return model;
      const known = this.#models.get(target);
      if (known) return known;
      const wrapped = new Proxy(target, {
        get: (t, prop) => {
          if (prop === "doGenerate" || prop === "doStream") {
            return (options: Any) => this.#modelCall(t, prop, options);
          }
          const value = Reflect.get(t, prop, t);
          return typeof value === "function" ? value.bind(t) : value;
        },
      });
      const outer = this.#journaling
        ? this.#sdk.wrapLanguageModel!({ model: wrapped, middleware: this.#journalMiddleware })
        : wrapped;
      this.#models.set(target, outer);
      this.#models.set(wrapped, outer);
      this.#models.set(outer, outer);
      return outer;
    }, () => model);
  }

  /**
   * The run journal as the SDK's own middleware, outside the adapter's model
   * wrapper: a call answered from the journal never reaches it, so it counts
   * no turn and no use, carries no directive, and your own middleware (inside
   * it) sees live calls only. The request journaled is the call's parameters
   * as the SDK gives them (before any directive), without its signal and headers.
   */
  readonly #journalMiddleware = {
    wrapGenerate: async (
      { doGenerate, params, model }: { doGenerate: () => Promise<Any>; params: Any; model: Any },
    ): Promise<Any> => {
      let live: { result: Any } | undefined;
      const value = await this.#run.journal.model(
        journalRequest(params, model),
        async () => {
          const result = await doGenerate();
          live = { result };
          // What cannot be journaled (undefined) is returned live and not journaled.
          return this.#guard("journaling a model call", () => generatedRecord(result), () => {
            return undefined;
          });
        },
        { usage: (record: Any) => usageOf(record?.usage) },
      );
      return live ? live.result : replayedGenerate(value);
    },
    wrapStream: async (
      { doStream, params, model }: { doStream: () => Promise<Any>; params: Any; model: Any },
    ): Promise<Any> => {
      let live: { result: Any } | undefined;
      let started!: () => void;
      const liveReady = new Promise<typeof LIVE>((resolve) => started = () => resolve(LIVE));
      let settled: Promise<unknown> = Promise.resolve();
      const journaled = this.#run.journal.model(
        journalRequest(params, model),
        async () => {
          const result = await doStream();
          if (!(result?.stream instanceof ReadableStream)) {
            live = { result };
            started();
            throw new Error("not a stream");
          }
          let finish!: (parts: Any[]) => void;
          let fail!: (error: unknown) => void;
          const finished = new Promise<Any[]>((resolve, reject) => {
            finish = resolve;
            fail = reject;
          });
          live = {
            result: { ...result, stream: teeParts(result.stream, finish, fail, () => settled) },
          };
          started();
          const parts = await finished;
          return this.#guard("journaling a streamed model call", () => {
            return streamedRecord(parts, result);
          }, () => undefined);
        },
      );
      // The live stream closes once its journal entry is durable (or was refused).
      settled = journaled.then(() => {}, () => {});
      const first = await Promise.race([liveReady, journaled]);
      if (first === LIVE && live) return live.result;
      return replayedStream(first);
    },
  };

  /** One model call: one turn, and the directive placed in this call's prompt only. */
  async #modelCall(
    model: Record<string, Any>,
    method: "doGenerate" | "doStream",
    options: Any,
  ): Promise<unknown> {
    let text = undefined as string | undefined;
    let placed = undefined as string | undefined;
    const sent = this.#guard("placing the checkpoint directive", () => {
      this.#calls++;
      text = this.#run.preLlmCall();
      const prompt: Part[] | undefined = Array.isArray(options?.prompt)
        ? options.prompt
        : undefined;
      if (!prompt) return options;
      const at = this.#placement === "tool-result" ? this.#newestUnsent(prompt) : undefined;
      placed = this.#pending.take(text, this.#placement !== "tool-result" || at !== undefined);
      return placed === undefined
        ? options
        : { ...options, prompt: this.#place(prompt, placed, at) };
    }, () => {
      // Kept for a later call rather than lost.
      const kept = placed ?? text;
      if (kept !== undefined) this.#pending.take(kept, false);
      placed = undefined;
      return options;
    });
    try {
      // The tool results this call carries are in the ledger before the model sees them.
      await this.#run.effects.durable();
      const result = await model[method](sent);
      this.#markSent(options?.prompt);
      return method === "doGenerate"
        ? this.#reportUsage(model, result)
        : this.#usageOfStream(model, result);
    } catch (error) {
      // The retry (or a later call) carries the directive this call lost.
      if (placed !== undefined) this.#pending.take(placed, false);
      throw error;
    }
  }

  /** Report a generated call's usage; returns the result as it was. */
  #reportUsage(model: Record<string, Any>, result: Any): unknown {
    this.#guard("reporting usage", () => {
      const usage = usageOf(result?.usage);
      if (usage) this.#run.postLlmCall({ ...usage, ...modelId(model) });
    }, () => {});
    return result;
  }

  /** A streamed call's result whose stream reports the usage of its `finish` part. */
  #usageOfStream(model: Record<string, Any>, result: Any): unknown {
    return this.#guard("reporting usage", () => {
      if (!(result?.stream instanceof ReadableStream)) return result;
      const watch = new TransformStream<Part, Part>({
        transform: (part, controller) => {
          if (part?.type === "finish") this.#reportUsage(model, part);
          controller.enqueue(part);
        },
      });
      return { ...result, stream: result.stream.pipeThrough(watch) };
    }, () => result);
  }

  /** Where the newest eligible tool result is: [message index, part index]. */
  #newestUnsent(prompt: Part[]): [number, number] | undefined {
    if (this.#unsent.size === 0) return undefined;
    for (let m = prompt.length - 1; m >= 0; m--) {
      const message = prompt[m];
      if (message?.role !== "tool" || !Array.isArray(message.content)) continue;
      for (let p = message.content.length - 1; p >= 0; p--) {
        const part = message.content[p];
        if (
          part?.type === "tool-result" && this.#unsent.has(part.toolCallId) &&
          CARRIERS.has(part.output?.type)
        ) return [m, p];
      }
    }
    return undefined;
  }

  #markSent(prompt: unknown): void {
    this.#guard("tracking sent tool results", () => {
      if (this.#unsent.size === 0 || !Array.isArray(prompt)) return;
      for (const message of prompt) {
        if (message?.role !== "tool" || !Array.isArray(message.content)) continue;
        for (const part of message.content) {
          if (part?.type === "tool-result") this.#unsent.delete(part.toolCallId);
        }
      }
    }, () => {});
  }

  /** A copy of the prompt with the directive placed; the SDK's own messages are untouched. */
  #place(prompt: Part[], text: string, at: [number, number] | undefined): Part[] {
    if (this.#placement === "system") {
      let i = 0;
      while (prompt[i]?.role === "system") i++;
      return [...prompt.slice(0, i), { role: "system", content: text }, ...prompt.slice(i)];
    }
    if (this.#placement === "tool-result" && at) {
      const [m, p] = at;
      const message = prompt[m]!;
      const content = [...message.content];
      content[p] = { ...content[p], output: withPrologue(content[p].output, text) };
      const out = [...prompt];
      out[m] = { ...message, content };
      return out;
    }
    return [...prompt, { role: "user", content: [{ type: "text", text }] }];
  }

  #wrapTools(tools: Record<string, Any>): Record<string, Any> {
    const out: Record<string, Any> = {};
    for (const [name, tool] of Object.entries(tools)) {
      if (!isObject(tool) || typeof tool.execute !== "function") {
        out[name] = tool;
        continue;
      }
      const execute = this.#wrapExecute(name, tool, tool.execute);
      // A tool that streams (an async generator) runs live, as its chunks are its output.
      const streams = Object.prototype.toString.call(tool.execute) ===
        "[object AsyncGeneratorFunction]";
      out[name] = {
        ...tool,
        execute: this.#journaling && !streams ? this.#journalTool(name, execute) : execute,
      };
    }
    return out;
  }

  /**
   * A tool's `execute` through the run journal: in a retry, a call of the
   * replayed stretch returns its recorded result and does not run (nor is it
   * reported again); live, its result is journaled before it is returned. An
   * async iterable a tool returns is read to its end, its last chunk the result.
   */
  #journalTool(
    name: string,
    execute: (input: unknown, options: Any) => unknown,
  ): (input: unknown, options: Any) => Promise<unknown> {
    return async (input, options) => {
      const recorded = await this.#run.journal.tool(name, input, async () => {
        const out = execute(input, options);
        if (!isAsyncIterable(out)) return { result: await out };
        let last: unknown;
        for await (const chunk of out) last = chunk;
        return { result: last };
      });
      return isObject(recorded) ? recorded.result : recorded;
    };
  }

  /**
   * A tool's `execute` that reports its call, outcome and duration, and gives
   * the tool its effect key (`options.effectKey`); a tool in `replay` runs
   * through `run.once`, and one in `effect_tools` after its intent is durable.
   */
  #wrapExecute(
    name: string,
    tool: object,
    execute: (input: unknown, options: Any) => unknown,
  ): (input: unknown, options: Any) => unknown {
    const run = this.#run;
    return (input, options) => {
      const callId = typeof options?.toolCallId === "string" ? options.toolCallId : undefined;
      const started = performance.now();
      let reported = false;
      const report = (ok: boolean, error?: unknown, value?: unknown) => {
        if (reported) return;
        reported = true;
        const outcome: Any = { ok, durationMs: performance.now() - started };
        if (callId !== undefined) outcome.callId = callId;
        if (!ok && error !== undefined) outcome.error = error;
        if (ok && value !== undefined) outcome.result = value;
        run.postToolCall(name, outcome);
        if (callId !== undefined && this.#placement === "tool-result") this.#unsent.add(callId);
      };
      const replay = this.#replay.includes(name);
      const call: Any = callId === undefined ? { input } : { callId, input };
      if (replay) call.effect = false; // run.once records it
      run.preToolCall(name, call);
      const given = withToolSignal(run, callId, options);
      const withKey = (key: string) => ({ ...given, effectKey: key });
      if (replay || run.effects.isEffectTool(name)) {
        return effectful(
          run,
          { replay: this.#replay },
          name,
          input,
          callId,
          (key) => execute.call(tool, input, withKey(key)),
        ).then(
          ({ value }) => {
            report(true, undefined, value);
            return value;
          },
          (error) => {
            report(false, error);
            throw error;
          },
        );
      }
      // The key is worked out only when the tool reads it.
      const context = {
        ...given,
        get effectKey() {
          return run.effects.key(name, input);
        },
      };
      let result;
      try {
        result = execute.call(tool, input, context);
      } catch (error) {
        report(false, error);
        throw error;
      }
      if (isAsyncIterable(result)) return this.#streamingTool(result, report);
      if (isThenable(result)) {
        return Promise.resolve(result).then(
          (value) => {
            report(true);
            return value;
          },
          (error) => {
            report(false, error);
            throw error;
          },
        );
      }
      report(true);
      return result;
    };
  }

  /** A streaming tool stays in flight until its stream ends; each chunk is activity. */
  async *#streamingTool(
    source: AsyncIterable<unknown>,
    report: (ok: boolean, error?: unknown) => void,
  ): AsyncGenerator<unknown> {
    let ended = false;
    try {
      for await (const chunk of source) {
        this.#run.activity();
        yield chunk;
      }
      ended = true;
      report(true);
    } catch (error) {
      ended = true;
      report(false, error);
      throw error;
    } finally {
      if (!ended) report(false, new Error("stopped before its stream ended"));
    }
  }

  /**
   * Ours in `experimental_transform`: every part is activity, and the stream's
   * end (closed, errored or cancelled) is the run's end.
   */
  readonly #transform = (): { readable: ReadableStream; writable: WritableStream } => {
    let aborted = false;
    let failed = false;
    const pass = new TransformStream<Part, Part>({
      transform: (part, controller) => {
        this.#run.activity();
        // A run an enforced cap stopped ends its stream as generateText does: with the error.
        const stopped = part?.type === "abort" || part?.type === "error"
          ? this.#run.budget.error(part.reason ?? part.error, [...this.#steps])
          : undefined;
        if (stopped) {
          void this.#end("capped");
          controller.error(stopped);
          return;
        }
        if (part?.type === "abort") aborted = true;
        else if (part?.type === "error") failed = true;
        controller.enqueue(part);
      },
    });
    const writer = pass.writable.getWriter();
    // The reader cancelled: the host stopped the stream.
    writer.closed.catch(() => this.#end("aborted"));
    const writable = new WritableStream<Part>({
      write: (part) => writer.write(part),
      close: async () => {
        await writer.close();
        const status: EndStatus = aborted
          ? this.#thrownStatus({ name: "AbortError" })
          : failed
          ? "failed"
          : this.#capped
          ? "capped"
          : "done";
        await this.#end(status);
      },
      abort: async (reason) => {
        await this.#end(this.#thrownStatus(reason));
        await writer.abort(reason);
      },
    });
    return { readable: pass.readable, writable };
  };
}

/**
 * A model call's usage in either shape: numbers (v5) or `{ total }` objects
 * (v6, v7); undefined when it gives no token count.
 */
function usageOf(usage: Any): { inputTokens: number; outputTokens: number } | undefined {
  if (!isObject(usage)) return undefined;
  const count = (v: Any): number | undefined =>
    typeof v === "number" ? v : isObject(v) && typeof v.total === "number" ? v.total : undefined;
  const inputTokens = count(usage.inputTokens);
  const outputTokens = count(usage.outputTokens);
  if (inputTokens === undefined && outputTokens === undefined) return undefined;
  return { inputTokens: inputTokens ?? 0, outputTokens: outputTokens ?? 0 };
}

/** The model's id, for the `prices` setting. */
const modelId = (model: Record<string, Any>): { model?: string } =>
  typeof model.modelId === "string" ? { model: model.modelId } : {};

/** A tool call's options with the call's deadline signal joined to the SDK's `abortSignal`. */
function withToolSignal(run: Run, callId: string | undefined, options: Any): Any {
  if (callId === undefined) return options;
  return { ...options, abortSignal: toolCallSignal(run, callId, options?.abortSignal) };
}

/** The kinds of tool output that can carry the directive. */
const CARRIERS = new Set(["text", "error-text", "json", "error-json", "content"]);

/** A tool result's output with the directive appended, as text where it was JSON. */
function withPrologue(output: Part, text: string): Part {
  switch (output.type) {
    case "text":
    case "error-text":
      return { ...output, value: `${String(output.value)}\n\n${text}` };
    case "json":
      return { type: "text", value: `${JSON.stringify(output.value)}\n\n${text}` };
    case "error-json":
      return { type: "error-text", value: `${JSON.stringify(output.value)}\n\n${text}` };
    default: // content
      return { ...output, value: [...output.value, { type: "text", text }] };
  }
}

/** The answer of a journaled stream's first settling: its live stream is ready. */
const LIVE = Symbol("live");

/**
 * A model call's request as the journal keys it: the model, and the call's
 * parameters made JSON-safe, without its abort signal and headers.
 */
function journalRequest(params: Any, model: Any): unknown {
  const { abortSignal: _signal, headers: _headers, ...rest } = isObject(params) ? params : {};
  return {
    model: { provider: model?.provider, modelId: model?.modelId },
    params: jsonSafe(rest),
  };
}

/** What a generated call's journal keeps: what the SDK reads of it. */
function generatedRecord(result: Any): unknown {
  if (!isObject(result)) return result;
  const out: Part = {
    content: jsonSafe(result.content),
    finishReason: jsonSafe(result.finishReason),
    usage: jsonSafe(result.usage),
    warnings: jsonSafe(result.warnings ?? []),
  };
  if (result.providerMetadata !== undefined) {
    out.providerMetadata = jsonSafe(result.providerMetadata);
  }
  const response = responseMetadata(result.response);
  if (response) out.response = response;
  return out;
}

/** A response's metadata, without its raw body. */
function responseMetadata(response: Any): Part | undefined {
  if (!isObject(response)) return undefined;
  const { body: _body, ...rest } = response;
  return jsonSafe(rest) as Part;
}

/** A replayed generated call's result: its response's timestamp a `Date` again. */
function replayedGenerate(value: Any): Any {
  if (!isObject(value) || !isObject(value.response)) return value;
  return { ...value, response: withDate(value.response) };
}

/** What a finished stream's journal keeps: its parts, and its response's metadata. */
function streamedRecord(parts: Any[], result: Any): unknown {
  const out: Part = { parts: parts.map((part) => jsonSafe(part)) };
  const response = responseMetadata(result.response);
  if (response) out.response = response;
  return out;
}

/** A replayed stream: its recorded parts, the response metadata's timestamp a `Date` again. */
function replayedStream(value: Any): Any {
  const parts: Part[] = isObject(value) && Array.isArray(value.parts) ? value.parts : [];
  const stream = new ReadableStream<Part>({
    start(controller) {
      for (const part of parts) {
        controller.enqueue(part?.type === "response-metadata" ? withDate(part) : part);
      }
      controller.close();
    },
  });
  return isObject(value) && isObject(value.response)
    ? { stream, response: value.response }
    : { stream };
}

/** An object whose `timestamp` (a `Date` as JSON gives it back: its text) is a `Date` again. */
function withDate(value: Part): Part {
  if (typeof value.timestamp !== "string") return value;
  const date = new Date(value.timestamp);
  return Number.isNaN(date.getTime()) ? value : { ...value, timestamp: date };
}

/**
 * A model's stream passed through as it is read, its parts kept: `finish`
 * gets them once the stream has ended (with no `error` part), and the stream
 * closes once `settled()` has; `fail` gets an error, a cancel or an error part.
 */
function teeParts(
  source: ReadableStream<Any>,
  finish: (parts: Any[]) => void,
  fail: (error: unknown) => void,
  settled: () => Promise<unknown>,
): ReadableStream<Any> {
  const reader = source.getReader();
  const parts: Any[] = [];
  return new ReadableStream<Any>({
    async pull(controller) {
      let next: Awaited<ReturnType<typeof reader.read>>;
      try {
        next = await reader.read();
      } catch (error) {
        fail(error);
        throw error;
      }
      if (next.done) {
        if (parts.some((part) => part?.type === "error")) {
          fail(new Error("the stream had an error part"));
        } else finish(parts);
        await settled();
        controller.close();
        return;
      }
      parts.push(next.value);
      controller.enqueue(next.value);
    },
    cancel(reason) {
      fail(new Error("the stream was cancelled"));
      return reader.cancel(reason);
    },
  });
}

/** Bytes as base64 text. */
function base64(bytes: Uint8Array): string {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

/**
 * A value as JSON can carry it: bytes as base64 text, a URL or a `Date` as its
 * text, functions and symbols left out, a value met again on its own path left out.
 */
function jsonSafe(value: unknown, path = new Set<object>()): unknown {
  if (value instanceof Uint8Array) return base64(value);
  if (value instanceof ArrayBuffer) return base64(new Uint8Array(value));
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (value instanceof URL) return value.href;
  switch (typeof value) {
    case "function":
    case "symbol":
      return undefined;
    case "bigint":
      return value.toString();
    case "object":
      break;
    default:
      return value;
  }
  if (value === null || path.has(value)) return value === null ? null : undefined;
  path.add(value);
  try {
    if (Array.isArray(value)) {
      return value.map((item) => jsonSafe(item, path) ?? null);
    }
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      const safe = jsonSafe(item, path);
      if (safe !== undefined) out[key] = safe;
    }
    return out;
  } finally {
    path.delete(value);
  }
}
