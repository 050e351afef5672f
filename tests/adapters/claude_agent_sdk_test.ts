// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The Claude Agent SDK adapter, end to end: the SDK's own CLI (a native
 * binary from npm) talks to a scripted Messages API server on 127.0.0.1, so
 * the tests assert what the model was sent, request by request.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { createSdkMcpServer, type Options, tool } from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import { createAgentCheckpoint } from "../../mod.ts";
import { parseRecord } from "../../_record.ts";
import { checkpointedQuery } from "../../adapters/claude_agent_sdk.ts";
import {
  claudeOffline,
  type MessagesServer,
  startMessagesServer,
} from "../fixtures/messages_server.ts";
import { blockFor, captureLog, tempHome } from "../_helpers.ts";

const TIER1 = "CHECKPOINT-TIER-ONE";
const TIER2 = "CHECKPOINT-TIER-TWO";

const record = (file: string) =>
  fs.existsSync(file) ? parseRecord(fs.readFileSync(file)) : undefined;

const count = (haystack: string, needle: string) => haystack.split(needle).length - 1;

const offline = (server: MessagesServer, cwd: string, extra: Options = {}): Options =>
  claudeOffline(server, cwd, extra);

/** An in-process tool answering at once. */
const quick = createSdkMcpServer({
  name: "t",
  alwaysLoad: true,
  tools: [
    tool(
      "ping",
      "Answer pong",
      {},
      () => Promise.resolve({ content: [{ type: "text" as const, text: "pong" }] }),
    ),
  ],
});

test("the directive reaches requests 6 and 10 (from 0) of a 12-turn run, once each; Write reaches the run with its id", async () => {
  const cwd = tempHome();
  const server = await startMessagesServer((n) =>
    n === 9
      ? {
        tools: [{ name: "Write", input: { file_path: path.join(cwd, "out.txt"), content: "x\n" } }],
      }
      : n < 12
      ? { text: `step ${n}`, tools: [{ name: "mcp__t__ping", input: {} }] }
      : { text: "all done" }
  );
  const { logger, records: logs } = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger,
    settings: { allow_tiny_tier1: true, tier1_template: TIER1, tier2_template: TIER2 },
  });
  try {
    const q = checkpointedQuery(ac, { sessionId: "twelve", maxTurns: 12 }, {
      prompt: "work in twelve steps",
      options: offline(server, cwd, {
        allowedTools: ["mcp__t__ping", "Write"],
        mcpServers: { t: quick },
      }),
    });
    // What the run's tool hooks were told, as they were told it.
    const toldPre: { tool: string; call: unknown }[] = [];
    const preToolCall = q.run.preToolCall.bind(q.run);
    Object.assign(q.run, {
      preToolCall: (tool: string, call?: { callId?: string; input?: unknown }) => {
        toldPre.push({ tool, call });
        preToolCall(tool, call);
      },
    });
    let result: string | undefined;
    for await (const m of q) if (m.type === "result") result = m.subtype;
    assert.equal(result, "success");
    assert.equal(server.requests.length, 12);
    assert.equal(fs.readFileSync(path.join(cwd, "out.txt"), "utf8"), "x\n");

    // Tier 1 is due once 6 of 12 turns are used, tier 2 once 10 are: requests
    // 6 and 10 counting from 0 (the 7th and the 11th). The CLI keeps hook
    // context in its transcript, so a directive is added to its request, as
    // that request's newest message, and is history afterwards, never added again.
    const seen = server.requests.map((r) => [count(r.raw, TIER1), count(r.raw, TIER2)]);
    const expected = server.requests.map((_, i) => [i >= 6 ? 1 : 0, i >= 10 ? 1 : 0]);
    assert.deepEqual(seen, expected);
    const newest = (i: number) => JSON.stringify(server.requests[i]!.body.messages.at(-1));
    assert.match(newest(6), new RegExp(TIER1));
    assert.match(newest(10), new RegExp(TIER2));

    const r = record(q.run.checkpointFile);
    assert.ok(r, "the run has its checkpoint file");
    assert.equal(r.turnsUsed, 12);
    assert.equal(r.end?.status, "done");
    const write = r.tools.find((t) => t.tool === "Write");
    assert.deepEqual(
      write && { callId: write.callId, status: write.status, timed: write.durationMs! >= 0 },
      { callId: "toolu_9_0", status: "ok", timed: true },
    );
    assert.deepEqual(toldPre.find((t) => t.tool === "Write")?.call, {
      callId: "toolu_9_0",
      input: { file_path: path.join(cwd, "out.txt"), content: "x\n" },
    });
    assert.deepEqual(logs.filter((l) => l.level === "error"), []);
  } finally {
    await server.close();
    await ac.close();
  }
});

