/**
 * `show RUN --steps`: an own-loop agent SIGKILLed mid-run and retried (each
 * attempt a process of its own), then the command line, a process of its own
 * too, lists each attempt's calls: the first attempt's live, the retry's
 * replayed prefix "replayed from attempt 1" and then live, with tokens,
 * durations, where each attempt stopped and its totals; a hostile tool result
 * printed escaped and short. On the embedded store and on PostgreSQL.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as path from "node:path";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { fixture, runScript, scriptCommand, tempHome } from "../_helpers.ts";
import { freshSchema, skipFleet } from "../store/_pg.ts";
import { attemptSteps, stepsText } from "../../cli/_steps.ts";
import type { JournalEntry, RunView } from "../../store/types.ts";

const AGENT = fixture("journal_agent");
const CLI = fileURLToPath(
  new URL(`../../scripts/cli${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url),
);

/** One process of the agent: to its end, or SIGKILLed once its model gets request `hangAt`. */
function agent(home: string, plan: Record<string, unknown>): Promise<void> {
  return new Promise((resolve, reject) => {
    const [cmd, argv] = scriptCommand(AGENT, [home, JSON.stringify(plan)]);
    const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    let killed = false;
    const hangAt = plan.hangAt as number | undefined;
    child.stdout.on("data", (chunk) => {
      out += chunk;
      if (!killed && hangAt !== undefined && out.includes(`MODEL ${hangAt}\n`)) {
        killed = true;
        child.kill("SIGKILL");
      }
    });
    child.stderr.on("data", (chunk) => err += chunk);
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      if (killed ? signal === "SIGKILL" : code === 0) resolve();
      else reject(new Error(`the agent ended ${code ?? signal}: ${err.slice(-2000)}`));
    });
  });
}

/** The agent SIGKILLed at step 6 (its tool at step 2 hostile), then retried to its end. */
async function killedAndRetried(store?: string): Promise<string> {
  const home = tempHome();
  const plan = {
    sessionId: "steps-agent",
    requests: path.join(home, "requests.txt"),
    tools: path.join(home, "tools.txt"),
    conversation: path.join(home, "conversation.json"),
    hostileAt: 2,
    ...(store ? { store } : {}),
  };
  await agent(home, { ...plan, hangAt: 6 });
  await agent(home, plan);
  return home;
}

/** The step lines of one attempt's section of the text, each trimmed. */
function section(text: string, attempt: number): string[] {
  const start = text.indexOf(`\nattempt ${attempt}: `);
  assert.ok(start >= 0, `attempt ${attempt} is listed:\n${text}`);
  const end = text.indexOf("\nattempt ", start + 1);
  return text.slice(start + 1, end === -1 ? undefined : end).split("\n").map((l) => l.trim())
    .filter((l) => l !== "");
}

