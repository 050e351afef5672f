/**
 * A run's side effects: the effect key of a tool call, its intent and
 * receipt in the run ledger, what an earlier attempt recorded, and `once`.
 * A part of the run (`run.effects`), with its own state.
 *
 * @module
 */
import { errorText } from "../log.ts";
import { nowMs } from "../_run_table.ts";
import { nodeCrypto } from "../_write_steps.ts";
import type { Settings } from "../settings.ts";
import type { EffectIntent, EffectReceipt, EffectRow } from "../_ledger.ts";
import type { EffectSink, PartContext, RunHost, ToolEnd } from "./_host.ts";

/** Call ids remembered for calls still in flight. */
const MAX_OPEN_CALLS = 64;

/**
 * What an earlier attempt (or this one) recorded of a side effect, by its
 * key: `done`, with the receipt (`ok`, and the `result` as recorded: the
 * value's JSON read back, or, when the receipt cut it to
 * `effect_result_max_bytes`, the cut text with `truncated: true`), or
 * `unknown`: an intent without a receipt, the call started and its outcome
 * is not known.
 */
export type EffectState =
  | {
    state: "done";
    /** Whether the call succeeded. */
    ok: boolean;
    /** The result recorded (a failed call: its error's text). */
    result: unknown;
    /** True when the result was cut to `effect_result_max_bytes`: `result` is then the cut JSON text. */
    truncated?: true;
    /** The tool. */
    tool: string;
    /** The attempt whose receipt it is. */
    attempt: number;
  }
  | {
    state: "unknown";
    /** The tool. */
    tool: string;
    /** The attempt whose intent it is. */
    attempt: number;
  };

/**
 * A value as canonical JSON: object keys sorted, at every depth; what JSON
 * leaves out (undefined, functions, symbols) left out; `toJSON` honoured; a
 * bigint as its decimal text; a cycle as `"[Circular]"`. Two inputs equal
 * as data give the same text. @internal
 *
 * @example
 * ```ts
 * import { canonicalJson } from "./_effects.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(canonicalJson({ b: 1, a: [2, { d: 3, c: undefined }] }), '{"a":[2,{"d":3}],"b":1}');
 * assert.equal(canonicalJson({ a: 1, b: 2 }), canonicalJson({ b: 2, a: 1 }));
 * ```
 */
export function canonicalJson(value: unknown): string {
  const seen = new Set<object>();
  const walk = (v: unknown, inArray: boolean): string | undefined => {
    if (
      v !== null && typeof v === "object" &&
      typeof (v as { toJSON?: unknown }).toJSON === "function"
    ) {
      v = (v as { toJSON: () => unknown }).toJSON();
    }
    switch (typeof v) {
      case "string":
      case "boolean":
        return JSON.stringify(v);
      case "number":
        return Number.isFinite(v) ? JSON.stringify(v) : "null";
      case "bigint":
        return JSON.stringify(v.toString());
      case "undefined":
      case "function":
      case "symbol":
        return inArray ? "null" : undefined;
    }
    if (v === null) return "null";
    const o = v as object;
    if (seen.has(o)) return JSON.stringify("[Circular]");
    seen.add(o);
    let out: string;
    if (Array.isArray(o)) out = `[${o.map((x) => walk(x, true)).join(",")}]`;
    else {
      const parts: string[] = [];
      for (const k of Object.keys(o).sort()) {
        const text = walk((o as Record<string, unknown>)[k], false);
        if (text !== undefined) parts.push(`${JSON.stringify(k)}:${text}`);
      }
      out = `{${parts.join(",")}}`;
    }
    seen.delete(o);
    return out;
  };
  return walk(value, false) ?? "null";
}

/** How long after a failed read of the earlier attempts' effects it is tried again, ms. */
const EFFECTS_READ_RETRY_MS = 30_000;

// node:crypto is loaded by the first effect key, not at import.
const sha256 = (text: string) => nodeCrypto().createHash("sha256").update(text).digest("hex");

