/**
 * Runs as OpenTelemetry traces, in the GenAI semantic conventions: a span
 * `invoke_agent` per run, a child span `execute_tool` per tool call, and the
 * run's checkpoint writes (tier crossings, stalls, deadlines, tool timeouts,
 * manual checkpoints), its resume and its end as span events.
 *
 * `@opentelemetry/api` is an optional peer: it is loaded only once a host has
 * registered a tracer provider with it (the API's global registry says so),
 * synchronously where the runtime can (Node), else by a dynamic import (Deno).
 * A run started before that import settles gets its span once it has: started
 * at the run's real start, with the tool calls, checkpoint events and end it
 * missed meanwhile, each at its own time. With no provider registered a run
 * has no span and its hooks read one undefined field.
 *
 * A resumed attempt's span is in the earlier attempt's trace (its parent is the
 * earlier attempt's span, whose ids the run ledger keeps) and links to it. A
 * span can only be ended by the process that started it: the span of an
 * attempt cut off by a kill never reaches the exporter. The next attempt stands
 * in for it with a span `invoke_agent … (cut off)` in the same trace, from the
 * dead attempt's start to its last sign of life, status error, with where it
 * was cut off; the new attempt's span is that span's child.
 *
 * @example No tracer provider registered: no span, nothing loaded
 * ```ts
 * import { openTelemetry } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const tracing = openTelemetry({ log: () => {}, enabled: () => true });
 * await tracing.ready;
 * const run = tracing.start({
 *   runId: "r",
 *   attempt: 1,
 *   dialect: "chat",
 *   caps: {},
 *   startedAt: Date.now(),
 *   checkpointFile: "/tmp/r.md",
 * });
 * assert.equal(run, undefined);
 * ```
 *
 * @module
 */
import { createRequire } from "node:module";
// deno-lint-ignore no-import-prefix -- a full npm: specifier lets Deno import this by URL
import type * as OtelApi from "npm:@opentelemetry/api@^1.9.0";
import type { EarlierTrace, RunFigures, RunTrace, TraceRef, TraceStart, Tracing } from "../run.ts";
import type { CheckpointEvent } from "../_writer.ts";
import { AXES, type Axis, type EndStatus } from "../_record.ts";

type Api = typeof OtelApi;
type Span = OtelApi.Span;
type Attributes = OtelApi.Attributes;
type Log = (level: "info" | "warn" | "error", message: string, runId?: string) => void;

/** The API, as the build names it (an optional peer of the npm package). */
const API = "npm:@opentelemetry/api@^1.9.0";
/** Where the API (any copy of major 1) keeps what a host registered. */
const REGISTRY = Symbol.for("opentelemetry.js.api.1");
/** Tool spans a run keeps open at most: past it, the oldest is ended (its end never came). */
const MAX_OPEN_TOOLS = 64;
/** The instrumentation scope of our spans. */
const SCOPE = "agent-checkpoint";

/** Whether a host has registered a tracer provider with the API: one property read. */
const providerRegistered = (): boolean =>
  (globalThis as Record<symbol, { trace?: unknown } | undefined>)[REGISTRY]?.trace !== undefined;

/** The API once loaded (once per process), the import in flight, or why it cannot be. */
let api: Api | undefined;
let loading: Promise<void> | undefined;
let unloadable: string | undefined;

/** Load the API: at once where `require` can, else by an import that settles later. */
function loadApi(): Api | undefined {
  if (api || loading || unloadable !== undefined) return api;
  try {
    api = createRequire(import.meta.url)(API) as Api;
    return api;
  } catch { /* not reachable by require (Deno, or a bundle): import it */ }
  loading = import(API).then(
    (mod: Api) => {
      api = mod;
    },
    (error) => {
      unloadable = error instanceof Error ? error.message : String(error);
    },
  ).finally(() => {
    loading = undefined;
  });
  return undefined;
}

/** What the tracer needs of the keeper. */
export interface OtelOptions {
  /** Where failures go. */
  log: Log;
  /** Whether the `otel` setting is on now. */
  enabled: () => boolean;
}