test("max-turns exhaustion ends the run capped and rethrows", async () => {
  const cwd = tempHome();
  const server = await startMessagesServer([{ tools: [{ name: "mcp__t__ping", input: {} }] }]);
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  try {
    const q = checkpointedQuery(ac, { sessionId: "capped", maxTurns: 3 }, {
      prompt: "never stop",
      options: offline(server, cwd, { allowedTools: ["mcp__t__ping"], mcpServers: { t: quick } }),
    });
    const results: string[] = [];
    await assert.rejects(async () => {
      for await (const m of q) if (m.type === "result") results.push(m.subtype);
    }, /maximum number of turns/);
    assert.deepEqual(results, ["error_max_turns"]);
    assert.equal(server.requests.length, 3, "maxTurns allows exactly three model calls");
    const r = record(q.run.checkpointFile);
    assert.equal(r?.end?.status, "capped");
    assert.equal(r?.turnsUsed, 3);
  } finally {
    await server.close();
    await ac.close();
  }
});

test("an error from the model's API ends the run failed with the API's message, and rethrows", async () => {
  const cwd = tempHome();
  // A script that throws makes the server answer HTTP 400 with the error's text.
  const server = await startMessagesServer(() => {
    throw new Error("no such model");
  });
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  try {
    // Two turns: tier 2 is due at the first call, so the run has its file from the start.
    const q = checkpointedQuery(ac, { sessionId: "api-error", maxTurns: 2 }, {
      prompt: "go",
      options: offline(server, cwd),
    });
    const results: { subtype: string; isError: boolean }[] = [];
    await assert.rejects(async () => {
      for await (const m of q) {
        if (m.type === "result") results.push({ subtype: m.subtype, isError: m.is_error });
      }
    }, /API Error: 400/);
    // The SDK reports this as a "success" result that is an error.
    assert.deepEqual(results, [{ subtype: "success", isError: true }]);
    const r = record(q.run.checkpointFile);
    assert.equal(r?.end?.status, "failed");
    assert.match(r?.end?.summary ?? "", /400.*no such model/);
  } finally {
    await server.close();
    await ac.close();
  }
});

test("a tool that blocks the main thread past a crossing gets the watchdog's file", async () => {
  const cwd = tempHome();
  const server = await startMessagesServer([
    { tools: [{ name: "mcp__slow__block", input: {} }] },
    { text: "done" },
  ]);
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { allow_tiny_tier1: true, watchdog_poll_seconds: 0.05 },
  });
  // Time-axis crossings: tier 1 at 10 s, tier 2 at 16 s. Wide apart, so a CLI that starts late on
  // a busy machine (load 12 and more) still reaches the tool before a crossing it can block past.
  const timeSeconds = 20;
  const started = Date.now();
  let file = "";
  let seen: { tier: 1 | 2; blockedAt: number; record: ReturnType<typeof record> } | undefined;
  const slow = createSdkMcpServer({
    name: "slow",
    alwaysLoad: true,
    tools: [tool("block", "Block the thread", {}, () => {
      // Block past the next crossing, whenever the tool gets to run: on a
      // loaded machine the CLI may start late, past tier 1's.
      const blockedAt = Date.now();
      const tier = blockedAt - started < 9500 ? 1 : 2;
      blockFor(started + (tier === 1 ? 10_000 : 16_000) + 500 - Date.now());
      seen = { tier, blockedAt, record: record(file) }; // read before the main thread is free
      return Promise.resolve({ content: [{ type: "text" as const, text: "unblocked" }] });
    })],
  });
  try {
    const q = checkpointedQuery(ac, { sessionId: "blocked", maxTurns: 12, timeSeconds }, {
      prompt: "call the slow tool",
      options: offline(server, cwd, { allowedTools: ["mcp__slow__block"], mcpServers: { slow } }),
    });
    file = q.run.checkpointFile;
    for await (const _ of q) { /* drain */ }
    assert.ok(seen, "the tool ran");
    assert.ok(seen.blockedAt - started < 15_500, "the tool ran before the last crossing");
    const r = seen.record;
    assert.ok(r, "the file existed while the tool blocked the main thread");
    assert.equal(r.source, "watchdog");
    assert.equal(r.tier, seen.tier);
    assert.ok(Date.parse(r.persistedAt) >= seen.blockedAt - 5, "written during the block");
    assert.deepEqual(
      r.tools.map((t) => [t.tool, t.callId, t.status]),
      [["mcp__slow__block", "toolu_1_0", "in flight"]],
    );
    assert.equal(record(file)?.end?.status, "done");
  } finally {
    await server.close();
    await ac.close();
  }
});

