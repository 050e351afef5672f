/**
 * Trees of runs that share one budget: a child run's turns, tokens and
 * dollars count toward its own caps and every ancestor's, and tiers (and
 * enforced caps) follow the tree's totals. Pure bookkeeping: the runs of this
 * process are read through a function their keeper gives, the runs of other
 * processes arrive as rows the run store returned, and nothing here does I/O
 * or reads a clock.
 *
 * @module
 */
import {
  type Axis,
  type BudgetStop,
  NO_MODEL,
  type RunCaps,
  SHARED_AXES,
  type SharedAxis,
  type UsageTotals,
} from "./_record.ts";
import type { TierPlan } from "./tier.ts";
import type { RunInfo } from "./_writer.ts";
import { nowMs } from "./_run_table.ts";
import { clearInterval, setInterval } from "node:timers";

/**
 * Use that counts toward a tree's caps: a figure per shared axis (`usd` is
 * the dollars of the calls whose cost is known), and the models of calls
 * whose cost is unknown (`usd` is then a lower bound).
 */
export type TreeUse = { [A in SharedAxis]: number } & { unpriced?: readonly string[] };

/**
 * No use on any axis: a fresh object.
 *
 * @example
 * ```ts
 * import { noUse } from "./_tree.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(noUse(), { turns: 0, tokens: 0, usd: 0 });
 * ```
 */
export function noUse(): TreeUse {
  const use = {} as TreeUse;
  for (const axis of SHARED_AXES) use[axis.name] = 0;
  return use;
}

/** The most models named as of unknown cost in one run's or one tree's use. */
const MAX_UNPRICED = 8;

/**
 * Add `n` to a tree's `sum` on an axis: never beyond the largest finite
 * number, so a forged huge cost passes every cap instead of turning the total
 * into `Infinity`, which a stored record cannot hold.
 */
const addUse = (sum: number, n: number): number => Math.min(sum + n, Number.MAX_VALUE);

/**
 * A run's own use as its stored record says it. The dollars of records from
 * versions that left them out when a cost was unknown are a lower bound (0),
 * never $0 known.
 *
 * @example
 * ```ts
 * import { recordUse } from "./_tree.ts";
 * import assert from "node:assert/strict";
 *
 * const use = recordUse({ turnsUsed: 2, usage: { inputTokens: 10, outputTokens: 5, usd: 0.5, unpriced: ["m"] } });
 * assert.deepEqual(use, { turns: 2, tokens: 15, usd: 0.5, unpriced: ["m"] });
 * ```
 */
export function recordUse(
  record: { turnsUsed?: unknown; usage?: Partial<UsageTotals> | undefined },
): TreeUse {
  const usage = record.usage;
  const use = noUse();
  for (const axis of SHARED_AXES) {
    const used = axis.used(record);
    if (used !== undefined) use[axis.name] = used;
    // A usage report without a cost: the dollars are unknown, never $0.
    else if (usage && axis.name === "usd") use.unpriced = [NO_MODEL];
  }
  if (!usage) return use;
  if (Array.isArray(usage.unpriced) && usage.unpriced.length > 0) {
    use.unpriced = usage.unpriced.slice(0, MAX_UNPRICED).map(String);
  }
  return use;
}

/** A run of a tree as the run store holds it (usually another process's). */
export interface TreeRow {
  /** The run's id. */
  runId: string;
  /** Its parent's run id; undefined for the tree's root. */
  parentId?: string;
  /** Its caps. */
  caps: RunCaps;
  /** Its own use (not its children's). */
  use: TreeUse;
  /** What its model call in flight reserves of the tree's caps, when one is. */
  reserved?: TreeUse;
  /** Its last model call's use, when it made one. */
  perCall?: TreeUse;
}

/** Where a run sits in its tree. */
export interface TreePlace {
  /** The tree's root run id. */
  root: string;
  /** The parent's run id; undefined for the root. */
  parent?: string;
}

