/**
 * A run's journal: every model call (its request's digest, its response) and
 * tool call (its call key, its result) of an attempt, in the run ledger; and,
 * in a retry, the earlier attempt's calls answered from it while they match.
 * A part of the run (`run.journal`), with its own state.
 *
 * @module
 */
import { errorText } from "../log.ts";
import { nowMs } from "../_run_table.ts";
import { nodeCrypto } from "../_write_steps.ts";
import type { JournalEntry } from "../_ledger.ts";
import type { UsageReport } from "./_budget.ts";
import { canonicalJson } from "./_effects.ts";
import type { JournalSink, PartContext, RunHost } from "./_host.ts";

// node:crypto is loaded by the first journaled call, not at import.
const sha256 = (text: string) => nodeCrypto().createHash("sha256").update(text).digest("hex");

/** An earlier attempt's calls, by index: what a retry replays. */
interface Earlier {
  attempt: number;
  models: (JournalEntry | undefined)[];
  tools: (JournalEntry | undefined)[];
}

/** A run's journal: this attempt's place in it, and the earlier attempt's calls. */
class JournalState {
  /** The earlier attempt replayed from, once read; undefined when there is none. */
  earlier: Earlier | undefined;
  loading: Promise<void> | undefined;
  loaded = false;
  /** True once the attempt answers its calls live: from its first call that differs, for good. */
  live: boolean;
  /** The next model call's index, and the next tool call's. */
  models = 0;
  tools = 0;
  /** Bytes journaled by this attempt, and whether it passed `journal_max_bytes`. */
  bytes = 0;
  full = false;
  /** Calls answered from the journal. */
  replayedModels = 0;
  replayedTools = 0;
  /** Replayed calls journaled again since the last one whose commit was waited for. */
  unwaited = 0;

  constructor(live: boolean) {
    this.live = live;
  }
}

/**
 * An earlier attempt's entry as the replaying attempt journals it again: the
 * attempt it was answered from, and no duration (no call was made).
 */
function replayedEntry(found: JournalEntry, from: number): JournalEntry {
  const { ms: _, ...entry } = found;
  return { ...entry, replayed: from };
}

/** A replay waits for the commit of every this many calls it journals again. */
const REPLAY_WAIT_EVERY = 256;

/** The byte length of a text as UTF-8. */
const utf8Bytes = (text: string) => new TextEncoder().encode(text).length;

/**
 * A run's journal, as `run.journal` gives it: a model call through
 * {@linkcode RunJournal.model} and a tool call through
 * {@linkcode RunJournal.tool} are journaled in the run ledger before they
 * return; in a retry of a run whose earlier attempt was cut off, failed or
 * was stopped, the earlier attempt's calls are answered from its journal,
 * in order, while each request matches the one journaled at its place: the
 * provider is not called and the tool does not run. At the first request
 * that differs, or past the journal's end, the run goes live for good.
 *
 * Call the model's hooks (`run.preLlmCall()`, `run.postLlmCall()`) inside
 * the function given to `model`: a replayed call then counts no turn and no
 * use again, and the resume text goes before the first live call.
 *
 * @example
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const run = ac.startRun({ sessionId: "own-loop" });
 * const reply = await run.journal.model({ messages: ["hi"] }, () => ({ text: "hello" }));
 * assert.deepEqual(reply, { text: "hello" });
 * assert.equal(run.journal.live, true); // a first attempt has nothing to replay
 * assert.equal(run.journal.replayed, 0);
 * await run.end();
 * await ac.close();
 * ```
 */
export class RunJournal {
  readonly #host: RunHost;
  #state: JournalState | undefined;

  /** @internal */
  constructor(host: RunHost) {
    this.#host = host;
  }

