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
import type { BudgetStop, RunCaps } from "./_record.ts";
import type { TierPlan } from "./tier.ts";
import type { RunInfo } from "./_writer.ts";

/** Use that counts toward a tree's caps. */
export interface TreeUse {
  /** Model calls. */
  turns: number;
  /** Input and output tokens. */
  tokens: number;
  /** Dollars; `NaN` when some call's cost is unknown. */
  usd: number;
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
}

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
  }
}

/**
 * The enforced cap that `use` has passed under `plan`, if any: an axis of
 * `axes` whose counted cap is reached (time only when `elapsed` is given;
 * dollars never when unknown).
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
 * assert.equal(passedCap(plan, ["usd"], { turns: 4, tokens: 0, usd: NaN }), undefined);
 * ```
 */
export function passedCap(
  plan: TierPlan,
  axes: readonly ("time" | "turns" | "tokens" | "usd")[],
  use: TreeUse,
  elapsed?: number,
): Omit<BudgetStop, "runId"> | undefined {
  for (const axis of axes) {
    const cap = axis === "turns"
      ? plan.turnCap
      : axis === "tokens"
      ? plan.tokenCap
      : axis === "usd"
      ? plan.usdCap
      : elapsed === undefined
      ? undefined
      : plan.timeCap;
    if (cap === undefined) continue;
    const used = axis === "time" ? elapsed! : use[axis];
    if (used >= cap) return { axis, cap, used: axis === "time" ? Math.floor(used) : used };
  }
  return undefined;
}

/** The deepest chain of parents followed; deeper ones (or a cycle) stop there. */
const MAX_DEPTH = 64;

const ZERO: TreeUse = Object.freeze({ turns: 0, tokens: 0, usd: 0 });

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
  ): void {
    this.#local.set(runId, { parentId, caps, use, stop });
  }

  /** Keep a run's last figures once it has ended (its slot goes to another run). */
  settle(runId: string, last: TreeUse): void {
    const member = this.#local.get(runId);
    if (member) {
      member.use = () => last;
      member.stop = undefined;
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
    let tokens = 0;
    let usd = 0;
    const seen = (u: TreeUse | undefined) => {
      if (!u) return;
      if (u.tokens > tokens) tokens = u.tokens;
      if (u.usd > usd) usd = u.usd;
    };
    for (const member of this.#local.values()) seen(member.perCall);
    for (const row of this.#remote) seen(row.perCall);
    return { turns: 0, tokens, usd };
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
        const sum = sums.get(id) ?? { ...ZERO };
        sum.turns += use.turns;
        sum.tokens += use.tokens;
        sum.usd += use.usd;
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
    return this.totals().get(this.root) ?? { ...ZERO };
  }
}
