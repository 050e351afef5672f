/**
 * A mutation check anyone can run: each mutant below changes one exact text of
 * the library (the behaviour a test must guard), and names the test file(s)
 * that must catch it. Each is applied in a scratch copy of the checkout (never
 * in place), the named tests run there against it, and the mutant is
 * `caught` when they fail, `survived` when they pass, `timeout` past the
 * per-mutant bound, `stale` when its text is no longer in the file exactly
 * once (the code moved: point the mutant at its new place), `no tests` when
 * its filter matched no test (rename it with the test). Not part of the
 * test command: it takes minutes a mutant on a busy machine.
 *
 *   deno task mutate                          # every mutant
 *   deno task mutate --only once-intent,tier-penultimate
 *   deno task mutate --timeout 300            # seconds a mutant (default 600)
 *   deno task mutate --list                   # the mutants, and whether their text is found
 *
 * Exit code 0 when every mutant run was caught, 1 otherwise.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

/** One change of a file's exact text. */
interface Edit {
  /** The file, from the checkout's root. */
  file: string;
  /** The text, found exactly once in the file. */
  from: string;
  /** What it becomes. */
  to: string;
}

/** A mutant: one or more edits, and the tests that must fail on them. */
interface Mutant {
  /** A short name, for `--only`. */
  name: string;
  /** What the mutant breaks, in words. */
  breaks: string;
  edits: Edit[];
  /** Test files, from the root. */
  tests: string[];
  /** A `--filter` for the test run (a test's name, or part of it), to keep the run short. */
  filter?: string;
}

const one = (file: string, from: string, to: string): Edit[] => [{ file, from, to }];