/** A run of this process in a tree. */
interface LocalMember {
  parentId: string | undefined;
  caps: RunCaps;
  /** Its own use now: read while it is live, its last figures once it ended. */
  use: () => TreeUse;
  /** Stop it: an enforced cap it counts toward was passed; undefined once it ended. */
  stop: ((stop: BudgetStop) => void) | undefined;
  /** What its model call in flight reserves of the tree's caps. */
  reserved?: TreeUse | undefined;
  /** Its last model call's use. */
  perCall?: TreeUse | undefined;
  /** Its look at the tree's totals between its own hooks; undefined once it ended. */
  look?: TreeLook | undefined;
}

/** A run's look at its tree's totals, made between its hooks (a relative may spend elsewhere). */
export interface TreeLook {
  /** Whether it wants the look now: live, not stopped, and a cap enforced. */
  wanted(): boolean;
  /** Judge the tree's totals as they stand (the store's rows were just read). */
  look(): void;
}

/**
 * How often a tree whose runs here are under an enforced cap is read from
 * the run store, ms: every run of it learns within about this long (plus one
 * write of the run that spent) that the tree passed the cap, though it makes
 * no call of its own. One indexed read per tree, not per run.
 */
export const TREE_LOOK_MS = 250;

/** A run's seat in its tree: the tree, its place, and the run store's side of it. */
export interface TreeSeat {
  /** The tree. */
  tree: RunTree;
  /** Where the run sits. */
  place: TreePlace;
  /** The run store's rows of the tree; undefined when no store can say now. */
  read?: (root: string) => TreeRow[] | undefined;
  /** Bring the run's record in the store up to date now, so that other processes see its use. */
  push?: (info: RunInfo) => void;
  /**
   * Look at the tree and write the run's record in one transaction of the
   * run store: `decide` gets the store's rows and says whether to write.
   */
  admit?: (info: RunInfo, decide: (rows: TreeRow[] | undefined) => boolean) => void;
}

/** What the run store does for trees, as the keeper wires it; each part may throw. */
export interface TreeStore {
  /** The newest attempt of every run of the tree rooted at `root`. */
  read(root: string): TreeRow[];
  /** Record that `runId` sits at `place`. */
  join(runId: string, place: TreePlace): void;
  /** Write the run's record now. */
  push(info: RunInfo): void;
  /** `decide` on the tree's rows and write the run's record if it says so, in one transaction. */
  admit(root: string, info: RunInfo, decide: (rows: TreeRow[]) => boolean): void;
}

/**
 * The trees of one keeper's runs: a seat for each run in one, made when a run
 * is started with a parent, is given as one, or hands its environment to a
 * child process.
 *
 * @example
 * ```ts
 * import { TreeSeats } from "./_tree.ts";
 * import assert from "node:assert/strict";
 *
 * const seats = new TreeSeats(() => undefined);
 * const root = seats.seat("lead", { root: "lead" });
 * const child = seats.seat("helper", { root: "lead", parent: "lead" });
 * assert.equal(child.tree, root.tree);
 * assert.equal(seats.of("helper"), child);
 * ```
 */
export class TreeSeats {
  readonly #store: () => TreeStore | undefined;
  readonly #seats = new Map<string, TreeSeat>();
  readonly #trees = new Map<string, RunTree>();
  readonly #failed: (what: string, error: unknown) => void;
  /** A store failure was logged and none has succeeded since: the next ones are not. */
  #failing = false;
  /** Seats whose place the store has not recorded yet, by run id. */
  readonly #unjoined = new Map<string, TreePlace>();
  /** Each tree's look at the store, by root: while a run of it here is under an enforced cap. */
  readonly #tickers = new Map<string, ReturnType<typeof setInterval>>();

  constructor(
    store: () => TreeStore | undefined,
    failed: (what: string, error: unknown) => void = () => {},
  ) {
    this.#store = store;
    this.#failed = (what, error) => {
      if (!this.#failing) failed(what, error);
      this.#failing = true;
    };
  }

