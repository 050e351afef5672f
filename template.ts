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
  /** Tokens used so far (input + output). */
  tokensUsed?: number;
  /** The token cap; absent means no token axis. */
  tokensCap?: number;
  /** Dollars spent so far; `NaN` when the cost is not known, which leaves the dollar axis out. */
  usdUsed?: number;
  /** `usdUsed` is a lower bound (some calls' cost is unknown): shown as `at least $X`. */
  usdAtLeast?: boolean;
  /** The cost cap in US dollars; absent means no dollar axis. */
  usdCap?: number;
  /** The path of the checkpoint file. */
  checkpointFile?: string;
  /** A one-line summary of the earlier attempt of a resumed run; absent on a fresh run. */
  previous?: string;
  /** The attempt number of a resumed run (1 = fresh); absent leaves `{attempt}` out. */
  attempt?: number;
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

/**
 * Format US dollars without the sign: two decimals, or four below a cent so
 * that small sums do not read as zero. Negative and non-finite input counts
 * as zero.
 *
 * @param usd An amount in US dollars.
 * @returns The amount, such as `1.25` or `0.0042`.
 *
 * @example
 * ```ts
 * import { formatUsd } from "./template.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatUsd(5), "5.00");
 * assert.equal(formatUsd(0.0042), "0.0042");
 * ```
 */
export function formatUsd(usd: number): string {
  const n = Number.isFinite(usd) && usd > 0 ? usd : 0;
  return n > 0 && n < 0.01 ? n.toFixed(4) : n.toFixed(2);
}

/**
 * The time used and the time left, as the budget clause prints them: the time
 * used floored, the time left the rest rounded up, so the two add up to the
 * cap as printed and `0s` is left only at or past the cap.
 */
function timeFigures(elapsed: number, cap: number): { used: string; left: string } {
  const used = Math.floor(elapsed);
  // With a whole-second cap, cap - floor(elapsed) is the rest rounded up, exactly.
  let left = Number.isInteger(cap) ? cap - used : Math.ceil(cap - elapsed);
  if (elapsed >= cap || left < 0) left = 0;
  // In the hours form (minutes shown) the rest is rounded up to the minute too.
  if (left >= 3600 && left % 60 !== 0) left = Math.ceil(left / 60) * 60;
  return { used: formatDuration(used), left: formatDuration(left) };
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
    const { used: timeUsed, left: timeLeft } = timeFigures(elapsed, timeCap);
    map.set("time_used", timeUsed);
    map.set("time_cap", formatDuration(timeCap));
    map.set("time_left", timeLeft);
    parts.push(`${timeUsed} of ${formatDuration(timeCap)} (${timeLeft} left)`);
  }
  // Tokens and dollars: the axis nearest its cap is named when more than one axis is present.
  const fractions: Array<[string, number]> = [];
  if (turnsPresent) fractions.push(["turn", used / cap]);
  if (timePresent) fractions.push(["time", elapsed / timeCap]);
  if (finite(values.tokensCap) && values.tokensCap > 0) {
    const tokens = count(values.tokensUsed);
    const tokenCap = Math.floor(values.tokensCap);
    map.set("tokens_used", String(tokens));
    map.set("tokens_cap", String(tokenCap));
    parts.push(`${tokens} of ${tokenCap} tokens (${Math.max(0, tokenCap - tokens)} left)`);
    fractions.push(["token", tokens / values.tokensCap]);
  }
  const usdKnown = values.usdUsed === undefined || Number.isFinite(values.usdUsed);
  if (finite(values.usdCap) && values.usdCap > 0 && usdKnown) {
    const spent = finite(values.usdUsed) && values.usdUsed > 0 ? values.usdUsed : 0;
    map.set("usd_used", formatUsd(spent));
    map.set("usd_cap", formatUsd(values.usdCap));
    parts.push(
      `${values.usdAtLeast ? "at least " : ""}$${formatUsd(spent)} of $${
        formatUsd(values.usdCap)
      } (${values.usdAtLeast ? "at most " : ""}$${
        formatUsd(Math.max(0, values.usdCap - spent))
      } left)`,
    );
    fractions.push(["dollar", spent / values.usdCap]);
  }
  if (parts.length > 0) map.set("budget", `you have used ${parts.join(" and ")}`);
  if (fractions.length > 1) {
    let nearest = fractions[0]!;
    for (const f of fractions) if (f[1] > nearest[1]) nearest = f;
    map.set("nearest", nearest[0]);
  }
  map.set("checkpoint_file", values.checkpointFile || "your checkpoint file");
  const previous = typeof values.previous === "string"
    ? values.previous.replace(/\s*\n\s*/g, " ").trim()
    : "";
  if (previous !== "") map.set("previous", previous);
  if (finite(values.attempt) && values.attempt >= 1) {
    map.set("attempt", String(Math.floor(values.attempt)));
  }
  return map;
}

