// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * A host for the LangChain adapter's test of the `recursionLimit` warning: it
 * invokes a `createAgent` agent with `maxTurns: 12` twice on LangGraph's
 * default limit, then once with the middleware's `withRecursionLimit()`, and
 * prints each invocation's model calls as one JSON line on stdout.
 */
import process from "node:process";
import { createAgent } from "npm:langchain@1";
import { tool } from "npm:@langchain/core@1/tools";
import { createAgentCheckpoint } from "../../mod.ts";
import { agentCheckpointMiddleware } from "../../adapters/langchain.ts";
import { tempHome } from "../_helpers.ts";
import { ScriptedChatModel, toolsThenAnswer } from "./_langchain_fake.ts";

const ac = createAgentCheckpoint({ home: tempHome(), env: {}, logger: () => {} });
const checkpoint = agentCheckpointMiddleware(ac, { maxTurns: 12 });
const search = tool(() => "found", {
  name: "search",
  description: "Search.",
  schema: { type: "object" as const, properties: {} },
});
const calls: number[] = [];
for (const thread of ["first", "second", "fixed"]) {
  const model = new ScriptedChatModel(toolsThenAnswer(100, "search"));
  const agent = createAgent({ model, tools: [search], middleware: [checkpoint] });
  const config = { configurable: { thread_id: thread } };
  await agent.invoke(
    { messages: [{ role: "user", content: "Go" }] },
    thread === "fixed" ? checkpoint.withRecursionLimit(config) : config,
  );
  calls.push(model.received.length);
}
await ac.close();
process.stdout.write(`${JSON.stringify(calls)}\n`);
