import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { type RunServer, SECURITY_HEADERS, serveRuns } from "../../serve/mod.ts";
import type { RunPayload, RunsPayload } from "../../serve/mod.ts";
import { openStore, thisHost } from "../../store/mod.ts";
import { createAgentCheckpoint } from "../../mod.ts";
import { loadSettings } from "../../config.ts";
import { scriptCommand, tempHome, waitFor } from "../_helpers.ts";
import { AGENT_TEXT, EVIL_ID, EVIL_TEXT, type Fleet, makeFleet, makeRetried } from "./_fleet.ts";

let fleet: Fleet;
let server: RunServer;

before(async () => {
  fleet = await makeFleet();
  server = await serveRuns({ store: fleet.store, settings: fleet.settings, port: 0 });
});
after(async () => {
  await server.close();
  await fleet.close();
});

const get = async <T>(p: string) => {
  const res = await fetch(new URL(p, server.url));
  return { status: res.status, headers: res.headers, body: await res.json() as T };
};

/** A raw request, with whatever method and Host header. */
function raw(
  method: string,
  p: string,
  headers: Record<string, string> = {},
  base = server.url,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(p, base), { method, headers }, (res) => {
      let body = "";
      res.on("data", (d) => body += d);
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** What a server of `home`'s ledger answers at `p` (the server and its store closed after). */
async function answerOf<T>(home: string, p: string): Promise<T> {
  const { settings } = loadSettings({ home, env: {} });
  const store = openStore({ home, settings, mode: "read" })!;
  const own = await serveRuns({ store, settings, port: 0 });
  try {
    return await (await fetch(new URL(p, own.url))).json() as T;
  } finally {
    await own.close();
    await store.close();
  }
}

test("GET /api/runs lists live, ended and cut-off runs, newest first, with the store's counts", async () => {
  const { status, body } = await get<RunsPayload>("/api/runs");
  assert.equal(status, 200);
  const byId = Object.fromEntries(body.runs.map((r) => [r.runId, r]));
  assert.equal(byId["live-1"]?.status, "live");
  assert.equal(byId["ended-done"]?.status, "done");
  assert.equal(byId["ended-capped"]?.status, "capped");
  assert.equal(byId["cut-1"]?.status, "cut-off");
  assert.equal(byId[EVIL_ID]?.status, "cut-off");
  assert.deepEqual(body.counts, {
    live: 1,
    done: 1,
    capped: 1,
    failed: 0,
    aborted: 0,
    deadline: 0,
    "cut-off": 2,
  });
  assert.equal(body.total, 5);
  assert.deepEqual(body.hosts, { [thisHost().machine]: 5 });
  const times = body.runs.map((r) => r.updatedAt);
  assert.deepEqual(times, [...times].sort((a, b) => b - a));
  // Each cap's use against its tier fractions (default: tier 1 at half, tier 2 at 90% of turns).
  const capped = byId["ended-capped"]!;
  assert.deepEqual(capped.caps.find((c) => c.axis === "turns"), {
    axis: "turns",
    used: 19,
    cap: 20,
    source: "host",
    tiers: [0.5, 0.9],
  });
  assert.equal(capped.caps.find((c) => c.axis === "time")?.cap, 600);
  assert.equal(capped.tier, 2);
  assert.deepEqual(capped.marks.map((m) => m.kind).sort(), ["checkpoint", "end", "tier", "tier"]);
  assert.ok(capped.endAt !== undefined && byId["live-1"]!.endAt === undefined);
  const cut = byId["cut-1"]!;
  assert.deepEqual(cut.inFlight.map((c) => c.tool), ["deploy"]);
  assert.ok(cut.hasFile);
});

test("GET /api/runs filters by status, host, since and limit", async () => {
  const cut = await get<RunsPayload>("/api/runs?status=cut-off");
  assert.deepEqual(cut.body.runs.map((r) => r.runId).sort(), ["cut-1", EVIL_ID].sort());
  assert.equal(cut.body.total, 2);
  const some = await get<RunsPayload>("/api/runs?status=capped,live");
  assert.deepEqual(some.body.runs.map((r) => r.runId).sort(), ["ended-capped", "live-1"]);
  const ended = await get<RunsPayload>("/api/runs?status=done&status=capped");
  assert.deepEqual(ended.body.runs.map((r) => r.status).sort(), ["capped", "done"]);
  const elsewhere = await get<RunsPayload>("/api/runs?host=another-machine");
  assert.deepEqual(elsewhere.body.runs, []);
  assert.equal(elsewhere.body.total, 0);
  assert.deepEqual(Object.keys(elsewhere.body.hosts), [thisHost().machine]);
  const future = await get<RunsPayload>(`/api/runs?since=${Date.now() + 3_600_000}`);
  assert.deepEqual(future.body.runs, []);
  const recent = await get<RunsPayload>("/api/runs?since=1h");
  assert.equal(recent.body.runs.length, 5);
  const one = await get<RunsPayload>("/api/runs?limit=2");
  assert.equal(one.body.runs.length, 2);
  assert.equal(one.body.total, 5);
});

test("bad filters are refused with 400 and the reason", async () => {
  for (
    const [q, reason] of [
      ["status=running", /status takes live, done, capped/],
      ["limit=0", /limit takes a whole number/],
      ["limit=lots", /limit takes a whole number/],
      ["since=yesterday", /since takes a duration/],
    ]
  ) {
    const { status, body } = await get<{ error: string }>(`/api/runs?${q}`);
    assert.equal(status, 400, q as string);
    assert.match(body.error, reason as RegExp);
  }
});

test("GET /api/runs/:id gives a cut-off run's record, attempts and checkpoint file", async () => {
  const { status, body } = await get<RunPayload>("/api/runs/cut-1");
  assert.equal(status, 200);
  assert.equal(body.run.status, "cut-off");
  assert.match(
    body.stopped,
    /^attempt 1 cut off after 3 of 20 turns and .*, inside tool deploy \(call id held, for /,
  );
  assert.equal(body.record.turnsUsed, 3);
  assert.deepEqual(body.attempts.map((a) => [a.attempt, a.status]), [[1, "cut-off"]]);
  assert.equal(body.file.source, "file");
  assert.ok(body.file.content?.endsWith(AGENT_TEXT), String(body.file.content));
  const evil = await get<RunPayload>(`/api/runs/${encodeURIComponent(EVIL_ID)}`);
  assert.equal(evil.body.record.runId, EVIL_ID);
  assert.ok(evil.body.file.content?.endsWith(EVIL_TEXT));
  const missing = await get<{ error: string }>("/api/runs/no-such-run");
  assert.equal(missing.status, 404);
});

test("a run's detail lists every attempt the store keeps, newest first", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  const first = ac.startRun({ sessionId: "again", caps: { turns: 10 } });
  first.preLlmCall();
  await first.end({ status: "failed", summary: "the API was down" });
  const second = ac.startRun({ sessionId: "again", caps: { turns: 10 } });
  second.preLlmCall();
  await second.end({ status: "done" });
  await ac.close();
  const body = await answerOf<RunPayload>(home, "/api/runs/again");
  assert.deepEqual(body.attempts.map((a) => [a.attempt, a.status]), [[2, "done"], [1, "failed"]]);
  assert.match(body.attempts[1]!.summary, /ended failed .*: the API was down/);
  assert.equal(body.run.earlierAttempts, 1);
});

test("a run cut off three times, then aborted: its row has every attempt's end, and the cut-off attempts are counted", async () => {
  const retried = await makeRetried();
  const own = await serveRuns({ store: retried.store, settings: retried.settings, port: 0 });
  try {
    const body = await (await fetch(`${own.url}api/runs`)).json() as RunsPayload;
    const row = body.runs.find((r) => r.runId === "retried")!;
    assert.equal(row.status, "aborted");
    assert.equal(row.attempt, 4);
    assert.deepEqual(row.attempts.map((a) => [a.attempt, a.status]), [
      [1, "cut-off"],
      [2, "cut-off"],
      [3, "cut-off"],
      [4, "aborted"],
    ]);
    // Each attempt ends before the next starts, and each has its end on the time line.
    for (let i = 0; i < 3; i++) {
      const [a, b] = [row.attempts[i]!, row.attempts[i + 1]!];
      assert.ok(a.endAt !== undefined && a.startedAt <= a.endAt && a.endAt <= b.startedAt, `${i}`);
    }
    assert.equal(body.counts["cut-off"], 0, "counts count each run's newest attempt");
    assert.equal(body.earlierCutOff, 3);
    // A run never retried has its one attempt.
    const busy = body.runs.find((r) => r.runId === "busy")!;
    assert.deepEqual(busy.attempts.map((a) => [a.attempt, a.status, a.endAt]), [
      [1, "live", undefined],
    ]);
  } finally {
    await own.close();
    await retried.close();
  }
});

test("a tier mark sits when the ledger recorded the crossing, not where its turns would put it", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  const run = ac.startRun({ sessionId: "early-tier", caps: { turns: 20 } });
  // Tier 1 at half of the 20 turns: the call whose prologue is its directive.
  let before = 0;
  let after = 0;
  for (let i = 0; i < 12 && after === 0; i++) {
    const at = Date.now();
    if (run.preLlmCall() !== undefined) [before, after] = [at, Date.now()];
  }
  assert.ok(after > 0, "tier 1 came within 12 turns");
  // Then a long quiet stretch, with no more turns: an estimate from the turns would put tier 1
  // at the end of the run.
  await waitFor(() => Date.now() > after + 400, 10_000);
  await run.end({ status: "done" });
  await ac.close();
  const body = await answerOf<RunsPayload>(home, "/api/runs");
  const row = body.runs.find((r) => r.runId === "early-tier")!;
  const tier = row.marks.find((m) => m.kind === "tier" && m.tier === 1);
  assert.ok(tier, JSON.stringify(row.marks));
  assert.equal(tier.estimated, undefined, "the time is recorded, not estimated");
  assert.ok(tier.at >= before - 1 && tier.at <= after + 1, `${tier.at} in [${before}, ${after}]`);
  const ended = row.marks.find((m) => m.kind === "end")!;
  assert.ok(ended.at - tier.at >= 400, "well before the end");
});

test("token and dollar caps are drawn against the use the run reported", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  const run = ac.startRun({ sessionId: "priced", caps: { turns: 10, tokens: 10_000, usd: 2 } });
  run.preLlmCall();
  run.postLlmCall({ inputTokens: 3000, outputTokens: 1000, usd: 0.5 });
  await run.end({ status: "done" });
  await ac.close();
  const body = await answerOf<RunsPayload>(home, "/api/runs");
  const caps = body.runs.find((r) => r.runId === "priced")!.caps;
  assert.deepEqual(
    caps.filter((c) => c.axis === "tokens" || c.axis === "usd").map((c) => [
      c.axis,
      c.used,
      c.cap,
    ]),
    [["tokens", 4000, 10_000], ["usd", 0.5, 2]],
  );
});

