/**
 * Tier math (S5): which tier is due for a run's caps, turns and elapsed time.
 * Pure: the clock comes in as an argument.
 *
 * @module
 */
import { AXES, type Axis, AXIS_NAMES, type RunCaps } from "./_record.ts";
import { defaultSettings, resolveSettings, type Settings } from "./settings.ts";

/**
 * Caps on the budget axes (see `AXES`); an absent axis has no cap. The time
 * cap is `timeSeconds`, in seconds; `turns` counts model calls, `tokens`
 * input and output tokens, `usd` US dollars.
 */
export type Caps =
  & { timeSeconds?: number | undefined }
  & { [A in Exclude<Axis, "time">]?: number | undefined };

/** A tier: 0 none, 1 the half-way checkpoint, 2 the final one. */
export type Tier = 0 | 1 | 2;

const EPSILON = 1e-9;
/**
 * Caps this small are tiny: tier 1 would land within a few turns of tier 2.
 * A turn cap is tiny below 10 (the seed's rule): a 10-turn run gets tier 1 at
 * turn 5, three turns before tier 2 at 8.
 */
const TINY_TURNS = 10;
const TINY_SECONDS = 300;

/** The numbers tier math needs, settled once per settings version. */
export interface TierPlan {
  turnCap: number | undefined;
  timeCap: number | undefined;
  tier1: number;
  tier2Time: number;
  tier2Turn: number;
  tier1Allowed: boolean;
  tokenCap: number | undefined;
  usdCap: number | undefined;
  /** The counted caps again, by axis name: for code that goes through every axis. */
  byAxis: { readonly [A in Axis]?: number };
}

/** The cap values of a run's caps, without their sources. */
export function capValues(caps: RunCaps): Caps {
  const out: Caps = {};
  for (const { name } of AXES) {
    if (name === "time") out.timeSeconds = caps.time?.value;
    else out[name] = caps[name]?.value;
  }
  return out;
}

const usable = (n: number | undefined): n is number =>
  n !== undefined && Number.isFinite(n) && n > 0;

/** Apply S4's floors, `enabled_axes` and the 1-turn rule to raw caps. */
export function countedCaps(caps: Caps, settings: Settings): Caps {
  const out: Caps = {};
  const axes = settings.enabled_axes;
  const turns = caps.turns;
  if (
    turns !== undefined && Number.isFinite(turns) && turns > 1 &&
    turns >= settings.min_budget_floor_turns && axes.includes("turns")
  ) out.turns = turns;
  const time = caps.timeSeconds;
  if (
    time !== undefined && Number.isFinite(time) && time > 0 &&
    time >= settings.min_budget_floor_seconds && axes.includes("time")
  ) out.timeSeconds = time;
  // The other axes: any cap above 0 counts.
  for (const { name } of AXES) {
    if (name === "time" || name === "turns") continue;
    const cap = caps[name];
    if (usable(cap) && axes.includes(name)) out[name] = cap;
  }
  return out;
}

/**
 * Seconds past a run's time cap after which it is no longer watched: its
 * watchdog stops, and a keeper whose table is full may evict it.
 */
export const PAST_CAP_SECONDS = 180;

/** Caps by axis name (a run's caps say `time` where {@linkcode Caps} says `timeSeconds`). */
function capsByAxis(caps: Caps): { [A in Axis]?: number } {
  const out: { [A in Axis]?: number } = {};
  for (const axis of AXIS_NAMES) {
    const cap = axis === "time" ? caps.timeSeconds : caps[axis];
    if (cap !== undefined) out[axis] = cap;
  }
  return out;
}

