/**
 * `show RUN --steps`: each attempt of a run, from its records and its run
 * journal: its model and tool calls in order, each live (with its duration)
 * or replayed from an earlier attempt, the tiers it crossed, and where it
 * stopped. A tool's result is one short line, its control characters shown
 * escaped.
 *
 * @module
 */
import { formatDuration } from "../template.ts";
import type { EndStatus } from "../_record.ts";
import type { JournalEntry, RunState, RunStore, RunView } from "../store/mod.ts";
import { size, table, terminalSafe } from "./_format.ts";
import { type CliIo, NAME, writeJson } from "./_io.ts";
import { orderCalls, placesOf } from "../run/_journal_order.ts";

/** One step of an attempt: a journaled call, or a tier it crossed. */
export type Step =
  | {
    kind: "model";
    /** Its place among the attempt's model calls, from 0 (as the journal's log line counts). */
    index: number;
    /** Replayed: the attempt whose entry answered it. */
    replayedFrom?: number;
    /** Live: how long the call took, ms. */
    ms?: number;
    inputTokens?: number;
    outputTokens?: number;
    /** When it was journaled, ms since the epoch. */
    at: number;
  }
  | {
    kind: "tool";
    index: number;
    tool: string;
    replayedFrom?: number;
    ms?: number;
    /** The result's text (a string result's own text, else its JSON), its first 200 characters. */
    result: string;
    /** True when `result` is only the result's beginning. */
    resultCut?: true;
    /** The result's size as JSON, bytes. */
    resultBytes: number;
    at: number;
  }
  | {
    kind: "tier";
    tier: 1 | 2;
    /** When it was crossed, ms since the epoch. */
    at: number;
  };

/** Calls of an attempt, live and replayed. */
export interface StepTotals {
  models: { live: number; replayed: number };
  tools: { live: number; replayed: number };
}

/** One attempt of a run, as `show --steps` gives it. */
export interface AttemptSteps {
  attempt: number;
  /** `live`, `ended` or `cut-off`. */
  state: RunState;
  /** How it ended, when it did. */
  status?: EndStatus;
  /** The host's words about its end. */
  summary?: string;
  machine: string;
  pid: number;
  startedAt: number;
  endedAt?: number;
  /** The tier it reached, 0 for none. */
  tier: number;
  /** Its tiers whose crossing time its record does not hold (shown at the attempt's head). */
  tiersUntimed: number[];
  /** Whether its checkpoint file holds its record (`written`), or a write is being tried again. */
  checkpointFile?: "written" | "pending";
  steps: Step[];
  totals: StepTotals;
  /** Where it stopped, in words. */
  stopped: string;
  /** A fork's attempt (never run): its calls were copied from this run's attempt, up to this step. */
  forkedFrom?: { runId: string; attempt: number; step: number };
}

/** The most characters of a tool's result kept in `--json`. */
const RESULT_CHARS = 200;
/** The most characters of a tool's result printed, once escaped. */
const SHOWN_CHARS = 60;

/** A whole number ≥ 0 of a usage report, else undefined. */
const tokens = (n: unknown) =>
  typeof n === "number" && Number.isFinite(n) && n >= 0 ? Math.floor(n) : undefined;

/** A tool result's text: a string result's own, else its JSON; its first `max` characters. */
function resultText(body: string, max: number): { result: string; resultCut?: true } {
  let text = body;
  if (body.startsWith('"')) {
    try {
      const value = JSON.parse(body);
      if (typeof value === "string") text = value;
    } catch {
      // Not JSON after all (a store holds only JSON): shown as it is, escaped when printed.
    }
  }
  let out = "";
  let n = 0;
  for (const c of text) {
    if (n++ === max) return { result: out, resultCut: true };
    out += c;
  }
  return { result: out };
}

/** A journal entry as a step of its attempt. */
function stepOf(e: JournalEntry): Step {
  const how = {
    ...(e.replayed !== undefined ? { replayedFrom: e.replayed } : {}),
    ...(e.replayed === undefined && e.ms !== undefined ? { ms: e.ms } : {}),
  };
  if (e.kind === "tool") {
    return {
      kind: "tool",
      index: e.index,
      tool: e.tool ?? "",
      ...how,
      ...resultText(e.body, RESULT_CHARS),
      resultBytes: new TextEncoder().encode(e.body).length,
      at: e.at,
    };
  }
  let usage: Record<string, unknown> = {};
  try {
    const parsed = e.usage === undefined ? undefined : JSON.parse(e.usage);
    if (parsed && typeof parsed === "object") usage = parsed;
  } catch {
    // A use that is not JSON: no tokens to show.
  }
  const input = tokens(usage.inputTokens);
  const output = tokens(usage.outputTokens);
  return {
    kind: "model",
    index: e.index,
    ...how,
    ...(input !== undefined ? { inputTokens: input } : {}),
    ...(output !== undefined ? { outputTokens: output } : {}),
    at: e.at,
  };
}

