/**
 * An attempt's journaled calls in the order it made them. The journal keeps
 * an attempt's model calls and its tool calls as two sequences, each in
 * order; `show RUN --steps` and a fork (which cuts a run's journal at a step)
 * merge them so.
 *
 * @module
 */

/** A journaled call as the merge needs it. */
export interface OrderedCall {
  kind: "model" | "tool";
  /** Its place among the attempt's calls of its kind, from 0. */
  index: number;
  /** When it was journaled, ms since the epoch. */
  at: number;
  /** A live call's duration, ms. */
  ms?: number;
  /** A replayed call: the attempt whose entry answered it. */
  replayedFrom?: number;
}

/**
 * Whether call `a` (a model call) came before `b` (a tool call), or the
 * other way about: by when each was journaled, then when each began; on a
 * tie, a model call goes before the tool call of its own step (a loop makes
 * a model call, then its tools).
 */
function modelFirst(model: OrderedCall, tool: OrderedCall): boolean {
  if (model.at !== tool.at) return model.at < tool.at;
  const began = (c: OrderedCall) => c.at - (c.ms ?? 0);
  if (began(model) !== began(tool)) return began(model) < began(tool);
  return model.index <= tool.index;
}

/**
 * An attempt's calls in the order they were made. The replayed ones (always
 * first: a retry goes live for good) come in the order of the attempt they
 * were replayed from (`earlier`: each earlier attempt's calls by their place
 * in its order, keyed `kind index`), then the live ones by time.
 *
 * @param calls One attempt's calls, any order.
 * @param earlier The places of the earlier attempts' calls, by attempt.
 * @returns The calls in the order the attempt made them.
 *
 * @example A retry's replayed calls in its earlier attempt's order, then its live ones
 * ```ts
 * import { orderCalls, placesOf } from "./_journal_order.ts";
 * import assert from "node:assert/strict";
 *
 * const first = orderCalls([
 *   { kind: "tool", index: 0, at: 20 },
 *   { kind: "model", index: 0, at: 10 },
 * ], new Map());
 * assert.deepEqual(first.map((c) => `${c.kind} ${c.index}`), ["model 0", "tool 0"]);
 * // Replayed in one millisecond: the earlier attempt's order decides.
 * const retry = orderCalls([
 *   { kind: "model", index: 1, at: 40 },
 *   { kind: "tool", index: 0, at: 30, replayedFrom: 1 },
 *   { kind: "model", index: 0, at: 30, replayedFrom: 1 },
 * ], new Map([[1, placesOf(first)]]));
 * assert.deepEqual(retry.map((c) => `${c.kind} ${c.index}`), ["model 0", "tool 0", "model 1"]);
 * ```
 */
export function orderCalls<C extends OrderedCall>(
  calls: readonly C[],
  earlier: ReadonlyMap<number, ReadonlyMap<string, number>>,
): C[] {
  const where = (c: C) =>
    c.replayedFrom === undefined
      ? undefined
      : earlier.get(c.replayedFrom)?.get(`${c.kind} ${c.index}`);
  const merge = (part: C[], known: boolean) => {
    const models = part.filter((c) => c.kind === "model").sort((a, b) => a.index - b.index);
    const tools = part.filter((c) => c.kind === "tool").sort((a, b) => a.index - b.index);
    const out: C[] = [];
    let m = 0;
    let t = 0;
    while (m < models.length || t < tools.length) {
      const model = models[m];
      const tool = tools[t];
      const takeModel = tool === undefined ||
        (model !== undefined &&
          (known ? where(model)! < where(tool)! : modelFirst(model, tool)));
      out.push(takeModel ? models[m++]! : tools[t++]!);
    }
    return out;
  };
  const replayed = calls.filter((c) => c.replayedFrom !== undefined);
  const live = calls.filter((c) => c.replayedFrom === undefined);
  const known = replayed.every((c) => where(c) !== undefined);
  return [...merge(replayed, known), ...merge(live, false)];
}

/** The places of an attempt's ordered calls, as {@linkcode orderCalls} reads them for a later attempt. */
export const placesOf = (calls: readonly OrderedCall[]): Map<string, number> =>
  new Map(calls.map((c, i) => [`${c.kind} ${c.index}`, i]));