/**
 * The tracer the keeper plugs in (`mod.ts`). Never throws.
 *
 * @param options The log, and the `otel` setting.
 * @returns The tracer: spans only once a tracer provider is registered.
 *
 * @example
 * ```ts
 * import { openTelemetry } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const tracing = openTelemetry({ log: () => {}, enabled: () => false });
 * assert.equal(typeof tracing.written, "function");
 * tracing.close();
 * ```
 */
export function openTelemetry(options: OtelOptions): Tracing {
  return new OtelTracing(options);
}

/** One queued hook: what it saw, handled off the hook's path. */
type Queued =
  | { op: "start"; run: OtelRun; tool: string; callId: string | undefined; at: number }
  | {
    op: "end";
    run: OtelRun;
    tool: string;
    callId: string | undefined;
    ok: boolean | undefined;
    error: unknown;
    at: number;
  }
  | {
    op: "run";
    run: OtelRun;
    status: EndStatus;
    summary: string | undefined;
    figures: RunFigures;
    at: number;
  };

class OtelTracing implements Tracing {
  readonly #log: Log;
  readonly #enabled: () => boolean;
  #said = false;
  ready: Promise<void> = Promise.resolve();
  /** The open runs' spans, by run id (the checkpoint events name runs by id). */
  readonly runs = new Map<string, OtelRun>();
  /** Runs started while the API's import was in flight: their spans start once it settles. */
  readonly #pending = new Map<string, PendingRun>();
  #queue: Queued[] = [];
  #flushQueued = false;

  constructor(options: OtelOptions) {
    this.#log = options.log;
    this.#enabled = options.enabled;
    if (providerRegistered()) this.#load();
  }

