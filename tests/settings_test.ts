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
  ["an unknown axis", "enabled_axes: [time, tokens]", /enabled_axes.*using \["time","turns"\]/],
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
