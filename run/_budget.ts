/**
 * A run's budget: its use (tokens, dollars) and their pricing, its seat in a
 * tree of runs sharing a budget, and the enforced caps that stop it (and
 * admit its model calls). A part of the run (`run.budget`), with its own
 * state.
 *
 * @module
 */
import { longTimeout, type LongTimer } from "../_timer.ts";
import {
  type BudgetStop,
  NO_MODEL,
  type RecordSource,
  type RunCaps,
  type TreeRecord,
  unpricedText,
} from "../_record.ts";
import type { ModelPrice, Settings } from "../settings.ts";
import { nowMs } from "../_run_table.ts";
import { type Tier, tierFor } from "../tier.ts";
import { passedCap, type TreeRow, type TreeSeat, type TreeUse } from "../_tree.ts";
import { usageTotals } from "../_writer.ts";
import { BudgetExceededError, type BudgetTotals, type PartContext, type RunHost } from "./_host.ts";

/** One model call's use, as `run.postLlmCall()` takes it. */
export interface UsageReport {
  /** Input (prompt) tokens of the call. */
  inputTokens?: number;
  /** Output (completion) tokens of the call. */
  outputTokens?: number;
  /** The call's cost in US dollars, when the framework gives one. */
  usd?: number;
  /** The model called, for the `prices` setting. @default {the model given to startRun} */
  model?: string;
  /**
   * The run's whole cost so far in US dollars, when the framework counts it
   * (the Claude Agent SDK's `total_cost_usd`): it replaces the run's sum.
   */
  totalUsd?: number;
}

/** A whole number of tokens ≥ 0 from what a host reported; anything else counts as 0. */
const tokenCount = (n: unknown): number =>
  typeof n === "number" && Number.isFinite(n) && n > 0 ? Math.floor(n) : 0;

/**
 * A model's price in the `prices` setting: its own entry, else the longest
 * name that begins the model's (`gpt-4o` prices `gpt-4o-2024-08-06`).
 */
function priceOf(prices: Record<string, ModelPrice>, model: string): ModelPrice | undefined {
  if (Object.hasOwn(prices, model)) return prices[model];
  let best: string | undefined;
  for (const name of Object.keys(prices)) {
    if (model.startsWith(name) && (best === undefined || name.length > best.length)) best = name;
  }
  return best === undefined ? undefined : prices[best];
}

/**
 * A run's budget, as `run.budget` gives it: whether a cap is enforced,
 * whether one stopped the run and the error to throw for it, and the
 * environment for a child process whose runs share this run's budget.
 *
 * @example
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({
 *   home: mkdtempSync(join(tmpdir(), "ac-")),
 *   env: {},
 *   settings: { enforce: ["turns"] },
 * });
 * const run = ac.startRun({ sessionId: "capped", caps: { turns: 2 } });
 * assert.equal(run.budget.enforced, true);
 * while (!run.signal.aborted) run.preLlmCall();
 * assert.equal(run.budget.stopped, true);
 * assert.equal(run.budget.error()?.axis, "turns");
 * assert.equal(run.stopReason?.kind, "budget");
 * await ac.close();
 * ```
 */
export class RunBudget {
  readonly #host: RunHost;
  /** @internal The run's seat in a tree of runs that share a budget. */
  seat: TreeSeat | undefined = undefined;
  /** The price in force for the run's model, by model name, for one settings version. */
  #prices: Map<string, ModelPrice | undefined> | undefined = undefined;
  #pricesVersion = -1;
  /** The enforced cap that stopped the run, once one did. */
  #stopped: BudgetStop | undefined = undefined;
  /** The run's own totals when it stopped, for {@linkcode BudgetExceededError}. */
  #stoppedTotals: BudgetTotals | undefined = undefined;
  /** The timer of an enforced time cap, armed when the run's signal is first asked for. */
  #timer: LongTimer | undefined = undefined;
  #engaged = false;

  /** @internal */
  constructor(host: RunHost) {
    this.#host = host;
  }

