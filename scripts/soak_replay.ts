/**
 * The replay soak (not in CI): per adapter, a deterministic 30-step agent
 * (tests/fixtures/*journal_agent.ts) whose offline model is this script's
 * model server, SIGKILLed at random steps and at random moments within a
 * step, and started again with the same session id until its run is done;
 * on the embedded store and on PostgreSQL (the fleet store).
 *
 * The server counts every model request it receives (they survive the
 * kills) and chooses, from the seed, where the next kill lands: while a
 * model request is in flight (it holds the request), inside a tool before
 * its append is complete or after it (it holds the tool's post), a few ms
 * after it answered a model request (the response in transit, being
 * journaled, or the tool starting), or at a random moment of the attempt
 * (a timer: startup, the replay, anywhere). The kills of a run aim at steps
 * drawn from the seed (as many as the kills, sorted: spread over the whole
 * run, some steps twice), each at the first such point at or past its step
 * that the attempt makes live (a step the retry replays is passed, so the
 * kill lands on the call the retry repeats). A kill that does not land (the
 * attempt ran to its end, or the kill came after the run had ended `done`)
 * ends the run; the kills left go to a new run (a new session id) of the
 * same agent.
 *
 * Checked for each run (a cycle), against an unkilled reference run of the
 * same agent and mode:
 * - model requests received ≤ steps + kills (only the call in flight at a
 *   kill is asked again);
 * - the final conversation equals the reference's;
 * - the tool appends `begin n`, then `end n`: every step's tool completed
 *   (`end n`) at least once, and more than once only as often as a kill
 *   landed after its `end n` and before the attempt's next model request
 *   (the tool in flight, its result possibly not yet journaled); every
 *   `begin n` without its `end n` is a kill inside the tool; so the tool of
 *   a step no kill landed in ran exactly once, and no tool of a replayed
 *   prefix ran again;
 * - read from the ledger after each attempt: no model call and no tool call
 *   whose response or result was journaled (by any attempt) before an
 *   attempt began went out or ran again in it;
 * - every retry resumed: the attempt numbers the processes report increase;
 *   the ledger's attempts of the run are 1, 2, … in the order their
 *   processes ran (a process killed before its start was recorded has
 *   none); the newest ended `done`, no other did.
 *
 *   deno task soak:replay [--seed N] [--kills 50] [--pg-kills 30]
 *     [--adapters own,ai-sdk,openai-agents] [--steps 30] [--pg URL]
 *
 * Exits 1 when a check fails. Adding an agent is one entry in `AGENTS`: a
 * fixture taking `HOME PLAN_JSON` whose plan has `sessionId`, `server`,
 * `tools`, `out` (or the name its entry maps it to), `steps`, `marks` and
 * `settings`; whose live model call posts `{ step, attempt, pid }` to
 * `server` and waits for its answer; whose tool, with `marks`, appends
 * `begin n` / `end n` to `tools`, posting `{ step, tool, pid }` after each
 * (one tool call a step, so the journal's tool call n is step n's);
 * and which prints `DONE <replayed model calls> <replayed tool calls>` at
 * its end, with the conversation in `out`.
 *
 * @module
 */
import * as fs from "node:fs";
import * as http from "node:http";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { openSqliteStore, storeFile } from "../store/sqlite.ts";
import { loadDriver, openPgStore } from "../store/postgres.ts";
import type { RunStore } from "../store/types.ts";
import { flag, runtime, tempDir } from "./_bench_util.ts";

