// The settings table (docs/settings.md, linked from the README) is written for people; this
// keeps it true to the one settings table in settings.ts: every setting listed once, with its default, and nothing else.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { SETTINGS, type SettingSpec } from "../settings.ts";
import { doc } from "./_helpers.ts";

/** The rows of the README's settings table: key → the default as written. */
function readmeRows(): Map<string, string> {
  const text = fs.readFileSync(doc("settings.md"), "utf8");
  const start = text.indexOf("# Configuration");
  assert.ok(start === 0, "docs/settings.md opens with its Configuration section");
  const end = text.indexOf("\n## ", start + 1);
  const section = text.slice(start, end < 0 ? undefined : end);
  const rows = new Map<string, string>();
  for (const line of section.split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    const key = /^`([a-z0-9_.]+)`$/.exec(cells[1] ?? "")?.[1];
    if (key === undefined) continue;
    assert.ok(!rows.has(key), `the README lists ${key} twice`);
    rows.set(key, cells[2] ?? "");
  }
  return rows;
}

/** Every setting by its dotted key, with its spec. */
function settings(): [string, SettingSpec<unknown>][] {
  return Object.entries(SETTINGS as Record<string, SettingSpec<unknown>>).flatMap((
    [key, spec],
  ) =>
    spec.fields
      ? Object.entries(spec.fields).map(([field, sub]): [string, SettingSpec<unknown>] => [
        `${key}.${field}`,
        sub,
      ])
      : [[key, spec]]
  );
}

/** How the README writes a default. */
function written(key: string, value: unknown): string {
  if (key.endsWith("_template")) return "built in";
  if (key === "workspace_exclude") return "built in"; // a long list, shown in its own section
  if (key === "checkpoint_dir") return "`<home>/agent-checkpoints/`";
  if (value === undefined || value === "" || (Array.isArray(value) && value.length === 0)) {
    return "none";
  }
  if (Array.isArray(value)) return `\`[${value.join(", ")}]\``;
  if (typeof value === "object" && value !== null) {
    // A structured default (the workspace tool lists) is shown in its own section.
    return Object.keys(value).length === 0 ? "none" : "built in";
  }
  return `\`${String(value)}\``;
}

test("docs/settings.md: the settings table lists every setting once, with its default", () => {
  const rows = readmeRows();
  const missing: string[] = [];
  for (const [key, spec] of settings()) {
    const cell = rows.get(key);
    if (cell === undefined) missing.push(key);
    else assert.equal(cell, written(key, spec.default), `the README's default of ${key}`);
  }
  assert.deepEqual(missing, [], "settings the README does not list");
});

test("docs/settings.md: the settings table names no setting that does not exist", () => {
  const known = new Set(settings().map(([key]) => key));
  const unknown = [...readmeRows().keys()].filter((key) => !known.has(key));
  assert.deepEqual(unknown, []);
});
