// Rules of the house that a reviewer would otherwise have to remember.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { underDeno } from "./_helpers.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

/** Every TypeScript source of the repository, relative to its root. */
function sources(dir = ""): string[] {
  return fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = path.join(dir, e.name);
    if (e.isDirectory()) {
      return e.name.startsWith(".") || e.name === "npm" || e.name === "node_modules"
        ? []
        : sources(rel);
    }
    return e.name.endsWith(".ts") ? [rel] : [];
  });
}

test(
  "no source takes a file path from a URL's pathname: it breaks a checkout whose path has a space",
  {
    skip: !underDeno && "reads the sources",
  },
  () => {
    const offenders = sources().filter((file) =>
      /(?:import\.meta\.url|new URL\([^)]*\))\)?\s*\.pathname/.test(
        fs.readFileSync(path.join(root, file), "utf8"),
      )
    );
    assert.deepEqual(offenders, [], "use fileURLToPath() from node:url");
  },
);