  /**
   * False while this attempt answers its calls from an earlier attempt's
   * journal (before its first call, in a retry); true once it goes live, at
   * once for a first attempt, and always with the journal off.
   */
  get live(): boolean {
    if (this.#state) return this.#state.live;
    return this.#host.attempt <= 1 || this.#sink() === undefined;
  }

  /**
   * True when the journal is on for this run now: the `journal` setting is
   * on and the run has a run ledger, so calls made through it are journaled
   * (and, in a retry, replayed). False with `journal: false`, with no ledger,
   * or once the run has ended.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const home = mkdtempSync(join(tmpdir(), "ac-"));
   * const ac = createAgentCheckpoint({ home, env: {}, settings: { journal: false } });
   * const run = ac.startRun({ sessionId: "journal-off" });
   * assert.equal(run.journal.on, false); // every call goes to the provider
   * await run.end();
   * await ac.close();
   * ```
   */
  get on(): boolean {
    return this.#sink() !== undefined;
  }

  /** Model calls answered from the journal in this attempt (the provider was not called). */
  get replayed(): number {
    return this.#state?.replayedModels ?? 0;
  }

  /** Tool calls answered from the journal in this attempt (the tool did not run). */
  get replayedTools(): number {
    return this.#state?.replayedTools ?? 0;
  }

  /** The sink when the journal is on for this run now, else undefined. */
  #sink(): { ctx: PartContext; sink: JournalSink } | undefined {
    const ctx = this.#host.live();
    const sink = ctx?.journal;
    if (!ctx || !sink) return undefined;
    const on = this.#host.safe("journal", false, () => {
      const settings = ctx.at(nowMs());
      return settings.enabled && settings.ledger && settings.journal;
    });
    return on ? { ctx, sink } : undefined;
  }

  #js(): JournalState {
    return this.#state ??= new JournalState(this.#host.attempt <= 1);
  }

  /**
   * Make a model call through the journal. Live, `call` runs (given the
   * run's signal) and its response is journaled, durably, before it is
   * returned. In a retry, call number i whose request has the same digest
   * (sha256 of its canonical JSON) as the earlier attempt's call i gets that
   * call's response, read back from its JSON, and `call` does not run. Make
   * the calls of a run one after another.
   *
   * @param request The request as the model gets it (anything JSON can carry).
   * @param call The model call: it returns the response (anything JSON can carry).
   * @param options `usage`: the call's use, from its response, to journal with it.
   * @returns The response, live or replayed.
   * @throws What `call` throws (nothing is journaled then).
   *
   * @example A retry answers the calls its earlier attempt made from the journal
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const home = mkdtempSync(join(tmpdir(), "ac-"));
   * let requests = 0;
   * const model = (messages: string[]) => ({ text: `reply ${requests++} to ${messages.length}` });
   * const first = createAgentCheckpoint({ home, env: {} });
   * const a = first.startRun({ sessionId: "loop-1" });
   * await a.journal.model({ messages: ["go"] }, () => model(["go"]));
   * await first.close(); // the process dies before the run ends
   *
   * // The retry (in the same process here: warn lets it go on).
   * const second = createAgentCheckpoint({ home, env: {}, settings: { on_duplicate: "warn" } });
   * const b = second.startRun({ sessionId: "loop-1" });
   * const replayed = await b.journal.model({ messages: ["go"] }, () => model(["go"]));
   * assert.deepEqual(replayed, { text: "reply 0 to 1" });
   * assert.equal(requests, 1); // the provider was not called again
   * assert.equal(b.journal.replayed, 1);
   * await b.journal.model({ messages: ["go", "more"] }, () => model(["go", "more"]));
   * assert.equal(requests, 2); // past the journal's end: live
   * assert.equal(b.journal.live, true);
   * await b.end();
   * await second.close();
   * ```
   */
  async model<T>(
    request: unknown,
    call: (signal: AbortSignal) => T | Promise<T>,
    options?: { usage?: (response: T) => UsageReport | undefined },
  ): Promise<T> {
    const on = this.#sink();
    const signal = this.#host.signal();
    if (!on) return await call(signal);
    const { ctx, sink } = on;
    const js = this.#js();
    const digest = this.#digest(request);
    if (digest === undefined) return await call(signal);
    const index = js.models++;
    if (!js.live) {
      await this.#load(sink, js);
      const found = js.earlier?.models[index];
      if (!js.live && found && found.key === digest) {
        const replayed = this.#read(found);
        if (replayed.ok) {
          js.replayedModels++;
          await this.#again(ctx, sink, js, found);
          return replayed.value as T;
        }
      }
      this.#goLive(js, index, found ? "its request differs from the journal's" : undefined);
    }
    let response: T;
    const started = performance.now();
    try {
      response = await call(signal);
    } catch (error) {
      // A call that failed took no place: the same request tried again is call `index`.
      if (js.models === index + 1) js.models = index;
      throw error;
    }
    const body = this.#host.safe("journal", undefined, () => JSON.stringify(response));
    if (body === undefined) return response;
    const entry = this.#entry("model", index, digest, body, performance.now() - started);
    const usage = options?.usage;
    if (usage) {
      const text = this.#host.safe("journal", undefined, () => {
        const report = usage(response);
        return report === undefined ? undefined : JSON.stringify(report);
      });
      if (text !== undefined) entry.usage = text;
    }
    await this.#record(ctx, sink, js, entry);
    return response;
  }

  /**
   * Make a tool call through the journal. Live, `fn` runs and its result is
   * journaled, durably, before it is returned. In a retry, while the run
   * still answers its model calls from the journal, tool call number j with
   * the same tool and input as the earlier attempt's call j gets that call's
   * result, read back from its JSON, and `fn` does not run (read-only tools
   * too, so the conversation is rebuilt exactly). A call that throws is not
   * journaled: a retry runs it again.
   *
   * @param name The tool's name.
   * @param input The call's input (anything JSON can carry).
   * @param fn The tool call: it returns the result (anything JSON can carry).
   * @returns The result, live or replayed.
   * @throws What `fn` throws.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "tools-1" });
   * const found = await run.journal.tool("search", { q: "deno" }, () => ["deno.com"]);
   * assert.deepEqual(found, ["deno.com"]);
   * assert.equal(run.journal.replayedTools, 0);
   * await run.end();
   * await ac.close();
   * ```
   */
  async tool<T>(name: string, input: unknown, fn: () => T | Promise<T>): Promise<T> {
    const on = this.#sink();
    if (!on) return await fn();
    const { ctx, sink } = on;
    const js = this.#js();
    const tool = String(name);
    const text = this.#digest([tool, input]);
    if (text === undefined) return await fn();
    const key = `jk_${text.slice(0, 32)}`;
    const index = js.tools++;
    if (!js.live) {
      await this.#load(sink, js);
      const found = js.earlier?.tools[index];
      if (!js.live && found && found.key === key) {
        const replayed = this.#read(found);
        if (replayed.ok) {
          js.replayedTools++;
          await this.#again(ctx, sink, js, found);
          return replayed.value as T;
        }
      }
    }
    const started = performance.now();
    const out = await fn();
    const body = this.#host.safe("journal", undefined, () => JSON.stringify(out) ?? "null");
    if (body === undefined) return out;
    const entry = this.#entry("tool", index, key, body, performance.now() - started);
    entry.tool = tool;
    await this.#record(ctx, sink, js, entry);
    return out;
  }

  /**
   * A replayed call journaled again, as this attempt's. Not waited for (a
   * replay takes no time), except every {@linkcode REPLAY_WAIT_EVERY}th: a
   * long replay resolves without ever giving the event loop a turn, and its
   * entries would pile up uncommitted; so its commits come in batches.
   */
  async #again(ctx: PartContext, sink: JournalSink, js: JournalState, found: JournalEntry) {
    const recorded = this.#record(ctx, sink, js, replayedEntry(found, js.earlier!.attempt));
    if (++js.unwaited < REPLAY_WAIT_EVERY) return;
    js.unwaited = 0;
    await recorded;
  }

  /** The sha256 of a value's canonical JSON; undefined (and a log line) when it cannot be made. */
  #digest(value: unknown): string | undefined {
    return this.#host.safe("journal", undefined, () => sha256(canonicalJson(value)));
  }

  #entry(
    kind: "model" | "tool",
    index: number,
    key: string,
    body: string,
    ms: number,
  ): JournalEntry {
    return {
      runId: this.#host.runId,
      attempt: this.#host.attempt,
      kind,
      index,
      key,
      body,
      at: Date.now(),
      ms: Math.max(0, Math.round(ms)),
    };
  }

  /** A journaled body read back: its JSON parsed. */
  #read(entry: JournalEntry): { ok: true; value: unknown } | { ok: false } {
    try {
      return { ok: true, value: JSON.parse(entry.body) };
    } catch (error) {
      this.#host.fail("journal", error);
      return { ok: false };
    }
  }

  /** From now on every call is live; said once, with how many calls were replayed. */
  #goLive(js: JournalState, index: number, why: string | undefined): void {
    js.live = true;
    const earlier = js.earlier;
    if (!earlier) return;
    this.#host.log(
      "info",
      `replayed ${js.replayedModels} model call(s) and ${js.replayedTools} tool call(s) of attempt ${earlier.attempt} from the journal; live from model call ${index} (${
        why ?? "past the journal's end"
      })`,
    );
  }

  /**
   * The earlier attempts' journal, read once: the attempt with the most model
   * calls (the newest of those), of this run's generation, before this one.
   */
  #load(sink: JournalSink, js: JournalState): Promise<void> {
    if (js.loaded) return Promise.resolve();
    js.loading ??= (async () => {
      const first = this.#host.info.generation ?? 1;
      const attempt = this.#host.attempt;
      const entries = await sink.read(this.#host.runId).catch((error) => {
        this.#host.fail("journal", error);
        return undefined;
      });
      const by = new Map<number, Earlier>();
      for (const e of entries ?? []) {
        if (e.attempt < first || e.attempt >= attempt) continue;
        let earlier = by.get(e.attempt);
        if (!earlier) by.set(e.attempt, earlier = { attempt: e.attempt, models: [], tools: [] });
        (e.kind === "model" ? earlier.models : earlier.tools)[e.index] = e;
      }
      let best: Earlier | undefined;
      const count = (e: Earlier) => e.models.filter((m) => m !== undefined).length;
      for (const earlier of by.values()) {
        if (
          !best || count(earlier) > count(best) ||
          count(earlier) === count(best) && earlier.attempt > best.attempt
        ) best = earlier;
      }
      js.earlier = best;
      js.loaded = true;
      if (!best) js.live = true;
    })();
    return js.loading;
  }

  /**
   * Journal an entry as this attempt's, durably (the caller awaits it),
   * unless the attempt passed `journal_max_bytes`: then one log line, and
   * nothing more is journaled.
   */
  async #record(
    ctx: PartContext,
    sink: JournalSink,
    js: JournalState,
    entry: JournalEntry,
  ): Promise<void> {
    if (js.full) return;
    entry.attempt = this.#host.attempt;
    entry.at = Date.now();
    const max = this.#host.safe("journal", 0, () => ctx.at(nowMs()).journal_max_bytes);
    const size = utf8Bytes(entry.body) + (entry.usage?.length ?? 0) + entry.key.length;
    if (js.bytes + size > max) {
      js.full = true;
      ctx.log(
        "warn",
        `the run's journal passed journal_max_bytes (${max} bytes) at its ${entry.kind} call ${entry.index}: the run goes on, its later calls are not journaled, and a retry replays the calls before it`,
        this.#host.runId,
      );
      return;
    }
    js.bytes += size;
    try {
      await sink.write(entry);
    } catch (error) {
      // the sink resolves false and logs; a throw is a failure of its own
      ctx.log("warn", `the journal could not record a call: ${errorText(error)}`, this.#host.runId);
    }
  }
}
