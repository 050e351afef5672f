/**
 * A tree of runs that share a budget, as the command line and the web view
 * show it: its runs (each with its parent), and what they used together
 * against the root's caps. Made from the runs' newest records alone, so the
 * embedded ledger and the fleet store answer alike.
 *
 * @module
 */
import { formatUsd } from "../template.ts";
import type { RunState, RunView } from "./types.ts";

/** One run of a tree. */
export interface TreeMember {
  /** The run's id. */
  runId: string;
  /** Its parent's id; undefined for the root. */
  parent?: string;
  /** Live, ended or cut off. */
  state: RunState;
  /** Its status as recorded (`live`, or how it ended). */
  status: string;
  /** Its own model calls (not its children's). */
  turns: number;
  /** Its own tokens. */
  tokens: number;
  /** Its own dollars; undefined when some of its calls' cost is unknown. */
  usd?: number;
}

/** A tree: its runs and their totals against the root's caps. */
export interface TreeSummary {
  /** The root run's id. */
  root: string;
  /** Its runs, the most recently started first. */
  members: TreeMember[];
  /** What the tree's runs used together. */
  totals: {
    turns: number;
    tokens: number;
    /** Dollars of the runs whose cost is known. */
    usd: number;
    /** Runs whose cost is (partly) unknown: their dollars are not in `usd`. */
    usdUnknown: number;
  };
  /** The root's caps, which the whole tree shares. */
  caps: { turns?: number; tokens?: number; usd?: number };
}

/**
 * The trees of `views` (runs of any trees, as {@linkcode RunStore.trees}
 * answers), by root, each with its totals.
 *
 * @example
 * ```ts
 * import { treeSummaries } from "./trees.ts";
 * import assert from "node:assert/strict";
 *
 * const run = (runId: string, parent: string | undefined, usd: number) => ({
 *   state: "ended",
 *   record: {
 *     runId, status: "capped", turnsUsed: 2, caps: runId === "lead" ? { usd: { value: 1 } } : {},
 *     usage: { inputTokens: 100, outputTokens: 50, usd },
 *     tree: parent === undefined ? { root: "lead" } : { root: "lead", parent },
 *   },
 * });
 * const [tree] = treeSummaries([run("lead", undefined, 0.25), run("helper", "lead", 0.5)] as never);
 * assert.deepEqual(tree!.totals, { turns: 4, tokens: 300, usd: 0.75, usdUnknown: 0 });
 * assert.deepEqual(tree!.caps, { usd: 1 });
 * assert.equal(tree!.members[1]!.parent, "lead");
 * ```
 */
export function treeSummaries(views: readonly RunView[]): TreeSummary[] {
  const trees = new Map<string, TreeSummary>();
  for (const view of views) {
    const r = view.record;
    const root = r.tree?.root ?? r.runId;
    let tree = trees.get(root);
    if (!tree) {
      tree = {
        root,
        members: [],
        totals: { turns: 0, tokens: 0, usd: 0, usdUnknown: 0 },
        caps: {},
      };
      trees.set(root, tree);
    }
    const n = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
    const tokens = r.usage ? n(r.usage.inputTokens) + n(r.usage.outputTokens) : 0;
    const member: TreeMember = {
      runId: r.runId,
      state: view.state,
      status: r.status,
      turns: n(r.turnsUsed),
      tokens,
    };
    if (r.tree?.parent !== undefined) member.parent = r.tree.parent;
    // A record leaves the dollars out when they are unknown: never $0 then.
    const usd = r.usage ? r.usage.usd : 0;
    if (typeof usd === "number" && Number.isFinite(usd)) member.usd = usd;
    tree.members.push(member);
    tree.totals.turns += member.turns;
    tree.totals.tokens += tokens;
    if (member.usd === undefined) tree.totals.usdUnknown++;
    else tree.totals.usd += member.usd;
    if (r.runId === root) {
      const caps = r.caps ?? {};
      if (caps.turns) tree.caps.turns = caps.turns.value;
      if (caps.tokens) tree.caps.tokens = caps.tokens.value;
      if (caps.usd) tree.caps.usd = caps.usd.value;
    }
  }
  return [...trees.values()];
}

/**
 * A tree's totals in one line: `9 runs: 40 turns, 6000 tokens, $1.01 of $1.00`
 * (each total with the root's cap when it has one).
 *
 * @example
 * ```ts
 * import { treeTotalsText } from "./trees.ts";
 * import assert from "node:assert/strict";
 *
 * const text = treeTotalsText({
 *   root: "lead",
 *   members: [{ runId: "lead", state: "ended", status: "capped", turns: 40, tokens: 6000 }],
 *   totals: { turns: 40, tokens: 6000, usd: 1.01, usdUnknown: 0 },
 *   caps: { usd: 1 },
 * });
 * assert.equal(text, "1 run: 40 turns, 6000 tokens, $1.01 of $1.00");
 * ```
 */
export function treeTotalsText(tree: TreeSummary): string {
  const t = tree.totals;
  const runs = tree.members.length;
  const of = (cap: number | undefined, text: (v: number) => string) =>
    cap === undefined ? "" : ` of ${text(cap)}`;
  return `${runs} run${runs === 1 ? "" : "s"}: ${t.turns}${
    of(tree.caps.turns, String)
  } turns, ${t.tokens}${of(tree.caps.tokens, String)} tokens, $${formatUsd(t.usd)}${
    of(tree.caps.usd, (v) => `$${formatUsd(v)}`)
  }${
    t.usdUnknown > 0 ? ` (${t.usdUnknown} run${t.usdUnknown === 1 ? "" : "s"} of unknown cost)` : ""
  }`;
}