test("a host's abort ends the run aborted; a denied tool is failed; the host's own hooks still run", async () => {
  const cwd = tempHome();
  const controller = new AbortController();
  const server = await startMessagesServer((n) => {
    if (n === 3) controller.abort(); // tier 2 of four turns wrote the file at request 2
    // Bash is not among the allowed tools: the CLI denies it without running it.
    if (n === 1) {
      return { tools: [{ name: "Bash", input: { command: `touch ${path.join(cwd, "denied")}` } }] };
    }
    return { tools: [{ name: "mcp__t__ping", input: {} }] };
  });
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  const hostSaw: string[] = [];
  try {
    const q = checkpointedQuery(ac, { sessionId: "aborted", maxTurns: 4 }, {
      prompt: "go on",
      options: offline(server, cwd, {
        allowedTools: ["mcp__t__ping"],
        mcpServers: { t: quick },
        abortController: controller,
        hooks: {
          PreToolUse: [{
            hooks: [(input) => {
              hostSaw.push(input.hook_event_name);
              return Promise.resolve({});
            }],
          }],
        },
      }),
    });
    await assert.rejects(async () => {
      for await (const _ of q) { /* drain */ }
    });
    assert.ok(hostSaw.length >= 1, "the host's PreToolUse hook ran");
    const r = record(q.run.checkpointFile);
    assert.equal(r?.end?.status, "aborted");
    const bash = r?.tools.find((t) => t.tool === "Bash");
    assert.deepEqual(bash && [bash.callId, bash.status], ["toolu_1_0", "failed"]);
    assert.equal(fs.existsSync(path.join(cwd, "denied")), false, "the denied tool did not run");
  } finally {
    await server.close();
    await ac.close();
  }
});

test("a request after the host's Stop hook sends the agent back is counted", async () => {
  const cwd = tempHome();
  const server = await startMessagesServer([{ text: "finished" }, { text: "finished again" }]);
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  let blocked = false;
  try {
    const q = checkpointedQuery(ac, { sessionId: "stop-hook", maxTurns: 3 }, {
      prompt: "go",
      options: offline(server, cwd, {
        hooks: {
          Stop: [{
            hooks: [() => {
              if (blocked) return Promise.resolve({});
              blocked = true;
              return Promise.resolve({ decision: "block" as const, reason: "check your work" });
            }],
          }],
        },
      }),
    });
    for await (const _ of q) { /* drain */ }
    assert.equal(server.requests.length, 2);
    const r = record(q.run.checkpointFile);
    assert.equal(r?.turnsUsed, 2, "both model requests counted");
    assert.equal(r?.end?.status, "done");
  } finally {
    await server.close();
    await ac.close();
  }
});

test("breaking out of the loop before a result ends the run aborted", async () => {
  const cwd = tempHome();
  const server = await startMessagesServer([{ tools: [{ name: "mcp__t__ping", input: {} }] }]);
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  try {
    // Two turns: tier 2 is due at the first call, so the run has its file from the start.
    const q = checkpointedQuery(ac, { sessionId: "broken", maxTurns: 2 }, {
      prompt: "go",
      options: offline(server, cwd, { allowedTools: ["mcp__t__ping"], mcpServers: { t: quick } }),
    });
    for await (const m of q) if (m.type === "assistant") break;
    const r = record(q.run.checkpointFile);
    assert.equal(r?.end?.status, "aborted");
  } finally {
    await server.close();
    await ac.close();
  }
});

test("deadline: true stops the query at the time cap and ends the run deadline", async () => {
  const cwd = tempHome();
  const server = await startMessagesServer([{
    tools: [{ name: "mcp__wait__forever", input: {} }],
  }]);
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  let release = () => {};
  const held = new Promise<void>((resolve) => release = resolve);
  const wait = createSdkMcpServer({
    name: "wait",
    alwaysLoad: true,
    tools: [tool("forever", "Wait until released", {}, async () => {
      await held;
      return { content: [{ type: "text" as const, text: "released" }] };
    })],
  });
  try {
    const q = checkpointedQuery(ac, {
      sessionId: "deadline",
      maxTurns: 4,
      timeSeconds: 1.5,
      deadline: true,
    }, {
      prompt: "wait",
      options: offline(server, cwd, { allowedTools: ["mcp__wait__forever"], mcpServers: { wait } }),
    });
    await assert.rejects(async () => {
      for await (const _ of q) { /* drain */ }
    });
    assert.ok(q.run.time.stopAtDeadline().aborted);
    const r = record(q.run.checkpointFile);
    assert.equal(r?.end?.status, "deadline");
  } finally {
    release();
    await server.close();
    await ac.close();
  }
});

test("a bad turn cap is a TypeError and starts nothing", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  for (const maxTurns of [0, Number.NaN, "5", -1, 2.5, undefined]) {
    assert.throws(
      () =>
        checkpointedQuery(ac, { sessionId: "bad", maxTurns: maxTurns as number }, { prompt: "x" }),
      TypeError,
      String(maxTurns),
    );
  }
  assert.throws(
    () =>
      checkpointedQuery(ac, { sessionId: "bad", maxTurns: 5 }, {
        prompt: "x",
        options: { maxTurns: 7 },
      }),
    /state the turn cap once/,
  );
  await ac.close();
});
