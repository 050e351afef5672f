/**
 * A file watcher in a process of its own, for the benchmarks: it watches a
 * checkpoint directory with `fs.watch()` and, for each file, appends a line
 * to a report file the first time the file is seen and each time its budget
 * tier rises:
 *
 *   {"f":"<name>","tier":<0|1|2>,"t":<ms on the shared clock>}
 *
 * `t` is when the event that showed the file arrived, on the clock every
 * process shares (`performance.timeOrigin + performance.now()`). A file with
 * no checkpoint block (the bare floor's) counts as tier 0. The first line of
 * the report is `{"ready":true}`. It exits after `--max-seconds` (default 900)
 * or when its standard input closes.
 *
 *   deno run -A scripts/_bench_watcher.ts DIR REPORT [--max-seconds N]
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";

const clock = () => performance.timeOrigin + performance.now();
const [dir, report] = process.argv.slice(2);
if (!dir || !report) {
  console.error("usage: _bench_watcher.ts DIR REPORT [--max-seconds N]");
  process.exit(2);
}
const maxAt = process.argv.indexOf("--max-seconds");
const maxSeconds = maxAt === -1 ? 900 : Number(process.argv[maxAt + 1]);

fs.mkdirSync(dir, { recursive: true });
const out = fs.openSync(report, "a");
const seen = new Map<string, number>();
const TIER = /"tier":(\d)/;

function look(name: string, t: number): void {
  if (name.startsWith(".") || name.endsWith(".tmp")) return;
  let text: string;
  try {
    text = fs.readFileSync(path.join(dir!, name), "utf8");
  } catch {
    return; // gone again, or not there yet
  }
  const data = text.lastIndexOf("<!-- agent-checkpoint:data ");
  const tier = data === -1 ? 0 : Number(TIER.exec(text.slice(data))?.[1] ?? 0);
  const before = seen.get(name);
  if (before !== undefined && before >= tier) return;
  seen.set(name, tier);
  fs.writeSync(out, JSON.stringify({ f: name, tier, t }) + "\n");
}

const watcher = fs.watch(dir, (_event, filename) => {
  const t = clock();
  if (filename) look(String(filename), t);
});
watcher.on("error", (error) => {
  fs.writeSync(out, JSON.stringify({ error: String(error) }) + "\n");
});
fs.writeSync(out, JSON.stringify({ ready: true }) + "\n");

const stop = () => {
  try {
    watcher.close();
  } finally {
    process.exit(0);
  }
};
setTimeout(stop, maxSeconds * 1000);
process.stdin.on("end", stop);
process.stdin.on("close", stop);
process.stdin.resume();