/** A run's effects: what the ledger holds of them, and this attempt's own on their way. */
class EffectsState {
  /** Every effect known, by key: the earlier attempts' (from the ledger) and this attempt's own. */
  readonly known = new Map<string, EffectRow>();
  /** Whether the earlier attempts' effects are in `known`. */
  loaded = false;
  loading: Promise<void> | undefined = undefined;
  /** When a failed read of them may be tried again, ms (`nowMs`). */
  retryAt = 0;
  /** This attempt's intents without a receipt yet, by key. */
  readonly pending = new Map<string, Promise<boolean>>();
  /** The keys of calls whose intent a tool hook recorded, by call id. */
  readonly byCall = new Map<string, string>();
  /** The same for calls without a call id, by tool, the oldest first. */
  readonly byTool = new Map<string, string[]>();
  /** A result was cut to the bound: said once per run. */
  saidCut = false;
  /** The `once` calls under way, by key: a second call of the same key waits for the first. */
  readonly running = new Map<string, Promise<unknown>>();
  /** Receipts on their way to the ledger: an adapter waits for them before the next model call. */
  readonly committing = new Set<Promise<boolean>>();
}

/** A result as a receipt keeps it: its JSON, cut to `max` bytes (UTF-8) when longer. */
function receiptText(
  value: unknown,
  max: number,
): { text?: string; truncated?: true; bytes: number } {
  let text: string | undefined;
  try {
    text = value === undefined ? undefined : JSON.stringify(value);
  } catch {
    text = JSON.stringify(String(value));
  }
  if (text === undefined) return { bytes: 0 };
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= max) return { text, bytes: bytes.length };
  const cut = new TextDecoder().decode(bytes.slice(0, max)).replace(/\uFFFD$/, "");
  return { text: cut, truncated: true, bytes: bytes.length };
}

/** What a receipt says, as `run.effects.state()` gives it. */
function stateOf(row: EffectRow | undefined): EffectState | undefined {
  if (!row) return undefined;
  const r = row.receipt;
  if (!r) return { state: "unknown", tool: row.tool, attempt: row.attempt };
  let result: unknown = r.result;
  if (r.result !== undefined && !r.truncated) {
    try {
      result = JSON.parse(r.result);
    } catch { /* kept as the text it is */ }
  }
  const out: EffectState = { state: "done", ok: r.ok, result, tool: row.tool, attempt: r.attempt };
  if (r.truncated) out.truncated = true;
  return out;
}

/**
 * A run's side effects, as `run.effects` gives them: the effect key of a
 * tool call ({@linkcode RunEffects.key}), its intent made durable
 * ({@linkcode RunEffects.intent}), what any attempt recorded of it
 * ({@linkcode RunEffects.state}), and a call run at most once across the
 * run's attempts ({@linkcode RunEffects.once}).
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
 * const run = ac.startRun({ sessionId: "mail-1" });
 * const reply = await run.effects.once("send_email", { to: "a@example.com" }, () => "sent");
 * assert.equal(reply, "sent");
 * await ac.close();
 * ```
 */
export class RunEffects {
  readonly #host: RunHost;
  #state: EffectsState | undefined;

  /** @internal */
  constructor(host: RunHost, known?: EffectRow[]) {
    this.#host = host;
    if (known) {
      const fx = this.#fx();
      for (const row of known) fx.known.set(row.key, row);
      fx.loaded = true;
    }
  }

