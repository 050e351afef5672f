import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import {
  CONFIG_ALIAS_LIMIT,
  CONFIG_SIZE_LIMIT,
  loadSettings,
  readConfig,
  resolveHome,
  SettingsSource,
} from "../config.ts";
import { createAgentCheckpoint } from "../mod.ts";
import { SHOW_LIMIT } from "../log.ts";
import { RunContext } from "../run.ts";
import { nowMs, RunTable } from "../_run_table.ts";
import { CheckpointWriter } from "../_writer.ts";
import { spawn } from "node:child_process";
import {
  captureLog,
  fixture,
  runScript,
  scriptCommand,
  tempHome,
  waitFor,
  writeConfig,
} from "./_helpers.ts";

const PROTO_KEYS = [
  "valueOf",
  "hasOwnProperty",
  "toLocaleString",
  "toString",
  "isPrototypeOf",
  "__proto__",
  "constructor",
];

const probe = async (which: string, dir = tempHome(), cwd?: string) => {
  const result = await runScript(fixture("config_probe"), [which, dir], {
    timeoutMs: 60_000,
    ...(cwd === undefined ? {} : { cwd }),
  });
  assert.equal(result.code, 0, `${which} ended with ${result.code}: ${result.stderr}`);
  return { value: JSON.parse(result.stdout.trim().split("\n").at(-1)!), stderr: result.stderr };
};

test("config keys named after Object.prototype properties are unknown keys, wherever they are", () => {
  const home = tempHome();
  const yaml = PROTO_KEYS.map((k) => `  ${k}: 1`).join("\n");
  writeConfig(
    home,
    `agent_checkpoint:\n${yaml}\n  mode: notify\n  caps:\n  ${yaml.replaceAll("\n", "\n  ")}\n` +
      `plugins:\n  entries:\n    agent-checkpoint:\n      settings:\n      ${
        yaml.replaceAll("\n", "\n      ")
      }\n`,
  );
  const overrides = JSON.parse(
    `{${PROTO_KEYS.map((k) => `"${k}": 1`).join(",")}, "caps": {"valueOf": 1, "__proto__": {}}}`,
  );
  const { settings, warnings } = loadSettings({ home, env: {}, overrides });
  assert.equal(settings.mode, "notify");
  assert.deepEqual(settings.caps, {});
  assert.equal(Object.getPrototypeOf(settings), Object.prototype);
  for (const key of PROTO_KEYS) {
    for (const where of ["config.yaml agent_checkpoint", "override"]) {
      assert.ok(
        warnings.includes(`unknown setting ${key} in ${where}; ignoring it`),
        `${key} in ${where}: ${warnings.join("\n")}`,
      );
    }
    assert.ok(
      warnings.includes(`unknown setting caps.${key} in config.yaml agent_checkpoint; ignoring it`),
    );
  }
});

test("createAgentCheckpoint() takes settings keyed valueOf or __proto__ without throwing, and runs", async () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint:\n  valueOf: 1\n  caps: { hasOwnProperty: 2 }\n");
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: JSON.parse('{"toLocaleString": 1, "__proto__": {"mode": "log-only"}}'),
    logger: log.logger,
  });
  assert.equal(ac.settings.mode, "snapshot");
  const run = ac.startRun({ sessionId: "proto", caps: { turns: 3 } });
  run.preLlmCall();
  assert.match(run.preLlmCall() ?? "", /Final budget checkpoint/);
  await run.end();
  await ac.close();
  const lines = log.records.map((r) => r.message).join("\n");
  assert.match(lines, /unknown setting valueOf in config.yaml agent_checkpoint/);
  assert.match(lines, /unknown setting __proto__ in override/);
});

test("settings whose getters throw, or a revoked proxy, cost a warning, never a throw", () => {
  const getter = Object.defineProperty({ mode: "notify" }, "enabled", {
    enumerable: true,
    get() {
      throw new Error("getter down");
    },
  });
  const a = loadSettings({ home: tempHome(), env: {}, overrides: getter });
  assert.equal(a.settings.mode, "notify");
  assert.match(a.warnings.join("\n"), /setting enabled in override cannot be read \(getter down\)/);
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  const b = loadSettings({ home: tempHome(), env: {}, overrides: proxy });
  assert.equal(b.settings.mode, "snapshot");
  assert.match(b.warnings.join("\n"), /settings in override cannot be read/);
});

test("an override's array is copied: changing it later changes no setting", () => {
  const fractions = [0.4];
  const { settings } = loadSettings({
    home: tempHome(),
    env: {},
    overrides: { tier_fractions: fractions },
  });
  fractions[0] = 2;
  assert.deepEqual(settings.tier_fractions, [0.4]);
});

/** A YAML alias bomb: `levels` levels of 9 aliases each, under a setting. */
const bomb = (levels: number) => {
  let yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (let i = 1; i <= levels; i++) {
    yaml += `a${i}: &a${i} [${Array(9).fill(`*a${i - 1}`).join(", ")}]\n`;
  }
  return `${yaml}agent_checkpoint:\n  mode: *a${levels}\n  tier_fractions: *a${levels}\n  caps: { turns: *a${levels} }\n`;
};

