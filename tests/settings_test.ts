import { test } from "node:test";
import assert from "node:assert/strict";
import * as os from "node:os";
import * as path from "node:path";
import { loadSettings, settingsSchema } from "../mod.ts";
import { defaultSettings } from "../settings.ts";
import { tempHome, writeConfig } from "./_helpers.ts";

const load = (yaml: string | undefined, overrides?: Record<string, unknown>, env = {}) => {
  const home = tempHome();
  if (yaml !== undefined) writeConfig(home, yaml);
  return { home, ...loadSettings(overrides ? { home, env, overrides } : { home, env }) };
};

test("loadSettings() gives every default when there is no config file", () => {
  const { home, settings, warnings } = load(undefined);
  assert.deepEqual(settings, defaultSettings(path.join(home, "agent-checkpoints")));
  assert.deepEqual(warnings, []);
});

test("loadSettings() reads both sections and plugins.entries wins key by key", () => {
  const { settings, warnings, sources } = load(`
agent_checkpoint:
  mode: notify
  tier2_time_fraction: 0.7
  caps: { turns: 30, time_seconds: 100 }
plugins:
  entries:
    agent-checkpoint:
      settings:
        mode: log-only
        caps: { turns: 40 }
`);
  assert.deepEqual(warnings, []);
  assert.equal(settings.mode, "log-only");
  assert.equal(settings.tier2_time_fraction, 0.7);
  assert.deepEqual(settings.caps, { turns: 40, time_seconds: 100 });
  assert.equal(sources.mode, "config.yaml plugins.entries.agent-checkpoint.settings");
  assert.equal(sources.tier2_time_fraction, "config.yaml agent_checkpoint");
  assert.equal(sources["caps.time_seconds"], "config.yaml agent_checkpoint");
});

test("loadSettings() lets programmatic overrides win over the file", () => {
  const { settings, sources } = load("agent_checkpoint: { mode: notify, watchdog: false }", {
    mode: "snapshot",
  });
  assert.equal(settings.mode, "snapshot");
  assert.equal(sources.mode, "override");
  assert.equal(settings.watchdog, false);
});

const invalid: Array<[string, string, RegExp]> = [
  ["wrong type", "mode: 3", /setting mode = 3 .* is invalid .*; using "snapshot"/],
  ["out of range", "tier_fractions: [1.5]", /tier_fractions = \[1.5\].*using \[0.5\]/],
  ["too many fractions", "tier_fractions: [0.2, 0.5, 0.9]", /tier_fractions.*using \[0.5\]/],
  ["a boolean for a number", "tier2_turn_fraction: true", /tier2_turn_fraction = true.*using 0.9/],
  ["a number for a boolean", "enabled: 1", /setting enabled = 1 .*using true/],
  ["a boolean for a cap", "caps: { turns: true }", /caps.turns = true .*using no value/],
  ["a fraction for an int", "min_budget_floor_turns: 2.5", /min_budget_floor_turns = 2.5.*using 0/],
  ["a negative floor", "min_budget_floor_seconds: -1", /min_budget_floor_seconds = -1.*using 0/],
  [
    "an unknown axis",
    "enabled_axes: [time, money]",
    /enabled_axes.*using \["time","turns","tokens","usd"\]/,
  ],
  ["a price without output", "prices: { m: { input: 1 } }", /setting prices = .*using \{\}/],
  ["a string for a number", "stall_window_seconds: soon", /stall_window_seconds = "soon"/],
];
for (const [what, yaml, warning] of invalid) {
  test(`loadSettings() falls back to the default for ${what}, with a warning`, () => {
    const { settings, warnings } = load(`agent_checkpoint:\n  ${yaml}\n`);
    const key = yaml.split(":")[0] as keyof typeof settings;
    const defaults = defaultSettings(settings.checkpoint_dir);
    assert.deepEqual(settings[key], defaults[key]);
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(warnings[0]!, warning);
  });
}