  #load(): Api | undefined {
    const loaded = loadApi();
    if (loading) {
      this.ready = loading.then(() => {
        this.#unloadable();
        this.#settle();
      });
    } else this.#unloadable();
    return loaded;
  }

  /** The API's import settled: the runs started meanwhile get their spans, and what they missed. */
  #settle(): void {
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const run of pending) {
      if (!api) continue; // it cannot be loaded: said once, by #unloadable
      try {
        const made = this.#made(api, run.start);
        if (made) run.replay(made, this);
      } catch (error) {
        this.fail("the run's span", error, run.start.runId);
      }
    }
  }

  /** The run's span, or undefined when no provider records it. */
  #made(api: Api, run: TraceStart): OtelRun | undefined {
    // Asked at each start: a provider registered anew (after `trace.disable()`) is the one used.
    const made = new OtelRun(this, api, api.trace.getTracer(SCOPE), run);
    if (!made.span.isRecording()) return undefined; // a no-op provider, or sampled out
    this.runs.set(run.runId, made);
    return made;
  }

  /** Say once that a registered provider gets no spans from us, when the API cannot be loaded. */
  #unloadable(): void {
    if (unloadable === undefined || this.#said) return;
    this.#said = true;
    this.#log(
      "warn",
      `a tracer provider is registered but @opentelemetry/api cannot be loaded (${unloadable}); runs have no spans`,
    );
  }

  start(run: TraceStart, started?: (ref: TraceRef) => void): RunTrace | undefined {
    if (!providerRegistered()) return undefined;
    try {
      if (!this.#enabled()) return undefined;
      const api = this.#load();
      if (api) {
        const made = this.#made(api, run);
        if (made) started?.(made.ref);
        return made;
      }
      if (!loading) return undefined;
      // The import is in flight (Deno, a run started right after the keeper was made).
      const pending = new PendingRun(run, started);
      this.#pending.set(run.runId, pending);
      return pending;
    } catch (error) {
      this.fail("the run's span", error, run.runId);
      return undefined;
    }
  }

  written(event: CheckpointEvent): void {
    const pending = this.#pending.get(event.runId);
    if (pending) {
      pending.written(event);
      return;
    }
    const run = this.runs.get(event.runId);
    if (!run || event.kind === "end") return; // the end's event comes with the span's end
    try {
      run.record(event);
    } catch (error) {
      this.fail("a checkpoint event", error, event.runId);
    }
  }

  close(): void {
    this.flush();
    const now = Date.now();
    for (const run of this.#pending.values()) run.close(now);
    for (const run of [...this.runs.values()]) {
      try {
        run.close(now);
      } catch (error) {
        this.fail("the run's span at close", error, run.runId);
      }
    }
    this.runs.clear();
  }

  /** Queue a hook's span work; it is done in a microtask, with the times the hook saw. */
  queue(item: Queued): void {
    this.#queue.push(item);
    if (this.#flushQueued) return;
    this.#flushQueued = true;
    queueMicrotask(() => this.flush());
  }

  flush(): void {
    this.#flushQueued = false;
    const queue = this.#queue;
    if (queue.length === 0) return;
    this.#queue = [];
    for (const item of queue) {
      try {
        if (item.op === "start") item.run.startTool(item.tool, item.callId, item.at);
        else if (item.op === "end") {
          item.run.endTool(item.tool, item.callId, item.ok, item.error, item.at);
        } else {
          item.run.finish(item.status, item.summary, item.figures, item.at);
          if (this.runs.get(item.run.runId) === item.run) this.runs.delete(item.run.runId);
        }
      } catch (error) {
        this.fail("a span", error, item.run.runId);
      }
    }
  }

  fail(what: string, error: unknown, runId?: string): void {
    try {
      this.#log(
        "warn",
        `OpenTelemetry: ${what} failed: ${error instanceof Error ? error.message : String(error)}`,
        runId,
      );
    } catch { /* the logger is guarded */ }
  }
}

/** What a run started before the API was loaded did meanwhile, in order. */
type Missed =
  | { op: "start"; tool: string; callId: string | undefined; at: number }
  | {
    op: "end";
    tool: string;
    callId: string | undefined;
    ok: boolean | undefined;
    error: unknown;
    at: number;
  }
  | { op: "event"; event: CheckpointEvent }
  | {
    op: "run";
    status: EndStatus;
    summary: string | undefined;
    figures: RunFigures;
    at: number;
  }
  | { op: "close"; at: number };

/** Events a run keeps while its span waits for the API; past it, the oldest go. */
const MAX_MISSED = 256;

/**
 * A run started while the API's import was in flight: it keeps what the run
 * does until the span can start, then hands it over, each at its own time.
 */
class PendingRun implements RunTrace {
  readonly start: TraceStart;
  readonly #started: ((ref: TraceRef) => void) | undefined;
  readonly #missed: Missed[] = [];
  #ended = false;
  /** The span's ids once it exists (the run ledger keeps them). */
  ref: TraceRef | undefined;

  constructor(start: TraceStart, started: ((ref: TraceRef) => void) | undefined) {
    this.start = start;
    this.#started = started;
  }

  #keep(missed: Missed): void {
    if (this.#missed.length >= MAX_MISSED) {
      // Tool starts and ends, and events, go first: the run's end is kept.
      const i = this.#missed.findIndex((m) => m.op !== "run" && m.op !== "close");
      if (i >= 0) this.#missed.splice(i, 1);
    }
    this.#missed.push(missed);
  }

  toolStart(tool: string, callId: string | undefined, at: number): void {
    if (!this.#ended) this.#keep({ op: "start", tool, callId, at });
  }

  toolEnd(
    tool: string,
    callId: string | undefined,
    ok: boolean | undefined,
    error: unknown,
    at: number,
  ): void {
    if (!this.#ended) this.#keep({ op: "end", tool, callId, ok, error, at });
  }

  written(event: CheckpointEvent): void {
    if (event.kind !== "end") this.#keep({ op: "event", event });
  }

  end(status: EndStatus, summary: string | undefined, figures: RunFigures, at: number): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#keep({ op: "run", status, summary, figures, at });
  }

  close(at: number): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#keep({ op: "close", at });
  }

  /** The span exists: everything the run did meanwhile, in order. */
  replay(run: OtelRun, owner: OtelTracing): void {
    this.ref = run.ref;
    this.#started?.(run.ref);
    for (const m of this.#missed) {
      if (m.op === "start") run.toolStart(m.tool, m.callId, m.at);
      else if (m.op === "end") run.toolEnd(m.tool, m.callId, m.ok, m.error, m.at);
      else if (m.op === "event") run.record(m.event);
      else if (m.op === "run") run.end(m.status, m.summary, m.figures, m.at);
      else {
        owner.flush();
        run.close(m.at);
        owner.runs.delete(run.runId);
      }
    }
  }
}

