// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The OpenAI Agents adapter journals its model calls through its own wrapper
 * of every model of the run (the SDK's `Model` interface) and its function
 * tools through `run.journal`: a 10-step agent, streamed or not, SIGKILLed
 * while its model answers step 6 and retried in a fresh process with the same
 * session id makes one extra model request, runs each tool step once and ends
 * with the result of a run never killed; with `journal: false` the retry asks
 * the model again for every step. The model server (here, in the test's
 * process) counts the requests, so the count survives the kill.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import * as path from "node:path";
import { spawn } from "node:child_process";
import {
  Agent,
  type CallModelInputFilter,
  type Model,
  type ModelProvider,
  Runner,
  setTracingDisabled,
  tool,
} from "npm:@openai/agents@0.x";
import {
  assistantMessage,
  functionCall,
  modelResponder,
  modelStreamResponder,
  ScriptedModel,
} from "npm:@openai/agents@0.x/testing";
import { createAgentCheckpoint } from "../../mod.ts";
import { checkpointedRun } from "../../adapters/openai_agents.ts";
import { fixture, scriptCommand, tempHome } from "../_helpers.ts";
import { openSqliteStore, storeFile } from "../../store/sqlite.ts";

setTracingDisabled(true); // offline: no trace exporter

const AGENT = fixture("openai_agents_journal_agent");
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
  result: {
    finalOutput: string;
    history: unknown[];
    rawResponses: unknown[];
    lastAgent: string;
    events: string[];
    replayed: number;
    replayedTools: number;
  };
  log: string;
  home: string;
}

/**
 * The agent in `mode`: killed once its model gets the request of step
 * `hangAt` (when given), then run (again) to its end in a fresh process.
 */
async function killedAndRetried(
  mode: Mode,
  options: { hangAt?: number; midStream?: boolean; settings?: Record<string, unknown> } = {},
): Promise<Outcome> {
  const home = tempHome();
  const server = await modelServer(options.hangAt, options.midStream);
  const files = { tools: path.join(home, "tools.txt"), out: path.join(home, "out.json") };
  const plan = {
    sessionId: `openai-agents-journal-${mode}`,
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
      result: JSON.parse(fs.readFileSync(files.out, "utf8")),
      log: last.err,
      home,
    };
  } finally {
    await server.close();
  }
}

/** The result of a run never killed, once per mode. */
const unkilled = new Map<Mode, Promise<Outcome>>();
function unkilledRun(mode: Mode): Promise<Outcome> {
  if (!unkilled.has(mode)) unkilled.set(mode, killedAndRetried(mode));
  return unkilled.get(mode)!;
}

const STEPS = Array.from({ length: 9 }, (_, i) => `step ${i}`);
const ALL = Array.from({ length: 10 }, (_, i) => i);

/** What the SDK returned to the host, without what says how it was got. */
const resultOf = (o: Outcome) => {
  const { replayed: _r, replayedTools: _t, ...rest } = o.result;
  return rest;
};

async function assertResumedAtStep6(mode: Mode): Promise<Outcome> {
  const got = await killedAndRetried(mode, { hangAt: 6 });
  // Steps 0..6 in the killed attempt; the retry asks again only for step 6, the call in flight.
  assert.deepEqual(got.requests, [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]);
  assert.deepEqual(got.tools, STEPS); // each tool step once
  assert.equal(got.result.replayed, 6);
  assert.equal(got.result.replayedTools, 6);
  assert.match(got.log, /replayed 6 model call\(s\) and 6 tool call\(s\) of attempt 1/);
  // The resume text went into the first live call, step 6, not into a replayed one.
  assert.deepEqual(got.notes, [6]);
  const never = await unkilledRun(mode);
  assert.deepEqual(never.requests, ALL);
  assert.deepEqual(never.tools, STEPS);
  assert.deepEqual(resultOf(got), resultOf(never));
  assert.equal(got.result.finalOutput, "appended steps 0 to 8");
  assert.equal(got.result.rawResponses.length, 10);
  // The retry's turns and use are its live calls' only (steps 6 to 9): the replayed ones are not
  // counted again.
  const store = openSqliteStore({ file: storeFile(got.home), hostTimeoutSeconds: 30 });
  try {
    const latest = await store.latest(`openai-agents-journal-${mode}`);
    assert.equal(latest?.record.attempt, 2);
    assert.equal(latest?.record.turnsUsed, 4);
    assert.deepEqual(latest?.record.usage, {
      inputTokens: 106 + 107 + 108 + 109,
      outputTokens: 40,
    });
    assert.equal(latest?.record.status, "done");
    // Only the tools that ran live were reported to the run: the replayed ones were not.
    assert.deepEqual(
      latest?.record.recent.map((c) => [c.callId, c.status]),
      [6, 7, 8].map((n) => [`call-${n}`, "ok"]),
    );
    assert.deepEqual(latest?.record.inFlight, []);
  } finally {
    await store.close();
  }
  return got;
}

