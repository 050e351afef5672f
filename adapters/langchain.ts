/**
 * agent-checkpoint for LangChain (`langchain` v1 `createAgent`) and LangGraph
 * (`@langchain/langgraph` v1 `createReactAgent`): the turn cap stated once,
 * the budget prologue in the one model call it is due for, every tool call
 * reported, and the run ended with how it went.
 *
 * A turn is one model call. `createAgent` counts nothing itself, so the
 * middleware enforces `maxTurns`; LangGraph counts graph steps
 * (`recursionLimit`), where one turn is two steps (the model, then its tools).
 *
 * Each model call's `AIMessage.usage_metadata` is reported with
 * `run.postLlmCall()` (for `createReactAgent`, when the next model call, a
 * streamed chunk or the end of `invoke()` shows it), and each tool call's `config.signal` also aborts
 * at the call's deadline (`tool_timeout_seconds`).
 *
 * @example One line in createAgent's middleware
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { agentCheckpointMiddleware } from "./langchain.ts";
 * import { createAgent } from "npm:langchain@1";
 * import { FakeListChatModel } from "npm:@langchain/core@1/utils/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const agent = createAgent({
 *   model: new FakeListChatModel({ responses: ["done"] }),
 *   middleware: [agentCheckpointMiddleware(ac, { maxTurns: 8 })],
 * });
 * const state = await agent.invoke(
 *   { messages: [{ role: "user", content: "Hi" }] },
 *   { configurable: { thread_id: "chat-1" } },
 * );
 * assert.equal(state.messages.at(-1)?.content, "done");
 * await ac.close();
 * ```
 *
 * @module
 */
export type { AdapterInit, Placement } from "./_shared.ts";
export { BudgetExceededError, RunRefusedError } from "../run.ts";
export {
  type AgentCheckpointMiddleware,
  agentCheckpointMiddleware,
  DEFAULT_RECURSION_LIMIT,
  type LangChainInit,
  stepsForCreateAgent,
} from "./_langchain_middleware.ts";
export {
  type CheckpointedReactAgent,
  checkpointedReactAgent,
  type ReactAgentGraph,
  type ReactAgentParams,
  recursionLimitForReactAgent,
} from "./_langgraph_agent.ts";
export { RunStoreSaver } from "./_langgraph_saver.ts";