test("loadSettings() warns about an unknown key and keeps the rest", () => {
  const { settings, warnings } = load("agent_checkpoint: { modee: notify, mode: notify }");
  assert.equal(settings.mode, "notify");
  assert.deepEqual(warnings, [
    "unknown setting modee in config.yaml agent_checkpoint; ignoring it",
  ]);
});

test("loadSettings() falls back to all defaults on malformed YAML", () => {
  const { settings, warnings } = load("agent_checkpoint: [unclosed\n  mode: notify");
  assert.equal(settings.mode, "snapshot");
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /is not valid YAML/);
});

test("loadSettings() ignores a section that is not a mapping, with a warning", () => {
  const { settings, warnings } = load("agent_checkpoint: [1, 2]\n");
  assert.equal(settings.mode, "snapshot");
  assert.match(warnings[0]!, /settings in config.yaml agent_checkpoint are not a mapping/);
});

test("loadSettings() ignores a config file that is not a mapping, with a warning", () => {
  const { warnings } = load("just a string\n");
  assert.match(warnings[0]!, /does not hold a mapping/);
});

test("loadSettings() accepts a numeric string for a cap but not for other numbers", () => {
  const { settings, warnings } = load(
    "agent_checkpoint: { caps: { time_seconds: '850' }, stall_window_seconds: '60' }",
  );
  assert.equal(settings.caps.time_seconds, 850);
  assert.equal(settings.stall_window_seconds, 600);
  assert.equal(warnings.length, 1);
});

test("loadSettings() floors watchdog_poll_seconds at 0.05", () => {
  assert.equal(
    load(undefined, { watchdog_poll_seconds: 0.001 }).settings.watchdog_poll_seconds,
    0.05,
  );
  assert.equal(load(undefined, { watchdog_poll_seconds: 2 }).settings.watchdog_poll_seconds, 2);
});

test("loadSettings() expands $VAR, ${VAR} and ~ in checkpoint_dir", () => {
  const env = { BASE: "/srv/runs", WHO: "ci", HOME: os.homedir() };
  const a = load(undefined, { checkpoint_dir: "$BASE/${WHO}/cp" }, env);
  assert.equal(a.settings.checkpoint_dir, "/srv/runs/ci/cp");
  const b = load(undefined, { checkpoint_dir: "~/cp" }, env);
  assert.equal(b.settings.checkpoint_dir, path.join(os.homedir(), "cp"));
  const c = load(undefined, { checkpoint_dir: "$MISSING/cp" }, env);
  assert.match(c.warnings[0]!, /names \$MISSING, which is not set/);
});

test("loadSettings() takes HERMES_HOME when no home is given", () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint: { mode: notify }");
  const { settings } = loadSettings({ env: { HERMES_HOME: home } });
  assert.equal(settings.mode, "notify");
  assert.equal(settings.checkpoint_dir, path.join(home, "agent-checkpoints"));
});

test("settingsSchema agrees with the defaults", () => {
  const defaults = defaultSettings("unused") as unknown as Record<string, unknown>;
  const props = settingsSchema.properties as Record<string, { default?: unknown }>;
  assert.deepEqual(Object.keys(props).sort(), Object.keys(defaults).sort());
  for (const [key, value] of Object.entries(defaults)) {
    if (key === "checkpoint_dir") continue; // depends on the home directory
    assert.deepEqual(props[key]!.default, value, key);
  }
});

test("settingsSchema rejects what loadSettings() rejects, for enums and ranges", () => {
  const props = settingsSchema.properties;
  assert.deepEqual(props.mode.enum, ["snapshot", "notify", "log-only"]);
  assert.equal(props.tier_fractions.maxItems, 2);
  assert.equal(props.tier2_time_fraction.maximum, 1);
  assert.equal(props.tier2_time_fraction.exclusiveMinimum, 0);
});

/**
 * A tiny JSON Schema checker for the keywords `settingsSchema` uses: enough to
 * run the schema against the values the checks reject.
 */
