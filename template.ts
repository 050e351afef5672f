/**
 * Rendering of tier templates (S7). Pure.
 *
 * @module
 */

/** The figures a template can show; an axis is present when its cap is given. */
export interface TemplateValues {
  /** Model calls made so far. */
  turnsUsed?: number;
  /** The turn cap; absent means no turn axis. */
  turnsCap?: number;
  /** Seconds since the run started. */
  elapsedSeconds?: number;
  /** The time cap in seconds; absent means no time axis. */
  timeCapSeconds?: number;
  /** The path of the checkpoint file. */
  checkpointFile?: string;
}

/**
 * Format seconds as `45s`, `29m59s` or `1h00m`, floored to whole seconds.
 * Negative and non-finite input counts as zero.
 *
 * @param seconds A duration in seconds.
 * @returns The duration, in the shortest form that keeps its unit.
 *
 * @example
 * ```ts
 * import { formatDuration } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatDuration(59.9), "59s");
 * assert.equal(formatDuration(1799), "29m59s");
 * assert.equal(formatDuration(3600), "1h00m");
 * ```
 */
export function formatDuration(seconds: number): string {
  const s = Number.isFinite(seconds) && seconds > 0 ? Math.floor(seconds) : 0;
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

const finite = (n: number | undefined): n is number => n !== undefined && Number.isFinite(n);
const count = (n: number | undefined) => (finite(n) && n > 0 ? Math.floor(n) : 0);

/** The placeholder values of a run, with the axes that are present. */
function placeholders(values: TemplateValues) {
  const turnsPresent = finite(values.turnsCap) && values.turnsCap > 0;
  const timePresent = finite(values.timeCapSeconds) && values.timeCapSeconds > 0;
  const used = count(values.turnsUsed);
  const cap = count(values.turnsCap);
  const elapsed = finite(values.elapsedSeconds) && values.elapsedSeconds > 0
    ? values.elapsedSeconds
    : 0;
  const timeCap = timePresent ? values.timeCapSeconds as number : 0;
  const map = new Map<string, string>();
  const parts: string[] = [];
  if (turnsPresent) {
    map.set("turns_used", String(used));
    map.set("turns_cap", String(cap));
    map.set("turns_left", String(Math.max(0, cap - used)));
    parts.push(`${used} of ${cap} turns (${Math.max(0, cap - used)} left)`);
  }
  if (timePresent) {
    map.set("time_used", formatDuration(elapsed));
    map.set("time_cap", formatDuration(timeCap));
    map.set("time_left", formatDuration(Math.max(0, timeCap - elapsed)));
    parts.push(
      `${formatDuration(elapsed)} of ${formatDuration(timeCap)} (${
        formatDuration(Math.max(0, timeCap - elapsed))
      } left)`,
    );
  }
  if (parts.length > 0) map.set("budget", `you have used ${parts.join(" and ")}`);
  map.set("checkpoint_file", values.checkpointFile || "your checkpoint file");
  return map;
}

/** Placeholders that belong to an axis, and so vanish with it. */
const AXIS_PLACEHOLDERS = new Set([
  "turns_used",
  "turns_cap",
  "turns_left",
  "time_used",
  "time_cap",
  "time_left",
  "budget",
]);

// Literal braces are parked on private-use characters while clauses are cut.
const OPEN = "\uE000";
const CLOSE = "\uE001";
const TOKEN = /\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
const PLACEHOLDER = /\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
/** Clause separators; a sentence end is kept when a clause before it goes. */
const SEPARATOR = /(\s*[,;]\s*(?:and\s+)?|\s+and\s+|\s+—\s+|[.!?](?=\s|$)\s*|\n+)/;
const isSentenceEnd = (sep: string) => /^[.!?\n]/.test(sep);

/**
 * Render a tier template (S7). Placeholders of an absent axis take their
 * clause (and its separator) with them; unknown placeholders stay as written;
 * `{{` and `}}` give literal braces. Never outputs `undefined` or `NaN`.
 *
 * @param template Text with `{turns_used}`, `{time_left}`, `{budget}` … in it.
 * @param values The run's figures; an axis is present when its cap is given.
 * @returns The text for the model.
 *
 * @example A clause naming the absent time axis is removed
 * ```ts
 * import { renderTemplate } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const text = renderTemplate(
 *   "Used {turns_used} of {turns_cap} turns, {time_left} left. Save to {checkpoint_file}.",
 *   { turnsUsed: 5, turnsCap: 10, checkpointFile: "/tmp/run.md" },
 * );
 * assert.equal(text, "Used 5 of 10 turns. Save to /tmp/run.md.");
 * ```
 */
export function renderTemplate(template: string, values: TemplateValues): string {
  const map = placeholders(values);
  const parked = String(template).replaceAll(OPEN, "").replaceAll(CLOSE, "").replace(
    TOKEN,
    (token) => token === "{{" ? OPEN : token === "}}" ? CLOSE : token,
  );
  const absent = (clause: string) => {
    for (const m of clause.matchAll(PLACEHOLDER)) {
      const name = m[1] as string;
      if (AXIS_PLACEHOLDERS.has(name) && !map.has(name)) return true;
    }
    return false;
  };
  // pieces alternate clause, separator, clause, … and end with a clause.
  const pieces = parked.split(SEPARATOR);
  let out = "";
  let sentence: Array<[string, string]> = [];
  const flush = () => {
    // A removed clause goes with the separator before it (the first clause of
    // a sentence, with the one after it); the sentence keeps its end.
    let first = true;
    sentence.forEach(([clause], k) => {
      if (absent(clause)) return;
      out += (first ? "" : sentence[k - 1]![1]) + clause;
      first = false;
    });
    if (!first) out += sentence.at(-1)![1];
    sentence = [];
  };
  for (let i = 0; i < pieces.length; i += 2) {
    const sep = pieces[i + 1] ?? "";
    sentence.push([pieces[i] as string, sep]);
    if (sep === "" || isSentenceEnd(sep)) flush();
  }
  flush();
  if (!/\s$/.test(parked)) out = out.trimEnd();
  const text = out.replace(
    PLACEHOLDER,
    (whole, name: string) => map.get(name) ?? whole,
  );
  return text.replaceAll(OPEN, "{").replaceAll(CLOSE, "}");
}
