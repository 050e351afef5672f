/**
 * Reading a kanban board a Hermes process writes: 20,000 cap discoveries of a
 * task while another process commits to its board as fast as it can, with
 * Hermes's pragmas (WAL, `synchronous=FULL`, `wal_autocheckpoint=100`,
 * `journal_size_limit=8388608`) and `BEGIN IMMEDIATE`. Counts the discoveries
 * that fell back (target: 0) and, for comparison, the single reads without a
 * retry that failed ("database is locked", "attempt to write a readonly
 * database": what the retries are for).
 *
 *   deno run -A scripts/bench_board.ts [--reads 20000]
 *
 * @module
 */
import process from "node:process";
import { liveBoardReads } from "../tests/_hermes.ts";
import { BOARD_READ_TRIES, BOARD_RETRY_MS } from "../discover.ts";

const at = process.argv.indexOf("--reads");
const reads = at === -1 ? 20_000 : Math.max(1, Number(process.argv[at + 1]) || 20_000);
const f = await liveBoardReads(reads);
const rate = f.commits / Math.max(f.seconds, 1e-9);
const pct = (n: number) => `${((100 * n) / Math.max(f.reads, 1)).toFixed(3)} %`;
console.log(`\n## A kanban board written by another process while it is read`);
console.log(
  `| what | figure | target |\n| --- | --- | --- |\n` +
    `| writer commits/s (while the reads ran) | ${Math.round(rate)} (${f.commits} in ${
      f.seconds.toFixed(1)
    } s) | ≥ 1,000 |\n` +
    `| cap discoveries | ${f.reads} | 20,000 |\n` +
    `| fallbacks (cap not from the board) | ${f.fallbacks} | 0 |\n` +
    `| single reads without a retry that failed | ${f.singleTryFailures} (${
      pct(f.singleTryFailures)
    }) | (what ${BOARD_READ_TRIES - 1} retries ${BOARD_RETRY_MS} ms apart absorb) |`,
);
for (const [message, n] of Object.entries(f.singleTryErrors)) console.log(`  ${n} × ${message}`);
for (const p of f.problems) console.log(`  fallback: ${p}`);
console.log(JSON.stringify({ ...f, commitsPerSecond: rate }));