/** Settle the tier thresholds for counted caps. */
export function tierPlan(caps: Caps, settings: Settings): TierPlan {
  const counted = countedCaps(caps, settings);
  const [tier1 = 0.5, tier2] = settings.tier_fractions;
  const tiny = (counted.turns !== undefined && counted.turns < TINY_TURNS) ||
    (counted.timeSeconds !== undefined && counted.timeSeconds < TINY_SECONDS);
  return {
    turnCap: counted.turns,
    timeCap: counted.timeSeconds,
    tier1,
    tier2Time: tier2 ?? settings.tier2_time_fraction,
    tier2Turn: tier2 ?? settings.tier2_turn_fraction,
    tier1Allowed: !tiny || settings.allow_tiny_tier1,
    tokenCap: counted.tokens,
    usdCap: counted.usd,
    byAxis: capsByAxis(counted),
  };
}

/** Distinct caps whose plans one {@linkcode TierPlans} keeps; past it, it starts afresh. */
const PLANS_KEPT = 1024;

/**
 * Tier plans shared by the runs whose caps have the same values, settled once
 * per settings version: most runs of a host have the caps of a few others, and
 * a plan per run cost each run an object of its own on either thread.
 *
 * @example
 * ```ts
 * import { TierPlans } from "./tier.ts";
 * import { defaultSettings } from "./settings.ts";
 * import assert from "node:assert/strict";
 *
 * const plans = new TierPlans();
 * const settings = defaultSettings("/tmp/cp");
 * const caps = { turns: { value: 50, source: "host" } };
 * const plan = plans.get(caps, settings, 1);
 * assert.equal(plan.turnCap, 50);
 * assert.equal(plans.get({ turns: { value: 50, source: "caps.turns" } }, settings, 1), plan);
 * assert.notEqual(plans.get(caps, settings, 2), plan); // new settings: a new plan
 * ```
 */
export class TierPlans {
  #version = NaN;
  readonly #byCaps = new Map<string, TierPlan>();