function schemaAccepts(schema: Record<string, unknown>, value: unknown): boolean {
  const s = schema as {
    type?: string | string[];
    enum?: unknown[];
    minimum?: number;
    exclusiveMinimum?: number;
    maximum?: number;
    minLength?: number;
    pattern?: string;
    items?: Record<string, unknown>;
    minItems?: number;
    maxItems?: number;
    uniqueItems?: boolean;
    anyOf?: Record<string, unknown>[];
    properties?: Record<string, Record<string, unknown>>;
    additionalProperties?: boolean | Record<string, unknown>;
    required?: string[];
  };
  if (s.anyOf && !s.anyOf.some((sub) => schemaAccepts(sub, value))) return false;
  if (s.enum && !s.enum.includes(value)) return false;
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    const typeOf = (t: string) =>
      t === "integer"
        ? Number.isInteger(value)
        : t === "number"
        ? typeof value === "number"
        : t === "null"
        ? value === null
        : t === "array"
        ? Array.isArray(value)
        : t === "object"
        ? typeof value === "object" && value !== null && !Array.isArray(value)
        : t === "string"
        ? typeof value === "string"
        : t === "boolean" && typeof value === "boolean";
    if (!types.some(typeOf)) return false;
  }
  if (typeof value === "number") {
    if (s.minimum !== undefined && !(value >= s.minimum)) return false;
    if (s.exclusiveMinimum !== undefined && !(value > s.exclusiveMinimum)) return false;
    if (s.maximum !== undefined && !(value <= s.maximum)) return false;
  }
  if (typeof value === "string") {
    if (s.minLength !== undefined && value.length < s.minLength) return false;
    if (s.pattern !== undefined && !new RegExp(s.pattern, "u").test(value)) return false;
  }
  if (Array.isArray(value)) {
    if (s.minItems !== undefined && value.length < s.minItems) return false;
    if (s.maxItems !== undefined && value.length > s.maxItems) return false;
    if (s.uniqueItems && new Set(value.map((v) => JSON.stringify(v))).size !== value.length) {
      return false;
    }
    if (s.items && !value.every((v) => schemaAccepts(s.items!, v))) return false;
  }
  const isObject = typeof value === "object" && value !== null && !Array.isArray(value);
  if ((s.properties || typeof s.additionalProperties === "object") && isObject) {
    const extra = s.additionalProperties;
    for (const [k, v] of Object.entries(value)) {
      const sub = s.properties && Object.hasOwn(s.properties, k) ? s.properties[k] : undefined;
      if (sub !== undefined) {
        if (!schemaAccepts(sub, v)) return false;
      } else if (extra === false) return false;
      else if (typeof extra === "object" && !schemaAccepts(extra, v)) return false;
    }
  }
  if (s.required && isObject && !s.required.every((k) => Object.hasOwn(value, k))) return false;
  return true;
}

