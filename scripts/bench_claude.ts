// deno-lint-ignore-file no-import-prefix -- full npm: specifiers, as the adapter has
/**
 * What the Claude Agent SDK adapter costs: a 12-turn scripted run (one quick
 * in-process tool per turn) through the SDK's own `query()` and through
 * `checkpointedQuery()`, interleaved, against the loopback Messages API
 * fixture.
 *
 *   deno run -A scripts/bench_claude.ts [rounds]
 *
 * Prints the median wall time of each, the difference per turn, and the time
 * spent inside the run's hooks (preLlmCall, preToolCall, postToolCall).
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import {
  createSdkMcpServer,
  type Options,
  query,
  tool,
} from "npm:@anthropic-ai/claude-agent-sdk@0.x";
import { createAgentCheckpoint, type Run } from "../mod.ts";
import { checkpointedQuery } from "../adapters/claude_agent_sdk.ts";
import { startMessagesServer } from "../tests/fixtures/messages_server.ts";

const TURNS = 12;
const rounds = Number(process.argv[2] ?? 5);

const ping = createSdkMcpServer({
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

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "bench-claude-"));
const options = (url: string): Options => ({
  cwd: tmp,
  settingSources: [],
  permissionMode: "dontAsk",
  allowedTools: ["mcp__t__ping"],
  mcpServers: { t: ping },
  env: {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: tmp,
    CLAUDE_CONFIG_DIR: tmp,
    ANTHROPIC_BASE_URL: url,
    ANTHROPIC_API_KEY: "dummy",
    DISABLE_TELEMETRY: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_ERROR_REPORTING: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
  },
});

const script = (n: number) =>
  n < TURNS ? { tools: [{ name: "mcp__t__ping", input: {} }] } : { text: "done" };

/** Time spent inside the run's hook methods, summed. */
function timed(run: Run): { ms: number; calls: number[] } {
  const spent = { ms: 0, calls: [] as number[] };
  for (const name of ["preLlmCall", "preToolCall", "postToolCall"] as const) {
    const original = run[name].bind(run) as (...a: unknown[]) => unknown;
    Object.assign(run, {
      [name]: (...args: unknown[]) => {
        const t = performance.now();
        try {
          return original(...args);
        } finally {
          const ms = performance.now() - t;
          spent.ms += ms;
          spent.calls.push(ms);
        }
      },
    });
  }
  return spent;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const ac = createAgentCheckpoint({
  home: fs.mkdtempSync(path.join(os.tmpdir(), "bench-claude-home-")),
  env: {},
});
const plain: number[] = [];
const wrapped: number[] = [];
const inHooks: number[] = [];
const calls: number[] = [];
for (let i = 0; i < rounds; i++) {
  {
    const server = await startMessagesServer(script);
    const t = performance.now();
    for await (const _ of query({ prompt: "go", options: options(server.url) })) { /* drain */ }
    plain.push(performance.now() - t);
    await server.close();
  }
  {
    const server = await startMessagesServer(script);
    const t = performance.now();
    const q = checkpointedQuery(ac, { sessionId: `bench-${i}`, maxTurns: TURNS }, {
      prompt: "go",
      options: options(server.url),
    });
    const spent = timed(q.run);
    for await (const _ of q) { /* drain */ }
    wrapped.push(performance.now() - t);
    inHooks.push(spent.ms);
    calls.push(...spent.calls);
    if (server.requests.length !== TURNS) throw new Error(`${server.requests.length} requests`);
    await server.close();
  }
}
await ac.close();
const p = median(plain);
const w = median(wrapped);
console.log(`${rounds} rounds of a ${TURNS}-turn query, medians:`);
console.log(`  query():             ${p.toFixed(0)} ms`);
console.log(`  checkpointedQuery(): ${w.toFixed(0)} ms`);
console.log(`  difference per turn: ${((w - p) / TURNS).toFixed(1)} ms`);
console.log(
  `  inside the run's hooks: ${median(inHooks).toFixed(2)} ms per query, ${
    (median(inHooks) / TURNS * 1000).toFixed(0)
  } µs per turn`,
);
console.log(
  `  one hook call: median ${(median(calls) * 1000).toFixed(0)} µs, max ${
    Math.max(...calls).toFixed(1)
  } ms (a persist, or the watchdog's start)`,
);
fs.rmSync(tmp, { recursive: true, force: true });