  /** @internal Whether the settings name `tool` in `effect_tools` (adapters await its intent). */
  isEffectTool(tool: string): boolean {
    return this.#host.guard("isEffectTool", false, (ctx) => {
      const settings = ctx.at(nowMs());
      return settings.enabled && settings.effect_tools.includes(String(tool));
    });
  }

  /**
   * The run's effects, made on first use. What earlier attempts recorded is
   * read from the ledger when first asked for: a start that looked fresh may
   * have been one whose ledger did not answer in time.
   */
  #fx(): EffectsState {
    if (this.#state === undefined) {
      this.#state = new EffectsState();
      this.#host.engage(this);
    }
    return this.#state;
  }

  /**
   * @internal `preToolCall` of a tool that acts on the world: its intent (unless one is on its
   * way or it is done), and its key kept for the call's end.
   */
  toolStart(ctx: PartContext, tool: string, callId: string | undefined, input: unknown): void {
    const sink = ctx.effects;
    if (!sink) return;
    const key = this.key(tool, input);
    const fx = this.#fx();
    if (!fx.pending.has(key)) {
      if (fx.known.get(key)?.receipt?.ok) return; // done before (replayed): nothing to record
      void this.#recordIntent(sink, fx, tool, key, input, callId);
    }
    if (callId !== undefined) {
      fx.byCall.set(callId, key);
      if (fx.byCall.size > MAX_OPEN_CALLS) fx.byCall.delete(fx.byCall.keys().next().value!);
    } else {
      const keys = fx.byTool.get(tool) ?? [];
      keys.push(key);
      if (keys.length > MAX_OPEN_CALLS) keys.shift();
      fx.byTool.set(tool, keys);
    }
  }

  /** @internal `postToolCall`: a call whose intent a tool hook recorded gets its receipt. */
  toolEnd(ctx: PartContext, settings: Settings, end: ToolEnd): void {
    const fx = this.#state;
    if (!settings.enabled || fx === undefined || (fx.byCall.size === 0 && fx.byTool.size === 0)) {
      return;
    }
    const { tool, callId, ok } = end;
    let key: string | undefined;
    if (callId !== undefined) {
      key = fx.byCall.get(callId);
      fx.byCall.delete(callId);
    } else {
      const keys = fx.byTool.get(tool);
      key = keys?.shift();
      if (keys?.length === 0) fx.byTool.delete(tool);
    }
    if (key === undefined || !fx.pending.has(key) || !ctx.effects) return;
    const failed = ok === false;
    void this.#recordReceipt(
      ctx,
      settings,
      fx,
      tool,
      key,
      !failed,
      failed ? errorText(end.error ?? "failed") : end.result,
    );
  }

  #recordIntent(
    sink: EffectSink,
    fx: EffectsState,
    tool: string,
    key: string,
    input: unknown,
    callId: string | undefined,
  ): Promise<boolean> {
    const own = fx.pending.get(key);
    if (own) return own;
    const intent: EffectIntent = {
      runId: this.#host.runId,
      key,
      tool,
      inputDigest: sha256(canonicalJson(input)),
      attempt: this.#host.attempt,
      at: Date.now(),
    };
    if (callId !== undefined) intent.callId = callId;
    if (!fx.known.get(key)?.receipt) {
      const row: EffectRow = { ...intent };
      fx.known.set(key, row);
    }
    // The ledger's record may be an interval behind: a kill right after this call would leave
    // a retry told of an email sent by an attempt of 0 turns and 0s.
    sink.progress?.(this.#host.info);
    const recorded = sink.intent(intent);
    fx.pending.set(key, recorded);
    return recorded;
  }

  #recordReceipt(
    ctx: PartContext,
    settings: Settings,
    fx: EffectsState,
    tool: string,
    key: string,
    ok: boolean,
    result: unknown,
  ): Promise<boolean> {
    fx.pending.delete(key);
    const max = settings.effect_result_max_bytes;
    const kept = receiptText(result, max);
    if (kept.truncated && !fx.saidCut) {
      fx.saidCut = true;
      ctx.log(
        "warn",
        `the receipt of ${tool} (effect key ${key}) keeps ${max} of its result's ${kept.bytes} bytes (effect_result_max_bytes); a replay returns the cut text`,
        this.#host.runId,
      );
    }
    const receipt: EffectReceipt = {
      runId: this.#host.runId,
      key,
      tool,
      ok,
      attempt: this.#host.attempt,
      at: Date.now(),
    };
    if (kept.text !== undefined) receipt.result = kept.text;
    if (kept.truncated) receipt.truncated = true;
    const known = fx.known.get(key);
    const row: EffectRow = known ?? {
      runId: this.#host.runId,
      key,
      tool,
      inputDigest: "",
      attempt: this.#host.attempt,
      at: receipt.at,
    };
    const { runId: _r, key: _k, tool: _t, ...stored } = receipt;
    row.receipt = stored;
    fx.known.set(key, row);
    const committed = ctx.effects?.receipt(receipt) ?? Promise.resolve(false);
    fx.committing.add(committed);
    void committed.finally(() => fx.committing.delete(committed));
    return committed;
  }

  /**
   * @internal Resolves once every receipt this attempt has recorded so far is
   * committed (or given up on, as the log says): an adapter awaits it before
   * the model sees a tool's result, so a record never lags what the model knows.
   */
  durable(): Promise<void> {
    const fx = this.#state;
    if (fx === undefined || fx.committing.size === 0) return Promise.resolve();
    return Promise.all(fx.committing).then(() => {}, () => {});
  }

  /**
   * The effect key of a tool call: the same string in every attempt of this
   * run, on any machine, for the same tool and the same input (its canonical
   * JSON: key order does not matter), and a different one otherwise. Give it
   * to an API as its idempotency key, so that a retried run's repeat of a
   * call is the same request, not a second one.
   *
   * @param tool The tool's name.
   * @param input The call's input (anything JSON can carry).
   * @returns `ek_` and 32 hex digits of a sha256 of the run id, the tool and the input.
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
   * const run = ac.startRun({ sessionId: "invoice-7" });
   * const key = run.effects.key("send_email", { to: "a@example.com", subject: "Invoice" });
   * assert.match(key, /^ek_[0-9a-f]{32}$/);
   * assert.equal(key, run.effects.key("send_email", { subject: "Invoice", to: "a@example.com" }));
   * assert.notEqual(key, run.effects.key("send_email", { to: "b@example.com", subject: "Invoice" }));
   * // The call passes it on: `fetch(url, { headers: { "Idempotency-Key": key } })`.
   * await ac.close();
   * ```
   */
  key(tool: string, input: unknown): string {
    let text: string;
    try {
      text = canonicalJson(input);
    } catch (error) {
      // An input whose toJSON throws: its text as String gives, never a throw into the host.
      this.#host.fail("effects.key", error);
      text = JSON.stringify(String(input));
    }
    // A run id started again after a done end is another run: its keys are its own.
    const generation = this.#host.info.generation ?? 1;
    const id = generation > 1 ? `${this.#host.runId}\u0000${generation}` : this.#host.runId;
    return `ek_${
      sha256(`agent-checkpoint effect 1\u0000${id}\u0000${String(tool)}\u0000${text}`)
        .slice(0, 32)
    }`;
  }

  /**
   * Record the intent of a call of a tool that acts on the world, and wait
   * until it is durable in the run ledger: one commit shared with every
   * other intent and receipt of that moment. The call's end then gives its
   * receipt: `postToolCall(tool, { callId, result })` with the same call id
   * (or, without one, the tool's oldest call). A later attempt of the run
   * finds the intent: `done` once it has its receipt, else `unknown`.
   *
   * @param tool The tool's name.
   * @param input The call's input.
   * @param options `callId`: the call's id, as `postToolCall` will give it.
   * @returns True once committed; false when the ledger is off or could not take it within 10 s (the log says which).
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
   * const run = ac.startRun({ sessionId: "payout-1" });
   * const input = { account: "acct_9", cents: 1200 };
   * assert.equal(await run.effects.intent("pay", input, { callId: "c1" }), true); // durable now
   * assert.deepEqual(await run.effects.state(run.effects.key("pay", input)), { state: "unknown", tool: "pay", attempt: 1 });
   * run.postToolCall("pay", { callId: "c1", ok: true, result: { id: "tx_1" } });
   * const done = await run.effects.state(run.effects.key("pay", input));
   * assert.equal(done?.state, "done");
   * await ac.close();
   * ```
   */
  intent(tool: string, input: unknown, options?: { callId?: string }): Promise<boolean> {
    return this.#host.guard("intent", Promise.resolve(false), (ctx) => {
      const sink = ctx.effects;
      if (!sink || !ctx.at(nowMs()).enabled) return Promise.resolve(false);
      const name = String(tool);
      const callId = options?.callId === undefined ? undefined : String(options.callId);
      const key = this.key(name, input);
      const fx = this.#fx();
      const fresh = !fx.pending.has(key);
      const recorded = this.#recordIntent(sink, fx, name, key, input, callId);
      if (!fresh) return recorded; // a tool hook made it, and keeps its call
      if (callId !== undefined) {
        fx.byCall.set(callId, key);
        if (fx.byCall.size > MAX_OPEN_CALLS) fx.byCall.delete(fx.byCall.keys().next().value!);
      } else {
        const keys = fx.byTool.get(name) ?? [];
        keys.push(key);
        if (keys.length > MAX_OPEN_CALLS) keys.shift();
        fx.byTool.set(name, keys);
      }
      return recorded;
    });
  }

  /**
   * What the run ledger holds of an effect, by its key, from any attempt of
   * this run on any machine sharing the store: `done` with its receipt,
   * `unknown` (an intent without a receipt), or undefined when no attempt
   * recorded it.
   *
   * @param key An effect key ({@linkcode RunEffects.key}).
   * @returns Its state, or undefined.
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
   * const run = ac.startRun({ sessionId: "never-did" });
   * assert.equal(await run.effects.state(run.effects.key("send_email", { to: "x" })), undefined);
   * await ac.close();
   * ```
   */
  async state(key: string): Promise<EffectState | undefined> {
    const ctx = this.#host.live();
    if (!ctx?.effects) return undefined;
    try {
      const fx = this.#fx();
      // A read that failed (the log says why) is tried again after a while, not at every call.
      if (!fx.loaded && nowMs() >= fx.retryAt) {
        fx.loading ??= ctx.effects.read(this.#host.runId).then((rows) => {
          fx.loading = undefined;
          if (!rows) {
            fx.retryAt = nowMs() + EFFECTS_READ_RETRY_MS;
            return;
          }
          // What the ledger holds wins over this attempt's own intent without a receipt (made
          // before the read: a tool hook's): an earlier attempt's receipt is the answer.
          for (const row of rows) {
            const own = fx.known.get(row.key);
            if (!own || (row.receipt && !own.receipt)) fx.known.set(row.key, row);
          }
          fx.loaded = true;
        });
        await fx.loading;
      }
      return stateOf(fx.known.get(String(key)));
    } catch (error) {
      this.#host.fail("effect", error);
      return undefined;
    }
  }

  /**
   * Run a tool call that acts on the world at most once across the run's
   * attempts: when an earlier attempt (or this one) has a receipt of a
   * successful call for the same tool and input, its recorded result is
   * returned and `fn` is not run; else the intent is made durable, then
   * `fn(key)` runs (hand `key` to the API as its idempotency key: a call
   * whose outcome is unknown runs again, with the same key), then its
   * receipt is recorded. A replayed result is the recorded value's JSON read
   * back (a `Date` comes back as its text). A call that failed is not a
   * receipt to replay: it runs again.
   *
   * @param tool The tool's name.
   * @param input The call's input.
   * @param fn The call, given the effect key.
   * @param options `callId`: the call's id, for the record.
   * @returns What `fn` returned, now or in the attempt that ran it.
   * @throws What `fn` throws (its receipt then records the failure).
   *
   * @example A retried run does not send the email twice
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const home = mkdtempSync(join(tmpdir(), "ac-"));
   * const sent: string[] = [];
   * const send = (key: string) => {
   *   sent.push(key); // the mail API, with `Idempotency-Key: key`
   *   return { id: "msg_1" };
   * };
   * const first = createAgentCheckpoint({ home, env: {} });
   * const a = first.startRun({ sessionId: "report-9" });
   * await a.effects.once("send_email", { to: "boss@example.com" }, send);
   * await first.close(); // the process dies before the run ends
   *
   * // The retry, here in the same process (still running: warn lets it go on; in a new
   * // process, as a real retry is, the default does).
   * const second = createAgentCheckpoint({ home, env: {}, settings: { on_duplicate: "warn" } });
   * const b = second.startRun({ sessionId: "report-9" });
   * assert.equal(b.attempt, 2);
   * assert.deepEqual(await b.effects.once("send_email", { to: "boss@example.com" }, send), { id: "msg_1" });
   * assert.equal(sent.length, 1); // replayed from the receipt, not sent again
   * await b.end();
   * await second.close();
   * ```
   */
  async once<T>(
    tool: string,
    input: unknown,
    fn: (key: string) => T | Promise<T>,
    options?: { callId?: string },
  ): Promise<T> {
    const name = String(tool);
    const key = this.key(name, input);
    const ctx = this.#host.live();
    const sink = ctx?.effects;
    if (!ctx || !sink || !this.#host.safe("once", false, () => ctx.at(nowMs()).enabled)) {
      return await fn(key);
    }
    const fx = this.#fx();
    // The same call under way in this attempt (parallel tool calls alike): its result, not a second run.
    const running = fx.running.get(key);
    if (running) return await running as T;
    const call = this.#onceRun(ctx, sink, fx, name, key, input, fn, options);
    fx.running.set(key, call);
    try {
      return await call;
    } finally {
      fx.running.delete(key);
    }
  }

  async #onceRun<T>(
    ctx: PartContext,
    sink: EffectSink,
    fx: EffectsState,
    name: string,
    key: string,
    input: unknown,
    fn: (key: string) => T | Promise<T>,
    options: { callId?: string } | undefined,
  ): Promise<T> {
    const known = await this.state(key);
    if (known?.state === "done" && known.ok) {
      this.#host.log(
        "info",
        `${name} (effect key ${key}) replayed from attempt ${known.attempt}'s receipt; not run again`,
      );
      return known.result as T;
    }
    const callId = options?.callId === undefined ? undefined : String(options.callId);
    await this.#host.safe(
      "once",
      Promise.resolve(false),
      () => this.#recordIntent(sink, fx, name, key, input, callId),
    );
    let out: T;
    try {
      out = await fn(key);
    } catch (error) {
      await this.#host.safe(
        "once",
        Promise.resolve(false),
        () => this.#recordReceipt(ctx, ctx.at(nowMs()), fx, name, key, false, errorText(error)),
      );
      throw error;
    }
    await this.#host.safe(
      "once",
      Promise.resolve(false),
      () => this.#recordReceipt(ctx, ctx.at(nowMs()), fx, name, key, true, out),
    );
    return out;
  }
}