  /**
   * The plan for `caps` under `settings`, whose version is `version`.
   *
   * @param caps A run's caps.
   * @param settings The settings in force.
   * @param version Their version: another one settles the plans again.
   * @returns The plan, shared with every run whose caps have these values.
   */
  get(caps: RunCaps, settings: Settings, version: number): TierPlan {
    if (version !== this.#version) {
      this.#byCaps.clear();
      this.#version = version;
    }
    let key = "";
    for (const axis of AXIS_NAMES) key += `${caps[axis]?.value}|`;
    let plan = this.#byCaps.get(key);
    if (plan === undefined) {
      if (this.#byCaps.size >= PLANS_KEPT) this.#byCaps.clear();
      plan = tierPlan(capValues(caps), settings);
      this.#byCaps.set(key, plan);
    }
    return plan;
  }
}

/** Whether a plan has a cap on any axis. */
export const hasCap = (plan: TierPlan): boolean => {
  for (const axis of AXIS_NAMES) if (plan.byAxis[axis] !== undefined) return true;
  return false;
};

/**
 * The tier due under a plan; the hot path of every hook. Tokens and dollars
 * take the turn fractions, and their tier 1 is never suppressed as tiny; a
 * dollar figure that is not a number (cost unknown) never makes a tier due.
 */
export function tierFor(
  plan: TierPlan,
  turnsUsed: number,
  elapsedSeconds: number,
  tokensUsed = 0,
  usdUsed = 0,
): Tier {
  const { turnCap, timeCap, tokenCap, usdCap } = plan;
  // Tokens and dollars: tier 1 is never tiny there (the tiny rule is about turns and time).
  let spent = -1;
  if (tokenCap !== undefined) {
    const frac = tokensUsed / tokenCap;
    if (frac >= plan.tier2Turn - EPSILON) return 2;
    spent = frac;
  }
  if (usdCap !== undefined) {
    const frac = usdUsed / usdCap;
    if (frac >= plan.tier2Turn - EPSILON) return 2;
    if (frac > spent) spent = frac;
  }
  let largest = -1;
  if (timeCap !== undefined) {
    const frac = elapsedSeconds / timeCap;
    if (frac >= plan.tier2Time - EPSILON) return 2;
    largest = frac;
  }
  if (turnCap !== undefined) {
    const frac = turnsUsed / turnCap;
    if (frac >= plan.tier2Turn - EPSILON || turnsUsed >= turnCap - 2) return 2;
    if (frac > largest) largest = frac;
  }
  if (spent >= plan.tier1 - EPSILON) return 1;
  return plan.tier1Allowed && largest >= plan.tier1 - EPSILON ? 1 : 0;
}

/**
 * A surface's latch (bit 0: tier 1 fired, bit 1: tier 2) after firing `tier`,
 * or undefined when it may not fire: each tier fires at most once per surface,
 * and tier 1 never after tier 2 (S5).
 */
export function fireTier(latch: number, tier: 1 | 2): number | undefined {
  if (tier === 2 ? latch & 2 : latch & 3) return undefined;
  return latch | tier | 1;
}

/**
 * Seconds after the start at which the time axis alone makes a tier due, or
 * undefined when it never does. The watchdog sleeps until then.
 */
export function timeCrossing(plan: TierPlan, tier: 1 | 2): number | undefined {
  if (plan.timeCap === undefined) return undefined;
  if (tier === 1 && !plan.tier1Allowed) return undefined;
  const fraction = tier === 1 ? plan.tier1 : plan.tier2Time;
  return Math.max(0, fraction - EPSILON) * plan.timeCap;
}

/**
 * The tier due for a run (S5), after S4's floors, `enabled_axes` and the
 * 1-turn rule are applied to `caps`. Settings are S3's snake_case keys; an
 * invalid one falls back to its default.
 *
 * @param input The caps, turns used so far, elapsed seconds and settings.
 * @returns 0 when nothing is due, else the highest due tier.
 *
 * @example The examples of S5
 * ```ts
 * import { dueTier } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * // Turn cap 100: tier 1 at 50, tier 2 at 90.
 * assert.equal(dueTier({ caps: { turns: 100 }, turnsUsed: 49, elapsedSeconds: 0 }), 0);
 * assert.equal(dueTier({ caps: { turns: 100 }, turnsUsed: 50, elapsedSeconds: 0 }), 1);
 * assert.equal(dueTier({ caps: { turns: 100 }, turnsUsed: 90, elapsedSeconds: 0 }), 2);
 * // Turn cap 10: tier 1 at 5, tier 2 at 8. Turn cap 9 is tiny: no tier 1, tier 2 at 7.
 * assert.equal(dueTier({ caps: { turns: 10 }, turnsUsed: 5, elapsedSeconds: 0 }), 1);
 * assert.equal(dueTier({ caps: { turns: 10 }, turnsUsed: 8, elapsedSeconds: 0 }), 2);
 * assert.equal(dueTier({ caps: { turns: 9 }, turnsUsed: 6, elapsedSeconds: 0 }), 0);
 * assert.equal(dueTier({ caps: { turns: 9 }, turnsUsed: 7, elapsedSeconds: 0 }), 2);
 * // Time cap one hour: tier 1 at 30 minutes.
 * assert.equal(dueTier({ caps: { timeSeconds: 3600 }, turnsUsed: 0, elapsedSeconds: 1800 }), 1);
 * // Tokens and dollars take the turn fractions: tier 1 at half, tier 2 at 90 %.
 * const caps = { tokens: 100_000, usd: 5 };
 * assert.equal(dueTier({ caps, turnsUsed: 3, elapsedSeconds: 0, tokensUsed: 50_000 }), 1);
 * assert.equal(dueTier({ caps, turnsUsed: 3, elapsedSeconds: 0, usdUsed: 4.5 }), 2);
 * ```
 */
export function dueTier(input: {
  caps: Caps;
  turnsUsed: number;
  elapsedSeconds: number;
  tokensUsed?: number;
  usdUsed?: number;
  settings?: Record<string, unknown>;
}): Tier {
  const { settings } = resolveSettings(defaultSettings(""), [
    { source: "override", values: input.settings },
  ]);
  return tierFor(
    tierPlan(input.caps, settings),
    input.turnsUsed,
    input.elapsedSeconds,
    input.tokensUsed ?? 0,
    input.usdUsed ?? 0,
  );
}