/** What every store's `show --steps` must say of the run `killedAndRetried` made. */
async function checkSteps(home: string, extra: string[] = []) {
  const shown = await runScript(CLI, ["show", "steps-agent", "--steps", "--home", home, ...extra]);
  assert.equal(shown.code, 0, shown.stderr);
  const text = shown.stdout;
  // Never a raw terminal escape from a tool result: ESC, BEL, C1 CSI, the bidi override.
  // deno-lint-ignore no-control-regex
  assert.doesNotMatch(text, /[\x1b\x07\x9b\u202e]/);
  assert.match(text, /^Run steps-agent: 2 attempts/);

  const first = section(text, 1);
  assert.match(first[0]!, /^attempt 1: cut off/);
  const calls1 = first.filter((l) => /^(model|tool) call \d/.test(l));
  // Model call n, then its tool call, in order; each live, with its duration.
  assert.deepEqual(
    calls1.map((l) => l.split(/\s{2,}/).slice(0, 2).join(" | ")),
    Array.from({ length: 6 }, (_, i) => [`model call ${i} | live`, `tool call ${i} | live`]).flat(),
  );
  for (const l of calls1) assert.match(l, / \d+ ms( |$)/, l);
  assert.match(calls1[0]!, /model call 0 +live +100 in \/ 10 out +\d+ ms$/);
  assert.match(calls1[1]!, /tool call 0 +live +append +\d+ ms +\{"appended":0\}$/);
  assert.ok(first.some((l) => /^cut off after tool call 5 \(append\)/.test(l)), first.join("\n"));
  assert.ok(first.includes("model calls: 6 live, 0 replayed; tool calls: 6 live, 0 replayed"));

  const second = section(text, 2);
  assert.match(second[0]!, /^attempt 2: ended done/);
  const calls2 = second.filter((l) => /^(model|tool) call \d/.test(l));
  assert.deepEqual(
    calls2.map((l) => l.split(/\s{2,}/).slice(0, 2).join(" | ")),
    Array.from({ length: 10 }, (_, i) => {
      const how = i < 6 ? "replayed from attempt 1" : "live";
      return [`model call ${i} | ${how}`, `tool call ${i} | ${how}`];
    }).flat(),
  );
  // A replayed call has its tokens (journaled with it) and no duration: it took none.
  assert.match(calls2[0]!, /^model call 0 +replayed from attempt 1 +100 in \/ 10 out$/);
  assert.match(calls2[12]!, /^model call 6 +live +106 in \/ 10 out +\d+ ms$/);
  assert.ok(second.includes("ended done after tool call 9 (append)"), second.join("\n"));
  assert.ok(second.includes("model calls: 4 live, 6 replayed; tool calls: 4 live, 6 replayed"));

  // The hostile result, live in attempt 1 and replayed in attempt 2: escaped, short, its size.
  for (const line of [calls1[5]!, calls2[5]!]) {
    assert.match(line, /^tool call 2 /);
    assert.ok(line.includes("\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202eAAA"), line);
    assert.match(line, /… \(9\.8 KiB\)$/);
    assert.ok(line.length < 160, `${line.length}: ${line}`);
  }
  assert.ok(text.length < 4000, `the whole text is short: ${text.length}`);

  const json = await runScript(CLI, [
    "show",
    "steps-agent",
    "--steps",
    "--json",
    "--home",
    home,
    ...extra,
  ]);
  assert.equal(json.code, 0, json.stderr);
  const got = JSON.parse(json.stdout) as {
    attempts: {
      attempt: number;
      state: string;
      status?: string;
      totals: unknown;
      steps: Record<string, unknown>[];
    }[];
  };
  assert.deepEqual(got.attempts.map((a) => [a.attempt, a.state, a.status]), [
    [1, "cut-off", undefined],
    [2, "ended", "done"],
  ]);
  assert.deepEqual(got.attempts[1]!.totals, {
    models: { live: 4, replayed: 6 },
    tools: { live: 4, replayed: 6 },
  });
  const models = got.attempts[1]!.steps.filter((s) => s.kind === "model");
  assert.deepEqual(models.map((s) => s.replayedFrom ?? null), [
    1,
    1,
    1,
    1,
    1,
    1,
    null,
    null,
    null,
    null,
  ]);
  assert.ok(models.slice(6).every((s) => typeof s.ms === "number" && s.ms >= 0));
  assert.ok(models.slice(0, 6).every((s) => s.ms === undefined));
  const hostile = got.attempts[1]!.steps.find((s) => s.kind === "tool" && s.index === 2)!;
  assert.equal(hostile.resultCut, true);
  assert.ok((hostile.result as string).length <= 200);
  assert.ok((hostile.resultBytes as number) > 10_000);
}

test("show --steps after a SIGKILL and a retry: attempt 1 live, attempt 2 replayed from attempt 1 then live; a hostile result escaped and short", async () => {
  await checkSteps(await killedAndRetried());
});

test("PostgreSQL: show --steps --store reads each attempt's journal from the fleet store", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  try {
    const home = await killedAndRetried(db.url);
    await checkSteps(home, ["--store", db.url]);
  } finally {
    await db.drop();
  }
});

