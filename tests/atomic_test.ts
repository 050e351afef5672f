// The library's one atomic write of a whole file (`_file_ops.ts`, public through persist.ts and mod.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { writeFileAtomic } from "../mod.ts";
import { writeFileAtomicSync } from "../persist.ts";
import { tempHome } from "./_helpers.ts";

test("writeFileAtomic() replaces a file and leaves no temporary file", async () => {
  const dir = tempHome();
  const file = path.join(dir, "a.md");
  await writeFileAtomic(file, "one");
  writeFileAtomicSync(file, "two");
  await writeFileAtomic(file, "three");
  assert.equal(fs.readFileSync(file, "utf8"), "three");
  assert.deepEqual(fs.readdirSync(dir), ["a.md"]);
});

test("writeFileAtomic() rejects, leaving nothing, when the directory is missing", async () => {
  const dir = tempHome();
  await assert.rejects(writeFileAtomic(path.join(dir, "missing", "a.md"), "x"), /ENOENT/);
  assert.deepEqual(fs.readdirSync(dir), []);
});
