// Which store a process uses: the store setting, with AGENT_CHECKPOINT_STORE winning over the file.
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadSettings } from "../../config.ts";
import { tempHome, writeConfig } from "../_helpers.ts";

test("AGENT_CHECKPOINT_STORE wins over the config file; the host's own settings win over both", () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint:\n  store: postgres://from-file/db\n");
  assert.equal(loadSettings({ home, env: {} }).settings.store, "postgres://from-file/db");
  const fromEnv = loadSettings({ home, env: { AGENT_CHECKPOINT_STORE: "postgres://from-env/db" } });
  assert.equal(fromEnv.settings.store, "postgres://from-env/db");
  assert.equal(fromEnv.sources.store, "env AGENT_CHECKPOINT_STORE");
  const fromHost = loadSettings({
    home,
    env: { AGENT_CHECKPOINT_STORE: "postgres://from-env/db" },
    overrides: { store: "postgres://from-host/db" },
  });
  assert.equal(fromHost.settings.store, "postgres://from-host/db");
  // Unset, the embedded store in the home.
  assert.equal(loadSettings({ home: tempHome(), env: {} }).settings.store, "");
});

test("a store that is not a postgres:// URL is refused with a warning, the embedded store kept", () => {
  const { settings, warnings } = loadSettings({
    home: tempHome(),
    env: { AGENT_CHECKPOINT_STORE: "mysql://db/fleet" },
  });
  assert.equal(settings.store, "");
  assert.equal(warnings.length, 1);
  assert.match(
    warnings[0]!,
    /setting store = "mysql:\/\/db\/fleet" from env AGENT_CHECKPOINT_STORE is invalid \(must be empty or a postgres:\/\/ URL\)/,
  );
});
