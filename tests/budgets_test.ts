// Tokens and dollars as budget axes, and tool-call deadlines, through the core API.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { createAgentCheckpoint, discoverCaps } from "../mod.ts";
import { parseRecord, summaryLine } from "../_record.ts";
import { auditSummary } from "../cli/_checkpoints.ts";
import { usageCell } from "../cli/_ledger.ts";
import { main } from "../cli/mod.ts";
import { listCheckpoints } from "../cli/_inspect.ts";
import { explain } from "../cli/_explain_report.ts";
import { explainText } from "../cli/_explain.ts";
import { memoryIo } from "../cli/_io.ts";
import { paint } from "../cli/_format.ts";
import { captureLog, tempHome, waitFor, writeConfig } from "./_helpers.ts";

const record = (file: string) =>
  fs.existsSync(file) ? parseRecord(fs.readFileSync(file)) : undefined;

// The watchdog is off unless a test says otherwise: the hooks alone decide.
const make = (settings: Record<string, unknown> = {}, home = tempHome()) => {
  const log = captureLog();
  const events: Array<{ kind: string; source: string; tier?: number }> = [];
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { watchdog: false, ...settings },
    logger: log.logger,
    onCheckpoint: (e) => events.push(e),
  });
  return { ac, log, events, home };
};

/** Wait for a signal to abort; the host's own work keeps the process alive meanwhile. */
async function aborted(signal: AbortSignal): Promise<void> {
  const alive = setInterval(() => {}, 50);
  try {
    if (!signal.aborted) {
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
    }
  } finally {
    clearInterval(alive);
  }
}

/** Drive `calls` model calls; returns the call index of each prologue and the record after each call. */
function drive(
  run: ReturnType<ReturnType<typeof make>["ac"]["startRun"]>,
  calls: number,
  use: (call: number) => Parameters<typeof run.postLlmCall>[0],
) {
  const prologues: Record<number, string> = {};
  const tiers: number[] = [];
  for (let call = 0; call < calls; call++) {
    const text = run.preLlmCall();
    if (text !== undefined) prologues[call] = text;
    run.postLlmCall(use(call));
    tiers.push(record(run.checkpointFile)?.tier ?? 0);
  }
  return { prologues, tiers };
}