const args = process.argv.slice(2);
const sqliteKills = Number(flag(args, "--kills", "50"));
const pgKills = Number(flag(args, "--pg-kills", "30"));
const STEPS = Number(flag(args, "--steps", "30"));
const pgUrl = flag(
  args,
  "--pg",
  process.env.AGENT_CHECKPOINT_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test",
)!;
let seed = Number(flag(args, "--seed", String(Date.now() % 100_000)));
const startSeed = seed;
const random = () => {
  // mulberry32: a seeded run can be repeated
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
/** The most an attempt may take, on a busy machine, before the soak gives up on it. */
const ATTEMPT_MS = 300_000;

// deno-lint-ignore no-explicit-any
type Any = any;

/** An agent the soak drives: its fixture, its modes, its plan, and its conversation. */
interface Agent {
  fixture: string;
  modes: readonly string[];
  /** The steps with a tool call: every step, or all but the last (whose answer is text). */
  toolSteps: (steps: number) => number;
  /** The fixture's plan, from the soak's common fields. */
  plan: (common: Common, mode: string) => Record<string, unknown>;
  /** What of the out file must equal the unkilled run's. */
  conversation: (out: Any) => unknown;
}
interface Common {
  sessionId: string;
  server: string;
  tools: string;
  out: string;
  steps: number;
  marks: true;
  settings: Record<string, unknown>;
}
const fixture = (name: string) =>
  fileURLToPath(new URL(`../tests/fixtures/${name}.ts`, import.meta.url));

const AGENTS: Record<string, Agent> = {
  own: {
    fixture: fixture("journal_agent"),
    modes: ["loop"],
    toolSteps: (steps) => steps,
    plan: ({ out, ...common }) => ({ ...common, conversation: out }),
    conversation: (out) => out,
  },
  "ai-sdk": {
    fixture: fixture("ai_sdk_journal_agent"),
    modes: ["generate", "stream"],
    toolSteps: (steps) => steps - 1,
    plan: (common, mode) => ({ ...common, major: 7, mode }),
    conversation: (out) => ({ text: out.text, steps: out.steps }),
  },
  "openai-agents": {
    fixture: fixture("openai_agents_journal_agent"),
    modes: ["generate", "stream"],
    toolSteps: (steps) => steps - 1,
    plan: (common, mode) => ({ ...common, mode }),
    conversation: ({ replayed: _, replayedTools: __, ...rest }) => rest,
  },
};
const adapters = flag(args, "--adapters", Object.keys(AGENTS).join(","))!.split(",");
for (const a of adapters) {
  if (!AGENTS[a]) {
    console.error(`unknown adapter ${a}: one of ${Object.keys(AGENTS).join(", ")}`);
    process.exit(2);
  }
}

/** What the server got: a model request, or a tool's post after its `begin` / `end` append. */
interface Event {
  pid: number;
  step: number;
  kind: "model" | "begin" | "end";
  attempt?: number;
}

/** Where a kill lands: at the first event of `kind` whose step is `step` or later. */
interface Aim {
  kind: "model" | "begin" | "end" | "response" | "timer";
  step: number;
  /** For `response`, ms after the answer; for `timer`, ms after the start. */
  delayMs: number;
}

/** The model server: it answers at once, except the one event a kill is aimed at. */
async function modelServer() {
  const events: Event[] = [];
  const held: http.ServerResponse[] = [];
  let aim: Aim | undefined;
  let hit: ((how: "held" | "answered") => void) | undefined;
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => body += chunk);
    req.on("end", () => {
      const got = JSON.parse(body) as {
        step: number;
        tool?: "begin" | "end";
        rest?: boolean;
        pid: number;
        attempt?: number;
      };
      if (got.rest) return void res.end("ok");
      const e: Event = {
        pid: got.pid,
        step: got.step,
        kind: got.tool ?? "model",
        ...(got.attempt === undefined ? {} : { attempt: got.attempt }),
      };
      events.push(e);
      const aimed = aim && aim.step <= e.step &&
        (aim.kind === e.kind || (aim.kind === "response" && e.kind === "model"));
      if (aimed && aim!.kind !== "response") {
        aim = undefined;
        held.push(res);
        hit?.("held");
        return;
      }
      res.end("ok");
      if (aimed) {
        aim = undefined;
        hit?.("answered");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/`,
    events,
    /** Aim the next kill; resolves when its event comes (never, for a timer). */
    arm(next: Aim | undefined): Promise<"held" | "answered"> {
      aim = next?.kind === "timer" ? undefined : next;
      return new Promise((resolve) => hit = resolve);
    },
    release() {
      for (const res of held.splice(0)) res.destroy();
    },
    async close() {
      this.release();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
type Server = Awaited<ReturnType<typeof modelServer>>;

/** One process of the agent: to its end, or SIGKILLed where `aim` says (if it gets there). */
async function attempt(
  agent: Agent,
  home: string,
  plan: Record<string, unknown>,
  server: Server,
  aim: Aim | undefined,
): Promise<{ killed: boolean; pid: number; out: string; err: string; ms: number }> {
  const started = performance.now();
  const child = spawn(runtime, [
    "run",
    "-A",
    "--quiet",
    agent.fixture,
    home,
    JSON.stringify(plan),
  ], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  let killed = false;
  child.stdout.on("data", (d) => out += d);
  child.stderr.on("data", (d) => err = (err + d).slice(-6000));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => resolve(code));
  });
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) {
      killed = child.kill("SIGKILL");
    }
  };
  const hit = server.arm(aim);
  let timer: ReturnType<typeof setTimeout> | undefined;
  if (aim?.kind === "timer") timer = setTimeout(kill, aim.delayMs);
  else if (aim) {
    void hit.then((how) => {
      if (how === "held") kill();
      else timer = setTimeout(kill, aim.delayMs);
    });
  }
  const limit = setTimeout(() => {
    err += `\n(the soak killed it: not ended within ${ATTEMPT_MS} ms)`;
    child.kill("SIGKILL");
  }, ATTEMPT_MS);
  const code = await exited;
  clearTimeout(limit);
  clearTimeout(timer);
  server.arm(undefined);
  server.release();
  if (!killed && code !== 0) {
    throw new Error(`the agent ended ${code ?? child.signalCode}: ${err.slice(-3000)}`);
  }
  return { killed, pid: child.pid!, out, err, ms: performance.now() - started };
}

const lines = (file: string) =>
  fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "") : [];
const readJson = (file: string): Any => JSON.parse(fs.readFileSync(file, "utf8"));

interface Reference {
  conversation: unknown;
  ms: number;
}

/** The run of an agent and mode never killed: its conversation and time. */
async function reference(agentName: string, mode: string): Promise<Reference> {
  const agent = AGENTS[agentName]!;
  const home = tempDir("ac-soak-replay-ref-");
  const server = await modelServer();
  const common: Common = {
    sessionId: `replay-reference`,
    server: server.url,
    tools: path.join(home, "tools.txt"),
    out: path.join(home, "out.json"),
    steps: STEPS,
    marks: true,
    settings: {},
  };
  try {
    const a = await attempt(agent, home, agent.plan(common, mode), server, undefined);
    const requests = server.events.filter((e) => e.kind === "model").length;
    const tools = lines(common.tools);
    const want = Array.from(
      { length: agent.toolSteps(STEPS) },
      (_, n) => [`begin ${n}`, `end ${n}`],
    ).flat();
    if (requests !== STEPS || JSON.stringify(tools) !== JSON.stringify(want)) {
      throw new Error(
        `the unkilled ${agentName} ${mode} run: ${requests} requests, tools ${tools.join(",")}`,
      );
    }
    const conversation = agent.conversation(readJson(common.out));
    fs.rmSync(home, { recursive: true, force: true });
    return { conversation, ms: a.ms };
  } finally {
    await server.close();
  }
}

interface Row {
  adapter: string;
  store: string;
  mode: string;
  cycles: number;
  kills: number;
  killsBy: Record<Aim["kind"], number>;
  attempts: number;
  requests: number;
  bound: number;
  toolsRun: number;
  toolsAgain: number;
  replayedTools: number;
  equal: boolean;
  /** Kills that came after the run had ended done (not counted as kills). */
  afterDone: number;
  /** Attempts whose start the fleet store answered too late (they started from the local file). */
  lateStarts: number;
  ms: number;
  failures: string[];
}

/** What the ledger holds of a run: its attempts, and the steps whose calls are journaled. */
async function ledgerOf(
  store: "sqlite" | "postgres",
  home: string,
  url: string,
  runId: string,
): Promise<{
  attempts: { attempt: number; status: string | undefined; pid: number }[];
  /** The model calls and tool calls journaled by any attempt, by index (one of each a step). */
  models: Set<number>;
  tools: Set<number>;
}> {
  const models = new Set<number>();
  const tools = new Set<number>();
  if (store === "sqlite" && !fs.existsSync(storeFile(home))) {
    return { attempts: [], models, tools };
  }
  const s: RunStore = store === "sqlite"
    ? openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 })
    : openPgStore({ url, hostTimeoutSeconds: 30 });
  try {
    const views = await s.list({ runId, limit: 10_000 });
    for (const e of await s.journal?.read(runId) ?? []) {
      (e.kind === "model" ? models : tools).add(e.index);
    }
    return {
      attempts: views.map((v) => ({
        attempt: v.record.attempt,
        status: v.record.status,
        pid: v.record.host.pid,
      }))
        .sort((a, b) => a.attempt - b.attempt),
      models,
      tools,
    };
  } finally {
    await s.close();
  }
}

/** A new schema on the PostgreSQL server: its store URL, and its drop. */
async function pgSchema(): Promise<{ url: string; drop(): Promise<void> }> {
  const schema = `ac_soak_replay_${process.pid}_${Math.floor(random() * 1e9)}`;
  const sql = (await loadDriver())(pgUrl, {
    max: 1,
    onnotice: () => {},
    connect_timeout: 3,
    fetch_types: false,
  });
  try {
    await sql.unsafe(`CREATE SCHEMA "${schema}"`);
  } finally {
    await sql.end({ timeout: 1 });
  }
  const url = new URL(pgUrl);
  url.searchParams.set("schema", schema);
  return {
    url: url.href,
    async drop() {
      const sql = (await loadDriver())(pgUrl, { max: 1, onnotice: () => {}, fetch_types: false });
      try {
        await sql.unsafe(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await sql.end({ timeout: 1 });
      }
    },
  };
}

const KINDS: readonly Aim["kind"][] = ["model", "model", "begin", "end", "response", "timer"];

/** An agent in one mode on one store, killed `kills` times across as many runs as it takes. */
async function soak(
  agentName: string,
  mode: string,
  store: "sqlite" | "postgres",
  kills: number,
  ref: Reference,
): Promise<Row> {
  const agent = AGENTS[agentName]!;
  const started = performance.now();
  const row: Row = {
    adapter: agentName,
    store,
    mode,
    cycles: 0,
    kills: 0,
    killsBy: { model: 0, begin: 0, end: 0, response: 0, timer: 0 },
    attempts: 0,
    requests: 0,
    bound: 0,
    toolsRun: 0,
    toolsAgain: 0,
    replayedTools: 0,
    equal: true,
    afterDone: 0,
    lateStarts: 0,
    ms: 0,
    failures: [],
  };
  const db = store === "postgres" ? await pgSchema() : undefined;
  const toolSteps = agent.toolSteps(STEPS);
  let keep = false;
  try {
    while (row.kills < kills) {
      row.cycles++;
      const home = tempDir("ac-soak-replay-");
      const server = await modelServer();
      const sessionId = `replay-${agentName}-${mode}-${row.cycles}`;
      const where = `${agentName} ${mode} ${store} run ${row.cycles} (${home})`;
      const fail = (what: string) => {
        row.failures.push(`${where}: ${what}`);
        keep = true;
      };
      const common: Common = {
        sessionId,
        server: server.url,
        tools: path.join(home, "tools.txt"),
        out: path.join(home, "out.json"),
        steps: STEPS,
        marks: true,
        settings: db ? { store: db.url } : {},
      };
      const plan = agent.plan(common, mode);
      let cycleKills = 0;
      /** Per step: kills that landed inside its tool before `end n`, and after it. */
      const beforeEnd = new Map<number, number>();
      const afterEnd = new Map<number, number>();
      const pids: number[] = [];
      let last: Awaited<ReturnType<typeof attempt>> | undefined;
      let journaled = await ledgerOf(store, home, db?.url ?? "", sessionId);
      // The steps the kills aim at, drawn from the seed, in order: spread over the whole run.
      const aims = Array.from({ length: kills - row.kills }, () => Math.floor(random() * STEPS))
        .sort((a, b) => a - b);
      try {
        for (;;) {
          let aim: Aim | undefined;
          if (row.kills < kills) {
            const kind = pick(KINDS);
            const step = Math.min(
              aims[cycleKills]!,
              kind === "begin" || kind === "end" ? toolSteps - 1 : STEPS - 1,
            );
            aim = {
              kind,
              step,
              delayMs: kind === "timer" ? random() * ref.ms : random() * 20,
            };
          }
          const linesBefore = lines(common.tools).length;
          const eventsBefore = server.events.length;
          const a = await attempt(agent, home, plan, server, aim);
          row.attempts++;
          pids.push(a.pid);
          // Nothing whose result the ledger held when the attempt began ran again in it.
          for (const e of server.events.slice(eventsBefore)) {
            if (e.kind === "model" && journaled.models.has(e.step)) {
              fail(
                `attempt ${row.attempts}: model call ${e.step} went out again, journaled before`,
              );
            }
          }
          for (const l of lines(common.tools).slice(linesBefore)) {
            const n = Number(l.split(" ")[1]);
            if (l.startsWith("begin") && journaled.tools.has(n)) {
              fail(`attempt ${row.attempts}: the tool of step ${n} ran again, journaled before`);
            }
          }
          journaled = await ledgerOf(store, home, db?.url ?? "", sessionId);
          // Killed after its DONE: its end may still be on its way to the store (a commit the
          // server had received); it is there within a moment, or never.
          for (let i = 0; i < 20 && a.killed && /DONE \d+ \d+/.test(a.out); i++) {
            if (journaled.attempts.at(-1)?.status === "done") break;
            await new Promise((r) => setTimeout(r, 100));
            journaled = await ledgerOf(store, home, db?.url ?? "", sessionId);
          }
          if (/took \d+ ms to answer a run's start/.test(a.err)) row.lateStarts++;
          // A kill that came after the run had ended done is no kill of the run: it is over.
          if (
            !a.killed ||
            (/DONE \d+ \d+/.test(a.out) && journaled.attempts.at(-1)?.status === "done")
          ) {
            if (a.killed) row.afterDone++;
            last = a;
            break;
          }
          row.kills++;
          cycleKills++;
          row.killsBy[aim!.kind]++;
          // Was a tool in flight? The last line this attempt appended to the tool file, and the
          // attempt's model requests after it.
          const appended = lines(common.tools).slice(linesBefore);
          const tail = appended.at(-1);
          const m = tail ? /^(begin|end) (\d+)$/.exec(tail) : null;
          if (m) {
            const n = Number(m[2]);
            const askedPast = server.events.some((e) =>
              e.pid === a.pid && e.kind === "model" && e.step > n
            );
            if (!askedPast) {
              const into = m[1] === "begin" ? beforeEnd : afterEnd;
              into.set(n, (into.get(n) ?? 0) + 1);
            }
          }
        }
        const done = /DONE (\d+) (\d+)/.exec(last.out);
        if (!done) {
          fail(`the last attempt printed no DONE: ${last.out} ${last.err.slice(-2000)}`);
          continue;
        }
        row.replayedTools += Number(done[2]);

        // Requests: only the call in flight at a kill is asked again.
        const requests = server.events.filter((e) => e.kind === "model").length;
        row.requests += requests;
        row.bound += STEPS + cycleKills;
        if (requests > STEPS + cycleKills) {
          const steps = server.events.filter((e) => e.kind === "model").map((e) => e.step);
          fail(`${requests} model requests > ${STEPS} + ${cycleKills} kills: ${steps.join(",")}`);
        }

        // The conversation: the unkilled run's.
        const conversation = agent.conversation(readJson(common.out));
        if (JSON.stringify(conversation) !== JSON.stringify(ref.conversation)) {
          row.equal = false;
          fail("the final conversation differs from the unkilled run's");
        }

        // Tools: each step's completed once, again only after a kill landed past its append.
        const tools = lines(common.tools);
        const count = (line: string) => tools.filter((l) => l === line).length;
        for (let n = 0; n < toolSteps; n++) {
          const begins = count(`begin ${n}`);
          const ends = count(`end ${n}`);
          row.toolsRun += ends;
          row.toolsAgain += Math.max(0, ends - 1);
          const after = afterEnd.get(n) ?? 0;
          const before = beforeEnd.get(n) ?? 0;
          if (ends < 1) fail(`the tool of step ${n} never completed`);
          if (ends > 1 + after) {
            fail(
              `the tool of step ${n} completed ${ends} times; kills in flight after it: ${after}`,
            );
          }
          if (begins !== ends + before) {
            fail(
              `the tool of step ${n} began ${begins} times, completed ${ends}, cut off ${before}`,
            );
          }
        }
        if (
          tools.some((l) => !/^(begin|end) (\d+)$/.test(l) || Number(l.split(" ")[1]) >= toolSteps)
        ) {
          fail(`a tool line of no step: ${tools.join(",")}`);
        }

        // Every retry resumed: attempt numbers increase, and the run ended done.
        const reported: number[] = [];
        for (const pid of pids) {
          const at = server.events.find((e) => e.pid === pid && e.attempt !== undefined)?.attempt;
          if (at !== undefined) reported.push(at);
        }
        if (reported.some((a, i) => i > 0 && a <= reported[i - 1]!)) {
          fail(`the attempts the processes reported do not increase: ${reported.join(",")}`);
        }
        const ledger = journaled.attempts;
        const numbers = ledger.map((l) => l.attempt);
        if (numbers.some((a, i) => a !== i + 1)) {
          fail(`the ledger's attempts are not 1 to ${numbers.length}: ${numbers.join(",")}`);
        }
        // The ledger's attempt of each process, in the order they ran: each above the last.
        const byPid = pids.flatMap((pid) =>
          ledger.filter((l) => l.pid === pid).map((l) => l.attempt)
        );
        if (byPid.length !== ledger.length || byPid.some((a, i) => i > 0 && a <= byPid[i - 1]!)) {
          fail(`the ledger's attempts, in the order the processes ran: ${byPid.join(",")}`);
        }
        const newest = ledger.at(-1);
        if (newest?.status !== "done") {
          fail(`the run's newest attempt ended ${newest?.status ?? "missing"}`);
        }
        const lastReported = server.events.find((e) => e.pid === pids.at(-1) && e.attempt)?.attempt;
        if (newest && lastReported !== undefined && newest.attempt !== lastReported) {
          fail(
            `the ledger's newest attempt is ${newest.attempt}, the last process's ${lastReported}`,
          );
        }
        if (ledger.slice(0, -1).some((l) => l.status === "done")) {
          fail(`an earlier attempt ended done: ${JSON.stringify(ledger)}`);
        }
        if (newest && newest.attempt < reported.length) {
          fail(
            `${reported.length} processes asked the model, the last attempt is ${newest.attempt}`,
          );
        }
      } finally {
        await server.close();
        if (!keep) fs.rmSync(home, { recursive: true, force: true });
      }
    }
  } finally {
    if (!keep) await db?.drop();
  }
  row.ms = performance.now() - started;
  return row;
}