test("run() SIGKILLed at step 6 and retried: one extra request, each tool step once, the unkilled result", async () => {
  await assertResumedAtStep6("generate");
});

test("run() streamed, SIGKILLed at step 6 and retried: one extra request, each tool step once, the unkilled result and stream", async () => {
  const got = await assertResumedAtStep6("stream");
  // The host read the model's events of every step, the replayed ones' as recorded (and the whole
  // stream equals the unkilled run's, above).
  const raw = got.result.events.filter((e) => e.startsWith("raw ")).map((e) =>
    JSON.parse(e.slice(4))
  );
  assert.equal(raw.filter((e) => e.type === "response_started").length, 10);
  assert.deepEqual(
    raw.filter((e) => e.type === "response_done").map((e) => e.response.id),
    ALL.map((n) => `resp-${n}`),
  );
  assert.equal(raw.length, 22); // and the last step's two text deltas
});

test("journal: false: a retry asks the model again for every step, and runs every tool again", async () => {
  const got = await killedAndRetried("generate", { hangAt: 6, settings: { journal: false } });
  assert.deepEqual(got.requests, [0, 1, 2, 3, 4, 5, 6, ...ALL]);
  assert.deepEqual(got.tools, [...STEPS.slice(0, 6), ...STEPS]);
  assert.equal(got.result.replayed, 0);
  assert.equal(got.result.replayedTools, 0);
});

test("a stream SIGKILLed mid-stream at step 6 was not journaled, so the retry asks for it again", async () => {
  const got = await killedAndRetried("stream", { hangAt: 6, midStream: true });
  assert.deepEqual(got.requests, [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]);
  // The rest of step 6's stream was asked for twice: cut off once, then live again.
  assert.deepEqual(got.rests, [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]);
  assert.deepEqual(got.tools, STEPS);
  assert.equal(got.result.replayed, 6);
  assert.equal(got.result.replayedTools, 6);
  assert.deepEqual(resultOf(got), resultOf(await unkilledRun("stream")));
});

// deno-lint-ignore no-explicit-any
type Any = any;

