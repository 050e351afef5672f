/**
 * The hooks of two checkouts side by side, in one process: a checkout of an
 * earlier revision (before) and this one (after), interleaved over rounds,
 * each figure in ns per call with a clock read as the floor.
 *
 *   git worktree add --detach /tmp/base <revision>
 *   deno run -A scripts/ab_hooks.ts /tmp/base .
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
const [beforeDir, afterDir] = Deno.args;
const url = (dir: string) => new URL("mod.ts", `file://${path.resolve(dir)}/`).href;
const libs = {
  before: await import(url(beforeDir!)),
  after: await import(url(afterDir!)),
};
const N = 200_000;
type Fig = Record<string, number[]>;
const figs: Record<string, Fig> = { before: {}, after: {}, floor: {} };
const add = (who: string, what: string, ns: number) => (figs[who]![what] ??= []).push(ns);
for (let round = 0; round < 7; round++) {
  // floor: a clock read
  let t = performance.now();
  let x = 0;
  for (let i = 0; i < N; i++) x += performance.now();
  add("floor", "clock read", ((performance.now() - t) * 1e6) / N);
  for (const who of round % 2 ? ["before", "after"] : ["after", "before"]) {
    const lib = libs[who as "before" | "after"];
    const home = fs.mkdtempSync(path.join(os.tmpdir(), "ab-"));
    const ac = lib.createAgentCheckpoint({ home, env: {} });
    const run = ac.startRun({ sessionId: `ab-${who}-${round}` });
    for (let i = 0; i < 1000; i++) {
      run.preToolCall("t");
      run.postToolCall("t", { ok: true });
    }
    t = performance.now();
    for (let i = 0; i < N; i++) {
      run.preToolCall("t");
      run.postToolCall("t", { ok: true });
    }
    add(who, "preToolCall+postToolCall", ((performance.now() - t) * 1e6) / N);
    t = performance.now();
    for (let i = 0; i < N; i++) {
      run.preToolCall("t", { callId: "c" });
      run.postToolCall("t", { callId: "c", ok: true });
    }
    add(who, "pair with callId", ((performance.now() - t) * 1e6) / N);
    const run2 = ac.startRun({ sessionId: `ab2-${who}-${round}` });
    t = performance.now();
    for (let i = 0; i < N; i++) run2.preLlmCall();
    add(who, "preLlmCall (no cap)", ((performance.now() - t) * 1e6) / N);
    await run.end({ status: "done" });
    await run2.end({ status: "done" });
    await ac.close();
  }
  if (x === 0) console.log("");
}
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mm = (xs: number[]) =>
  `${Math.min(...xs).toFixed(0)} / ${med(xs).toFixed(0)} / ${Math.max(...xs).toFixed(0)} ns`;
console.log(`floor, clock read: ${mm(figs.floor!["clock read"]!)}`);
for (const what of Object.keys(figs.after!)) {
  const b = figs.before![what]!, a = figs.after![what]!;
  console.log(
    `${what}: before ${mm(b)}, after ${mm(a)}, after/before median ${
      (med(a) / med(b)).toFixed(2)
    }×`,
  );
}
Deno.exit(0);