  /**
   * Record every seat not yet in the store's tree (a busy or failing store
   * kept it out): each look at the store, write, admission and end tries
   * again, for a run missing from its tree's rows hides its spend from the
   * tree's other processes.
   */
  #join(store: TreeStore): void {
    for (const [runId, place] of this.#unjoined) {
      try {
        store.join(runId, place);
        this.#unjoined.delete(runId);
      } catch (error) {
        this.#failed(`recording ${runId} in the tree ${place.root}`, error);
        return;
      }
    }
  }

  /** The seat of a run of this keeper, when it has one. */
  of(runId: string): TreeSeat | undefined {
    return this.#seats.get(runId);
  }

  /** The run's seat at `place`, made (and recorded in the store) when it has none. */
  seat(runId: string, place: TreePlace): TreeSeat {
    const known = this.#seats.get(runId);
    if (known) return known;
    let tree = this.#trees.get(place.root);
    if (!tree) this.#trees.set(place.root, tree = new RunTree(place.root));
    const seat: TreeSeat = {
      tree,
      place,
      read: (root) => {
        const store = this.#store();
        if (!store) return undefined;
        this.#join(store);
        try {
          const rows = store.read(root);
          this.#failing = false;
          return rows;
        } catch (error) {
          this.#failed(`reading the tree ${root} from the run ledger`, error);
          return undefined;
        }
      },
      push: (info) => {
        const store = this.#store();
        if (!store) return;
        this.#join(store);
        try {
          store.push(info);
        } catch (error) {
          this.#failed(`writing ${info.runId}'s use to the run ledger`, error);
        }
      },
      admit: (info, decide) => {
        const store = this.#store();
        let decided = false;
        if (store) this.#join(store);
        try {
          if (store) {
            store.admit(place.root, info, (rows) => {
              decided = true;
              return decide(rows);
            });
            return;
          }
        } catch (error) {
          this.#failed(`admitting ${info.runId}'s model call in the run ledger`, error);
        }
        if (!decided) decide(undefined); // no store, or it failed before deciding: this process's view
      },
    };
    this.#seats.set(runId, seat);
    this.#unjoined.set(runId, place);
    if (!this.#tickers.has(place.root)) {
      const ticker = setInterval(() => this.#look(tree, seat), TREE_LOOK_MS);
      // A look never keeps the process alive: the runs' own hooks and ends do.
      (ticker as { unref?: () => void }).unref?.();
      this.#tickers.set(place.root, ticker);
    }
    const store = this.#store();
    if (store) this.#join(store);
    return seat;
  }

  /** A run ended: its seat goes; its tree goes with its last seat. */
  leave(runId: string): void {
    const seat = this.#seats.get(runId);
    if (!seat) return;
    const store = this.#unjoined.has(runId) ? this.#store() : undefined;
    if (store) this.#join(store);
    this.#unjoined.delete(runId);
    this.#seats.delete(runId);
    for (const other of this.#seats.values()) if (other.tree === seat.tree) return;
    this.#trees.delete(seat.tree.root);
    clearInterval(this.#tickers.get(seat.tree.root));
    this.#tickers.delete(seat.tree.root);
  }

  /** Stop every tree's look (the keeper closes). */
  close(): void {
    for (const ticker of this.#tickers.values()) clearInterval(ticker);
    this.#tickers.clear();
  }

  /**
   * A tree's look between its runs' hooks: the store's rows read once, then
   * each run here under an enforced cap judges the totals. The spend of a
   * relative in another process reaches them so, not at their next call.
   */
  #look(tree: RunTree, seat: TreeSeat): void {
    // A timer's callback: whatever fails here is logged, never thrown into the host's process.
    try {
      if (tree.looks().length === 0) return; // nothing enforced here: no read
      const rows = seat.read?.(tree.root);
      if (!rows) return;
      tree.refresh(rows, nowMs());
      for (const look of tree.looks()) look.look();
    } catch (error) {
      this.#failed(`looking at the tree ${tree.root}`, error);
    }
  }
}

/**
 * The enforced cap that `use` has passed under `plan`, if any: an axis of
 * `axes` whose counted cap is reached (time only when `elapsed` is given),
 * or a dollar cap under which a call's cost is unknown.
 *
 * @example
 * ```ts
 * import { passedCap } from "./_tree.ts";
 * import { tierPlan } from "./tier.ts";
 * import { defaultSettings } from "./settings.ts";
 * import assert from "node:assert/strict";
 *
 * const plan = tierPlan({ usd: 1 }, defaultSettings("/tmp/cp"));
 * assert.equal(passedCap(plan, ["usd"], { turns: 3, tokens: 0, usd: 0.99 }), undefined);
 * assert.deepEqual(passedCap(plan, ["usd"], { turns: 4, tokens: 0, usd: 1.2 }), {
 *   axis: "usd",
 *   cap: 1,
 *   used: 1.2,
 * });
 * // A call of unknown cost stops an enforced dollar cap: never counted as $0.
 * assert.deepEqual(passedCap(plan, ["usd"], { turns: 4, tokens: 0, usd: 0.2, unpriced: ["m"] }), {
 *   axis: "usd",
 *   cap: 1,
 *   used: 0.2,
 *   unpriced: "m",
 * });
 * ```
 */
export function passedCap(
  plan: TierPlan,
  axes: readonly Axis[],
  use: TreeUse,
  elapsed?: number,
): Omit<BudgetStop, "runId"> | undefined {
  for (const axis of axes) {
    const cap = axis === "time" && elapsed === undefined ? undefined : plan.byAxis[axis];
    if (cap === undefined) continue;
    const used = axis === "time" ? elapsed! : use[axis];
    if (used >= cap) return { axis, cap, used: axis === "time" ? Math.floor(used) : used };
    // A call of unknown cost may have spent anything: an enforced dollar cap stops there.
    if (axis === "usd" && use.unpriced?.length) {
      return { axis, cap, used, unpriced: use.unpriced[0]! };
    }
  }
  return undefined;
}

/** The deepest chain of parents followed; deeper ones (or a cycle) stop there. */
const MAX_DEPTH = 64;

/**
 * One tree of runs: its members in this process, and what the run store says
 * of the others.
 *
 * @example A child's spend counts toward its parent's cap
 * ```ts
 * import { RunTree } from "./_tree.ts";
 * import assert from "node:assert/strict";
 *
 * const tree = new RunTree("parent");
 * tree.join("parent", undefined, { usd: { value: 1, source: "host" } }, () => ({
 *   turns: 2, tokens: 100, usd: 0.25,
 * }));
 * tree.join("child", "parent", {}, () => ({ turns: 3, tokens: 50, usd: 0.5 }));
 * assert.deepEqual(tree.totals().get("parent"), { turns: 5, tokens: 150, usd: 0.75 });
 * assert.deepEqual(tree.chain("child").map((m) => m.runId), ["child", "parent"]);
 * ```
 */
export class RunTree {
  /** The root run's id. */
  readonly root: string;
  readonly #local = new Map<string, LocalMember>();
  #remote: TreeRow[] = [];
  /** When the remote rows were last read, ms on the caller's clock. */
  refreshedAt = -Infinity;

  constructor(root: string) {
    this.root = root;
  }

  /** How many runs of this process are in the tree. */
  get localSize(): number {
    return this.#local.size;
  }

  /** Add (or replace) a run of this process. */
  join(
    runId: string,
    parentId: string | undefined,
    caps: RunCaps,
    use: () => TreeUse,
    stop?: (stop: BudgetStop) => void,
    look?: TreeLook,
  ): void {
    this.#local.set(runId, { parentId, caps, use, stop, look });
  }

  /** The looks of this process's runs that want one now. */
  looks(): TreeLook[] {
    const out: TreeLook[] = [];
    for (const member of this.#local.values()) if (member.look?.wanted()) out.push(member.look);
    return out;
  }

  /** Keep a run's last figures once it has ended (its slot goes to another run). */
  settle(runId: string, last: TreeUse): void {
    const member = this.#local.get(runId);
    if (member) {
      member.use = () => last;
      member.stop = undefined;
      member.look = undefined;
    }
  }

  /** Set (or clear) what a run's model call in flight reserves of the tree's caps. */
  reserve(runId: string, reserved: TreeUse | undefined): void {
    const member = this.#local.get(runId);
    if (member) member.reserved = reserved;
  }

  /** A run's model call landed: its reservation gives way to what it cost. */
  called(runId: string, use: TreeUse): void {
    const member = this.#local.get(runId);
    if (member) {
      member.reserved = undefined;
      member.perCall = use;
    }
  }

  /**
   * What a run's next model call is expected to cost: its own last call's,
   * else the dearest last call of the tree's (a run joining late reserves too).
   */
  expected(runId: string): TreeUse {
    const own = this.#local.get(runId)?.perCall;
    if (own) return own;
    // Dearest on each axis but turns: the next call is one turn, counted when it is made.
    const dearest = noUse();
    const seen = (u: TreeUse | undefined) => {
      if (!u) return;
      for (const { name } of SHARED_AXES) {
        if (name !== "turns" && u[name] > dearest[name]) dearest[name] = u[name];
      }
    };
    for (const member of this.#local.values()) seen(member.perCall);
    for (const row of this.#remote) seen(row.perCall);
    return dearest;
  }

  /** A run of this process's last model call's use. */
  perCallOf(runId: string): TreeUse | undefined {
    return this.#local.get(runId)?.perCall;
  }

  /** What a run of this process reserves now. */
  reservedBy(runId: string): TreeUse | undefined {
    return this.#local.get(runId)?.reserved;
  }

  /** Stop every live run of this process that counts toward `runId`'s caps, but `except`. */
  stopUnder(runId: string, stop: BudgetStop, except: string): void {
    for (const [id, member] of this.#local) {
      if (id !== except && member.stop && this.chain(id).some((m) => m.runId === runId)) {
        member.stop(stop);
      }
    }
  }

  /** What the run store holds of the tree; this process's own runs are read from memory. */
  refresh(rows: readonly TreeRow[], now: number): void {
    this.#remote = rows.filter((row) => !this.#local.has(row.runId));
    this.refreshedAt = now;
  }

  #parentOf(runId: string): string | undefined {
    const local = this.#local.get(runId);
    if (local) return local.parentId;
    return this.#remote.find((row) => row.runId === runId)?.parentId;
  }

  #capsOf(runId: string): RunCaps | undefined {
    return this.#local.get(runId)?.caps ?? this.#remote.find((r) => r.runId === runId)?.caps;
  }

  /** The run and its ancestors, nearest first, each with its caps (`{}` when unknown). */
  chain(runId: string): { runId: string; caps: RunCaps }[] {
    const out: { runId: string; caps: RunCaps }[] = [];
    const seen = new Set<string>();
    for (let id: string | undefined = runId; id !== undefined && !seen.has(id);) {
      seen.add(id);
      out.push({ runId: id, caps: this.#capsOf(id) ?? {} });
      if (out.length >= MAX_DEPTH) break;
      id = this.#parentOf(id);
    }
    return out;
  }

  /**
   * Each run's subtree total (its own use and every descendant's), by run id;
   * with `reservedBy`, also what every other run's call in flight reserves.
   */
  totals(reservedBy?: string): Map<string, TreeUse> {
    const sums = new Map<string, TreeUse>();
    const add = (runId: string, use: TreeUse) => {
      for (const { runId: id } of this.chain(runId)) {
        const sum = sums.get(id) ?? noUse();
        for (const { name } of SHARED_AXES) sum[name] = addUse(sum[name], use[name]);
        if (use.unpriced?.length) {
          const models = new Set([...sum.unpriced ?? [], ...use.unpriced]);
          sum.unpriced = [...models].slice(0, MAX_UNPRICED);
        }
        sums.set(id, sum);
      }
    };
    for (const [runId, member] of this.#local) {
      add(runId, member.use());
      if (reservedBy !== undefined && runId !== reservedBy && member.reserved) {
        add(runId, member.reserved);
      }
    }
    for (const row of this.#remote) {
      add(row.runId, row.use);
      if (reservedBy !== undefined && row.reserved) add(row.runId, row.reserved);
    }
    return sums;
  }

  /** The tree's own members' use, added up: what the whole tree spent. */
  total(): TreeUse {
    return this.totals().get(this.root) ?? noUse();
  }
}