test("in one process: the host's model provider, model settings, hooks and filter still run, and a handoff agent's model is journaled too", async () => {
  const home = tempHome();
  const results = (input: unknown) =>
    (Array.isArray(input) ? input : []).filter((i: Any) => i?.type === "function_call_result")
      .length;
  const ran: number[] = [];
  const lookup = tool({
    name: "lookup",
    description: "Look a step up.",
    parameters: {
      type: "object",
      properties: { n: { type: "number" } },
      required: ["n"],
      additionalProperties: false,
    },
    strict: true,
    execute: (input: unknown) => {
      ran.push((input as { n: number }).n);
      return `looked up ${(input as { n: number }).n}`;
    },
  });
  /** An attempt: the specialist's model fails at its last step when `fail`. */
  const attempt = async (fail: boolean) => {
    const asked = { triage: [] as Any[], specialist: [] as Any[] };
    const resolved: (string | undefined)[] = [];
    const triageModel = new ScriptedModel(
      Array.from({ length: 2 }, () =>
        modelResponder((call) => {
          const n = results(call.request.input);
          asked.triage.push(call.request);
          return n === 0
            ? [functionCall("lookup", { n: 0 }, { callId: "c-0", id: "fc-0" })]
            : [functionCall("transfer_to_specialist", {}, { callId: "h-1", id: "fc-1" })];
        })),
    );
    const specialistModel = new ScriptedModel(
      Array.from({ length: 2 }, () =>
        modelResponder((call) => {
          const n = results(call.request.input);
          asked.specialist.push(call.request);
          if (n === 3 && fail) throw new Error("provider down");
          return n === 2
            ? [functionCall("lookup", { n: 2 }, { callId: "c-2", id: "fc-2" })]
            : [assistantMessage("done", { id: "msg-3" })];
        })),
    );
    const modelProvider: ModelProvider = {
      getModel: (name?: string): Model => {
        resolved.push(name);
        return triageModel;
      },
    };
    const specialist = new Agent({
      name: "specialist",
      instructions: "Finish.",
      model: specialistModel,
      tools: [lookup],
    });
    const triage = new Agent({
      name: "triage",
      instructions: "Route.",
      model: "triage-model",
      modelSettings: { temperature: 0.3 },
      tools: [lookup],
      handoffs: [specialist],
    });
    const runner = new Runner({ modelProvider });
    const hooks: string[] = [];
    runner.on("agent_start", (_c, agent) => void hooks.push(`start ${agent.name}`));
    runner.on(
      "agent_handoff",
      (_c, from, to) => void hooks.push(`handoff ${from.name} ${to.name}`),
    );
    specialist.on("agent_start", () => void hooks.push("specialist's own start"));
    let filtered = 0;
    const filter: CallModelInputFilter = ({ modelData }) => {
      filtered++;
      return { ...modelData, instructions: `${modelData.instructions} [filtered]` };
    };
    const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
    try {
      const result = await checkpointedRun(
        ac,
        { sessionId: "composed", maxTurns: 10 },
        triage,
        "Go",
        { runner, callModelInputFilter: filter },
      );
      return {
        asked,
        resolved,
        hooks,
        filtered,
        finalOutput: result.finalOutput,
        lastAgent: result.lastAgent?.name,
        history: JSON.stringify(result.history),
        replayed: result.run.journal.replayed,
        replayedTools: result.run.journal.replayedTools,
      };
    } catch (error) {
      return { error, asked, resolved, hooks, filtered };
    } finally {
      await ac.close();
    }
  };

  const first = await attempt(true);
  assert.match(String((first as { error?: unknown }).error), /provider down/);
  assert.deepEqual(first.asked.triage.map((r: Any) => results(r.input)), [0, 1]);
  assert.deepEqual(first.asked.specialist.map((r: Any) => results(r.input)), [2, 3]);
  assert.deepEqual(ran, [0, 2]);

  const got = await attempt(false) as Any;
  assert.equal(got.error, undefined);
  assert.equal(got.finalOutput, "done");
  assert.equal(got.lastAgent, "specialist");
  // The triage's two calls (a name the host's provider resolves) and the specialist's first (a
  // model on the handoff agent) were replayed; only the call that failed was made again.
  assert.deepEqual(got.asked.triage, []);
  assert.deepEqual(got.asked.specialist.map((r: Any) => results(r.input)), [3]);
  assert.equal(got.replayed, 3);
  assert.equal(got.replayedTools, 2);
  assert.deepEqual(ran, [0, 2]); // no tool ran again
  // The host's provider resolved the name in both attempts, its settings and filter reached the
  // model, and its runner's and agent's hooks heard the run.
  assert.deepEqual(first.resolved.filter((n) => n === "triage-model").length > 0, true);
  assert.deepEqual(got.resolved.filter((n: unknown) => n === "triage-model").length > 0, true);
  assert.equal(first.asked.triage[0].modelSettings.temperature, 0.3);
  for (
    const request of [...first.asked.triage, ...first.asked.specialist, ...got.asked.specialist]
  ) {
    assert.match(request.systemInstructions, /\[filtered\]$/);
  }
  assert.equal(got.filtered, 4); // the host's filter runs before every call, replayed or live
  assert.deepEqual(got.hooks, [
    "start triage",
    "handoff triage specialist",
    "specialist's own start",
    "start specialist",
  ]);
});

test("in one process: a stream that fails midway is not journaled, so the retry asks for it again", async () => {
  const home = tempHome();
  const asked: number[] = [];
  const results = (input: unknown) =>
    (Array.isArray(input) ? input : []).filter((i: Any) => i?.type === "function_call_result")
      .length;
  const ping = tool({
    name: "ping",
    description: "Ping.",
    parameters: { type: "object", properties: {}, required: [], additionalProperties: false },
    strict: true,
    execute: () => "pong",
  });
  const attempt = async (fail: boolean) => {
    const model = new ScriptedModel(Array.from({ length: 4 }, () =>
      modelStreamResponder((call) => {
        const n = results(call.request.input);
        asked.push(n);
        return (async function* () {
          yield { type: "response_started" as const };
          if (n === 2 && fail) throw new Error("connection reset");
          yield {
            type: "response_done" as const,
            response: {
              id: `resp-${n}`,
              usage: { requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 },
              output: n < 2
                ? [functionCall("ping", {}, { callId: `c-${n}`, id: `fc-${n}` })]
                : [assistantMessage("done", { id: "msg" })],
            },
          };
        })();
      })));
    const agent = new Agent({ name: "pinger", model, tools: [ping] });
    const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
    try {
      const streamed = await checkpointedRun(ac, { sessionId: "cut", maxTurns: 10 }, agent, "Go", {
        stream: true,
      });
      try {
        for await (const _ of streamed) { /* read to its end */ }
      } finally {
        // The run's end is recorded once `completed` settles: before the keeper closes.
        await streamed.completed.catch(() => {});
      }
      await streamed.completed;
      return { output: streamed.finalOutput, replayed: streamed.run.journal.replayed };
    } finally {
      await ac.close();
    }
  };
  await assert.rejects(attempt(true), /connection reset/);
  const got = await attempt(false);
  assert.deepEqual(asked, [0, 1, 2, 2]);
  assert.equal(got.output, "done");
  assert.equal(got.replayed, 2);
});