test("show --steps: a run with no ledger record is no such run; a home with no ledger says --steps needs one", async () => {
  const home = await killedAndRetried();
  const none = await runScript(CLI, ["show", "nope", "--steps", "--home", home]);
  assert.equal(none.code, 1);
  assert.match(none.stderr, /no such run "nope" in the run ledger/);
  const bare = await runScript(CLI, ["show", "steps-agent", "--steps", "--home", tempHome()]);
  assert.equal(bare.code, 1);
  assert.match(bare.stderr, /no run ledger in .*--steps reads the run journal/);
});

/** A record of attempt `attempt` for the formatter's own tests. */
function view(attempt: number, extra: Record<string, unknown>, state: string): RunView {
  return {
    record: {
      runId: "r",
      attempt,
      dialect: "chat",
      caps: {},
      turnsUsed: 3,
      elapsedSeconds: 1,
      tier: 0,
      inFlight: [],
      recent: [],
      notes: [],
      host: { machine: "m", pid: 7, start: "" },
      status: "live",
      startedAt: 1000,
      updatedAt: 2000,
      ...extra,
    },
    state,
  } as unknown as RunView;
}

const entry = (kind: "model" | "tool", index: number, at: number, more = {}): JournalEntry => ({
  runId: "r",
  attempt: 1,
  kind,
  index,
  key: "k",
  ...(kind === "tool" ? { tool: "bash" } : {}),
  body: "{}",
  at,
  ms: 5,
  ...more,
});

test("show --steps places a tier crossing before the call it was crossed at, and names the tool in flight at a cut-off", () => {
  const [a] = attemptSteps(
    [view(
      1,
      { tier: 1, tierAt: { 1: 1250 }, inFlight: [{ tool: "deploy", startedAt: 1400 }] },
      "cut-off",
    )],
    [entry("model", 0, 1100), entry("tool", 0, 1200), entry("model", 1, 1300)],
  );
  assert.deepEqual(a!.steps.map((s) => `${s.kind} ${s.kind === "tier" ? s.tier : s.index}`), [
    "model 0",
    "tool 0",
    "tier 1",
    "model 1",
  ]);
  assert.equal(
    a!.stopped,
    "cut off after model call 1, with deploy in flight, model call 2 begun and never journaled",
  );
  const text = stepsText("r", [a!]);
  assert.match(text, /attempt 1: cut off .*; reached tier 1\n/);
  assert.match(text, /\n {2}tier 1 +crossed\n/);
  // A record written before tiers had times: its tier at the attempt's head.
  const [old] = attemptSteps([view(1, { tier: 2 }, "cut-off")], []);
  assert.match(stepsText("r", [old!]), /reached tier 2 \(its record holds no time for tier 1, 2\)/);
  assert.match(stepsText("r", [old!]), /no journaled call/);
});

test("show --steps orders calls journaled in the same millisecond as the loop made them", () => {
  // Replayed calls carry the replay's time, all alike: their order is their source attempt's.
  const [, b] = attemptSteps([view(1, {}, "cut-off"), view(2, {}, "live")], [
    entry("model", 0, 100),
    entry("tool", 0, 100, { ms: 0 }),
    entry("tool", 1, 100, { ms: 0 }),
    entry("model", 1, 101),
    entry("model", 0, 500, { attempt: 2, replayed: 1 }),
    entry("tool", 0, 500, { attempt: 2, replayed: 1 }),
    entry("tool", 1, 500, { attempt: 2, replayed: 1 }),
    entry("model", 1, 500, { attempt: 2, replayed: 1 }),
    // Live calls in the same millisecond: the one that began first, first.
    entry("tool", 2, 510, { attempt: 2, ms: 0 }),
    entry("model", 2, 510, { attempt: 2, ms: 8 }),
  ]);
  assert.deepEqual(b!.steps.map((s) => `${s.kind} ${s.kind === "tier" ? s.tier : s.index}`), [
    "model 0",
    "tool 0",
    "tool 1",
    "model 1",
    "model 2",
    "tool 2",
  ]);
});
