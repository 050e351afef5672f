/**
 * Checkpoint-file write figures (not part of the test suite):
 *
 * - a burst of 512 files: one `persistBlock` at a time against `persistBlocks`
 *   at 4, 16 and 64 in flight;
 * - a new run's first write in a directory of 0, 10,000 and 100,000 files
 *   (the temporary-file sweep, paid once per directory and process), and the
 *   next new run's first write there;
 * - agent lines lost while the library persists in a loop and an agent
 *   appends at 50 and 7,500 lines a second.
 *
 * Run: `deno run -A scripts/bench_writes.ts [--quick]`.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { persistBlock, persistBlocks } from "../persist.ts";
import { resetSwept } from "../_file_ops.ts";

const quick = process.argv.includes("--quick");
const block = (text: string) =>
  `<!-- agent-checkpoint:begin -->\n${text}\n${
    "figures ".repeat(60)
  }\n<!-- agent-checkpoint:data {"v":1} -->\n<!-- agent-checkpoint:end -->`;
const tempDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-"));
const ms = (n: number) => `${n.toFixed(1)} ms`;

function burstFiles(n: number): string[] {
  const dir = tempDir();
  const files = Array.from({ length: n }, (_, i) => path.join(dir, `run-${i}.md`));
  for (const f of files) fs.writeFileSync(f, `# agent notes ${f}\n\n${block("old")}\n`);
  return files;
}

async function burst(): Promise<void> {
  const n = 512;
  const rounds = quick ? 1 : 3;
  console.log(
    `\nBurst of ${n} files (each already holding agent text and a block), best of ${rounds}:`,
  );
  const rows: [string, (files: string[]) => Promise<void> | void][] = [
    ["one at a time (persistBlock)", (files) => {
      for (const f of files) persistBlock(f, block("new"));
    }],
  ];
  for (const c of [4, 16, 64]) {
    rows.push([`persistBlocks, ${c} in flight`, async (files) => {
      const errors = await persistBlocks(files.map((file) => ({ file, block: block("new") })), {
        concurrency: c,
      });
      if (errors.some((e) => e)) throw errors.find((e) => e);
    }]);
  }
  for (const [label, run] of rows) {
    let best = Infinity;
    for (let r = 0; r < rounds; r++) {
      const files = burstFiles(n);
      const started = performance.now();
      await run(files);
      best = Math.min(best, performance.now() - started);
    }
    console.log(`  ${label.padEnd(32)} ${ms(best).padStart(10)}`);
  }
}

function firstWrites(): void {
  console.log("\nFirst write of a new run in a directory of N files:");
  persistBlock(path.join(tempDir(), "warm-up.md"), block("x"));
  for (const count of quick ? [0, 10_000] : [0, 10_000, 100_000]) {
    const dir = tempDir();
    for (let i = 0; i < count; i++) fs.writeFileSync(path.join(dir, `old-${i}.md`), "");
    resetSwept();
    let started = performance.now();
    persistBlock(path.join(dir, "first.md"), block("x"));
    const first = performance.now() - started;
    started = performance.now();
    persistBlock(path.join(dir, "second.md"), block("x"));
    const second = performance.now() - started;
    console.log(
      `  ${String(count).padStart(7)} files: process's first write ${ms(first)}, ` +
        `next run's first write ${ms(second)}`,
    );
  }
}

async function appendLoss(rate: number, count: number): Promise<void> {
  const dir = tempDir();
  const file = path.join(dir, "run.md");
  fs.writeFileSync(file, "# notes\n");
  const writer = fileURLToPath(new URL("../tests/fixtures/append_writer.ts", import.meta.url));
  const child = spawn(process.execPath, [
    "run",
    "-A",
    "--quiet",
    writer,
    file,
    `${rate}`,
    `${count}`,
  ], {
    stdio: "inherit",
  });
  const exited = new Promise((resolve) => child.once("close", resolve));
  let persists = 0;
  const started = performance.now();
  while (!fs.existsSync(`${file}.done`)) {
    persistBlock(file, block(`persist ${persists++}`));
    await new Promise((r) => setTimeout(r, 0));
  }
  const took = performance.now() - started;
  persistBlock(file, block("final"));
  await exited;
  const seen = new Set<number>();
  let doubled = 0;
  for (const m of fs.readFileSync(file, "utf8").matchAll(/^agent line (\d+)$/gm)) {
    if (seen.has(Number(m[1]))) doubled++;
    seen.add(Number(m[1]));
  }
  const lost = count - seen.size;
  console.log(
    `  ${String(rate).padStart(5)} lines/s: ${lost} of ${count} lost (${
      (100 * lost / count).toFixed(3)
    } %), ${doubled} doubled, ${persists} persists in ${(took / 1000).toFixed(1)} s`,
  );
}

await burst();
firstWrites();
console.log("\nAgent lines lost while persisting in a loop:");
await appendLoss(50, quick ? 100 : 300);
await appendLoss(7500, quick ? 5000 : 30_000);
