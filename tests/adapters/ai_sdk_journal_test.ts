// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The AI SDK adapter journals its model calls through the SDK's own
 * middleware (`wrapLanguageModel`) and its tool calls through `run.journal`:
 * a 10-step `generateText` / `streamText` agent SIGKILLed while its model
 * answers step 6 and retried in a fresh process with the same session id
 * makes one extra model request, runs each tool step once and ends with the
 * steps of a run never killed; with `journal: false` the retry asks the model
 * again for every step. The model server (here, in the test's process)
 * counts the requests, so the count survives the kill.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import * as path from "node:path";
import { spawn } from "node:child_process";
import * as ai7 from "npm:ai@7.0.173";
import { MockLanguageModelV4 } from "npm:ai@7.0.173/test";
import { createAgentCheckpoint } from "../../mod.ts";
import { checkpointed } from "../../adapters/ai_sdk.ts";
import { fixture, scriptCommand, tempHome } from "../_helpers.ts";
import { openSqliteStore, storeFile } from "../../store/sqlite.ts";

const AGENT = fixture("ai_sdk_journal_agent");
/** The most a child may take to reach its step, or to end, on a busy machine. */
const BOUND_MS = 240_000;

type Mode = "generate" | "stream";

/**
 * The model server: it counts each request's step, and never answers the
 * first at `hangAt` (with `midStream`, the first request for the rest of
 * that step's stream, which it does not count).
 */
async function modelServer(hangAt?: number, midStream = false) {
  const requests: number[] = [];
  const rests: number[] = [];
  const notes: number[] = [];
  const held: http.ServerResponse[] = [];
  let hang!: () => void;
  const hung = new Promise<void>((resolve) => hang = resolve);
  let hangs = hangAt !== undefined;
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => body += chunk);
    req.on("end", () => {
      const { step, rest, note } = JSON.parse(body) as {
        step: number;
        rest?: boolean;
        note?: boolean;
      };
      (rest ? rests : requests).push(step);
      if (note) notes.push(step);
      if (hangs && step === hangAt && (rest === true) === midStream) {
        hangs = false;
        held.push(res);
        hang();
        return;
      }
      res.end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/`,
    requests,
    rests,
    notes,
    hung,
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Resolves with `value`, or rejects once `ms` have passed. */
function bounded<T>(value: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([value, late]).finally(() => clearTimeout(timer));
}

/** One process of the agent: to its end, or SIGKILLed once the server holds its request. */
function agent(
  home: string,
  plan: Record<string, unknown>,
  hung?: Promise<void>,
): Promise<{ killed: boolean; out: string; err: string }> {
  const [cmd, argv] = scriptCommand(AGENT, [home, JSON.stringify(plan)]);
  const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  let killed = false;
  child.stdout.on("data", (chunk) => out += chunk);
  child.stderr.on("data", (chunk) => err += chunk);
  const exited = new Promise<{ killed: boolean; out: string; err: string }>((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      if (killed ? signal === "SIGKILL" : code === 0) resolve({ killed, out, err });
      else reject(new Error(`the agent ended ${code ?? signal}: ${err.slice(-3000)}`));
    });
  });
  hung?.then(() => {
    killed = true;
    child.kill("SIGKILL");
  });
  return bounded(exited, BOUND_MS, "the agent").catch((error) => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    throw error;
  });
}

const lines = (file: string) =>
  fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "") : [];

interface Outcome {
  requests: number[];
  rests: number[];
  /** The steps whose request carried the adapter's note (the resume text). */
  notes: number[];
  tools: string[];
  middleware: string[];
  result: {
    text: string;
    steps: { response: { timestamp: string } }[];
    replayed: number;
    replayedTools: number;
  };
  log: string;
  home: string;
}

/**
 * The agent of `major` in `mode`: killed once its model gets the request of
 * step `hangAt` (when given), then run (again) to its end in a fresh process.
 */
async function killedAndRetried(
  major: number,
  mode: Mode,
  options: {
    hangAt?: number;
    midStream?: boolean;
    settings?: Record<string, unknown>;
    middleware?: boolean;
  } = {},
): Promise<Outcome> {
  const home = tempHome();
  const server = await modelServer(options.hangAt, options.midStream);
  const files = {
    tools: path.join(home, "tools.txt"),
    out: path.join(home, "out.json"),
    ...(options.middleware ? { middleware: path.join(home, "middleware.txt") } : {}),
  };
  const plan = {
    sessionId: `ai-sdk-journal-${major}-${mode}`,
    major,
    mode,
    server: server.url,
    ...files,
    ...(options.settings ? { settings: options.settings } : {}),
    ...(options.midStream ? { midStream: true } : {}),
  };
  try {
    if (options.hangAt !== undefined) {
      const first = await agent(home, plan, server.hung);
      assert.ok(first.killed, "killed while its model call was in flight");
      // The kill came while step `hangAt` was asked for: the steps before it each ran their tool.
      assert.equal(lines(files.tools).length, options.hangAt);
    }
    const last = await agent(home, plan);
    assert.match(last.out, /DONE \d+ \d+/);
    return {
      requests: [...server.requests],
      rests: [...server.rests],
      notes: [...server.notes],
      tools: lines(files.tools),
      middleware: files.middleware ? lines(files.middleware) : [],
      result: JSON.parse(fs.readFileSync(files.out, "utf8")),
      log: last.err,
      home,
    };
  } finally {
    await server.close();
  }
}

/** The result of a run never killed, once per major and mode. */
const unkilled = new Map<string, Promise<Outcome>>();
function unkilledRun(major: number, mode: Mode): Promise<Outcome> {
  const key = `${major} ${mode}`;
  if (!unkilled.has(key)) unkilled.set(key, killedAndRetried(major, mode));
  return unkilled.get(key)!;
}

const STEPS = Array.from({ length: 9 }, (_, i) => `step ${i}`);
const ALL = Array.from({ length: 10 }, (_, i) => i);

/** The steps as the SDK gave them, without what says how they were got. */
const stepsOf = (o: Outcome) => ({ text: o.result.text, steps: o.result.steps });

async function assertResumedAtStep6(major: number, mode: Mode, middleware = false) {
  const got = await killedAndRetried(major, mode, { hangAt: 6, middleware });
  // Steps 0..6 in the killed attempt; the retry asks again only for step 6, the call in flight.
  assert.deepEqual(got.requests, [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]);
  assert.ok(got.requests.length <= 10 + 1);
  assert.deepEqual(got.tools, STEPS); // each tool step once
  assert.equal(got.result.replayed, 6);
  assert.equal(got.result.replayedTools, 6);
  assert.match(got.log, /replayed 6 model call\(s\) and 6 tool call\(s\) of attempt 1/);
  // The resume text went into the first live call, step 6, not into a replayed one.
  assert.deepEqual(got.notes, [6]);
  const never = await unkilledRun(major, mode);
  assert.deepEqual(never.requests, ALL);
  assert.deepEqual(stepsOf(got), stepsOf(never));
  assert.equal(got.result.steps.length, 10);
  // Replayed steps' timestamps came back as Dates.
  assert.equal(got.result.steps[0]!.response.timestamp, "2026-01-01T00:00:00.000Z");
  // The retry's turns and use are its live calls' only (steps 6 to 9): the replayed ones are not
  // counted again.
  const store = openSqliteStore({ file: storeFile(got.home), hostTimeoutSeconds: 30 });
  try {
    const latest = await store.latest(`ai-sdk-journal-${major}-${mode}`);
    assert.equal(latest?.record.attempt, 2);
    assert.equal(latest?.record.turnsUsed, 4);
    assert.deepEqual(latest?.record.usage, {
      inputTokens: 106 + 107 + 108 + 109,
      outputTokens: 40,
    });
    assert.equal(latest?.record.status, "done");
  } finally {
    await store.close();
  }
  return got;
}

for (const major of [5, 6, 7]) {
  test(`ai v${major} generateText SIGKILLed at step 6 and retried: one extra request, each tool step once, the unkilled steps`, async () => {
    await assertResumedAtStep6(major, "generate");
  });

  test(`ai v${major} streamText SIGKILLed at step 6 and retried: one extra request, each tool step once, the unkilled steps`, async () => {
    await assertResumedAtStep6(major, "stream");
  });
}

test("journal: false: a retry asks the model again for every step, and runs every tool again", async () => {
  const got = await killedAndRetried(7, "generate", { hangAt: 6, settings: { journal: false } });
  assert.deepEqual(got.requests, [0, 1, 2, 3, 4, 5, 6, ...ALL]);
  assert.deepEqual(got.tools, [...STEPS.slice(0, 6), ...STEPS]);
  assert.equal(got.result.replayed, 0);
  assert.equal(got.result.replayedTools, 0);
});

for (const mode of ["generate", "stream"] as const) {
  test(`ai v7 ${mode}: the user's own wrapLanguageModel middleware sees every live call, and no replayed one`, async () => {
    const got = await assertResumedAtStep6(7, mode, true);
    const kind = mode === "generate" ? "generate" : "stream";
    assert.deepEqual(got.middleware, got.requests.map((step) => `${kind} ${step}`));
  });
}