/** The mutants. Texts in run.ts and its parts (run/) are marked in their name's prefix `run:`. */
const MUTANTS: Mutant[] = [
  // The three the suite did not catch before (issue 46).
  {
    name: "run:once-intent-not-awaited",
    breaks: "once() runs the tool before its intent is durable",
    edits: one(
      "run/_effects.ts",
      `    await this.#host.safe(
      "once",
      Promise.resolve(false),
      () => this.#recordIntent(sink, fx, name, key, input, callId),
    );`,
      `    void this.#host.safe(
      "once",
      Promise.resolve(false),
      () => this.#recordIntent(sink, fx, name, key, input, callId),
    );`,
    ),
    tests: ["tests/effects_test.ts"],
    filter: "once starts its tool only once the intent is durable",
  },
  {
    name: "run:unknown-price-is-zero",
    breaks: "a call of unknown price counts $0 (logged, but the run is not marked)",
    edits: [
      {
        file: "run/_budget.ts",
        from: "if (!unknown.includes(label) && unknown.length < 8) {",
        to: "if (false) {",
      },
      {
        file: "run/_budget.ts",
        from: `    }
    return NaN;
  }
}`,
        to: `    }
    return 0;
  }
}`,
      },
    ],
    tests: ["tests/budgets_test.ts"],
    filter: "never counted as $0",
  },
  {
    name: "run:unknown-cost-untold-is-zero",
    breaks: "with no dollar cap to tell, an unknown cost counts $0",
    edits: one(
      "run/_budget.ts",
      "if (Number.isNaN(usd) && this.#host.info.unknownPrices?.length) usd = 0;",
      "if (Number.isNaN(usd)) usd = 0;",
    ),
    tests: ["tests/budgets_test.ts"],
    filter: "never counted as $0",
  },
  {
    name: "retry-attempt-unrecorded",
    breaks: "a retry whose start the ledger cannot take keeps the previous attempt's number",
    edits: one(
      "_earlier.ts",
      "info.attempt = Math.max(earlier.previous.attempt, fromFile?.previous.attempt ?? 0) + 1;",
      "info.attempt = Math.max(earlier.previous.attempt, fromFile?.previous.attempt ?? 0);",
    ),
    tests: ["tests/store/ledger_faults_test.ts"],
    filter: "numbers itself",
  },
  {
    name: "retry-attempt-after-done-unrecorded",
    breaks: "a new run after one ended done, started while the ledger is locked, reuses its number",
    edits: one(
      "_earlier.ts",
      'if (previous.record.status === "done") info.attempt = previous.record.attempt + 1;',
      'if (previous.record.status === "done") info.attempt = previous.record.attempt;',
    ),
    tests: ["tests/store/ledger_faults_test.ts"],
    filter: "numbers itself",
  },
  // Tier math.
  {
    name: "tier-penultimate",
    breaks: "tier 2 no longer fires by the penultimate turn",
    edits: one(
      "tier.ts",
      "turnsUsed >= turnCap - 2) return 2;",
      "turnsUsed >= turnCap - 1) return 2;",
    ),
    tests: ["tests/tier_test.ts"],
  },
  {
    name: "tier1-spent-strict",
    breaks: "tier 1 of tokens/dollars fires only past its fraction, not at it",
    edits: one(
      "tier.ts",
      "if (spent >= plan.tier1 - EPSILON) return 1;",
      "if (spent > plan.tier1 + EPSILON) return 1;",
    ),
    tests: ["tests/tier_test.ts"],
  },
  {
    name: "tier1-largest-spent-axis",
    breaks: "tier 1 takes the smallest of tokens and dollars, not the largest",
    edits: one("tier.ts", "if (frac > spent) spent = frac;", "if (frac < spent) spent = frac;"),
    tests: ["tests/tier_test.ts"],
  },
  {
    name: "tier-latch-2-after-1",
    breaks: "tier 2 never fires once tier 1 has",
    edits: one(
      "tier.ts",
      "if (tier === 2 ? latch & 2 : latch & 3) return undefined;",
      "if (latch & 3) return undefined;",
    ),
    tests: ["tests/run_test.ts"],
    filter: "preToolCall() and postToolCall() persist each tier once",
  },
  {
    name: "tier-time-crossing-late",
    breaks: "the watchdog sleeps past a time tier's crossing",
    edits: one(
      "tier.ts",
      "return Math.max(0, fraction - EPSILON) * plan.timeCap;",
      "return Math.max(0, fraction - EPSILON) * plan.timeCap * 2;",
    ),
    tests: ["tests/watchdog_test.ts"],
  },
  // The watchdog.
  {
    name: "watchdog-stall-window",
    breaks: "the stall record comes at twice its window",
    edits: one(
      "watchdog.ts",
      "const window = settings.stall_window_seconds;",
      "const window = settings.stall_window_seconds * 2;",
    ),
    tests: ["tests/watchdog_clock_test.ts"],
    filter: "stall record",
  },
  {
    name: "watchdog-uncapped-next-multiple",
    breaks: "a capless run's next checkpoint is planned one interval late",
    edits: one(
      "watchdog.ts",
      "start + (multiple + 1) * interval * 1000",
      "start + (multiple + 2) * interval * 1000",
    ),
    tests: ["tests/watchdog_clock_test.ts"],
    filter: "capless run",
  },
  {
    name: "watchdog-tool-deadline-late",
    breaks: "the watchdog sleeps a minute past a tool call's deadline",
    edits: one("watchdog.ts", "next = Math.min(next, at);", "next = Math.min(next, at + 60_000);"),
    tests: ["tests/watchdog_clock_test.ts"],
    filter: "tool call's record",
  },
  {
    name: "watchdog-settles-before-write",
    breaks: "the claimed signals are settled before the watchdog writes the records",
    edits: [
      {
        file: "watchdog.ts",
        from: "      await this.#write();\n    } finally {",
        to: "    } finally {",
      },
      {
        file: "watchdog.ts",
        from: "shared.settleTimeout(slot, n);\n      }\n    }",
        to: "shared.settleTimeout(slot, n);\n      }\n      await this.#write();\n    }",
      },
    ],
    tests: ["tests/watchdog_test.ts"],
    filter: "signal aborts only once",
  },
  // Record writing.
  {
    name: "record-at-least",
    breaks: "a total with calls of unknown cost is shown as exact",
    edits: one(
      "_record.ts",
      '`- Cost so far: ${unpriced ? "at least " : ""}',
      '`- Cost so far: ${unpriced ? "" : ""}',
    ),
    tests: ["tests/budgets_test.ts"],
    filter: "never counted as $0",
  },
  // Leases.
  {
    name: "lease-dead-process-live",
    breaks: "a run whose process is gone reads live (its retry is refused)",
    edits: one(
      "store/types.ts",
      'if (start === null) return "cut-off";',
      'if (start === null) return "live";',
    ),
    tests: ["tests/store/ledger_faults_test.ts"],
    filter: "is live on its machine, however old its heartbeat",
  },
  {
    name: "lease-timeout-never",
    breaks: "a run on another machine whose heartbeat stopped never reads cut off",
    edits: one(
      "store/types.ts",
      'return vantage.now - seen > vantage.hostTimeoutSeconds * 1000 ? "cut-off" : "live";',
      'return "live";',
    ),
    tests: ["tests/store/ledger_faults_test.ts"],
    filter: "is live on its machine, however old its heartbeat",
  },
  {
    name: "ledger-stamp-look-began",
    breaks:
      "the watchdog stamps a run's record with the time its look began (older than the start row)",
    edits: [
      ...one("_ledger.ts", "const now = Math.max(source.now, nowMs());", "const now = source.now;"),
      ...one(
        "_ledger.ts",
        "updatedAt: Math.round(Math.max(now, shared.activity(slot))),",
        "updatedAt: Math.round(now),",
      ),
    ],
    tests: ["tests/store/ledger_test.ts"],
    filter: "a look that began before a run did",
  },
  {
    // Both guards at once: either alone says the outage (the prune's failure pings again).
    name: "fleet-prune-first-word",
    breaks: "a prune that fails on a server that is away is said as a failed prune, not an outage",
    edits: [
      ...one(
        "store/_bridge_worker.ts",
        "else if (down || again || prune) await ping();",
        "else if (down || again) await ping();",
      ),
      ...one(
        "store/_bridge_worker.ts",
        "if (await ping().then(() => true, () => false)) {",
        "if (await Promise.resolve(true)) {",
      ),
    ],
    tests: ["tests/store/postgres_fleet_test.ts"],
    filter: "a prune that is the store's first word",
  },
  {
    name: "journal-holds-like-an-intent",
    breaks: "a journaled call waits out an intent's give-up time while the store is away",
    edits: one(
      "_ledger.ts",
      "if (now - e.since >= JOURNAL_HOLD_MS) {",
      "if (now - e.since >= EFFECT_GIVE_UP_MS) {",
    ),
    tests: ["tests/journal_test.ts"],
    filter: "a ledger another process holds locked: journaled calls go on",
  },
  // Effects.
  {
    name: "run:effect-key-ignores-tool",
    breaks: "two tools with the same input share an effect key",
    edits: one(
      "run/_effects.ts",
      "sha256(`agent-checkpoint effect 1\\u0000${id}\\u0000${String(tool)}\\u0000${text}`)",
      "sha256(`agent-checkpoint effect 1\\u0000${id}\\u0000\\u0000${text}`)",
    ),
    tests: ["tests/effects_test.ts"],
    filter: "effectKey is the same",
  },
  {
    name: "run:once-replays-failure",
    breaks: "once() replays a failed call's receipt instead of running it again",
    edits: one(
      "run/_effects.ts",
      'if (known?.state === "done" && known.ok) {',
      'if (known?.state === "done") {',
    ),
    tests: ["tests/effects_test.ts"],
    filter: "a retried run: once replays",
  },
  {
    name: "run:once-runs-twice-in-parallel",
    breaks: "two parallel once() calls for the same input both run the tool",
    edits: one(
      "run/_effects.ts",
      "    if (running) return await running as T;",
      "    void running;",
    ),
    tests: ["tests/effects_test.ts"],
    filter: "two calls of once",
  },
  // Budgets.
  {
    name: "tree-unknown-never-stops",
    breaks: "an enforced dollar cap lets a call of unknown cost go on",
    edits: one(
      "_tree.ts",
      'if (axis === "usd" && use.unpriced?.length) {',
      "if (false) {",
    ),
    tests: ["tests/budgets_test.ts"],
    filter: "never counted as $0",
  },
  {
    name: "tree-recorduse-unknown-dropped",
    breaks: "a run with unknown dollars adds to its tree as if they were known",
    edits: one(
      "_tree.ts",
      'else if (usage && axis.name === "usd") use.unpriced = [NO_MODEL];',
      'else if (usage && axis.name === "usd") use.usd = 0;',
    ),
    tests: ["tests/tree_test.ts"],
    filter: "no dollar figure",
  },
  // Rollback.
  {
    name: "rollback-touches-user-edits",
    breaks: "a rollback restores a file the user edited after the agent wrote it",
    edits: one(
      "workspace/_restore.ts",
      "      } else if (wrote !== now) {",
      "      } else if (false) {",
    ),
    tests: ["tests/workspace/rollback_safety_test.ts"],
  },
  {
    name: "rollback-ignores-ownership",
    breaks: "a rollback without --all touches every changed file, the user's too",
    edits: one("workspace/_restore.ts", "    else if (!options.all) {", "    else if (false) {"),
    tests: ["tests/workspace/workspace_test.ts"],
    filter: "hand edits are kept",
  },
];

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const only = new Set((flag("--only") ?? "").split(",").filter((s) => s !== ""));
const timeoutS = Number(flag("--timeout") ?? 600);