// ---- the soak -----------------------------------------------------------------------------
const rows: Row[] = [];
const refs = new Map<string, Reference>();
const started = performance.now();
console.log(
  `replay soak: seed ${startSeed}, ${STEPS} steps, ${sqliteKills} kills on SQLite, ${pgKills} on PostgreSQL, adapters ${
    adapters.join(",")
  }`,
);
for (const name of adapters) {
  for (const mode of AGENTS[name]!.modes) {
    const ref = await reference(name, mode);
    refs.set(`${name} ${mode}`, ref);
    console.log(`  ${name} ${mode}: the unkilled run took ${(ref.ms / 1000).toFixed(1)} s`);
    for (const [store, kills] of [["sqlite", sqliteKills], ["postgres", pgKills]] as const) {
      if (kills <= 0) continue;
      const row = await soak(name, mode, store, kills, ref);
      rows.push(row);
      console.log(
        `  ${name} ${mode} ${store}: ${row.kills} kills in ${row.cycles} run(s), ${row.requests} requests (bound ${row.bound}), ${row.failures.length} violation(s), ${
          (row.ms / 1000).toFixed(0)
        } s`,
      );
    }
  }
}

const header = [
  "adapter",
  "store",
  "mode",
  "kills",
  "attempts",
  "requests",
  "bound",
  "excess",
  "tools run",
  "run again",
  "replayed tools",
  "conversation equal",
  "time",
];
const table = rows.map((r) => [
  r.adapter,
  r.store,
  r.mode,
  String(r.kills),
  String(r.attempts),
  String(r.requests),
  String(r.bound),
  String(r.requests - r.cycles * STEPS),
  String(r.toolsRun),
  String(r.toolsAgain),
  String(r.replayedTools),
  r.equal ? "yes" : "no",
  `${(r.ms / 1000).toFixed(0)} s`,
]);
const widths = header.map((h, i) => Math.max(h.length, ...table.map((t) => t[i]!.length)));
const show = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
console.log();
console.log(show(header));
console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
for (const t of table) console.log(show(t));
console.log(
  `bound: ${STEPS} requests a run + one a kill; excess: requests beyond ${STEPS} a run; tools run: completed tool calls (\`end n\`), run again: beyond one a step; replayed tools: by each run's last attempt`,
);
console.log();
for (const r of rows) {
  const by = Object.entries(r.killsBy).map(([k, n]) => `${k} ${n}`).join(", ");
  console.log(
    `  ${r.adapter} ${r.store} ${r.mode}: ${r.cycles} run(s); kills: ${by}; a kill after done: ${r.afterDone}; starts answered late: ${r.lateStarts}`,
  );
}
const failures = rows.flatMap((r) => r.failures);
for (const f of failures.slice(0, 40)) console.log(`FAIL ${f}`);
console.log(
  `${failures.length === 0 ? "ok" : "FAILED"}: seed ${startSeed}, ${
    ((performance.now() - started) / 1000).toFixed(0)
  } s`,
);
process.exit(failures.length === 0 ? 0 : 1);