type Call = Extract<Step, { kind: "model" | "tool" }>;

/** A call as the stop line names it. */
const callName = (c: Call) =>
  c.kind === "model" ? `model call ${c.index}` : `tool call ${c.index} (${c.tool})`;

/** Where an attempt stopped, in words. */
function stoppedText(view: RunView, calls: Call[]): string {
  const r = view.record;
  if (r.fork) {
    return `forked: a start replays these calls, then goes live at step ${r.fork.step + 1}`;
  }
  const last = calls.at(-1);
  const after = last ? `after ${callName(last)}` : "before its first journaled call";
  if (view.state === "ended") return `ended ${r.status} ${after}`;
  const flight = r.inFlight.map((c) => c.tool);
  const inFlight = flight.length === 0 ? "" : `, with ${flight.join(", ")} in flight`;
  if (view.state === "live") return `live: last journaled ${last ? callName(last) : "none yet"}`;
  // Its record counts the model calls begun (live ones): more than were journaled, one was in
  // flight (or failed) when the process went.
  const journaled = calls.filter((c) => c.kind === "model" && c.replayedFrom === undefined).length;
  const models = calls.filter((c) => c.kind === "model");
  const next = (models.at(-1)?.index ?? -1) + 1;
  const begun = r.turnsUsed > journaled ? `, model call ${next} begun and never journaled` : "";
  return `cut off ${after}${inFlight}${begun}`;
}

/**
 * Each attempt of a run with its steps: the attempts' records (any order)
 * and the run's journal entries (every attempt's).
 *
 * @param views The run's attempts, as the store keeps them.
 * @param entries The run's journal.
 * @returns The attempts, oldest first.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { attemptSteps } from "./_steps.ts";
 *
 * const record = (attempt: number) => ({
 *   runId: "r", attempt, dialect: "chat", caps: {}, turnsUsed: 1, elapsedSeconds: 1, tier: 0,
 *   inFlight: [], recent: [], notes: [], host: { machine: "m", pid: 7, start: "" },
 *   status: attempt === 2 ? "done" : "live", startedAt: 1000, updatedAt: 2000,
 *   ...(attempt === 2 ? { end: { status: "done", at: 3000 } } : {}),
 * });
 * const views = [1, 2].map((a) => ({
 *   record: record(a), state: a === 2 ? "ended" : "cut-off",
 * })) as never;
 * const entry = (attempt: number, kind: "model" | "tool", more: object) => ({
 *   runId: "r", attempt, kind, index: 0, key: "k", body: '"ok"', at: 1500, ...more,
 * });
 * const [first, second] = attemptSteps(views, [
 *   entry(1, "model", { ms: 40 }), entry(1, "tool", { tool: "ls", ms: 2 }),
 *   entry(2, "model", { replayed: 1 }), entry(2, "tool", { tool: "ls", replayed: 1 }),
 * ]);
 * assert.equal(first!.stopped, "cut off after tool call 0 (ls)");
 * assert.deepEqual(second!.totals, {
 *   models: { live: 0, replayed: 1 },
 *   tools: { live: 0, replayed: 1 },
 * });
 * ```
 */
