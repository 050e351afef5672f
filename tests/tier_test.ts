import { test } from "node:test";
import assert from "node:assert/strict";
import { dueTier } from "../mod.ts";

type Input = Parameters<typeof dueTier>[0];
/** The first turn at which each tier is due, scanning turns 0 … cap. */
const firstTurns = (caps: Input["caps"], settings?: Record<string, unknown>) => {
  const seen: Record<number, number> = {};
  for (let t = 0; t <= (caps.turns ?? 0); t++) {
    const tier = dueTier(
      settings ? { caps, turnsUsed: t, elapsedSeconds: 0, settings } : {
        caps,
        turnsUsed: t,
        elapsedSeconds: 0,
      },
    );
    if (tier && seen[tier] === undefined) seen[tier] = t;
  }
  return seen;
};
const atSecond = (timeSeconds: number, s: number, settings: Record<string, unknown> = {}) =>
  dueTier({ caps: { timeSeconds }, turnsUsed: 0, elapsedSeconds: s, settings });

test("dueTier() fires tier 1 at turn 5 of a 10-turn cap (not tiny) and tier 2 at turn 8", () => {
  assert.deepEqual(firstTurns({ turns: 10 }), { 1: 5, 2: 8 });
});

test("dueTier() suppresses tier 1 on a 9-turn cap (tiny) and fires tier 2 at turn 7", () => {
  assert.deepEqual(firstTurns({ turns: 9 }), { 2: 7 });
});

test("dueTier() fires tier 1 at 50 and tier 2 at 90 of 100 turns", () => {
  assert.deepEqual(firstTurns({ turns: 100 }), { 1: 50, 2: 90 });
});

test("dueTier() fires tier 1 at 1800 s and tier 2 at 2880 s of an hour", () => {
  assert.equal(atSecond(3600, 1799.99), 0);
  assert.equal(atSecond(3600, 1800), 1);
  assert.equal(atSecond(3600, 2879.99), 1);
  assert.equal(atSecond(3600, 2880), 2);
});

test("dueTier() compares fractions with a tolerance: [0.7] of 10 turns fires at 7", () => {
  const settings = { tier_fractions: [0.7], allow_tiny_tier1: true };
  assert.deepEqual(firstTurns({ turns: 10 }, settings), { 1: 7, 2: 8 });
  // 0.7 * 10 is 7.000000000000001 in floating point; 7 / 10 is 0.7.
  assert.equal(atSecond(3600, 0.7 * 3600 - 1e-7, { tier_fractions: [0.7] }), 1);
});

test("dueTier() lets a second tier fraction replace both tier-2 fractions", () => {
  const settings = { tier_fractions: [0.3, 0.6] };
  assert.deepEqual(firstTurns({ turns: 100 }, settings), { 1: 30, 2: 60 });
  assert.equal(atSecond(1000, 599, settings), 1);
  assert.equal(atSecond(1000, 600, settings), 2);
});

test("dueTier() fires tier 2 no later than the penultimate turn", () => {
  const settings = { tier2_turn_fraction: 1 };
  assert.deepEqual(firstTurns({ turns: 100 }, settings), { 1: 50, 2: 98 });
});

test("dueTier() ignores a turn cap below min_budget_floor_turns", () => {
  assert.equal(
    dueTier({
      caps: { turns: 20 },
      turnsUsed: 19,
      elapsedSeconds: 0,
      settings: { min_budget_floor_turns: 21 },
    }),
    0,
  );
  assert.deepEqual(firstTurns({ turns: 20 }, { min_budget_floor_turns: 20 }), { 1: 10, 2: 18 });
});

test("dueTier() ignores a time cap below min_budget_floor_seconds", () => {
  assert.equal(atSecond(600, 599, { min_budget_floor_seconds: 601 }), 0);
  assert.equal(atSecond(600, 599, { min_budget_floor_seconds: 600 }), 2);
});