test("a checkpoint file outside the home's checkpoint directory, or a link to one, is not read", async () => {
  const home = tempHome();
  const { settings } = loadSettings({ home, env: {} });
  const writer = openStore({ home, settings })!;
  const outside = path.join(home, "secret.txt");
  fs.writeFileSync(outside, "not for the page");
  const base = {
    attempt: 1,
    dialect: "chat",
    caps: {},
    turnsUsed: 0,
    elapsedSeconds: 0,
    tier: 0,
    inFlight: [],
    recent: [],
    notes: [],
    host: thisHost(),
    status: "done" as const,
    startedAt: Date.now(),
    updatedAt: Date.now(),
  };
  await writer.write({
    records: [
      { ...base, runId: "outside", checkpointFile: outside },
      {
        ...base,
        runId: "linked",
        checkpointFile: path.join(settings.checkpoint_dir, "linked.md"),
      },
    ],
  });
  fs.mkdirSync(settings.checkpoint_dir, { recursive: true });
  fs.symlinkSync(outside, path.join(settings.checkpoint_dir, "linked.md"));
  const own = await serveRuns({ store: writer, settings, port: 0 });
  try {
    const a = await (await fetch(`${own.url}api/runs/outside`)).json() as RunPayload;
    assert.equal(a.file.source, "none");
    assert.equal(a.file.content, undefined);
    assert.match(a.file.note ?? "", /not under this home's checkpoint directory/);
    const b = await (await fetch(`${own.url}api/runs/linked`)).json() as RunPayload;
    assert.equal(b.file.content, undefined);
    assert.match(b.file.note ?? "", /symbolic link/);
    assert.equal(b.run.hasFile, false);
  } finally {
    await own.close();
    await writer.close();
  }
});

test("every answer carries the Content-Security-Policy and nosniff; the page has no inline script", async () => {
  for (const p of ["/", "/app.js", "/app.css", "/api/runs", "/api/runs/cut-1", "/nowhere"]) {
    const res = await raw("GET", p);
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) {
      assert.equal(res.headers[name.toLowerCase()], value, `${name} on ${p}`);
    }
  }
  const csp = SECURITY_HEADERS["Content-Security-Policy"]!;
  assert.match(csp, /script-src 'self'(;|$)/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  const page = await raw("GET", "/");
  assert.equal(page.status, 200);
  assert.match(String(page.headers["content-type"]), /^text\/html/);
  const scripts = [...page.body.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
  assert.deepEqual(scripts.map((m) => [m[1]?.trim(), m[2]]), [['src="/app.js" defer', ""]]);
  assert.doesNotMatch(page.body, /\son[a-z]+=/i);
  const js = await raw("GET", "/app.js");
  assert.match(String(js.headers["content-type"]), /^text\/javascript/);
  assert.doesNotMatch(js.body, /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(/);
  assert.equal((await raw("GET", "/nowhere")).status, 404);
});

test("POST, PUT, DELETE and PATCH are refused with 405; HEAD answers without a body", async () => {
  for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
    for (const p of ["/", "/api/runs", "/api/runs/cut-1"]) {
      const res = await raw(method, p);
      assert.equal(res.status, 405, `${method} ${p}`);
    }
  }
  const head = await raw("HEAD", "/api/runs");
  assert.equal(head.status, 200);
  assert.equal(head.body, "");
  assert.ok(Number(head.headers["content-length"]) > 0);
});

test("on the loopback, a request addressed to another host name is refused", async () => {
  assert.equal((await raw("GET", "/api/runs", { Host: "attacker.example" })).status, 421);
  assert.equal((await raw("GET", "/api/runs", { Host: "localhost:1234" })).status, 200);
});

test("the server waits for a ledger that is not there yet, and says so", async () => {
  const home = tempHome();
  const { settings } = loadSettings({ home, env: {} });
  let calls = 0;
  const own = await serveRuns({
    store: () => {
      calls++;
      const store = fs.existsSync(path.join(home, "agent-checkpoint", "runs.db"))
        ? openStore({ home, settings, mode: "read" })
        : undefined;
      return store ? Promise.resolve(store) : Promise.reject(new Error("no run ledger yet"));
    },
    settings,
    port: 0,
  });
  try {
    const early = await fetch(`${own.url}api/runs`);
    assert.equal(early.status, 503);
    assert.equal((await early.json() as { error: string }).error, "no run ledger yet");
    const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
    await ac.startRun({ sessionId: "first", caps: { turns: 5 } }).end({ status: "done" });
    await ac.close();
    let runs: string[] = [];
    const seen = async () => {
      const res = await fetch(`${own.url}api/runs`);
      if (res.status === 200) runs = (await res.json() as RunsPayload).runs.map((r) => r.runId);
      else await res.body?.cancel();
      return runs.length > 0;
    };
    const end = Date.now() + 20_000;
    while (!await seen() && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(runs, ["first"]);
    assert.ok(calls >= 2);
  } finally {
    await own.close();
  }
});

// ---- the command ------------------------------------------------------------

const cliScript = () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  return fileURLToPath(new URL(`../../scripts/cli${ext}`, import.meta.url));
};

/** Start `serve` as a program; resolves once it printed its URL (or ended). */
async function startCli(args: string[]) {
  const [cmd, argv] = scriptCommand(cliScript(), ["serve", ...args]);
  const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  let code: number | null | undefined;
  child.stdout.on("data", (d) => stdout += d);
  child.stderr.on("data", (d) => stderr += d);
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(code = c)));
  await waitFor(() => /http:\/\/\S+\//.test(stdout) || code !== undefined, 60_000);
  return {
    child,
    url: /http:\/\/\S+\//.exec(stdout)?.[0],
    out: () => ({ stdout, stderr }),
    exited,
  };
}

test("serve --port 0 prints its URL, serves the home's runs, and stops on SIGTERM", async () => {
  const cli = await startCli(["--port", "0", "--home", fleet.home]);
  assert.ok(cli.url, JSON.stringify(cli.out()));
  assert.match(cli.url!, /^http:\/\/127\.0\.0\.1:\d+\/$/);
  assert.match(cli.out().stdout, /^Serving .*runs\.db \(read-only\) at http/);
  assert.equal(cli.out().stderr, "");
  const body = await (await fetch(`${cli.url}api/runs`)).json() as RunsPayload;
  assert.equal(body.total, 5);
  cli.child.kill("SIGTERM");
  await cli.exited;
  // Deno's child_process names the signal sent rather than the exit code: the output tells.
  assert.match(cli.out().stdout, /\nStopped\.\n$/);
});

test("serve on an address beyond the loopback prints a warning", async () => {
  const cli = await startCli(["--port", "0", "--host", "0.0.0.0", "--home", fleet.home]);
  try {
    assert.ok(cli.url, JSON.stringify(cli.out()));
    assert.match(cli.out().stderr, /warning: listening on 0\.0\.0\.0, beyond this machine/);
    const port = new URL(cli.url!).port;
    const res = await fetch(`http://127.0.0.1:${port}/api/runs`);
    assert.equal(res.status, 200);
    await res.body?.cancel();
  } finally {
    cli.child.kill("SIGTERM");
    await cli.exited;
  }
});

test("serve on every address still refuses a foreign Host name, and takes --allow-host", async () => {
  const cli = await startCli([
    "--port",
    "0",
    "--host",
    "0.0.0.0",
    "--allow-host",
    "runs.example.internal, other.example:7433, [fd00::7]",
    "--home",
    fleet.home,
  ]);
  try {
    assert.ok(cli.url, JSON.stringify(cli.out()));
    const base = `http://127.0.0.1:${new URL(cli.url!).port}/`;
    const status = async (name: string) =>
      (await raw("GET", "/api/runs", { Host: name }, base)).status;
    // A name a page elsewhere rebinds to this machine: refused, whatever the bind.
    assert.equal(await status("evil.example"), 421);
    assert.equal(await status(`evil.example:${new URL(base).port}`), 421);
    // The machine's own names and addresses, the loopback, the bound address, the allow list.
    const own = Object.values(os.networkInterfaces()).flat().map((a) => a!.address)
      .filter((a) => !a.includes(":"));
    for (const name of ["localhost", "127.0.0.1", "0.0.0.0", os.hostname(), ...own]) {
      assert.equal(await status(`${name}:80`), 200, name);
    }
    assert.equal(await status("runs.example.internal"), 200);
    assert.equal(await status("OTHER.example:7433"), 200);
    assert.equal(await status("[fd00::7]:80"), 200);
    assert.equal(await status("[fd00::8]:80"), 421);
  } finally {
    cli.child.kill("SIGTERM");
    await cli.exited;
  }
  const bad = await startCli(["--allow-host", "a b/c", "--home", fleet.home]);
  assert.equal(await bad.exited, 2);
  assert.match(bad.out().stderr, /--allow-host takes host names separated by commas/);
});

test("serve refuses a bad port and a store that is not a PostgreSQL URL", async () => {
  for (
    const [args, reason] of [
      [["--port", "http"], /--port takes a port number/],
      [["--port", "70000"], /--port takes a port number/],
      [["--store", "mysql://x"], /--store takes a postgres:\/\/ or postgresql:\/\/ URL/],
    ] as const
  ) {
    const cli = await startCli([...args, "--home", fleet.home]);
    assert.equal(await cli.exited, 2);
    assert.match(cli.out().stderr, reason);
  }
});

test("a tree of runs sharing one budget: each row names its parent, and a run's detail its tree's children and totals", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  const lead = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  lead.preLlmCall();
  lead.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.2 });
  const helper = ac.startRun({ sessionId: "helper", parent: lead });
  helper.preLlmCall();
  helper.postLlmCall({ inputTokens: 1000, outputTokens: 500, usd: 0.3 });
  await helper.end();
  await lead.end();
  const solo = ac.startRun({ sessionId: "solo" });
  await solo.end();
  await ac.close();
  const list = await answerOf<RunsPayload>(home, "/api/runs");
  const row = (id: string) => list.runs.find((r) => r.runId === id)!;
  assert.equal(row("helper").parent, "lead");
  assert.equal(row("helper").treeRoot, "lead");
  assert.equal(row("lead").treeRoot, "lead");
  assert.equal(row("lead").parent, undefined);
  assert.equal(row("solo").treeRoot, undefined);
  const detail = await answerOf<RunPayload>(home, "/api/runs/lead");
  assert.deepEqual(detail.tree?.children, [{ runId: "helper", status: "done" }]);
  assert.equal(detail.tree?.text, "2 runs: 2 turns, 1650 tokens, $0.50 of $1.00");
  const child = await answerOf<RunPayload>(home, "/api/runs/helper");
  assert.equal(child.tree?.root, "lead");
  assert.deepEqual(child.tree?.children, []);
  assert.equal((await answerOf<RunPayload>(home, "/api/runs/solo")).tree, undefined);
});