/** Per key: values the checks must accept, then values they must reject (all JSON values). */
const SAMPLES: Record<string, [valid: unknown[], invalid: unknown[]]> = {
  enabled: [[true, false], [1, 0, "true", [], {}]],
  mode: [["snapshot", "notify", "log-only"], ["loud", 3, true, ""]],
  tier_fractions: [[[0.5], [0.3, 0.7], [1]], [[], [0], [1.5], [0.2, 0.5, 0.9], ["0.5"], 0.5, [
    true,
  ]]],
  tier2_time_fraction: [[0.8, 1, 0.001], [0, -0.1, 1.01, true, "0.8"]],
  tier2_turn_fraction: [[0.9], [0, 2, false, "x"]],
  min_budget_floor_turns: [[0, 5, 2.0], [-1, 2.5, true, "3"]],
  min_budget_floor_seconds: [[0, 0.5, 100], [-1, true, "10"]],
  enabled_axes: [[["time"], ["turns", "time"], [], ["tokens", "usd"]], [
    ["money"],
    ["time", "time"],
    "time",
    [1],
  ]],
  checkpoint_dir: [["/tmp/cp", "~/cp"], ["", "   ", 3, true]],
  allow_tiny_tier1: [[true], ["yes", 1]],
  caps: [[
    { turns: 3 },
    { time_seconds: 0.5 },
    { time_seconds: "850" },
    { turns: "40" },
    { tokens: 200000 },
    { usd: 2.5 },
  ], [
    { tokens: 1.5 },
    { usd: 0 },
    { turns: 2.5 },
    { turns: true },
    { turns: 0 },
    { turns: "2.5" },
    { time_seconds: -1 },
    { time_seconds: "soon" },
    { time_seconds: "0" },
    { time_seconds: "1e-400" },
    { time_seconds: false },
  ]],
  tier1_template: [["Checkpoint: {budget}"], ["", " \n ", 1]],
  tier2_template: [["Final: {budget}"], ["", false]],
  mid_run_persist: [[false], ["false"]],
  watchdog: [[true], [0]],
  watchdog_poll_seconds: [[0.001, 10, -5], [true, "10"]],
  uncapped_interval_seconds: [[0, 60], [-1, "60", true]],
  stall_window_seconds: [[0, 600], [-0.5, "soon"]],
  resume: [[true, false], ["no", 0]],
  resume_template: [["Resume from {checkpoint_file}"], ["", 7]],
  deadline_grace_seconds: [[0, 2.5], [-1, true, "5"]],
  workspace_snapshots: [[true], [1]],
  max_file_size_mb: [[0.5, 10], [0, -1, true, "10"]],
  max_total_size_mb: [[500], [0, false]],
  max_snapshots: [[1, 20], [0, 1.5, -3, true, "20"]],
  workspace_file_tools: [[{ names: ["edit_file"] }, { path_keys: [] }], [["edit_file"], {
    names: "x",
  }, { name: [] }]],
  workspace_shell_tools: [[{ names: ["run_command"], command_keys: ["cmd"] }], [{ names: [""] }]],
  workspace_exclude: [[[], ["*.log", "secret/"], ["!keep.log"]], [
    "*.log",
    [""],
    ["  "],
    ["a\nb"],
    [1],
    {},
  ]],
  workspace_include: [[[], [".env.example"]], [".env", [".env\r"], [null]]],
  max_tree_files: [[1, 200_000], [0, 1.5, "9"]],
  ledger: [[true, false], ["on", 1]],
  otel: [[true, false], ["on", 1]],
  progress_interval_seconds: [[0.25, 1, 5], [0, -1, true, "1"]],
  host_timeout_seconds: [[30, 2.5], [0, false, "30"]],
  ledger_retention_days: [[30, 0.5], [0, -7, "30"]],
  resume_budget: [["fresh", "remaining"], ["all", true, 1]],
  on_duplicate: [["warn", "refuse", "take-over"], ["takeover", true, 1]],
  machine: [["", "runner-7", "m.example.org"], ["two words", 7, "x".repeat(201)]],
  store: [["", "postgres://db.internal/fleet", "postgresql://ci@db:5432/agents?schema=ci"], [
    "mysql://db/fleet",
    "runs.db",
    3,
    true,
  ]],
  store_file_max_kb: [[256, 0.5], [0, -1, "256"]],
  prices: [[{}, { "gpt-4o": { input: 2.5, output: 10 } }, { free: { input: 0, output: 0 } }], [
    { m: { input: 1 } },
    { m: { input: -1, output: 1 } },
    { m: { input: 1, output: 2, cached: 1 } },
    { m: 3 },
    [],
    "gpt-4o",
  ]],
  tool_timeout_seconds: [[30, 0.5, "120"], [0, -1, true, "soon"]],
  enforce: [[[], ["usd"], ["tokens", "turns", "time"]], [["usd", "usd"], ["money"], "usd", 1]],
  effect_tools: [[[], ["send_email"], ["pay", "open_pr"]], [["pay", "pay"], [""], ["  "], "pay", [
    1,
  ]]],
  effect_result_max_bytes: [[0, 4096, 65_536], [-1, 1.5, true, "4096"]],
  journal: [[true, false], ["on", 1]],
  journal_max_bytes: [[0, 1024, 67_108_864], [-1, 1.5, true, "64MiB"]],
};