export function attemptSteps(views: readonly RunView[], entries: readonly JournalEntry[]) {
  const out: AttemptSteps[] = [];
  // Each attempt's calls by their place in its order, for the attempts that replay them.
  const positions = new Map<number, Map<string, number>>();
  const sorted = [...views].sort((a, b) => a.record.attempt - b.record.attempt);
  for (const view of sorted) {
    const r = view.record;
    const calls = orderCalls(
      entries.filter((e) => e.attempt === r.attempt).map(stepOf) as Call[],
      positions,
    );
    positions.set(r.attempt, placesOf(calls));
    const steps: Step[] = [...calls];
    const tiersUntimed: number[] = [];
    for (const tier of [1, 2] as const) {
      if (r.tier < tier) continue;
      const at = r.tierAt?.[tier];
      if (typeof at !== "number") {
        // A tier skipped (tier 2 claimed first) has no time when the record has times at all.
        if (!r.tierAt) tiersUntimed.push(tier);
        continue;
      }
      // Before the first call journaled after it: the call it was crossed at.
      const i = steps.findIndex((s) => s.at > at);
      steps.splice(i === -1 ? steps.length : i, 0, { kind: "tier", tier, at });
    }
    const count = (kind: "model" | "tool", replayed: boolean) =>
      calls.filter((c) => c.kind === kind && (c.replayedFrom !== undefined) === replayed).length;
    out.push({
      attempt: r.attempt,
      state: view.state,
      ...(view.state === "ended" && r.end ? { status: r.end.status } : {}),
      ...(r.end?.summary ? { summary: r.end.summary } : {}),
      machine: r.host.machine,
      pid: r.host.pid,
      startedAt: r.startedAt,
      ...(r.end ? { endedAt: r.end.at } : {}),
      tier: r.tier,
      tiersUntimed,
      ...(r.fileState ? { checkpointFile: r.fileState } : {}),
      steps,
      totals: {
        models: { live: count("model", false), replayed: count("model", true) },
        tools: { live: count("tool", false), replayed: count("tool", true) },
      },
      stopped: stoppedText(view, calls),
      ...(r.fork
        ? { forkedFrom: { runId: r.fork.from, attempt: r.fork.attempt, step: r.fork.step } }
        : {}),
    });
  }
  return out;
}

/** A live call's duration: `840 ms`, `2.4 s`, `3m05s`. */
function durationText(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return formatDuration(ms / 1000);
}

/**
 * A tool's result on one line: its control characters escaped, at most
 * 60 characters of it, and its size when it was cut (or `cut`: it is only
 * the result's beginning).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { resultLine } from "./_steps.ts";
 *
 * assert.equal(resultLine("\x1b[2Jok", 5), "\\x1b[2Jok");
 * const long = resultLine("\x1b[31m" + "x".repeat(10_000), 10_020);
 * assert.ok(!long.includes("\x1b") && long.length < 100);
 * assert.match(long, /^\\x1b\[31mxxx.*… \(9\.8 KiB\)$/);
 * ```
 */
export function resultLine(result: string, bytes: number, cut = false): string {
  let out = "";
  for (const c of result) {
    const shown = terminalSafe(c);
    if (out.length + shown.length > SHOWN_CHARS) return `${out}… (${size(bytes)})`;
    out += shown;
  }
  return cut ? `${out}… (${size(bytes)})` : out;
}

/** How a call was answered, for the text (a fork's calls: copied from the run it forked). */
const howText = (s: Call, a: AttemptSteps) =>
  a.forkedFrom
    ? `copied from ${a.forkedFrom.runId}`
    : s.replayedFrom !== undefined
    ? `replayed from attempt ${s.replayedFrom}`
    : "live";

/** An attempt's head line: its number, how it ended, where and when it ran. */
function headText(a: AttemptSteps): string {
  const f = a.forkedFrom;
  if (f) {
    return terminalSafe(
      `attempt ${a.attempt}: forked from ${f.runId} at step ${f.step} (its attempt ${f.attempt}'s first ${f.step} steps, copied), ${
        new Date(a.startedAt).toISOString()
      }`,
    );
  }
  const how = a.state === "ended"
    ? `ended ${a.status ?? "?"}${a.summary ? `: ${a.summary.replace(/\s+/g, " ")}` : ""}`
    : a.state === "live"
    ? "live"
    : "cut off (its process is gone and it never recorded an end)";
  const parts = [
    `attempt ${a.attempt}: ${how}`,
    `${a.machine} (pid ${a.pid}), started ${new Date(a.startedAt).toISOString()}`,
  ];
  if (a.tier > 0) {
    parts.push(
      a.tiersUntimed.length > 0
        ? `reached tier ${a.tier} (its record holds no time for tier ${a.tiersUntimed.join(", ")})`
        : `reached tier ${a.tier}`,
    );
  }
  if (a.checkpointFile === "written") parts.push("checkpoint file written");
  if (a.checkpointFile === "pending") parts.push("checkpoint file write pending (tried again)");
  return terminalSafe(parts.join("; "));
}