  /** Whether the settings enforce a cap (the `enforce` setting): adapters then hand `run.signal` on. */
  get enforced(): boolean {
    return this.#host.guard(
      "budget.enforced",
      false,
      (ctx) => ctx.at(nowMs()).enforce.length !== 0,
    );
  }

  /** Whether an enforced cap stopped the run. */
  get stopped(): boolean {
    return this.#stopped !== undefined;
  }

  /**
   * The error an adapter throws for a run an enforced cap stopped,
   * with `cause` (the framework's own error) and the framework's steps; undefined
   * when no enforced cap stopped it.
   */
  error(cause?: unknown, steps?: unknown[]): BudgetExceededError | undefined {
    const stop = this.#stopped;
    if (stop === undefined) return undefined;
    const totals = this.#stoppedTotals ?? { turns: 0, inputTokens: 0, outputTokens: 0 };
    return new BudgetExceededError({
      runId: this.#host.runId,
      axis: stop.axis,
      cap: stop.cap,
      used: stop.used,
      capRunId: stop.runId,
      totals,
      ...(steps === undefined ? {} : { steps }),
    }, cause === undefined ? undefined : { cause });
  }

  /** @internal The run becomes the parent (or root) of a tree: its seat there. */
  join(seat: TreeSeat): void {
    this.#host.guard("budget.join", undefined, (ctx) => {
      this.seat = seat;
      this.#engage();
      this.#host.info.tree = seat.place;
      ctx.publish(this.#host.info);
      this.#seatIn(ctx, seat);
      // What it used before it had children counts from now on, in every process of the tree.
      seat.push?.(this.#host.info);
    });
  }

  /** @internal The run starts in a tree: its seat there. */
  seated(ctx: PartContext, seat: TreeSeat): void {
    this.seat = seat;
    this.#engage();
    this.#seatIn(ctx, seat);
  }

  #engage(): void {
    if (!this.#engaged) {
      this.#engaged = true;
      this.#host.engage(this);
    }
  }

  /** Take the run's place in its tree: its use read from shared memory, its stop by a relative. */
  #seatIn(ctx: PartContext, seat: TreeSeat): void {
    const slot = this.#host.info.slot;
    seat.tree.join(
      this.#host.runId,
      seat.place.parent,
      this.#host.caps,
      () => this.#ownUse(ctx, ctx.shared.turns(slot)),
      (stop) =>
        this.#host.guard("budget", undefined, (c) => {
          const now = nowMs();
          this.#stop(c, c.at(now), now, "host", stop);
        }),
      {
        // Only a tree with an enforced cap is read between hooks (time is each run's own timer).
        wanted: () => {
          if (this.#stopped !== undefined || this.#host.ended) return false;
          const enforce = ctx.at(nowMs()).enforce;
          // Never read yet: an ancestor's caps in another process are not known here until then.
          return enforce.length !== 0 && (seat.tree.refreshedAt === -Infinity ||
            seat.tree.chain(this.#host.runId).some(({ caps }) =>
              enforce.some((axis) => axis !== "time" && caps[axis] !== undefined)
            ));
        },
        look: () => this.#host.guard("budget", undefined, (c) => this.#treeLook(c, seat)),
      },
    );
  }

  /**
   * Between the run's hooks: stop it once its tree's totals, just read from
   * the run store, pass an enforced cap of its own or an ancestor's (the spend
   * may be a relative's in another process). No write to the store: the
   * `budget` record goes to the checkpoint file, and the run's next write
   * carries its stop.
   */
  #treeLook(ctx: PartContext, seat: TreeSeat): void {
    const now = nowMs();
    const settings = ctx.at(now);
    if (!settings.enabled || settings.enforce.length === 0) return;
    if (this.#stopped !== undefined || this.#host.ended) return;
    const totals = seat.tree.totals();
    const own = this.#ownUse(ctx, ctx.shared.turns(this.#host.info.slot));
    for (const [i, { runId, caps }] of seat.tree.chain(this.#host.runId).entries()) {
      const plan = i === 0
        ? this.#host.planFor(ctx, settings)
        : ctx.plans.get(caps, settings, ctx.version);
      // Time is each run's own, with a timer of its own: not judged here.
      const passed = passedCap(plan, settings.enforce, totals.get(runId) ?? own);
      if (!passed) continue;
      const stop: BudgetStop = { ...passed, runId };
      this.#stop(ctx, settings, now, "watchdog", stop);
      seat.tree.stopUnder(runId, stop, this.#host.runId);
      return;
    }
  }

  /**
   * The environment for a child process whose runs count toward this run's
   * budget: a library there makes each run it starts a child of this one.
   *
   * @returns `AGENT_CHECKPOINT_PARENT` (this run's id) and `AGENT_CHECKPOINT_TREE` (its tree's root).
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
   * assert.deepEqual(run.budget.childEnv(), {
   *   AGENT_CHECKPOINT_PARENT: "lead",
   *   AGENT_CHECKPOINT_TREE: "lead",
   * });
   * await ac.close();
   * ```
   */
  childEnv(): Record<string, string> {
    // The run counts its children's use from now on: it takes a seat in a tree (its own root).
    if (this.seat === undefined) {
      this.#host.guard("childEnv", undefined, (ctx) => {
        const seat = ctx.trees?.seat(this.#host.runId, { root: this.#host.runId });
        if (seat) this.join(seat);
      });
    }
    return {
      AGENT_CHECKPOINT_PARENT: this.#host.runId,
      AGENT_CHECKPOINT_TREE: this.seat?.place.root ?? this.#host.runId,
    };
  }

  /**
   * A run in a tree, or under an enforced cap: the tier that the tree's totals
   * make due against the run's own caps and every ancestor's (time is each
   * run's own), and the stop once an enforced cap is passed. `turns` is the
   * run's own count as the calling hook counts it. A model call about to start
   * under an enforced cap is admitted only while what the tree spent and every
   * other call in flight (each reserved at its run's last call's cost) leave
   * room, so the tree overshoots by one call at most; across processes the
   * look and the reservation are one transaction of the run store.
   *
   * @internal
   */
  judge(
    ctx: PartContext,
    settings: Settings,
    tier: Tier,
    now: number,
    source: RecordSource,
    turns: number,
  ): Tier {
    const slot = this.#host.info.slot;
    const seat = this.seat;
    const elapsed = this.#host.elapsed(ctx, now);
    const enforce = settings.enforce;
    const own = this.#ownUse(ctx, turns);
    const admitting = enforce.length !== 0 && source === "pre_llm_call" &&
      this.#stopped === undefined;
    let stop: BudgetStop | undefined;
    /** A call refused: the cap is taken by what the tree spent and its other calls in flight. */
    let refused = false;
    const judge = (levels: { runId: string; caps: RunCaps; use: TreeUse }[], dueToo: boolean) => {
      for (let i = 0; i < levels.length; i++) {
        const level = levels[i]!;
        const plan = i === 0
          ? this.#host.planFor(ctx, settings)
          : ctx.plans.get(level.caps, settings, ctx.version);
        const use = level.use;
        if (dueToo) {
          const due = tierFor(plan, use.turns, i === 0 ? elapsed : 0, use.tokens, use.usd);
          if (due > tier) tier = due;
        }
        if (enforce.length !== 0 && stop === undefined && this.#stopped === undefined) {
          const passed = passedCap(plan, enforce, use, i === 0 ? elapsed : undefined);
          if (passed) stop = { ...passed, runId: level.runId };
        }
      }
    };
    if (!seat) judge([{ runId: this.#host.runId, caps: this.#host.caps, use: own }], false);
    else {
      // The calling hook may count this run's turn differently from shared memory (preLlmCall).
      const lag = ctx.shared.turns(slot) - turns;
      const levels = (reservedBy: string | undefined) => {
        const totals = seat.tree.totals(reservedBy);
        return seat.tree.chain(this.#host.runId).map(({ runId, caps }) => {
          const use = totals.get(runId) ?? own;
          return { runId, caps, use: { ...use, turns: use.turns - lag } };
        });
      };
      const decide = (rows: TreeRow[] | undefined): boolean => {
        if (rows) seat.tree.refresh(rows, now);
        judge(levels(undefined), true);
        if (admitting && stop === undefined) {
          const spent = levels(undefined);
          judge(levels(this.#host.runId), false);
          if (stop) {
            refused = true;
            const s = stop as BudgetStop;
            const level = spent.find((l) => l.runId === s.runId);
            const done = level ? (s.axis === "time" ? s.used : level.use[s.axis]) : s.used;
            if (s.used > done) s.inFlight = s.used - done;
            s.used = done;
          }
          // Turns count at the call's start already: a call in flight reserves tokens and dollars.
          seat.tree.reserve(
            this.#host.runId,
            stop ? undefined : seat.tree.expected(this.#host.runId),
          );
        }
        const all = seat.tree.totals().get(seat.place.root);
        const tree: TreeRecord = { ...seat.place };
        if (all) {
          const { unpriced: _u, ...figures } = all;
          tree.totals = { ...figures, turns: all.turns - lag };
          if (all.unpriced?.length) tree.totals.unpriced = [...all.unpriced];
        }
        const reserved = seat.tree.reservedBy(this.#host.runId);
        if (reserved) tree.reserved = { ...reserved, at: Math.round(Date.now()) };
        const perCall = seat.tree.perCallOf(this.#host.runId);
        if (perCall && Number.isFinite(perCall.usd)) {
          tree.perCall = { tokens: perCall.tokens, usd: perCall.usd };
        }
        this.#host.info.tree = tree;
        // The watchdog's records carry it too, so its next write does not take the reservation back.
        ctx.publish(this.#host.info);
        return enforce.length !== 0 && source !== "pre_tool_call";
      };
      if (admitting && seat.admit) seat.admit(this.#host.info, decide);
      else {
        const due = seat.read && (enforce.length !== 0 && source !== "pre_tool_call" &&
            source !== "post_tool_call" ||
          now - seat.tree.refreshedAt >= settings.progress_interval_seconds * 1000);
        if (decide(due ? seat.read!(seat.place.root) : undefined)) seat.push?.(this.#host.info);
      }
    }
    if (stop) {
      // A tier due now is persisted first (its latch then holds): the budget record is the last word.
      if (tier !== 0) this.#host.midRun(ctx, settings, tier, now, source);
      this.#stop(ctx, settings, now, source, stop);
      // Passed: every run under that cap stops; refused: the others' calls in flight take the rest.
      if (!refused) seat?.tree.stopUnder(stop.runId, stop, this.#host.runId);
    }
    return tier;
  }

  /** @internal The run ends: its timer cleared; in a tree, its use settled and its seat let go. */
  ended(ctx: PartContext | undefined): void {
    this.#timer?.clear();
    const seat = this.seat;
    if (!ctx || !seat) return;
    this.#treeTotalsNow(ctx); // its end record names the tree's totals as it leaves
    seat.tree.settle(this.#host.runId, this.#ownUse(ctx, ctx.shared.turns(this.#host.info.slot)));
    ctx.trees?.leave(this.#host.runId);
  }

  /** The run's own use: its known dollars, and the models of its calls of unknown cost. */
  #ownUse(ctx: PartContext, turns: number): TreeUse {
    const slot = this.#host.info.slot;
    const use: TreeUse = { turns, tokens: ctx.shared.tokens(slot), usd: ctx.shared.usd(slot) };
    if (this.#host.info.unknownPrices?.length) use.unpriced = this.#host.info.unknownPrices;
    else if (!Number.isFinite(use.usd)) use.unpriced = [NO_MODEL]; // unknown before it had a tree
    if (!Number.isFinite(use.usd)) use.usd = 0;
    return use;
  }

  /**
   * The tree's totals in the run's record, as this process knows them now (no
   * look at the store): a run's record names them even when it never made a
   * model call of its own.
   */
  #treeTotalsNow(ctx: PartContext): void {
    const seat = this.seat;
    const tree = this.#host.info.tree;
    if (!seat || !tree) return;
    const all = seat.tree.totals().get(seat.place.root);
    if (!all) return;
    const { unpriced: _u, ...figures } = all;
    const totals: NonNullable<TreeRecord["totals"]> = figures;
    if (all.unpriced?.length) totals.unpriced = [...all.unpriced];
    this.#host.info.tree = { ...tree, totals };
    ctx.publish(this.#host.info);
  }

  /**
   * Stop the run at an enforced cap: the `budget` record first, then the budget
   * signal aborts; the run's end is `capped` unless the host says otherwise.
   */
  #stop(
    ctx: PartContext,
    settings: Settings,
    now: number,
    source: RecordSource,
    stop: BudgetStop,
  ): void {
    if (this.#stopped !== undefined || this.#host.ended) return;
    this.#stopped = stop;
    this.#timer?.clear();
    const slot = this.#host.info.slot;
    const use = usageTotals(ctx.shared, slot);
    const totals: BudgetTotals = this.#stoppedTotals = {
      turns: ctx.shared.turns(slot),
      inputTokens: use?.inputTokens ?? 0,
      outputTokens: use?.outputTokens ?? 0,
      ...(use?.usd === undefined ? {} : { usd: use.usd }),
    };
    // Ten significant digits: sums of dollars carry float noise (1.0000000000000002).
    const n = (x: number) => String(Number(x.toPrecision(10)));
    const whose = stop.runId === this.#host.runId ? "" : ` of ${stop.runId}`;
    ctx.log(
      "warn",
      stop.unpriced !== undefined
        ? `the enforced ${stop.axis} cap${whose} is in doubt: a call's cost is unknown (${
          unpricedText(stop.unpriced)
        }; at least ${n(stop.used)} of ${n(stop.cap)} known); the run's signal aborts it`
        : stop.inFlight === undefined
        ? `the enforced ${stop.axis} cap${whose} is passed (${n(stop.used)} of ${
          n(stop.cap)
        }); the run's signal aborts it`
        : `the enforced ${stop.axis} cap${whose} is taken: ${n(stop.used)} of ${
          n(stop.cap)
        } spent and ${
          n(stop.inFlight)
        } reserved by other calls in flight, so this call is refused; the run's signal aborts it`,
      this.#host.runId,
    );
    // mid_run_persist: false promises no file writes from the mid-run surface.
    if (settings.enabled && settings.mid_run_persist) {
      this.#treeTotalsNow(ctx); // stopped by a relative before it looked itself: the record says them
      ctx.writer.write(this.#host.info, settings, { kind: "budget", stop }, source, now);
    }
    const error = new BudgetExceededError({
      runId: this.#host.runId,
      axis: stop.axis,
      cap: stop.cap,
      used: stop.used,
      capRunId: stop.runId,
      totals,
    });
    this.#host.stop(
      { kind: "budget", error },
      new DOMException(`The run's enforced ${stop.axis} cap is passed`, "AbortError"),
    );
  }

  /** @internal `run.signal` was asked for: an enforced time cap gets its timer. */
  watch(): void {
    this.#host.guard("signal", undefined, (ctx) => {
      const now = nowMs();
      const cap = this.#host.caps.time?.value;
      if (cap !== undefined && ctx.at(now).enforce.includes("time")) {
        const at = ctx.shared.start(this.#host.info.slot) + cap * 1000;
        this.#engage();
        this.#timer = longTimeout(
          () =>
            this.#host.guard("budget", undefined, (c) => {
              const t = nowMs();
              const settings = c.at(t);
              if (!settings.enforce.includes("time")) return;
              const stop: BudgetStop = {
                axis: "time",
                cap,
                used: Math.floor(this.#host.elapsed(c, t)),
                runId: this.#host.runId,
              };
              this.#stop(c, settings, t, "host", stop);
            }),
          Math.max(0, at - now),
          { unref: true },
        );
      }
    });
  }

  /** @internal `postLlmCall`: the call's use counted, priced, judged. */
  called(ctx: PartContext, settings: Settings, now: number, report: UsageReport): void {
    const input = tokenCount(report?.inputTokens);
    const output = tokenCount(report?.outputTokens);
    const slot = this.#host.info.slot;
    const given = report?.usd;
    // A negative, NaN or infinite cost is no cost at all (never a credit): priced, else unknown.
    let usd = typeof given === "number" && Number.isFinite(given) && given >= 0
      ? given
      : input + output === 0 && given === undefined || typeof report?.totalUsd === "number"
      ? 0
      : this.#price(ctx, settings, report?.model, input, output, given);
    // Unknown is never $0: #price marked the run (its known costs go on counting), or, with no
    // dollar cap to tell, its dollars are unknown (NaN) from now on, as the record then says.
    if (Number.isNaN(usd) && this.#host.info.unknownPrices?.length) usd = 0;
    ctx.shared.addUsage(slot, input, output, usd);
    // The call has landed: in a tree, its reservation gives way to what it cost.
    this.seat?.tree.called(this.#host.runId, { turns: 1, tokens: input + output, usd });
    const total = report?.totalUsd;
    if (typeof total === "number" && Number.isFinite(total) && total >= 0) {
      ctx.shared.setUsd(slot, total);
      // The framework's own total covers every call: no cost is unknown any more.
      if (this.#host.info.unknownPrices !== undefined) {
        delete this.#host.info.unknownPrices;
        ctx.publish(this.#host.info);
      }
    }
    if (!settings.enabled) return;
    const plan = this.#host.planFor(ctx, settings);
    const budgeted = this.seat !== undefined || settings.enforce.length !== 0;
    if (plan.tokenCap === undefined && plan.usdCap === undefined && !budgeted) return;
    ctx.contact(settings);
    let tier = tierFor(
      plan,
      ctx.shared.turns(slot),
      this.#host.elapsed(ctx, now),
      ctx.shared.tokens(slot),
      ctx.shared.usd(slot),
    );
    if (budgeted) {
      tier = this.judge(ctx, settings, tier, now, "post_llm_call", ctx.shared.turns(slot));
    }
    if (tier !== 0) this.#host.midRun(ctx, settings, tier, now, "post_llm_call");
  }

  /**
   * A call's cost from the `prices` setting, or `NaN` when there is none: the
   * run is then marked (its dollars are a lower bound from now on; under an
   * enforced dollar cap its next look stops it) and one log line per model says so.
   */
  #price(
    ctx: PartContext,
    settings: Settings,
    model: unknown,
    input: number,
    output: number,
    given: unknown,
  ): number {
    const name = typeof model === "string" && model !== "" ? model : this.#host.info.model ?? "";
    const version = ctx.version;
    const prices = this.#prices ??= new Map();
    if (version !== this.#pricesVersion) {
      prices.clear();
      this.#pricesVersion = version;
    }
    let price = prices.get(name);
    if (price === undefined && !prices.has(name)) {
      price = name === "" ? undefined : priceOf(settings.prices, name);
      prices.set(name, price);
    }
    if (price) return (input * price.input + output * price.output) / 1e6;
    // No dollar cap, no tree, nothing enforced: nobody to tell; its dollars are just left out.
    const told = this.#host.caps.usd !== undefined || this.seat !== undefined ||
      settings.enforce.includes("usd");
    if (!told) return NaN;
    // Never $0: the run's dollars are a lower bound from now on, and its record says for which model.
    const label = name === "" ? NO_MODEL : name;
    const unknown = this.#host.info.unknownPrices ?? [];
    if (!unknown.includes(label) && unknown.length < 8) {
      this.#host.info.unknownPrices = [...unknown, label];
      ctx.publish(this.#host.info);
    }
    if (!ctx.unknownPrices.has(label)) {
      ctx.unknownPrices.add(label);
      const why = given === undefined
        ? "a model call came with no cost"
        : `a model call came with the cost ${String(given)}, which is no cost (never a credit)`;
      ctx.log(
        "warn",
        `unknown price for ${label}: ${why}, and ${
          name === "" ? "no model was named" : `the prices setting has no price for ${name}`
        }; its dollars are unknown, never counted as $0: ${
          settings.enforce.includes("usd")
            ? "an enforced dollar cap stops the run"
            : "the run's dollar total is a lower bound from now on (shown as at least $X)"
        } (add a price under prices, dollars per million input and output tokens)`,
        this.#host.runId,
      );
    }
    return NaN;
  }
}