test("settingsSchema and the checks agree on every key's valid and invalid values", () => {
  const props = settingsSchema.properties as unknown as Record<string, Record<string, unknown>>;
  assert.deepEqual(Object.keys(SAMPLES).sort(), Object.keys(props).sort(), "a sample per key");
  for (const [key, [valid, invalid]] of Object.entries(SAMPLES)) {
    for (const value of valid) {
      const { warnings, sources } = loadSettings({
        home: "/nonexistent",
        env: {},
        overrides: { [key]: value },
      });
      assert.deepEqual(warnings, [], `${key} = ${JSON.stringify(value)}`);
      assert.ok(
        Object.entries(sources).some(([k, s]) => k.split(".")[0] === key && s === "override"),
        `${key} = ${JSON.stringify(value)} is taken`,
      );
      assert.ok(
        schemaAccepts(props[key]!, value),
        `the schema accepts ${key} = ${JSON.stringify(value)}`,
      );
    }
    for (const value of invalid) {
      const { warnings } = loadSettings({
        home: "/nonexistent",
        env: {},
        overrides: { [key]: value },
      });
      assert.equal(warnings.length, 1, `${key} = ${JSON.stringify(value)}: ${warnings.join("\n")}`);
      assert.match(warnings[0]!, new RegExp(`^setting ${key}(\\.\\w+)? = .* is invalid`));
      assert.ok(
        !schemaAccepts(props[key]!, value),
        `the schema rejects ${key} = ${JSON.stringify(value)}`,
      );
    }
  }
  // Settings as a whole: unknown keys are rejected by both.
  assert.ok(!schemaAccepts(settingsSchema as unknown as Record<string, unknown>, { modee: 1 }));
  assert.ok(
    schemaAccepts(settingsSchema as unknown as Record<string, unknown>, { mode: "notify" }),
  );
});

test("the new settings have their defaults: resume, deadlines and workspace snapshots", () => {
  const { settings } = load(undefined);
  assert.equal(settings.resume, true);
  assert.match(settings.resume_template, /\{checkpoint_file\}/);
  assert.match(settings.resume_template, /\{previous\}/);
  assert.match(settings.resume_template, /\{attempt\}/);
  assert.match(settings.resume_template, /read it first, continue from the next step it names/);
  assert.equal(settings.deadline_grace_seconds, 0);
  assert.equal(settings.workspace_snapshots, false);
  assert.equal(settings.max_file_size_mb, 10);
  assert.equal(settings.max_total_size_mb, 500);
  assert.equal(settings.max_snapshots, 20);
});

test("warnings print NaN, Infinity, -0 and bigints as themselves, not as null", () => {
  const { warnings } = load(
    "agent_checkpoint: { stall_window_seconds: .nan, tier2_time_fraction: .inf, tier_fractions: [-.inf] }",
    { min_budget_floor_turns: 10n, uncapped_interval_seconds: -Infinity },
  );
  const text = warnings.join("\n");
  assert.match(text, /stall_window_seconds = NaN /);
  assert.match(text, /tier2_time_fraction = Infinity /);
  assert.match(text, /tier_fractions = \[-Infinity\] /);
  assert.match(text, /min_budget_floor_turns = 10n /);
  assert.match(text, /uncapped_interval_seconds = -Infinity /);
  assert.doesNotMatch(text, /null/);
});

test("a warning shows at most a bounded part of a huge value", () => {
  const { warnings } = load(undefined, {
    mode: "x".repeat(1_000_000),
    tier_fractions: Array(1e5).fill(2),
  });
  assert.equal(warnings.length, 2);
  for (const w of warnings) assert.ok(w.length < 600, `${w.length} characters`);
});