test("token tiers fire at the call that crosses them: persisted by usage(), told at the next call", async () => {
  const { ac, events } = make();
  const run = ac.startRun({ sessionId: "tokens", caps: { tokens: 10_000 } });
  const { prologues, tiers } = drive(run, 12, () => ({ inputTokens: 800, outputTokens: 200 }));
  // 1,000 tokens a call: half the cap after call 4 (0-based), 90 % after call 8.
  assert.deepEqual(tiers, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
  assert.deepEqual(Object.keys(prologues).map(Number), [5, 9]);
  assert.match(
    prologues[5]!,
    /^Budget checkpoint: you have used 5000 of 10000 tokens \(5000 left\)\./,
  );
  assert.match(prologues[9]!, /^Final budget checkpoint: you have used 9000 of 10000 tokens/);
  assert.deepEqual(
    events.map((e) => [e.kind, e.source, e.tier]),
    [["tier", "post_llm_call", 1], ["tier", "post_llm_call", 2]],
  );
  const r = record(run.checkpointFile)!;
  assert.deepEqual(r.usage, { inputTokens: 7200, outputTokens: 1800 }, "as at tier 2");
  assert.deepEqual(r.caps.tokens, { value: 10_000, source: "host" });
  await ac.close();
});

test("dollar tiers fire on the cost the framework gives, and the directive names the axis nearest its cap", async () => {
  const { ac } = make();
  const run = ac.startRun({ sessionId: "usd", caps: { turns: 100, usd: 2 } });
  const { prologues } = drive(run, 10, () => ({ inputTokens: 1000, outputTokens: 100, usd: 0.25 }));
  // $0.25 a call: $1.00 (half) after call 3, $1.80 (90 %) passed after call 7.
  assert.deepEqual(Object.keys(prologues).map(Number), [4, 8]);
  assert.match(
    prologues[4]!,
    /^Budget checkpoint: you have used 4 of 100 turns \(96 left\) and \$1\.00 of \$2\.00 \(\$1\.00 left\); your dollar budget is nearest its cap\./,
  );
  assert.match(
    prologues[8]!,
    /\$2\.00 of \$2\.00 \(\$0\.00 left\); your dollar budget is nearest its cap\. Stop expanding/,
  );
  const text = fs.readFileSync(run.checkpointFile, "utf8");
  assert.match(text, /- Cost so far: \$2\.00\n- Cost cap: \$2\.00 \(host\)/);
  assert.match(text, /- Tokens so far: 8800 \(8000 in, 800 out\)/);
  await ac.close();
});

test("the prices setting prices calls that come without a cost: the model named once, a dated name by its prefix", async () => {
  const { ac, log } = make({ prices: { "small-model": { input: 1, output: 5 } } });
  // $1 per million input tokens, $5 per million output: 100,000 in + 20,000 out is $0.20.
  const run = ac.startRun({
    sessionId: "priced",
    caps: { usd: 1 },
    model: "small-model-2026-01-01",
  });
  const { prologues } = drive(run, 6, () => ({ inputTokens: 100_000, outputTokens: 20_000 }));
  assert.deepEqual(Object.keys(prologues).map(Number), [3, 5]); // $0.60 after call 2, $1.00 after call 4
  assert.deepEqual(record(run.checkpointFile)!.usage, {
    inputTokens: 500_000,
    outputTokens: 100_000,
    usd: 1,
  });
  assert.deepEqual(log.records.filter((r) => r.level !== "info"), []);
  await ac.close();
});

test("with neither a cost nor a price the cost is unknown, never $0: one log line, the dollar axis stays on, and the token axis still counts", async () => {
  const { ac, log } = make({ prices: { "other-model": { input: 1, output: 1 } } });
  const run = ac.startRun({ sessionId: "unpriced", caps: { usd: 0.01, tokens: 1_000_000 } });
  const { prologues } = drive(run, 20, () => ({
    inputTokens: 40_000,
    outputTokens: 10_000,
    model: "mystery-model",
  }));
  // Tokens: 50,000 a call reaches half of a million after call 9, 90 % after call 17.
  assert.deepEqual(Object.keys(prologues).map(Number), [10, 18]);
  assert.doesNotMatch(prologues[10]!, /\$/, "no dollar figure when the cost is not known");
  const warnings = log.records.filter((r) => r.level === "warn");
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!.message, /unknown price for mystery-model.*no price for mystery-model/);
  assert.doesNotMatch(warnings[0]!.message, /axis is off/);
  const text = fs.readFileSync(run.checkpointFile, "utf8");
  assert.match(text, /- Cost so far: unknown \(no cost reported, no price\)/);
  await ac.close();
});

test("caps.tokens and caps.usd come from the settings; enabled_axes leaves one out, saying why", async () => {
  const found = await discoverCaps({ sessionId: "s" }, {
    home: "/nonexistent",
    env: {},
    overrides: { caps: { tokens: 50_000, usd: "2.5" }, enabled_axes: ["time", "turns", "usd"] },
  });
  assert.deepEqual(found.caps, { usd: { value: 2.5, source: "caps.usd" } });
  assert.deepEqual(found.dropped, ["tokens cap 50000 not counted: tokens is not in enabled_axes"]);
  const host = await discoverCaps({ sessionId: "s", caps: { tokens: 900 } }, {
    home: "/nonexistent",
    env: {},
    overrides: { caps: { tokens: 50_000 } },
  });
  assert.deepEqual(host.caps, { tokens: { value: 900, source: "host" } });
});

test("a tool call past its deadline gets a tool_timeout record naming it, and its signal aborts", async () => {
  const { ac, events } = make();
  const run = ac.startRun({ sessionId: "slow", caps: { turns: 50 } });
  run.preLlmCall();
  run.preToolCall("fetch_page", { callId: "call_7", timeoutSeconds: 0.2, input: { url: "x" } });
  const signal = run.time.toolSignal("call_7");
  assert.equal(signal.aborted, false);
  await aborted(signal);
  assert.equal((signal.reason as DOMException).name, "TimeoutError");
  const r = record(run.checkpointFile)!;
  assert.equal(r.kind, "tool_timeout");
  assert.equal(r.source, "host");
  assert.equal(r.timedOut?.tool, "fetch_page");
  assert.equal(r.timedOut?.callId, "call_7");
  assert.ok(Math.abs(r.timedOut!.timeoutSeconds - 0.2) < 1e-9);
  assert.deepEqual(r.tools.map((t) => [t.tool, t.callId, t.status, t.timedOut]), [
    ["fetch_page", "call_7", "in flight", true],
  ]);
  const text = fs.readFileSync(run.checkpointFile, "utf8");
  assert.match(text, /tool call timed out; checkpoint persisted/);
  assert.match(text, /Tool call fetch_page \(call_7\) ran past its 0\.2s deadline/);
  assert.match(text, /- Timed out: fetch_page \[call_7\] ran past its 0\.2s deadline/);
  assert.deepEqual(events.map((e) => e.kind), ["tool_timeout"]);
  // A signal asked for after the deadline is aborted already.
  assert.equal(run.time.toolSignal("call_7").aborted, true);
  run.postToolCall("fetch_page", { callId: "call_7", error: signal.reason });
  await ac.close();
});