test("ai v7 streamText SIGKILLed mid-stream at step 6: the cut-off stream was not journaled, so the retry asks for it again", async () => {
  const got = await killedAndRetried(7, "stream", { hangAt: 6, midStream: true });
  assert.deepEqual(got.requests, [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]);
  // The rest of step 6's stream was asked for twice: cut off once, then live again.
  assert.deepEqual(got.rests, [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]);
  assert.deepEqual(got.tools, STEPS);
  assert.equal(got.result.replayed, 6);
  assert.equal(got.result.replayedTools, 6);
  assert.deepEqual(stepsOf(got), stepsOf(await unkilledRun(7, "stream")));
});

// deno-lint-ignore no-explicit-any
type Any = any;

test("ai v7, in one process: a step's tool calls that run at once and end out of order are replayed each as its own, after a failed attempt", async () => {
  const home = tempHome();
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  const stepOf = (prompt: Any[]) => prompt.filter((m) => m.role === "tool").length;
  const ran: string[] = [];
  const asked: number[] = [];
  /** An attempt: the model fails at step `failAt` (when given); each step calls `a` and `b` at once. */
  const attempt = async (failAt?: number) => {
    const model = new MockLanguageModelV4({
      doGenerate: (options: Any) => {
        const n = stepOf(options.prompt);
        asked.push(n);
        if (n === failAt) return Promise.reject(new Error("provider down"));
        return Promise.resolve({
          content: n < 4
            ? ["a", "b"].map((t) => ({
              type: "tool-call",
              toolCallId: `${t}-${n}`,
              toolName: t,
              input: JSON.stringify({ n }),
            }))
            : [{ type: "text", text: "done" }],
          finishReason: { unified: n < 4 ? "tool-calls" : "stop", raw: "x" },
          usage,
          warnings: [],
          response: { id: `r-${n}`, timestamp: new Date(Date.UTC(2026, 0, 1, n)), modelId: "m" },
        });
      },
    });
    // `a` ends only after `b` has: the calls of a step end in the other order than they start.
    let bDone!: () => void;
    let waiting = Promise.resolve();
    const tools = {
      a: ai7.tool({
        inputSchema: ai7.jsonSchema<{ n: number }>({ type: "object" }),
        execute: async ({ n }) => {
          await waiting;
          ran.push(`a ${n}`);
          return { tool: "a", n };
        },
      }),
      b: ai7.tool({
        inputSchema: ai7.jsonSchema<{ n: number }>({ type: "object" }),
        execute: ({ n }) => {
          ran.push(`b ${n}`);
          bDone();
          return { tool: "b", n };
        },
      }),
    };
    const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
    const cp = checkpointed(ac, { sessionId: "parallel-tools", maxSteps: 10, ai: ai7 });
    try {
      const result = await cp.generateText({
        model,
        tools,
        prompt: "go",
        maxRetries: 0,
        prepareStep: () => {
          waiting = new Promise<void>((resolve) => bDone = resolve);
          return undefined;
        },
      });
      return {
        steps: result.steps.map((s: Any) => [s.toolResults.map((r: Any) => r.output), s.text]),
        replayed: cp.run.journal.replayed,
        replayedTools: cp.run.journal.replayedTools,
      };
    } finally {
      await ac.close();
    }
  };
  await assert.rejects(attempt(2), /provider down/);
  assert.deepEqual(ran, ["b 0", "a 0", "b 1", "a 1"]);
  const got = await attempt();
  // The retry asked the model from step 2 on, and ran only the tool calls after it.
  assert.deepEqual(asked, [0, 1, 2, 2, 3, 4]);
  assert.deepEqual(ran, ["b 0", "a 0", "b 1", "a 1", "b 2", "a 2", "b 3", "a 3"]);
  assert.equal(got.replayed, 2);
  assert.equal(got.replayedTools, 4);
  assert.deepEqual(
    got.steps,
    [0, 1, 2, 3].map((n) => [[{ tool: "a", n }, { tool: "b", n }], ""]).concat([[[], "done"]]),
  );
});
