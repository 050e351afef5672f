/**
 * `deno task test`: every part of the project's test command, each run even
 * when an earlier one failed, and each part's outcome printed at the end.
 * Exits 1 when any part failed.
 *
 *   deno task test
 *
 * A part that needs an earlier one (the Node suite needs the npm build) is
 * reported as not run when that part failed, with the reason.
 */
import process from "node:process";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

/** One part of the test command. */
export interface Part {
  /** Its name in the summary. */
  name: string;
  /** The command and its arguments. */
  cmd: string[];
  /** The part that must have passed for this one to run. */
  needs?: string;
}

/** What became of a part. */
export interface Outcome {
  name: string;
  /** `passed`, `failed (exit N)` or `not run: …`. */
  result: string;
  ok: boolean;
  seconds: number;
}

const deno = process.execPath;

/** The parts, in order: what the `&&` chain of this task ran before. */
export const PARTS: Part[] = [
  { name: "deno test", cmd: [deno, "test", "-A", "--doc", "--parallel"] },
  { name: "check", cmd: [deno, "task", "check"] },
  { name: "build:npm", cmd: [deno, "task", "build:npm"] },
  { name: "test:node", cmd: [deno, "task", "test:node"], needs: "build:npm" },
];

/**
 * Run every part (output goes straight through), in order; a part whose
 * `needs` failed is not run. Returns each part's outcome.
 */
export function runParts(parts: Part[], cwd: string): Outcome[] {
  const outcomes: Outcome[] = [];
  for (const part of parts) {
    const needed = part.needs && outcomes.find((o) => o.name === part.needs);
    if (needed && !needed.ok) {
      outcomes.push({
        name: part.name,
        result: `not run: ${part.needs} failed`,
        ok: false,
        seconds: 0,
      });
      continue;
    }
    console.log(`test: ${part.name}: ${part.cmd.slice(1).join(" ")}`);
    const t = performance.now();
    const done = spawnSync(part.cmd[0]!, part.cmd.slice(1), { cwd, stdio: "inherit" });
    const seconds = (performance.now() - t) / 1000;
    const ok = done.status === 0;
    const result = ok
      ? "passed"
      : done.error
      ? `failed (${done.error.message})`
      : `failed (exit ${done.status ?? done.signal})`;
    outcomes.push({ name: part.name, result, ok, seconds });
  }
  return outcomes;
}

/** The summary printed at the end: one line per part. */
export function summary(outcomes: Outcome[]): string {
  const width = Math.max(...outcomes.map((o) => o.name.length));
  return [
    "test: summary",
    ...outcomes.map((o) =>
      `  ${o.name.padEnd(width)}  ${o.result}${o.seconds > 0 ? ` (${o.seconds.toFixed(0)} s)` : ""}`
    ),
    outcomes.every((o) => o.ok)
      ? "test: every part passed"
      : `test: ${outcomes.filter((o) => !o.ok).length} of ${outcomes.length} parts did not pass`,
  ].join("\n");
}

if (import.meta.main) {
  const outcomes = runParts(PARTS, fileURLToPath(new URL("..", import.meta.url)));
  console.log(summary(outcomes));
  process.exitCode = outcomes.every((o) => o.ok) ? 0 : 1;
}