/** How many times `text` occurs in `within`. */
function count(within: string, text: string): number {
  let n = 0;
  for (let i = within.indexOf(text); i >= 0; i = within.indexOf(text, i + 1)) n++;
  return n;
}

/** Why a mutant cannot be applied to the files under `root`, or undefined. */
function staleness(root: string, m: Mutant): string | undefined {
  for (const e of m.edits) {
    const file = path.join(root, e.file);
    const n = fs.existsSync(file) ? count(fs.readFileSync(file, "utf8"), e.from) : -1;
    if (n !== 1) return `${e.file}: its text is there ${n < 0 ? "(no file)" : `${n} times`}`;
  }
  return undefined;
}

/** Run a command with a bound; resolves its exit code, or "timeout". */
function run(
  cmd: string,
  argv: string[],
  cwd: string,
  ms: number,
): Promise<number | "timeout" | "no tests"> {
  return new Promise((resolve) => {
    const child = spawn(cmd, argv, { cwd, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let out = "";
    child.stdout!.on("data", (d) => out = (out + d).slice(-4000));
    child.stderr!.on("data", () => {});
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, "SIGKILL"); // its group: the test's own children too
      } catch { /* gone */ }
      resolve("timeout");
    }, ms);
    child.on("close", (code) => {
      clearTimeout(timer);
      // A filter that matches no test passes: that is no verdict.
      // deno-lint-ignore no-control-regex
      if (code === 0 && /\| 0 passed \| 0 failed/.test(out.replace(/\x1b\[[0-9;]*m/g, ""))) {
        resolve("no tests");
      } else resolve(code ?? 1);
    });
  });
}

