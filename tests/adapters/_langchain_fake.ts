// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * A scripted chat model for the LangChain adapter's tests and benchmark:
 * `@langchain/core`'s fake chat models return text only, so this one answers
 * each call from a script (tool calls included) and keeps what each call was
 * sent.
 */
import { BaseChatModel } from "npm:@langchain/core@1/language_models/chat_models";
import { AIMessage, type BaseMessage } from "npm:@langchain/core@1/messages";
import type { ChatResult } from "npm:@langchain/core@1/outputs";

/** A chat model whose `i`-th call (0-based) answers `respond(i, messages)`. */
export class ScriptedChatModel extends BaseChatModel {
  /** The messages each call was sent, as plain `{ type, content }` pairs (content as text). */
  readonly received: Array<Array<{ type: string; content: string }>> = [];
  readonly #respond: (call: number, messages: BaseMessage[]) => AIMessage;

  constructor(respond: (call: number, messages: BaseMessage[]) => AIMessage) {
    super({});
    this.#respond = respond;
  }

  _llmType(): string {
    return "scripted";
  }

  override bindTools(): this {
    return this;
  }

  override _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const call = this.received.length;
    this.received.push(messages.map((m) => ({
      type: m.getType(),
      content: m.text,
    })));
    const message = this.#respond(call, messages);
    return Promise.resolve({ generations: [{ message, text: String(message.content) }] });
  }
}

/** A script: a tool call of `tool` on each of the first `toolCalls` calls, then a final answer. */
export function toolsThenAnswer(
  toolCalls: number,
  tool = "search",
  args: (call: number) => Record<string, unknown> = (call) => ({ q: `q${call}` }),
): (call: number) => AIMessage {
  return (call) =>
    call < toolCalls
      ? new AIMessage({
        content: "",
        tool_calls: [{ id: `call_${call}`, name: tool, args: args(call), type: "tool_call" }],
      })
      : new AIMessage("all done");
}