/** The status of a run's end: done and capped are fine, the rest are errors. */
const FINE: readonly EndStatus[] = ["done", "capped"];

/** Our attributes for a run's caps. */
function capAttributes(caps: TraceStart["caps"]): Attributes {
  const out: Attributes = {};
  // Named as the `caps` setting names them: `agent_checkpoint.caps.time_seconds`.
  for (const axis of AXES) {
    const cap = caps[axis.name];
    if (cap) out[`agent_checkpoint.caps.${axis.setting}`] = cap.value;
  }
  return out;
}

/** Fractions of the caps used, `used` per axis. */
function fractions(
  caps: TraceStart["caps"],
  used: { readonly [A in Axis]?: number | undefined },
): Attributes {
  const out: Attributes = {};
  for (const { name } of AXES) {
    const cap = caps[name]?.value;
    const value = used[name];
    if (cap !== undefined && cap > 0 && value !== undefined && Number.isFinite(value)) {
      out[`agent_checkpoint.${name}.fraction_used`] = Math.round(value / cap * 1e4) / 1e4;
    }
  }
  return out;
}

/** A run's use per axis. */
function usedOf(figures: RunFigures): { [A in Axis]?: number | undefined } {
  const report = { ...figures, usage: figures };
  const used: { [A in Axis]?: number | undefined } = {};
  for (const axis of AXES) used[axis.name] = axis.used(report);
  return used;
}

/** A span context the ledger kept, as the API takes it. */
const remote = (api: Api, ref: TraceRef): OtelApi.SpanContext => ({
  traceId: ref.traceId,
  spanId: ref.spanId,
  traceFlags: api.TraceFlags.SAMPLED,
  isRemote: true,
});

/** One run's span, its tool calls' spans, and its events. */
class OtelRun implements RunTrace {
  readonly runId: string;
  readonly span: Span;
  readonly ref: TraceRef;
  readonly #owner: OtelTracing;
  readonly #api: Api;
  readonly #tracer: OtelApi.Tracer;
  readonly #start: TraceStart;
  readonly #context: OtelApi.Context;
  /** Tool spans in flight: by call id, else by `\0` + tool name, oldest first. */
  readonly #tools = new Map<string, Span[]>();
  #openTools = 0;
  #ended = false;

  constructor(owner: OtelTracing, api: Api, tracer: OtelApi.Tracer, run: TraceStart) {
    this.#owner = owner;
    this.#api = api;
    this.#tracer = tracer;
    this.#start = run;
    this.runId = run.runId;
    const agent = run.agentName;
    const name = agent === undefined ? "invoke_agent" : `invoke_agent ${agent}`;
    const attributes: Attributes = {
      "gen_ai.operation.name": "invoke_agent",
      "gen_ai.conversation.id": run.runId,
      "agent_checkpoint.attempt": run.attempt,
      "agent_checkpoint.dialect": run.dialect,
      ...capAttributes(run.caps),
    };
    if (agent !== undefined) attributes["gen_ai.agent.name"] = agent;
    if (run.model !== undefined) attributes["gen_ai.request.model"] = run.model;
    // Ids read back from the ledger that are not a span's (an edited record) start a new trace.
    const earlier = run.earlier && api.isSpanContextValid(remote(api, run.earlier.trace))
      ? run.earlier
      : undefined;
    let parent = api.context.active();
    const links: OtelApi.Link[] = [];
    if (earlier) {
      // One trace across attempts: the earlier attempt's span (or the stand-in for a dead one)
      // is the parent, and a link says which attempt it was.
      const before = remote(api, earlier.trace);
      const standIn = earlier.state === "cut-off" ? this.#cutOff(name, earlier, before) : undefined;
      parent = api.trace.setSpanContext(api.ROOT_CONTEXT, standIn ?? before);
      links.push({
        context: before,
        attributes: {
          "agent_checkpoint.link": "earlier attempt",
          "agent_checkpoint.attempt": earlier.attempt,
        },
      });
    }
    this.span = tracer.startSpan(name, {
      kind: api.SpanKind.INTERNAL,
      attributes,
      links,
      startTime: run.startedAt,
    }, parent);
    const ctx = this.span.spanContext();
    this.ref = { traceId: ctx.traceId, spanId: ctx.spanId };
    this.#context = api.trace.setSpan(parent, this.span);
    if (earlier) {
      this.span.addEvent("agent_checkpoint.resume", {
        "agent_checkpoint.previous.attempt": earlier.attempt,
        "agent_checkpoint.previous.state": earlier.state,
        "agent_checkpoint.previous.turns_used": earlier.turnsUsed,
        "agent_checkpoint.previous.tier": earlier.tier,
        "agent_checkpoint.record.file": run.checkpointFile,
      }, run.startedAt);
    }
  }

