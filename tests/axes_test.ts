// The budget axes are one table (AXES in _record.ts): a new axis is one entry there plus what is
// truly new about it. These tests fail when a consumer names the axes one by one again, and when
// one does not follow the table.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { underDeno } from "./_helpers.ts";
import { AXES, AXIS_NAMES, type BudgetAxis, SHARED_AXES } from "../_record.ts";
import {
  capsSetting,
  defaultSettings,
  type JsonSchema,
  resolveSettings,
  settingsSchema,
} from "../settings.ts";
import { tierPlan } from "../tier.ts";
import { noUse, recordUse } from "../_tree.ts";
import { treeRowOf, treeSummaries, treeTotalsText } from "../store/trees.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

/** The library's sources (not tests/, scripts/, docs/), relative to the root, `/`-separated. */
function librarySources(dir = ""): string[] {
  return fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = dir ? `${dir}/${e.name}` : e.name;
    if (e.isDirectory()) {
      return e.name.startsWith(".") || /^(npm|node_modules|tests|scripts|docs)$/.test(e.name)
        ? []
        : librarySources(rel);
    }
    return e.name.endsWith(".ts") ? [rel] : [];
  });
}

/** How far apart (characters) the names of one listing of the axes may be. */
const LISTING_SPAN = 300;

/**
 * The places where code names every axis the runs of a tree share (`turns`, `tokens`, `usd`),
 * one by one, within a few lines: a type, an object, a chain of `if`s, a sentence. Comment
 * lines are left out.
 */
export function axisListings(text: string, names: readonly string[]): number {
  const code = text.split("\n").filter((line) => !/^\s*(\*|\/\/|\/\*)/.test(line)).join("\n");
  const hits = [...code.matchAll(new RegExp(`\\b(${names.join("|")})\\b`, "g"))];
  let found = 0;
  for (let i = 0; i < hits.length; i++) {
    const seen = new Set<string>();
    let j = i;
    for (; j < hits.length && hits[j]!.index - hits[i]!.index <= LISTING_SPAN; j++) {
      seen.add(hits[j]![1]!);
      if (seen.size === names.length) break;
    }
    if (seen.size === names.length) {
      found++;
      i = j;
    }
  }
  return found;
}

/**
 * The listings left, by file: axis-specific wording (a checkpoint's own lines, a resumed run's
 * remaining caps, a host's cap options, the hot path's tier math, the shared-memory slots; the
 * run's own use, moved with the budget into run/_budget.ts).
 * It only shrinks: a file that goes through the table leaves it; a new listing fails.
 */
const LISTINGS_LEFT: Record<string, number> = {
  "_earlier.ts": 1,
  "_ledger.ts": 2,
  "_record.ts": 1,
  "_writer.ts": 3,
  "adapters/_shared.ts": 1,
  "cli/_explain_report.ts": 1,
  "cli/_ledger.ts": 1,
  "run.ts": 1,
  "run/_budget.ts": 4,
  "serve/_api.ts": 1,
  "tier.ts": 1,
  "watchdog.ts": 1,
};

test(
  "no consumer names the budget axes one by one beyond what is left: it goes through AXES (_record.ts)",
  { skip: !underDeno && "reads the sources" },
  () => {
    const names = SHARED_AXES.map((a) => a.name);
    // The scan finds a listing where there is one, and not where there is none.
    assert.equal(
      axisListings("if (caps.turns) a();\nif (caps.tokens) b();\nif (caps.usd) c();", names),
      1,
    );
    assert.equal(axisListings('const enforce = ["usd"];\n// turns, tokens', names), 0);
    const found: Record<string, number> = {};
    for (const file of librarySources().sort()) {
      const n = axisListings(fs.readFileSync(path.join(root, file), "utf8"), names);
      if (n > 0) found[file] = n;
    }
    assert.deepEqual(
      found,
      LISTINGS_LEFT,
      "go through AXES (or SHARED_AXES) of _record.ts instead of naming each axis; " +
        "a file with fewer listings: lower its count in LISTINGS_LEFT",
    );
  },
);

/** A copy of the table with an axis of tool calls added: one entry. */
const withToolCalls: readonly BudgetAxis[] = [
  ...AXES,
  {
    name: "tool_calls",
    setting: "tool_calls",
    settingDoc: "A tool-call cap for runs whose host gives none.",
    integer: true,
    capLabel: "Tool-call cap",
    unit: "tool calls",
    show: String,
    amount: (n) => `${n} tool calls`,
    tier2: "turn",
    shared: true,
    used: (r) => Number((r as { toolCalls?: unknown }).toolCalls) || 0,
  },
];

test("the caps setting is made from the table: an axis added to it is a cap setting at once", () => {
  const spec = capsSetting(withToolCalls);
  assert.deepEqual(Object.keys(spec.schema.properties ?? {}), withToolCalls.map((a) => a.setting));
  assert.deepEqual(spec.fields?.tool_calls?.check("12"), { ok: true, value: 12 });
  assert.equal(spec.fields?.tool_calls?.check(1.5).ok, false, "a whole number, as `integer` says");
});

test("every consumer of the table has every axis: settings, tier plans, records, trees", () => {
  const schema = settingsSchema.properties as Record<string, JsonSchema>;
  assert.deepEqual(schema.enabled_axes?.items?.enum, AXIS_NAMES);
  assert.deepEqual(schema.enforce?.items?.enum, AXIS_NAMES);
  assert.deepEqual(defaultSettings("/tmp/cp").enabled_axes, AXIS_NAMES);
  const capsSchema = settingsSchema.properties?.caps?.properties ?? {};
  assert.deepEqual(Object.keys(capsSchema), AXES.map((a) => a.setting));
  // A cap of 1000 on every axis, through the settings, a plan and a record.
  const { settings } = resolveSettings(defaultSettings("/tmp/cp"), [
    {
      source: "override",
      values: { caps: Object.fromEntries(AXES.map((a) => [a.setting, 1000])) },
    },
  ]);
  assert.deepEqual(Object.values(settings.caps), AXES.map(() => 1000));
  const caps = Object.fromEntries(AXES.map((a) => [a.name, { value: 1000, source: "host" }]));
  const plan = tierPlan(
    { turns: 1000, timeSeconds: 1000, tokens: 1000, usd: 1000 },
    defaultSettings("/tmp/cp"),
  );
  assert.deepEqual(Object.keys(plan.byAxis), AXIS_NAMES);
  const record = {
    v: 1,
    runId: "r",
    caps,
    turnsUsed: 3,
    usage: { inputTokens: 1, outputTokens: 2, usd: 0.5 },
  };
  // Trees: every shared axis is summed, capped and shown.
  const shared = SHARED_AXES.map((a) => a.name);
  assert.deepEqual(Object.keys(noUse()), shared);
  assert.deepEqual(Object.keys(recordUse(record)), shared);
  const row = treeRowOf({
    run_id: "r",
    record: JSON.stringify({ ...record, tree: { perCall: {} } }),
  }, 0);
  assert.deepEqual(Object.keys(row.perCall ?? {}), shared);
  const [tree] = treeSummaries(
    [
      { state: "ended", record: { ...record, status: "done", tree: { root: "r" } } },
    ] as unknown as Parameters<typeof treeSummaries>[0],
  );
  assert.deepEqual(Object.keys(tree!.caps), shared);
  assert.deepEqual(Object.keys(tree!.totals).filter((k) => k !== "usdUnknown"), shared);
  const text = treeTotalsText(tree!);
  for (const axis of SHARED_AXES) {
    assert.ok(text.includes(`of ${axis.show(1000)}`), `${axis.name} in ${text}`);
  }
});
