/**
 * `fork RUN --at STEP --as NEW`: a 30-step own-loop agent run to its end as
 * RUN; the command line (a process of its own) forks it at step 10; the agent
 * started as NEW makes no model call and runs no tool for steps 1–10, goes
 * live at step 11, and ends with RUN's conversation; `show NEW --steps` says
 * it was forked. The refusals. On the embedded store and on PostgreSQL (where
 * RUN was cut off and retried, so the copied attempt's first steps are
 * themselves replayed calls).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { fixture, runScript, scriptCommand, tempHome } from "../_helpers.ts";
import { freshSchema, skipFleet } from "../store/_pg.ts";

const AGENT = fixture("journal_agent");
const CLI = fileURLToPath(
  new URL(`../../scripts/cli${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url),
);
const STEPS = 30;

/** One process of the agent, to its end (or SIGKILLed once its model gets request `hangAt`); its stdout. */
function agent(home: string, plan: Record<string, unknown>): Promise<string> {
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
      if (killed ? signal === "SIGKILL" : code === 0) resolve(out);
      else reject(new Error(`the agent ended ${code ?? signal}: ${err.slice(-2000)}`));
    });
  });
}

/** The plan of the agent as run `sessionId`, its files under `home`. */
function planOf(home: string, sessionId: string, store?: string) {
  return {
    sessionId,
    steps: STEPS,
    requests: path.join(home, `${sessionId}.requests`),
    tools: path.join(home, `${sessionId}.tools`),
    conversation: path.join(home, `${sessionId}.json`),
    ...(store ? { store } : {}),
  };
}

const lines = (file: string) => fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "");
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

/** The step lines of one attempt's section of `show --steps`, each trimmed. */
function section(text: string, attempt: number): string[] {
  const start = text.indexOf(`\nattempt ${attempt}: `);
  assert.ok(start >= 0, `attempt ${attempt} is listed:\n${text}`);
  const end = text.indexOf("\nattempt ", start + 1);
  return text.slice(start + 1, end === -1 ? undefined : end).split("\n").map((l) => l.trim())
    .filter((l) => l !== "");
}

const calls = (part: string[]) =>
  part.filter((l) => /^(model|tool) call \d/.test(l)).map((l) =>
    l.split(/\s{2,}/).slice(0, 2).join(" | ")
  );

/**
 * RUN made (to its end), forked at step 10 by the command line, NEW run: what
 * every store must show. `cutAt`: RUN's first attempt is SIGKILLed at that
 * step, and retried to its end.
 */
async function forkAndRun(extra: string[], store?: string, cutAt?: number) {
  const home = tempHome();
  const source = planOf(home, "source", store);
  if (cutAt !== undefined) await agent(home, { ...source, hangAt: cutAt });
  const done = await agent(home, source);
  assert.match(done, /\nDONE /);

  const forked = await runScript(CLI, [
    "fork",
    "source",
    "--at",
    "10",
    "--as",
    "forked",
    "--home",
    home,
    ...extra,
  ]);
  assert.equal(forked.code, 0, forked.stderr);
  assert.match(
    forked.stdout,
    new RegExp(
      `^Forked source at step 10 \\(its attempt ${
        cutAt === undefined ? 1 : 2
      }, of 30 steps\\) as forked: 10 model call\\(s\\) and 10 tool call\\(s\\) copied`,
    ),
  );

  const plan = planOf(home, "forked", store);
  const out = await agent(home, plan);
  // Steps 1–10 (0 to 9) replayed: no model request, no tool run; live from step 11 (10).
  assert.match(out, /\nDONE 10 10\n/);
  assert.deepEqual(lines(plan.requests), range(10, STEPS).map(String));
  assert.deepEqual(lines(plan.tools), range(10, STEPS).map((n) => `step ${n}`));
  assert.deepEqual(
    JSON.parse(fs.readFileSync(plan.conversation, "utf8")),
    JSON.parse(fs.readFileSync(source.conversation, "utf8")),
  );

  const shown = await runScript(CLI, ["show", "forked", "--steps", "--home", home, ...extra]);
  assert.equal(shown.code, 0, shown.stderr);
  const text = shown.stdout;
  assert.match(text, /^Run forked: 2 attempts/);
  const first = section(text, 1);
  assert.match(
    first[0]!,
    new RegExp(
      `^attempt 1: forked from source at step 10 \\(its attempt ${
        cutAt === undefined ? 1 : 2
      }'s first 10 steps, copied\\)`,
    ),
  );
  assert.deepEqual(
    calls(first),
    range(0, 10).flatMap((i) => [
      `model call ${i} | copied from source`,
      `tool call ${i} | copied from source`,
    ]),
  );
  assert.ok(first.includes("model calls: 10 copied; tool calls: 10 copied"), first.join("\n"));
  const second = section(text, 2);
  assert.match(second[0]!, /^attempt 2: ended done/);
  assert.deepEqual(
    calls(second),
    range(0, STEPS).flatMap((i) => {
      const how = i < 10 ? "replayed from attempt 1" : "live";
      return [`model call ${i} | ${how}`, `tool call ${i} | ${how}`];
    }),
  );

  // The refusals: each says what is wrong, and writes nothing.
  const refused = async (args: string[], message: RegExp) => {
    const r = await runScript(CLI, ["fork", ...args, "--home", home, ...extra]);
    assert.equal(r.code, 1, `${args.join(" ")}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, message);
  };
  await refused(["source", "--at", "5", "--as", "forked"], /run "forked" already exists/);
  await refused(["nope", "--at", "5", "--as", "other"], /no such run "nope"/);
  await refused(
    ["source", "--at", "31", "--as", "other"],
    /run "source" has 30 steps in its attempt \d: cannot fork at step 31/,
  );
  await refused(["source", "--at", "0", "--as", "other"], /step is a whole number from 1, not 0/);
  await refused(
    ["source", "--at", "5", "--as", "other", "--attempt", "9"],
    /attempt 9 .*no journaled call/,
  );
  const ls = await runScript(CLI, ["ls", "--json", "--home", home, ...extra]);
  assert.equal(ls.code, 0, ls.stderr);
  const ids = (JSON.parse(ls.stdout) as { runs: { runId: string }[] }).runs.map((r) => r.runId);
  assert.deepEqual(ids.sort(), ["forked", "source"]);
}

test("fork at step 10 of a 30-step run: the new run replays steps 1–10 (no model call, no tool run), goes live at 11, and ends with the same conversation", async () => {
  await forkAndRun([]);
});

test(
  "PostgreSQL: fork --store, of a run cut off at step 12 and retried (its copied steps are replayed calls)",
  {
    skip: skipFleet,
  },
  async () => {
    const db = await freshSchema();
    try {
      await forkAndRun(["--store", db.url], db.url, 12);
    } finally {
      await db.drop();
    }
  },
);