test("dueTier() counts only enabled_axes", () => {
  const caps = { turns: 100, timeSeconds: 1000 };
  const at = (axes: string[], turnsUsed: number, elapsedSeconds: number) =>
    dueTier({ caps, turnsUsed, elapsedSeconds, settings: { enabled_axes: axes } });
  assert.equal(at(["turns"], 0, 999), 0);
  assert.equal(at(["time"], 99, 0), 0);
  assert.equal(at(["time"], 0, 800), 2);
  assert.equal(at([], 99, 999), 0);
});

test("dueTier() drops a 1-turn cap", () => {
  for (let t = 0; t < 5; t++) {
    assert.equal(dueTier({ caps: { turns: 1 }, turnsUsed: t, elapsedSeconds: 0 }), 0);
  }
  assert.deepEqual(firstTurns({ turns: 2 }), { 2: 0 });
});

test("dueTier() suppresses tier 1 on tiny caps unless allow_tiny_tier1", () => {
  assert.equal(atSecond(299, 150), 0);
  assert.equal(atSecond(299, 150, { allow_tiny_tier1: true }), 1);
  assert.equal(atSecond(300, 150), 1);
  assert.deepEqual(firstTurns({ turns: 11 }), { 1: 6, 2: 9 });
  assert.deepEqual(firstTurns({ turns: 9 }, { allow_tiny_tier1: true }), { 1: 5, 2: 7 });
  // A tiny time cap silences tier 1 even when the turn cap is large.
  assert.equal(
    dueTier({ caps: { turns: 100, timeSeconds: 200 }, turnsUsed: 60, elapsedSeconds: 0 }),
    0,
  );
});

test("dueTier() takes the largest axis fraction for tier 1", () => {
  assert.equal(
    dueTier({ caps: { turns: 100, timeSeconds: 3600 }, turnsUsed: 10, elapsedSeconds: 1800 }),
    1,
  );
  assert.equal(
    dueTier({ caps: { turns: 100, timeSeconds: 3600 }, turnsUsed: 50, elapsedSeconds: 10 }),
    1,
  );
});

test("dueTier() falls back to defaults for invalid settings", () => {
  assert.equal(
    dueTier({
      caps: { turns: 100 },
      turnsUsed: 50,
      elapsedSeconds: 0,
      settings: { tier_fractions: "x" },
    }),
    1,
  );
});

test("dueTier() fires token and dollar tiers at the turn fractions", () => {
  const at = (caps: { tokens?: number; usd?: number }, tokensUsed: number, usdUsed: number) =>
    dueTier({ caps, turnsUsed: 0, elapsedSeconds: 0, tokensUsed, usdUsed });
  assert.deepEqual([4999, 5000, 8999, 9000].map((t) => at({ tokens: 10_000 }, t, 0)), [0, 1, 1, 2]);
  assert.deepEqual([0.49, 0.5, 0.89, 0.9].map((d) => at({ usd: 1 }, 0, d)), [0, 1, 1, 2]);
  // A cost that is not known (NaN) never makes a tier due.
  assert.equal(at({ usd: 1 }, 0, NaN), 0);
  // The fractions and enabled_axes apply as to turns.
  const settings = { tier_fractions: [0.3, 0.6] };
  assert.equal(
    dueTier({ caps: { tokens: 100 }, turnsUsed: 0, elapsedSeconds: 0, tokensUsed: 60, settings }),
    2,
  );
  const axes = { enabled_axes: ["time", "turns", "usd"] };
  assert.equal(
    dueTier({
      caps: { tokens: 100 },
      turnsUsed: 0,
      elapsedSeconds: 0,
      tokensUsed: 99,
      settings: axes,
    }),
    0,
  );
});

test("dueTier() fires tier 1 of tokens and dollars even beside a tiny turn cap", () => {
  const caps = { turns: 9, usd: 1 };
  assert.equal(dueTier({ caps, turnsUsed: 1, elapsedSeconds: 0, usdUsed: 0.5 }), 1);
  assert.equal(dueTier({ caps, turnsUsed: 5, elapsedSeconds: 0, usdUsed: 0 }), 0, "turns: tiny");
});