/** A step as a row of the attempt's table. */
function stepRow(s: Step, a: AttemptSteps): string[] {
  if (s.kind === "tier") return [`tier ${s.tier}`, "crossed", "", "", ""];
  const took = s.ms !== undefined ? durationText(s.ms) : "";
  if (s.kind === "model") {
    const used = s.inputTokens !== undefined || s.outputTokens !== undefined
      ? `${s.inputTokens ?? "?"} in / ${s.outputTokens ?? "?"} out`
      : "-";
    return [`model call ${s.index}`, howText(s, a), used, took, ""];
  }
  return [
    `tool call ${s.index}`,
    howText(s, a),
    s.tool,
    took,
    resultLine(s.result, s.resultBytes, s.resultCut),
  ];
}

/** The totals of an attempt, in words. */
const totalsText = (t: StepTotals, a: AttemptSteps) =>
  a.forkedFrom
    ? `model calls: ${t.models.live} copied; tool calls: ${t.tools.live} copied`
    : `model calls: ${t.models.live} live, ${t.models.replayed} replayed; tool calls: ${t.tools.live} live, ${t.tools.replayed} replayed`;

/**
 * `show RUN --steps` as text: per attempt, its head, its steps, where it
 * stopped and its totals. Everything from the ledger is printed escaped.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { stepsText } from "./_steps.ts";
 *
 * const text = stepsText("r", [{
 *   attempt: 1, state: "cut-off", machine: "m", pid: 7, startedAt: 0, tier: 0,
 *   tiersUntimed: [], stopped: "cut off after model call 0",
 *   totals: { models: { live: 1, replayed: 0 }, tools: { live: 0, replayed: 0 } },
 *   steps: [{ kind: "model", index: 0, ms: 840, inputTokens: 12, outputTokens: 3, at: 1 }],
 * }]);
 * assert.match(text, /model call 0 +live +12 in \/ 3 out +840 ms/);
 * ```
 */
export function stepsText(runId: string, attempts: readonly AttemptSteps[]): string {
  const lines = [
    `Run ${terminalSafe(runId)}: ${attempts.length} attempt${
      attempts.length === 1 ? "" : "s"
    }, each one's calls from the run journal`,
  ];
  for (const a of attempts) {
    lines.push("", headText(a));
    if (a.steps.length === 0) {
      lines.push(
        "  (no journaled call: the journal was off, or no call went through run.journal)",
      );
    } else {
      lines.push(
        ...table(a.steps.map((s) => stepRow(s, a))).split("\n").map((l) => `  ${l.trimEnd()}`),
      );
    }
    lines.push(`  ${terminalSafe(a.stopped)}`, `  ${totalsText(a.totals, a)}`);
  }
  return lines.join("\n") + "\n";
}

/** An attempt as `show --steps --json` gives it: its times as ISO 8601. */
function attemptJson(a: AttemptSteps): Record<string, unknown> {
  const iso = (ms: number) => new Date(ms).toISOString();
  return {
    ...a,
    startedAt: iso(a.startedAt),
    ...(a.endedAt !== undefined ? { endedAt: iso(a.endedAt) } : {}),
    steps: a.steps.map((s) => ({ ...s, at: iso(s.at) })),
  };
}

/**
 * `show RUN --steps` over a store: every attempt of the run (those of
 * `machine` only, when given) and its journal, printed as text or JSON.
 * Resolves to the exit code: 1 when the store has no such run.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { showSteps } from "./_steps.ts";
 * import { memoryIo } from "./_io.ts";
 * import { memoryBackend } from "../store/memory.ts";
 *
 * const store = memoryBackend.open({ url: "memory://steps", hostTimeoutSeconds: 30, fileMaxKb: 4 });
 * const m = memoryIo();
 * assert.equal(await showSteps(store, "nope", undefined, false, m.io), 1);
 * assert.match(m.stderr(), /no such run "nope"/);
 * await store.close();
 * ```
 */
export async function showSteps(
  ledger: RunStore,
  runId: string,
  machine: string | undefined,
  json: boolean,
  io: CliIo,
): Promise<number> {
  const views = await ledger.list({
    runId,
    limit: Number.MAX_SAFE_INTEGER,
    ...(machine !== undefined ? { machine } : {}),
  });
  if (views.length === 0) {
    io.stderr(
      `${NAME}: no such run "${terminalSafe(runId)}" in the run ledger${
        machine !== undefined ? ` on ${terminalSafe(machine)}` : ""
      } (see ${NAME} ls)\n`,
    );
    return 1;
  }
  const entries = await ledger.journal?.read(runId) ?? [];
  const attempts = attemptSteps(views, entries);
  if (json) writeJson(io, { runId, attempts: attempts.map(attemptJson) });
  else io.stdout(stepsText(runId, attempts));
  return 0;
}