/** The scratch copy: the checkout as it is on disk (uncommitted changes too), without .git. */
function scratchCopy(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ac-mutate-"));
  fs.cpSync(ROOT, dir, {
    recursive: true,
    filter: (src) => !/[\\/](\.git|node_modules|npm)$/.test(src),
  });
  return dir;
}

async function main(): Promise<number> {
  const chosen = MUTANTS.filter((m) => only.size === 0 || only.has(m.name));
  if (args.includes("--list")) {
    for (const m of chosen) {
      console.log(`${m.name}: ${m.breaks} [${staleness(ROOT, m) ?? "found"}]`);
    }
    return 0;
  }
  const scratch = scratchCopy();
  const deno = process.execPath;
  const results: Record<string, number> = {
    caught: 0,
    survived: 0,
    timeout: 0,
    stale: 0,
    "no tests": 0,
    "fails as is": 0,
  };
  // Each test command once on the code as it is: a test that fails unmutated catches nothing.
  const baseline = new Map<string, number | "timeout" | "no tests">();
  const survivors: string[] = [];
  try {
    for (const m of chosen) {
      const stale = staleness(scratch, m);
      let verdict: "caught" | "survived" | "timeout" | "stale" | "no tests" | "fails as is";
      const started = Date.now();
      // Unchecked: a mutant is caught by a failing test, never by a type error.
      const argv = ["test", "-A", "--no-check", ...m.tests];
      if (m.filter) argv.push("--filter", m.filter);
      const key = argv.join("\u0000");
      if (!stale && !baseline.has(key)) {
        baseline.set(key, await run(deno, argv, scratch, timeoutS * 1000));
      }
      const as = baseline.get(key);
      if (stale) verdict = "stale";
      else if (as !== 0) verdict = typeof as === "string" ? as : "fails as is";
      else {
        const saved = new Map<string, string>();
        for (const e of m.edits) {
          const file = path.join(scratch, e.file);
          const text = saved.get(file) ?? fs.readFileSync(file, "utf8");
          if (!saved.has(file)) saved.set(file, text);
          fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace(e.from, () => e.to));
        }
        try {
          const code = await run(deno, argv, scratch, timeoutS * 1000);
          verdict = typeof code === "string" ? code : code === 0 ? "survived" : "caught";
        } finally {
          for (const [file, text] of saved) fs.writeFileSync(file, text);
        }
      }
      results[verdict]!++;
      if (verdict !== "caught") survivors.push(`${m.name} (${verdict})`);
      const secs = ((Date.now() - started) / 1000).toFixed(0);
      console.log(
        `${verdict.padEnd(8)} ${m.name}  ${secs}s  ${stale ?? m.breaks}  [${m.tests.join(" ")}]`,
      );
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(
    `\n${results.caught} of ${chosen.length} caught; ${results.survived} survived, ${results.timeout} timed out (${timeoutS}s each), ${results.stale} stale, ${
      results["no tests"]
    } whose filter ran no test, ${results["fails as is"]} whose tests fail without the mutant`,
  );
  if (survivors.length) console.log(`not caught: ${survivors.join(", ")}`);
  return results.caught === chosen.length ? 0 : 1;
}

if (import.meta.main) process.exit(await main());