  /**
   * The stand-in for an attempt cut off by a kill, whose own span died with its
   * process: from its start to its last sign of life, status error, with where it stopped.
   */
  #cutOff(name: string, earlier: EarlierTrace, before: OtelApi.SpanContext): OtelApi.SpanContext {
    const api = this.#api;
    const attributes: Attributes = {
      "gen_ai.operation.name": "invoke_agent",
      "gen_ai.conversation.id": this.#start.runId,
      "agent_checkpoint.attempt": earlier.attempt,
      "agent_checkpoint.cut_off": true,
      "agent_checkpoint.cut_off.turns_used": earlier.turnsUsed,
      "agent_checkpoint.cut_off.elapsed_seconds": earlier.elapsedSeconds,
      "agent_checkpoint.cut_off.tier": earlier.tier,
      "agent_checkpoint.cut_off.in_flight": earlier.inFlight,
      "agent_checkpoint.cut_off.span_id": earlier.trace.spanId,
      ...capAttributes(this.#start.caps),
    };
    if (this.#start.agentName !== undefined) {
      attributes["gen_ai.agent.name"] = this.#start.agentName;
    }
    const span = this.#tracer.startSpan(`${name} (cut off)`, {
      kind: api.SpanKind.INTERNAL,
      attributes,
      links: [{ context: before, attributes: { "agent_checkpoint.link": "cut-off attempt" } }],
      startTime: earlier.startedAt,
    }, api.trace.setSpanContext(api.ROOT_CONTEXT, before));
    const where = `turn ${earlier.turnsUsed}, ${earlier.elapsedSeconds}s, tier ${earlier.tier}` +
      (earlier.inFlight.length > 0 ? `, in ${earlier.inFlight.join(", ")}` : "");
    span.setStatus({
      code: api.SpanStatusCode.ERROR,
      message: `attempt ${earlier.attempt} was cut off (${where}); attempt ${
        earlier.attempt + 1
      } resumes it`,
    });
    span.end(Math.max(earlier.startedAt, earlier.lastSeen));
    return span.spanContext();
  }

  toolStart(tool: string, callId: string | undefined, at: number): void {
    if (!this.#ended) this.#owner.queue({ op: "start", run: this, tool, callId, at });
  }

  toolEnd(
    tool: string,
    callId: string | undefined,
    ok: boolean | undefined,
    error: unknown,
    at: number,
  ): void {
    if (!this.#ended) this.#owner.queue({ op: "end", run: this, tool, callId, ok, error, at });
  }

  end(status: EndStatus, summary: string | undefined, figures: RunFigures, at: number): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#owner.queue({ op: "run", run: this, status, summary, figures, at });
  }

  startTool(tool: string, callId: string | undefined, at: number): void {
    const attributes: Attributes = {
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.name": tool,
    };
    if (callId !== undefined) attributes["gen_ai.tool.call.id"] = callId;
    const span = this.#tracer.startSpan(`execute_tool ${tool}`, {
      kind: this.#api.SpanKind.INTERNAL,
      attributes,
      startTime: at,
    }, this.#context);
    const key = callId ?? `\0${tool}`;
    const open = this.#tools.get(key);
    if (open) open.push(span);
    else this.#tools.set(key, [span]);
    if (++this.#openTools > MAX_OPEN_TOOLS) this.#dropOldest(at);
  }

  /** End the oldest open tool span: the host never reported its end. */
  #dropOldest(at: number): void {
    const [key, open] = this.#tools.entries().next().value as [string, Span[]];
    const span = open.shift()!;
    if (open.length === 0) this.#tools.delete(key);
    this.#openTools--;
    span.setStatus({
      code: this.#api.SpanStatusCode.ERROR,
      message: `its end was never reported (more than ${MAX_OPEN_TOOLS} calls in flight)`,
    });
    span.end(at);
  }

  endTool(
    tool: string,
    callId: string | undefined,
    ok: boolean | undefined,
    error: unknown,
    at: number,
  ): void {
    const key = callId ?? `\0${tool}`;
    const open = this.#tools.get(key);
    const span = open?.shift();
    if (open?.length === 0) this.#tools.delete(key);
    if (!span) return;
    this.#openTools--;
    if (ok === false) {
      const message = error instanceof Error
        ? error.message
        : error === undefined
        ? ""
        : String(error);
      span.setStatus({ code: this.#api.SpanStatusCode.ERROR, message: message.slice(0, 500) });
      span.setAttribute(
        "error.type",
        error instanceof Error ? error.name || "Error" : "tool_error",
      );
    }
    span.end(at);
  }

  /** A checkpoint file was written: an event with the record's kind, tier and file. */
  record(event: CheckpointEvent): void {
    const attributes: Attributes = {
      "agent_checkpoint.record.kind": event.kind,
      "agent_checkpoint.record.source": event.source,
      "agent_checkpoint.record.file": event.file,
    };
    if (event.tier !== undefined) attributes["agent_checkpoint.record.tier"] = event.tier;
    const at = Date.parse(event.persistedAt);
    this.span.addEvent(
      `agent_checkpoint.${event.kind}`,
      attributes,
      Number.isNaN(at) ? undefined : at,
    );
  }

  finish(status: EndStatus, summary: string | undefined, figures: RunFigures, at: number): void {
    const api = this.#api;
    const span = this.span;
    for (const open of this.#tools.values()) {
      for (const tool of open) {
        tool.setStatus({ code: api.SpanStatusCode.ERROR, message: "the run ended first" });
        tool.end(at);
      }
    }
    this.#tools.clear();
    span.setAttributes({
      "gen_ai.usage.input_tokens": figures.inputTokens,
      "gen_ai.usage.output_tokens": figures.outputTokens,
      "agent_checkpoint.turns_used": figures.turnsUsed,
      "agent_checkpoint.elapsed_seconds": figures.elapsedSeconds,
      "agent_checkpoint.tier": figures.tier,
      "agent_checkpoint.end.status": status,
      ...fractions(this.#start.caps, usedOf(figures)),
    });
    if (figures.usd !== undefined) span.setAttribute("agent_checkpoint.usd", figures.usd);
    const end: Attributes = {
      "agent_checkpoint.record.kind": "end",
      "agent_checkpoint.end.status": status,
      "agent_checkpoint.record.file": this.#start.checkpointFile,
    };
    if (summary !== undefined) end["agent_checkpoint.end.summary"] = summary.slice(0, 500);
    span.addEvent("agent_checkpoint.end", end, at);
    if (!FINE.includes(status)) {
      span.setStatus({
        code: api.SpanStatusCode.ERROR,
        message: summary === undefined ? status : `${status}: ${summary.slice(0, 500)}`,
      });
    }
    span.end(at);
  }

  /** The keeper closed before the run ended. */
  close(at: number): void {
    if (this.#ended) return;
    this.#ended = true;
    for (const open of this.#tools.values()) for (const tool of open) tool.end(at);
    this.#tools.clear();
    this.span.setAttribute("agent_checkpoint.end.status", "closed");
    this.span.end(at);
  }
}
