/**
 * What the core tells a tracer (runs as OpenTelemetry traces): the small
 * interface the `otel/` subsystem implements and `mod.ts` plugs in, so that
 * the core never imports it. A run with no tracer listening has no
 * {@linkcode RunTrace}: its hooks read one undefined field.
 *
 * @module
 */
import type { EndStatus, RunCaps } from "./_record.ts";
import type { CheckpointEvent } from "./_writer.ts";

/** A span's ids as the run ledger keeps them, so a later attempt can link to it. */
export interface TraceRef {
  /** 32 lowercase hex digits. */
  traceId: string;
  /** 16 lowercase hex digits. */
  spanId: string;
}

/** Where an earlier attempt of a run had got to, and its span's ids, from the run ledger. */
export interface EarlierTrace {
  /** The earlier attempt's span. */
  trace: TraceRef;
  /** Its attempt number. */
  attempt: number;
  /** `live` (another process still runs it), `cut-off`, or how it ended. */
  state: "live" | "cut-off" | EndStatus;
  /** When it started, ms since the epoch. */
  startedAt: number;
  /** Its last sign of life (its record or its process's heartbeat), ms since the epoch. */
  lastSeen: number;
  /** Model calls it had made. */
  turnsUsed: number;
  /** Seconds it had run. */
  elapsedSeconds: number;
  /** The budget tier it had reached. */
  tier: number;
  /** The tools of the calls in flight when it stopped. */
  inFlight: string[];
}

/** A run as its span starts. */
export interface TraceStart {
  runId: string;
  attempt: number;
  dialect: string;
  caps: RunCaps;
  /** When the run started, ms since the epoch. */
  startedAt: number;
  /** The run's checkpoint file. */
  checkpointFile: string;
  /** The agent's name (`gen_ai.agent.name`), when the host gave one. */
  agentName?: string;
  /** The model the run calls, when known. */
  model?: string;
  /** The earlier attempt, when this one resumes a run the ledger recorded with a span. */
  earlier?: EarlierTrace;
}

/** A run's figures as it ends. */
export interface RunFigures {
  turnsUsed: number;
  elapsedSeconds: number;
  tier: number;
  inputTokens: number;
  outputTokens: number;
  /** Dollars, when known. */
  usd?: number;
}

/** One run's span. Never throws. */
export interface RunTrace {
  /** The span's ids, for the run ledger. */
  readonly ref: TraceRef;
  /** A tool call started (`at`: ms since the epoch). */
  toolStart(tool: string, callId: string | undefined, at: number): void;
  /** A tool call ended. */
  toolEnd(
    tool: string,
    callId: string | undefined,
    ok: boolean | undefined,
    error: unknown,
    at: number,
  ): void;
  /** The run ended. */
  end(status: EndStatus, summary: string | undefined, figures: RunFigures, at: number): void;
}

/** The tracer the keeper works with. Never throws. */
export interface Tracing {
  /** A run starts: its span, or undefined when no tracer provider listens (or `otel` is off). */
  start(run: TraceStart): RunTrace | undefined;
  /** A checkpoint file was written (the watchdog's writes included): an event on its run's span. */
  written(event: CheckpointEvent): void;
  /** The keeper closes: the spans of runs never ended are ended. */
  close(): void;
  /** @internal Settles once the OpenTelemetry API is loaded, or known to be absent (tests). */
  readonly ready: Promise<void>;
}