test("a YAML alias bomb as a setting's value costs bounded warnings, not a hang or a throw", () => {
  const home = tempHome();
  writeConfig(home, bomb(9)); // 9^10 leaves if expanded
  const { settings, warnings } = loadSettings({ home, env: {} });
  assert.equal(settings.mode, "snapshot");
  assert.deepEqual(settings.tier_fractions, [0.5]);
  assert.equal(warnings.length, 3, warnings.join("\n"));
  for (const warning of warnings) {
    assert.ok(warning.length < 2 * SHOW_LIMIT + 200, `${warning.length} characters`);
  }
});

test("a config.yaml with more aliases than the bound falls back to the defaults, with a warning", () => {
  const home = tempHome();
  const aliases = Array(CONFIG_ALIAS_LIMIT + 1).fill("*a").join(", ");
  writeConfig(home, `x: &a 1\ny: [${aliases}]\nagent_checkpoint: { mode: notify }\n`);
  const { settings, warnings } = loadSettings({ home, env: {} });
  assert.equal(settings.mode, "snapshot");
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /is not valid YAML/);
});

test("the default log file stays small after an alias bomb in config.yaml", async () => {
  const home = tempHome();
  writeConfig(home, bomb(9));
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  await ac.close();
  const log = path.join(home, "logs", "agent-checkpoint.log");
  assert.ok(fs.statSync(log).size < 16 * 1024, `${fs.statSync(log).size} bytes`);
});

test("a config.yaml over the size bound is not read: defaults and a warning", () => {
  const home = tempHome();
  writeConfig(home, `agent_checkpoint: { mode: notify }\n#${"x".repeat(CONFIG_SIZE_LIMIT)}\n`);
  const { settings, warnings } = loadSettings({ home, env: {} });
  assert.equal(settings.mode, "snapshot");
  assert.equal(warnings.length, 1);
  assert.match(
    warnings[0]!,
    /cannot read .*config\.yaml \(\d+ bytes, over the bound of 1048576\); using default/,
  );
});

test("a config.yaml that is a directory is not read: defaults and a warning", () => {
  const home = tempHome();
  fs.mkdirSync(path.join(home, "config.yaml"));
  assert.match(readConfig(home).warnings[0]!, /cannot read .*config\.yaml \(not a regular file\)/);
});

test("a config.yaml that is a FIFO with no writer does not hang: defaults and a warning", {
  skip: process.platform === "win32" && "no FIFOs",
}, async () => {
  const { value } = await probe("fifo-config");
  assert.equal(value.length, 1);
  assert.match(
    value[0],
    /cannot read .*config\.yaml \(not a regular file\); using default settings/,
  );
});

test("a config.yaml linked to /dev/zero is not read: defaults and a warning", {
  skip: process.platform === "win32" && "no /dev/zero",
}, async () => {
  const { value } = await probe("zero-config");
  assert.equal(value.length, 1);
  assert.match(
    value[0],
    /^cannot read .*config\.yaml \(not a regular file\); using default settings$/,
  );
});

test("resolveHome() and the constructor take a relative home in a deleted working directory", {
  skip: process.platform === "win32" && "a working directory cannot be deleted",
}, async () => {
  const cwd = tempHome();
  const { value } = await probe("deleted-cwd", cwd, cwd);
  // Node remembers the working directory it started in; Deno cannot resolve it.
  assert.ok(
    [path.join(cwd, "relative-home"), "relative-home"].includes(value.home),
    value.home,
  );
  assert.equal(value.dir, path.join(value.home, "agent-checkpoints"));
});

test("resolveHome() makes a relative home absolute from the working directory", () => {
  assert.equal(resolveHome("rel", {}), path.resolve("rel"));
  assert.equal(resolveHome("", { HERMES_HOME: "/h" }), "/h");
  assert.equal(resolveHome(42 as unknown as string, { HOME: "/u" }), "/u/.hermes");
});

test("loadSettings() takes no options, or bad ones, without throwing", () => {
  for (const options of [undefined, null, 7, "home"]) {
    const { settings } = loadSettings(options as never);
    assert.equal(typeof settings.mode, "string");
  }
});

test("SettingsSource reloads config.yaml when it changes, and tells onChange", () => {
  const home = tempHome();
  const seen: string[] = [];
  const source = new SettingsSource(home, {}, { watchdog_poll_seconds: 1 }, (loaded) => {
    seen.push(loaded.settings.mode);
  });
  writeConfig(home, "agent_checkpoint: { mode: notify }\n");
  assert.equal(source.at(0).mode, "notify");
  writeConfig(home, "agent_checkpoint: { mode: log-only, extra: true }\n");
  assert.equal(source.at(10).mode, "notify", "not before the poll interval");
  assert.equal(source.at(2000).mode, "log-only");
  assert.deepEqual(seen, ["snapshot", "notify", "log-only"]);
  assert.match(source.current.warnings.join("\n"), /unknown setting extra/);
});