test("tool_timeout_seconds gives every call a deadline; a call that ends in time neither aborts nor records", async () => {
  const { ac } = make({ tool_timeout_seconds: 0.15 });
  const run = ac.startRun({ sessionId: "quick" });
  run.preToolCall("fast", { callId: "a" });
  const fast = run.time.toolSignal("a");
  run.postToolCall("fast", { callId: "a", ok: true });
  // A signal asked for before the call starts is armed by preToolCall.
  const slow = run.time.toolSignal("b");
  run.preToolCall("slow", { callId: "b" });
  await aborted(slow);
  assert.equal(fast.aborted, false, "the call that ended in time is never aborted");
  const r = record(run.checkpointFile)!;
  assert.equal(r.kind, "tool_timeout");
  assert.equal(r.timedOut?.callId, "b");
  assert.deepEqual(r.tools.map((t) => [t.callId, t.status, t.timedOut]), [
    ["a", "ok", undefined],
    ["b", "in flight", true],
  ]);
  // A per-call deadline wins over the setting.
  run.preToolCall("patient", { callId: "c", timeoutSeconds: 3600 });
  assert.equal(run.time.toolSignal("c").aborted, false);
  await ac.close();
});

for (const ledger of [true, false]) {
  test(`the resume text names the tool call that timed out in the earlier attempt (ledger ${ledger ? "on" : "off"})`, async () => {
    const home = tempHome();
    const first = make({ ledger }, home);
    const run = first.ac.startRun({ sessionId: "job", caps: { turns: 30 } });
    run.preLlmCall();
    run.preToolCall("bash", { callId: "call_hang", timeoutSeconds: 0.1 });
    const signal = run.time.toolSignal("call_hang");
    await aborted(signal);
    await first.ac.close(); // cut off: no end recorded

    // The first keeper's run is live in this same, still running process: only warn resumes it here.
    const second = make({ ledger, on_duplicate: "warn" }, home);
    const again = second.ac.startRun({ sessionId: "job", caps: { turns: 30 } });
    assert.equal(again.attempt, 2);
    assert.equal(again.previous?.kind, "tool_timeout");
    // The file's record says "tool call bash [call_hang] ran past its 0.1s deadline"; the
    // ledger's, "inside tool bash (call id call_hang, for 0s, past its deadline)".
    const named = /bash[ (\[]+(call id )?call_hang.*past its (0\.1s )?deadline/;
    assert.match(again.preLlmCall()!, named);
    // The later attempt's records keep the earlier attempt's summary, which names the call.
    await again.end({ status: "failed" });
    assert.match(record(again.checkpointFile)?.attempts?.[0] ?? "", named);
    await second.ac.close();
  });
}

test("a finished call that timed out is named in the ledger's summary of its attempt", async () => {
  const home = tempHome();
  const first = make({}, home);
  const run = first.ac.startRun({ sessionId: "job", caps: { turns: 30 } });
  run.preToolCall("bash", { callId: "call_slow", timeoutSeconds: 0.1 });
  const signal = run.time.toolSignal("call_slow");
  await aborted(signal);
  run.postToolCall("bash", { callId: "call_slow", error: signal.reason });
  await run.end({ status: "failed" });
  await first.ac.close();
  const second = make({}, home);
  const again = second.ac.startRun({ sessionId: "job", caps: { turns: 30 } });
  assert.match(
    again.previous?.summary ?? "",
    /tool call bash \(call id call_slow\) ran past its deadline/,
  );
  await second.ac.close();
});

test("ls and audit show tokens and cost", async () => {
  const { ac, home } = make();
  const a = ac.startRun({ sessionId: "a", caps: { usd: 5 } });
  a.postLlmCall({ inputTokens: 9000, outputTokens: 3000, usd: 0.42 });
  await a.checkpoint();
  const b = ac.startRun({ sessionId: "b" });
  b.postLlmCall({ inputTokens: 1000, outputTokens: 0 });
  await b.checkpoint();
  await ac.close();
  const files = listCheckpoints(`${home}/agent-checkpoints`);
  const cells = Object.fromEntries(files.map((f) => [f.runId, usageCell(f.record)]));
  assert.deepEqual(cells, { a: "12000 tok, $0.42/$5.00", b: "1000 tok" });
  const summary = auditSummary(files);
  assert.deepEqual(summary.tokens, { runs: 2, input: 10_000, output: 3000 });
  assert.deepEqual(summary.usd, { runs: 1, total: 0.42, unknown: 1 });
});

test("usage() never throws and ignores figures that are not token counts", async () => {
  const { ac } = make();
  const run = ac.startRun({ sessionId: "odd", caps: { tokens: 100 } });
  // deno-lint-ignore no-explicit-any
  const odd: any[] = [undefined, null, {}, { inputTokens: -5, outputTokens: NaN }, {
    inputTokens: "40",
    usd: -1,
  }];
  for (const report of odd) run.postLlmCall(report);
  assert.equal(run.preLlmCall(), undefined);
  run.postLlmCall({ inputTokens: 60 });
  assert.match(run.preLlmCall() ?? "", /60 of 100 tokens/);
  assert.ok(await waitFor(() => record(run.checkpointFile)?.tier === 1));
  await ac.close();
});

test("explain shows the token and dollar caps and when their tiers fire", () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint:\n  caps: { tokens: 200000, usd: 5 }\n");
  const e = explain({ home, env: {}, sqlite: null });
  assert.equal(e.run.capless, false, "a run with only token and dollar caps is not capless");
  assert.deepEqual(e.run.caps.tokens, { value: 200_000, source: "caps.tokens" });
  assert.deepEqual(
    e.schedule.map((t) => [t.tier, t.fires, t.atTokens, t.atUsd]),
    [[1, true, 100_000, 2.5], [2, true, 180_000, 4.5]],
  );
  const text = explainText(e, paint(memoryIo().io));
  assert.match(text, /cost cap +\$5\.00 +\(caps\.usd\)/);
  assert.match(text, /the first model call after 180000 tokens or \$4\.50/);
});

test("a record's summary names a timed-out call, and its tokens and cost", () => {
  const line = summaryLine({
    kind: "end",
    source: "host",
    runId: "r",
    dialect: "chat",
    turnsUsed: 4,
    elapsedSeconds: 90,
    caps: { usd: { value: 2, source: "host" } },
    tier: 0,
    persistedAt: "2026-01-01T00:00:00.000Z",
    message: "",
    tools: [{ tool: "bash", callId: "c1", status: "failed", startedAt: 10, timedOut: true }],
    notes: [],
    usage: { inputTokens: 9000, outputTokens: 1000, usd: 0.5 },
    end: { status: "failed", at: "2026-01-01T00:00:00.000Z" },
  });
  assert.match(line, /after 4 turns and 1m30s, 10000 tokens and \$0\.50 of \$2\.00/);
  assert.match(line, /tool call bash \[c1\] timed out/);
});

test("the run ledger keeps tokens and cost; ls, show and audit over it show them", async () => {
  const { ac, home } = make();
  const a = ac.startRun({ sessionId: "a", caps: { usd: 5, tokens: 100_000 } });
  a.postLlmCall({ inputTokens: 9000, outputTokens: 3000, usd: 0.42 });
  await a.end();
  const b = ac.startRun({ sessionId: "b" });
  b.postLlmCall({ inputTokens: 1000, outputTokens: 0 });
  await b.end({ status: "failed" });
  await ac.close();
  const cli = async (...args: string[]) => {
    const m = memoryIo();
    const code = await main([...args, "--home", home], m.io);
    assert.equal(code, 0, m.stderr());
    return m.stdout();
  };
  const runs = JSON.parse(await cli("ls", "--json")).runs as Array<
    { runId: string; usage?: unknown }
  >;
  assert.deepEqual(
    Object.fromEntries(runs.map((r) => [r.runId, r.usage])),
    {
      a: { inputTokens: 9000, outputTokens: 3000, usd: 0.42 },
      b: { inputTokens: 1000, outputTokens: 0 },
    },
  );
  const ls = await cli("ls");
  assert.match(ls, /TOKENS, COST/);
  assert.match(ls, /^a .* 12000\/100000 tok, \$0\.42\/\$5\.00$/m);
  assert.match(ls, /^b .* 1000 tok$/m);
  assert.match(await cli("show", "a"), /tokens, cost +12000\/100000 tok, \$0\.42\/\$5\.00/);
  const audit = await cli("audit");
  assert.match(audit, /^tokens +13000 over 2 runs \(10000 in, 3000 out\)$/m);
  assert.match(audit, /^cost +\$0\.42 over 1 run \(1 run with no known cost\)$/m);
});

test("resume_budget remaining takes what earlier attempts used off the token and dollar caps", async () => {
  const home = tempHome();
  const first = make({ resume_budget: "remaining" }, home);
  const run = first.ac.startRun({ sessionId: "job", caps: { tokens: 10_000, usd: 1 } });
  run.postLlmCall({ inputTokens: 3000, outputTokens: 1000, usd: 0.25 });
  await run.end({ status: "failed" });
  await first.ac.close();
  const second = make({ resume_budget: "remaining" }, home);
  const again = second.ac.startRun({ sessionId: "job", caps: { tokens: 10_000, usd: 1 } });
  assert.equal(again.attempt, 2);
  assert.deepEqual(again.previous?.usage, { inputTokens: 3000, outputTokens: 1000, usd: 0.25 });
  assert.equal(again.caps.tokens?.value, 6000);
  assert.equal(again.caps.usd?.value, 0.75);
  assert.match(again.caps.usd?.source ?? "", /less \$0\.25 spent by earlier attempts/);
  await second.ac.close();
});

test("a call of unknown cost is never counted as $0: the record, the ls cell and the audit say at least or unknown, and an enforced dollar cap stops the run far under its cap", async () => {
  const calls = (run: ReturnType<ReturnType<typeof make>["ac"]["startRun"]>) => {
    run.preLlmCall();
    run.postLlmCall({ inputTokens: 10, outputTokens: 10, usd: 0.3 });
    run.preLlmCall();
    run.postLlmCall({ inputTokens: 1000, outputTokens: 1000, model: "mystery-model" });
  };
  const { ac, home } = make();
  // A dollar cap, not enforced: the known $0.30 is a floor.
  const floor = ac.startRun({ sessionId: "floor", caps: { usd: 1 } });
  calls(floor);
  await floor.checkpoint();
  // No cap, nothing enforced, no tree: nobody is told, and the run's dollars are unknown.
  const free = ac.startRun({ sessionId: "free" });
  calls(free);
  await free.checkpoint();
  await ac.close();
  // Enforced: the call of unknown cost stops the run though $0.30 is far under $1.
  const enforced = make({ enforce: ["usd"] }, home);
  const stopped = enforced.ac.startRun({ sessionId: "enforced", caps: { usd: 1 } });
  calls(stopped);
  assert.equal(
    stopped.signal.aborted,
    true,
    "an enforced cap stops at a call of unknown cost",
  );
  await stopped.end();
  await enforced.ac.close();

  const text = fs.readFileSync(floor.checkpointFile, "utf8");
  assert.match(text, /- Cost so far: at least \$0\.30 \(some calls' cost is unknown\)/);
  assert.match(text, /- Cost unknown: unknown price for mystery-model/);
  const files = listCheckpoints(`${home}/agent-checkpoints`);
  const by = Object.fromEntries(files.map((f) => [f.runId, f.record]));
  assert.deepEqual(by.floor!.usage, {
    inputTokens: 1010,
    outputTokens: 1010,
    usd: 0.3,
    unpriced: ["mystery-model"],
  });
  assert.equal(by.free!.usage?.usd, undefined, "no dollar total when a cost is unknown");
  assert.equal(by.enforced!.end?.status, "capped");
  assert.deepEqual(by.enforced!.usage?.unpriced, ["mystery-model"]);
  assert.deepEqual(
    Object.fromEntries(files.map((f) => [f.runId, usageCell(f.record)])),
    { floor: "2020 tok, ≥$0.30/$1.00", free: "2020 tok", enforced: "2020 tok, ≥$0.30/$1.00" },
  );
  // No run's dollars are known: none adds to the audit's total.
  assert.deepEqual(auditSummary(files).usd, { runs: 0, total: 0, unknown: 3 });
});