/**
 * Placeholders that can be absent (an axis's, and a resumed run's), and so
 * take their clause with them when they are.
 */
const AXIS_PLACEHOLDERS = new Set([
  "turns_used",
  "turns_cap",
  "turns_left",
  "time_used",
  "time_cap",
  "time_left",
  "budget",
  "tokens_used",
  "tokens_cap",
  "usd_used",
  "usd_cap",
  "nearest",
  "previous",
  "attempt",
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
 * Render a tier or resume template. Placeholders of an absent axis (and
 * `{previous}` and `{attempt}` on a run that is not resumed) take their
 * clause (and its separator) with them; unknown placeholders stay as written;
 * `{{` and `}}` give literal braces. Never outputs `undefined` or `NaN`. The
 * time used is floored and the time left rounded up, so the two add up to the
 * cap and `0s left` is shown only once the cap is reached.
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
 *
 * @example The time left is rounded up; a fresh run has no `{previous}`
 * ```ts
 * import { renderTemplate } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   renderTemplate("{budget}", { elapsedSeconds: 16.4, timeCapSeconds: 20 }),
 *   "you have used 16s of 20s (4s left)",
 * );
 * const resume = "This is attempt {attempt}; the last one {previous}. Read {checkpoint_file}.";
 * assert.equal(
 *   renderTemplate(resume, { attempt: 2, previous: "was cut off at tier 1", checkpointFile: "a.md" }),
 *   "This is attempt 2; the last one was cut off at tier 1. Read a.md.",
 * );
 * assert.equal(renderTemplate(resume, { checkpointFile: "a.md" }), "Read a.md.");
 * ```
 *
 * @example Tokens and dollars; `{nearest}` names the axis nearest its cap
 * ```ts
 * import { renderTemplate } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const values = { turnsUsed: 4, turnsCap: 40, usdUsed: 4.5, usdCap: 5 };
 * assert.equal(
 *   renderTemplate("{budget}; your {nearest} budget is nearest its cap.", values),
 *   "you have used 4 of 40 turns (36 left) and $4.50 of $5.00 ($0.50 left); " +
 *     "your dollar budget is nearest its cap.",
 * );
 * assert.equal(
 *   renderTemplate("{tokens_used} of {tokens_cap} tokens.", { tokensUsed: 1200, tokensCap: 5000 }),
 *   "1200 of 5000 tokens.",
 * );
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

/**
 * A template without its sentences that use `{name}`: a resumed run whose
 * earlier attempt left no checkpoint file is not told to read one.
 *
 * @param template A tier or resume template.
 * @param name A placeholder's name, without braces.
 * @returns The template with every sentence naming `{name}` left out.
 *
 * @example
 * ```ts
 * import { withoutSentencesNaming } from "./template.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   withoutSentencesNaming("It stopped. Read {checkpoint_file} first. Go on.", "checkpoint_file"),
 *   "It stopped. Go on.",
 * );
 * ```
 */
export function withoutSentencesNaming(template: string, name: string): string {
  const placeholder = `{${name}}`;
  // Sentences alternate with the spaces after their ends.
  const pieces = String(template).split(/(?<=[.!?])(\s+)/);
  let out = "";
  for (let i = 0; i < pieces.length; i += 2) {
    if (pieces[i]!.includes(placeholder)) continue;
    out += (out === "" ? "" : pieces[i - 1] ?? " ") + pieces[i];
  }
  return out.trim();
}

/**
 * Seconds in a DURATION such as `90s`, `30m`, `12h`, `7d`, `2w`; a bare
 * number is seconds only with `bareSeconds`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseDuration } from "./template.ts";
 *
 * assert.equal(parseDuration("30m"), 1800);
 * assert.equal(parseDuration("90"), undefined);
 * assert.equal(parseDuration("90", { bareSeconds: true }), 90);
 * ```
 */
export function parseDuration(
  text: string,
  options: { bareSeconds?: boolean } = {},
): number | undefined {
  const t = text.trim();
  if (options.bareSeconds && /^\d+(?:\.\d+)?$/.test(t)) return Number(t);
  const m = /^(\d+(?:\.\d+)?)([smhdw])$/.exec(t);
  if (!m) return undefined;
  const unit = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 }[m[2] as "s"];
  return Number(m[1]) * unit;
}