test("a reload another reader saw first reaches a run's context at once, before its own poll", () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint: { mode: notify, watchdog_poll_seconds: 60 }\n");
  const source = new SettingsSource(home, {}, undefined);
  const shared = new RunTable(undefined, 1);
  const log = () => {};
  const context = new RunContext({
    source,
    shared,
    writer: new CheckpointWriter(shared, { log, comment: () => {}, written: () => {} }),
    log,
    workspaces: () => undefined,
    watchdog: () => {},
    ended: () => {},
  });
  const now = nowMs();
  assert.equal(context.at(now).mode, "notify");
  writeConfig(home, "agent_checkpoint: { mode: log-only, watchdog_poll_seconds: 60 }\n");
  assert.equal(context.at(now + 1000).mode, "notify", "not looked at before the poll interval");
  // Another reader of the same source (the keeper's settings, a run of another table) polls.
  assert.equal(source.at(now + 61_000).mode, "log-only");
  assert.equal(context.at(now + 1000).mode, "log-only", "the context's own poll is not due yet");
  assert.equal(context.version, source.version);
});

test("a changed config.yaml that is empty or not valid keeps the settings in force, warning once", () => {
  const home = tempHome();
  const warnings: string[] = [];
  writeConfig(home, "agent_checkpoint: { enabled: false, watchdog_poll_seconds: 1 }\n");
  const source = new SettingsSource(home, {}, undefined, (loaded) => {
    warnings.push(...loaded.warnings);
  });
  assert.equal(source.at(0).enabled, false);
  let now = 0;
  const reload = (yaml: string) => {
    writeConfig(home, yaml);
    now += 2000;
    return source.at(now);
  };
  for (
    const bad of ["", "agent_checkpoint: { enab", "", "- a list\n", "agent_checkpoint: { enab"]
  ) {
    assert.equal(reload(bad).enabled, false, `after ${JSON.stringify(bad)}`);
  }
  assert.equal(source.version, 0, "nothing changed");
  assert.equal(warnings.length, 3, warnings.join("\n"));
  assert.match(warnings[0]!, /config\.yaml .*empty.*; keeping the settings in force until/);
  assert.match(warnings[1]!, /not valid YAML/);
  assert.match(warnings[2]!, /does not hold a mapping/);
  // Only a valid file changes them.
  assert.equal(
    reload("agent_checkpoint: { enabled: true, watchdog_poll_seconds: 1 }\n").enabled,
    true,
  );
  assert.equal(source.version, 1);
  // A deleted file is the defaults, as at start.
  fs.rmSync(path.join(home, "config.yaml"));
  writeConfig(home, "agent_checkpoint: { enabled: false, watchdog_poll_seconds: 1 }\n");
  assert.equal(source.at(now += 2000).enabled, false);
  fs.rmSync(path.join(home, "config.yaml"));
  assert.equal(source.at(now += 2000).enabled, true);
});

test("at start, an empty config.yaml gives the defaults", () => {
  const home = tempHome();
  writeConfig(home, "");
  assert.equal(new SettingsSource(home, {}, undefined).at(0).enabled, true);
});

test("a config.yaml rewritten in place while a run is live keeps a disabled library off", async () => {
  const home = tempHome();
  const yaml = "agent_checkpoint: { enabled: false, watchdog_poll_seconds: 0.05 }\n";
  writeConfig(home, yaml);
  const { logger, records } = captureLog();
  const ac = createAgentCheckpoint({ home, env: {}, logger });
  const run = ac.startRun({ sessionId: "off", caps: { turns: 4, timeSeconds: 1 } });
  const [cmd, args] = scriptCommand(fixture("config_rewriter"), [
    path.join(home, "config.yaml"),
    yaml,
  ]);
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"] });
  let rewrites = 0;
  child.stdout.on("data", (d) => rewrites += String(d).split("\n").length - 1);
  const directives: string[] = [];
  try {
    // 40 poll intervals, each with a rewrite in it, each with every hook a run calls.
    for (let poll = 0; poll < 40; poll++) {
      const since = Date.now();
      const seen = rewrites;
      assert.ok(await waitFor(() => Date.now() - since >= 60 && rewrites > seen, 20_000));
      const directive = run.preLlmCall();
      if (directive !== undefined) directives.push(directive);
      run.preToolCall("bash");
      run.postToolCall("bash");
    }
  } finally {
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("close", resolve));
  }
  run.end({ status: "done" });
  await ac.close();
  assert.deepEqual(directives, []);
  assert.equal(fs.existsSync(path.join(home, "agent-checkpoints")), false, "no checkpoint file");
  const kept = records.filter((r) => /keeping the settings in force/.test(r.message));
  assert.ok(kept.length <= 4, `one warning per bad content, not per poll: ${kept.length}`);
});
