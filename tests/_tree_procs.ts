// A tree of runs in three processes sharing one enforced $1.00 cap, as a host builds it: a parent
// here, 8 children in 2 other processes (tests/fixtures/tree_children.ts). Shared by the SQLite and
// the PostgreSQL tests, which differ only in where the tree's totals live.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Run } from "../mod.ts";
import { fixture, runScript } from "./_helpers.ts";

/** What a child process says of one child run. */
export interface ChildOutcome {
  runId: string;
  spent: number;
  calls: number;
  stopped: boolean;
  tree: boolean;
  /** When its budget signal aborted, epoch ms. */
  abortedAt?: number;
  /** When it reported its call of unknown cost, epoch ms. */
  costlessAt?: number;
  /** Its checkpoint file as it was when its signal aborted. */
  budget: string;
}

/** The tree's outcome: the children's, the parent's abort, and the bound its lateness is held to. */
export interface TreeOutcome {
  children: ChildOutcome[];
  /** What the whole tree spent, the parent's $0.05 included. */
  spent: number;
  /** When the parent's budget signal aborted, epoch ms (it made no call meanwhile). */
  parentAbortedAt: number | undefined;
  /** The parent's checkpoint file when its signal aborted. */
  parentBudget: string;
  /** The most this process's timers ran late while the children ran, ms: the machine's load. */
  timerLagMs: number;
}

/** Each child's calls cost this much. */
export const PER_CALL = 0.02;

/**
 * Start 8 children of `parent` (which spent $0.05 already) in 2 processes, each making $0.02
 * calls until its signal aborts; `costless` names the child whose 2nd call reports no
 * cost. Waits, without a call of the parent's, until the parent's signal aborts (at most 10 s
 * after the children ended).
 */
export async function runTree(
  parent: Run,
  env: Record<string, string>,
  homes: () => string,
  costless?: string,
): Promise<TreeOutcome> {
  let parentAbortedAt: number | undefined;
  let parentBudget = "";
  parent.signal.addEventListener("abort", () => {
    parentAbortedAt = Date.now();
    parentBudget = fs.readFileSync(parent.checkpointFile, "utf8");
  });
  // How late a 20 ms timer fires here while the tree runs: the machine's load, to bound by.
  let timerLagMs = 0;
  let due = performance.now() + 20;
  const lag = setInterval(() => {
    const now = performance.now();
    timerLagMs = Math.max(timerLagMs, now - due);
    due = now + 20;
  }, 20);
  // With a call of unknown cost midway, both child processes start calling together (once their
  // runs are started and warmed up), so that neither spends the whole cap before the other began.
  const barrier = costless === undefined
    ? undefined
    : fs.mkdtempSync(path.join(os.tmpdir(), "tree-barrier-"));
  const go = (async () => {
    if (barrier === undefined) return;
    const until = Date.now() + 60_000;
    while (fs.readdirSync(barrier).length < 2 && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    fs.writeFileSync(path.join(barrier, "go"), "");
  })();
  try {
    const results = await Promise.all([0, 1].map((p) =>
      runScript(
        fixture("tree_children"),
        [
          homes(),
          JSON.stringify({
            children: [0, 1, 2, 3].map((c) => `child-${p}-${c}`),
            usd: PER_CALL,
            ...(costless === undefined ? {} : { costless, barrier }),
          }),
        ],
        { env, timeoutMs: 120_000 },
      )
    ));
    await go;
    for (const r of results) assert.equal(r.code, 0, r.stderr);
    const children = results.flatMap((r) => JSON.parse(r.stdout) as ChildOutcome[]);
    assert.equal(children.length, 8);
    // Waited for as a condition, bounded: the parent makes no call that would look for it.
    const until = Date.now() + 10_000;
    while (parentAbortedAt === undefined && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const spent = 0.05 + children.reduce((sum, c) => sum + c.spent, 0);
    return { children, spent, parentAbortedAt, parentBudget, timerLagMs };
  } finally {
    clearInterval(lag);
  }
}

/**
 * Every run of the tree, the parent included, aborted within 1 s of `capAt` (the moment the
 * tree passed its cap), bounded for the machine's load: 1 s times the load per core (at most 5),
 * and twice the worst lateness of this process's timers. Prints the lateness measured.
 */
export function assertAbortedWithin1s(label: string, tree: TreeOutcome, capAt: number): void {
  const load = os.loadavg()[0]! / Math.max(1, os.cpus().length);
  // Scaled with the load, up to 5 s: beyond that a late look is a fault, not the machine.
  const bound = 1000 * Math.min(5, Math.max(1, load)) + 2 * tree.timerLagMs;
  const late = (at: number | undefined) => (at === undefined ? Infinity : at - capAt);
  const children = tree.children.map((c) => late(c.abortedAt));
  const parent = late(tree.parentAbortedAt);
  console.log(
    `${label}: parent aborted ${parent.toFixed(0)} ms after the cap; children at most ${
      Math.max(...children).toFixed(0)
    } ms; bound ${bound.toFixed(0)} ms (load ${load.toFixed(2)} per core, timers ${
      tree.timerLagMs.toFixed(0)
    } ms late at worst)`,
  );
  assert.ok(parent <= bound, `the parent aborted ${parent} ms after the cap (bound ${bound} ms)`);
  for (const c of tree.children) {
    assert.ok(
      late(c.abortedAt) <= bound,
      `${c.runId} aborted ${late(c.abortedAt)} ms after the cap (bound ${bound} ms)`,
    );
  }
}

/** When the tree's call of unknown cost was reported, epoch ms. */
export function costlessAt(tree: TreeOutcome): number {
  const at = tree.children.find((c) => c.costlessAt !== undefined)?.costlessAt;
  assert.ok(
    at !== undefined,
    `a child reported its call of unknown cost: ${
      JSON.stringify(tree.children.map(({ budget: _, ...c }) => c))
    }`,
  );
  return at;
}

/**
 * The call of unknown cost stopped every run of the tree, as passing the cap would: no run went
 * on to the $1.00 an unknown cost counted as $0 would allow, and every run's budget record says
 * the cap was stopped by a call of unknown cost, and that no model was named.
 */
export function assertUnknownCostStopped(tree: TreeOutcome): void {
  const costless = costlessAt(tree);
  for (const c of tree.children) {
    assert.equal(c.stopped, true, `${c.runId} was stopped`);
    assert.match(
      c.budget,
      /- Stopped by: the enforced usd cap \$1\.00 of lead \(used at least \$[\d.]+; a call of unknown cost: no cost was reported and no model was named\)/,
      `${c.runId}'s budget record says why; its file at the abort: ${
        c.budget.split("\n").filter((l) => /^(## |The |- (Stopped|Tree|Cost))/.test(l)).join(" | ")
      }`,
    );
  }
  assert.ok(tree.parentAbortedAt !== undefined, "the parent is stopped by its child's call");
  assert.match(
    tree.parentBudget,
    /The enforced usd cap \(\$1\.00\) cannot be kept: a model call is of unknown cost/,
  );
  // Spend stops there, never at the $1.00 an unknown cost counted as $0 would allow.
  const spentThen = tree.spent;
  assert.ok(spentThen < 1, `the tree spent $${spentThen.toFixed(2)}: the unknown cost stopped it`);
  assert.ok(spentThen <= 1 + 8 * PER_CALL + 1e-9, `the tree spent $${spentThen.toFixed(2)}`);
  console.log(
    `a call of unknown cost ${new Date(costless).toISOString()} stopped the tree at $${
      spentThen.toFixed(2)
    } of $1.00`,
  );
}
