/**
 * Run state in shared memory, so the watchdog worker reads counters, activity,
 * latches, tool names and each run's description, and claims tiers, without
 * the main thread's help (S11). Nothing the worker needs travels by message:
 * a message posted while a worker is still starting can be lost (Deno), and
 * one posted to the main thread waits for its event loop.
 *
 * Int32 fields go through `Atomics`. Timestamps are Float64 and written with
 * plain stores: `Atomics` has no Float64 form, aligned 8-byte stores do not
 * tear on the platforms Deno and Node run on, and a stale read only moves a
 * deadline by one poll.
 *
 * @module
 */
import type { ToolCall } from "./record.ts";
import { fireTier } from "./tier.ts";

/** At most this many runs are kept; the least recently active goes first (S11). */
export const MAX_RUNS = 512;
/** Tool calls remembered per run. */
export const TOOL_RING = 8;

// Int32 fields of a slot.
const GEN = 0; // bumped when the slot is freed, so stale handles see it
const TURNS = 1; // preLlmCall() calls so far
const MID_LATCH = 2; // bit 0: tier 1 persisted, bit 1: tier 2
const STALLED = 3; // 1 while a stall checkpoint stands for the current silence
const UNCAPPED = 4; // the latest uncapped multiple persisted
const TOOL_COUNT = 5; // tool calls recorded so far
const LIVE = 6; // 1 while a run holds the slot
const INFO_SEQ = 7; // seqlock of the run's description: odd while it is written
const INFO_LEN = 8; // bytes of the description
const RING_I = 9; // TOOL_RING × [tool id, status]
const I32_PER_SLOT = RING_I + TOOL_RING * 2;
// Float64 fields of a slot.
const START = 0; // run start, ms on the shared clock
const ACTIVITY = 1; // last hook call, ms
const RING_F = 2; // TOOL_RING × [started at ms, duration ms]
const F64_PER_SLOT = RING_F + TOOL_RING * 2;

const STATUS = ["", "in flight", "ok", "failed", "done"] as const;
const IN_FLIGHT = 1;

// Header fields.
const WAKE = 0; // bumped (and notified) when the watchdog should look again
const NAMES_USED = 1; // bytes of the tool-name table in use
const HEADER_BYTES = 64;
/** Bytes of the append-only tool-name table. */
const NAME_BYTES = 64 * 1024;
/** Bytes of each run's description (JSON). */
export const INFO_BYTES = 2048;

const F64_AT = HEADER_BYTES;
const I32_AT = F64_AT + MAX_RUNS * F64_PER_SLOT * 8;
const NAMES_AT = I32_AT + MAX_RUNS * I32_PER_SLOT * 4;
const INFO_AT = NAMES_AT + NAME_BYTES;
/** Bytes of shared memory for all runs. */
export const SHARED_BYTES = INFO_AT + MAX_RUNS * INFO_BYTES;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Milliseconds on a clock both threads share. `performance.now()` is monotonic
 * within a thread; adding the thread's time origin puts threads on one scale.
 */
export const nowMs = (): number => performance.timeOrigin + performance.now();

/** A view of the shared run table. */
export class SharedRuns {
  readonly buffer: SharedArrayBuffer;
  readonly #h: Int32Array;
  readonly #i: Int32Array;
  readonly #f: Float64Array;
  readonly #names: Uint8Array;
  readonly #info: Uint8Array;

  constructor(buffer: SharedArrayBuffer = new SharedArrayBuffer(SHARED_BYTES)) {
    this.buffer = buffer;
    this.#h = new Int32Array(buffer, 0, HEADER_BYTES / 4);
    this.#f = new Float64Array(buffer, F64_AT, MAX_RUNS * F64_PER_SLOT);
    this.#i = new Int32Array(buffer, I32_AT, MAX_RUNS * I32_PER_SLOT);
    this.#names = new Uint8Array(buffer, NAMES_AT, NAME_BYTES);
    this.#info = new Uint8Array(buffer, INFO_AT, MAX_RUNS * INFO_BYTES);
  }

  /** Ask the watchdog to look again now. */
  wake(): void {
    Atomics.add(this.#h, WAKE, 1);
    Atomics.notify(this.#h, WAKE);
  }

  /** The wake counter, read before a look so that no wake is missed. */
  wakes(): number {
    return Atomics.load(this.#h, WAKE);
  }

  /** Resolve on the next wake after `seen`, or after `ms`. */
  waitForWake(seen: number, ms: number): Promise<unknown> {
    const result = Atomics.waitAsync(this.#h, WAKE, seen, Math.max(0, ms));
    return result.async ? result.value : Promise.resolve(result.value);
  }

  /**
   * Add a tool name to the table; its id (offset + 1) or 0 when the table is
   * full. One writer: the main thread. The bytes are in place before the id
   * is published, so a reader that sees an id sees its whole name.
   */
  internName(name: string): number {
    const bytes = encoder.encode(name);
    const at = Atomics.load(this.#h, NAMES_USED);
    const length = Math.min(bytes.length, 0xffff);
    if (at + 2 + length > NAME_BYTES) return 0;
    this.#names[at] = length >> 8;
    this.#names[at + 1] = length & 0xff;
    this.#names.set(bytes.subarray(0, length), at + 2);
    Atomics.store(this.#h, NAMES_USED, at + 2 + length);
    return at + 1;
  }

  /** The tool name of an id from {@linkcode SharedRuns.internName}. */
  nameOf(id: number): string {
    const at = id - 1;
    if (id <= 0 || at + 2 > Atomics.load(this.#h, NAMES_USED)) return "(unknown)";
    const length = (this.#names[at]! << 8) | this.#names[at + 1]!;
    return decoder.decode(this.#names.slice(at + 2, at + 2 + length));
  }

  /** Write a run's description (seqlock: readers retry while it is odd). */
  writeInfo(slot: number, bytes: Uint8Array): boolean {
    if (bytes.length > INFO_BYTES) return false;
    const i = slot * I32_PER_SLOT;
    Atomics.add(this.#i, i + INFO_SEQ, 1);
    this.#info.set(bytes, slot * INFO_BYTES);
    Atomics.store(this.#i, i + INFO_LEN, bytes.length);
    Atomics.add(this.#i, i + INFO_SEQ, 1);
    return true;
  }

  /** The description's version: changes whenever it is rewritten. */
  infoSeq(slot: number): number {
    return Atomics.load(this.#i, slot * I32_PER_SLOT + INFO_SEQ);
  }

  /** Read a run's description, or undefined while it is being written. */
  readInfo(slot: number): { seq: number; text: string } | undefined {
    const i = slot * I32_PER_SLOT;
    const seq = Atomics.load(this.#i, i + INFO_SEQ);
    if (seq % 2 === 1) return undefined;
    const length = Atomics.load(this.#i, i + INFO_LEN);
    const copy = this.#info.slice(slot * INFO_BYTES, slot * INFO_BYTES + length);
    if (Atomics.load(this.#i, i + INFO_SEQ) !== seq) return undefined;
    return { seq, text: decoder.decode(copy) };
  }

  /** Whether a run holds the slot. */
  live(slot: number): boolean {
    return Atomics.load(this.#i, slot * I32_PER_SLOT + LIVE) === 1;
  }

  /** Take a free slot for a new run, or undefined when all are live. */
  claimSlot(now: number): { slot: number; gen: number } | undefined {
    for (let slot = 0; slot < MAX_RUNS; slot++) {
      const i = slot * I32_PER_SLOT;
      if (Atomics.compareExchange(this.#i, i + LIVE, 0, 1) !== 0) continue;
      for (let k = 1; k < I32_PER_SLOT; k++) {
        if (k !== LIVE && k !== INFO_SEQ) Atomics.store(this.#i, i + k, 0);
      }
      const f = slot * F64_PER_SLOT;
      this.#f.fill(0, f, f + F64_PER_SLOT);
      this.#f[f + START] = now;
      this.#f[f + ACTIVITY] = now;
      return { slot, gen: Atomics.load(this.#i, i + GEN) };
    }
    return undefined;
  }

  /** The live slot active least recently. */
  leastRecentlyActive(): number {
    let oldest = 0;
    for (let slot = 1; slot < MAX_RUNS; slot++) {
      if (this.#f[slot * F64_PER_SLOT + ACTIVITY]! < this.#f[oldest * F64_PER_SLOT + ACTIVITY]!) {
        oldest = slot;
      }
    }
    return oldest;
  }

  /** Free a slot; handles holding its old generation go inert. */
  free(slot: number): void {
    const i = slot * I32_PER_SLOT;
    Atomics.add(this.#i, i + GEN, 1);
    Atomics.store(this.#i, i + LIVE, 0);
  }

  /** The slot's generation. */
  gen(slot: number): number {
    return Atomics.load(this.#i, slot * I32_PER_SLOT + GEN);
  }

  /** Count a model call; returns the turns used before it. */
  addTurn(slot: number): number {
    return Atomics.add(this.#i, slot * I32_PER_SLOT + TURNS, 1);
  }

  turns(slot: number): number {
    return Atomics.load(this.#i, slot * I32_PER_SLOT + TURNS);
  }

  /** Move a run's start (and last activity) back by `ms`, as if it had started earlier. */
  rewind(slot: number, ms: number): void {
    const f = slot * F64_PER_SLOT;
    this.#f[f + START] = this.#f[f + START]! - ms;
    this.#f[f + ACTIVITY] = this.#f[f + ACTIVITY]! - ms;
  }

  start(slot: number): number {
    return this.#f[slot * F64_PER_SLOT + START]!;
  }

  activity(slot: number): number {
    return this.#f[slot * F64_PER_SLOT + ACTIVITY]!;
  }

  /**
   * Record a hook call: moves the stall deadline, and re-arms the stall
   * checkpoint (waking the watchdog, which has no deadline while stalled).
   */
  touch(slot: number, now: number): void {
    this.#f[slot * F64_PER_SLOT + ACTIVITY] = now;
    const i = slot * I32_PER_SLOT + STALLED;
    if (Atomics.load(this.#i, i) !== 0) {
      Atomics.store(this.#i, i, 0);
      this.wake();
    }
  }

  /**
   * Claim a tier on the mid-run surface. True for exactly one caller per tier
   * and run, whichever thread; tier 1 is never claimed once tier 2 has been.
   */
  claimTier(slot: number, tier: 1 | 2): boolean {
    const i = slot * I32_PER_SLOT + MID_LATCH;
    for (;;) {
      const old = Atomics.load(this.#i, i);
      const next = fireTier(old, tier);
      if (next === undefined) return false;
      if (Atomics.compareExchange(this.#i, i, old, next) === old) return true;
    }
  }

  /** Whether the mid-run surface already has this tier (or a higher one). */
  tierClaimed(slot: number, tier: 1 | 2): boolean {
    return (Atomics.load(this.#i, slot * I32_PER_SLOT + MID_LATCH) & tier) !== 0;
  }

  /** Claim the stall checkpoint of the current silence. */
  claimStall(slot: number): boolean {
    return Atomics.compareExchange(this.#i, slot * I32_PER_SLOT + STALLED, 0, 1) === 0;
  }

  /** Claim uncapped multiple `n`; false when it or a later one was taken. */
  claimMultiple(slot: number, n: number): boolean {
    const i = slot * I32_PER_SLOT + UNCAPPED;
    for (;;) {
      const old = Atomics.load(this.#i, i);
      if (old >= n) return false;
      if (Atomics.compareExchange(this.#i, i, old, n) === old) return true;
    }
  }

  /** Record the start of a tool call. */
  toolStart(slot: number, toolId: number, now: number): void {
    const i = slot * I32_PER_SLOT;
    const k = Atomics.load(this.#i, i + TOOL_COUNT) % TOOL_RING;
    this.#f[slot * F64_PER_SLOT + RING_F + k * 2] = now;
    this.#f[slot * F64_PER_SLOT + RING_F + k * 2 + 1] = -1;
    Atomics.store(this.#i, i + RING_I + k * 2, toolId);
    Atomics.store(this.#i, i + RING_I + k * 2 + 1, IN_FLIGHT);
    Atomics.add(this.#i, i + TOOL_COUNT, 1);
  }

  /** Record the end of the latest call of this tool still in flight (or a new entry). */
  toolEnd(slot: number, toolId: number, ok: boolean | undefined, ms: number, now: number): void {
    const i = slot * I32_PER_SLOT;
    const count = Atomics.load(this.#i, i + TOOL_COUNT);
    const status = ok === undefined ? 4 : ok ? 2 : 3;
    for (let back = 1; back <= Math.min(count, TOOL_RING); back++) {
      const k = (count - back) % TOOL_RING;
      if (
        Atomics.load(this.#i, i + RING_I + k * 2) === toolId &&
        Atomics.load(this.#i, i + RING_I + k * 2 + 1) === IN_FLIGHT
      ) {
        const f = slot * F64_PER_SLOT + RING_F + k * 2;
        this.#f[f + 1] = Number.isFinite(ms) && ms >= 0 ? ms : now - this.#f[f]!;
        Atomics.store(this.#i, i + RING_I + k * 2 + 1, status);
        return;
      }
    }
    this.toolStart(slot, toolId, Number.isFinite(ms) && ms >= 0 ? now - ms : now);
    const k = count % TOOL_RING;
    this.#f[slot * F64_PER_SLOT + RING_F + k * 2 + 1] = Number.isFinite(ms) && ms >= 0 ? ms : 0;
    Atomics.store(this.#i, i + RING_I + k * 2 + 1, status);
  }

  /** The recent tool calls, oldest first. */
  tools(slot: number): ToolCall[] {
    const i = slot * I32_PER_SLOT;
    const count = Atomics.load(this.#i, i + TOOL_COUNT);
    const start = this.start(slot);
    const out: ToolCall[] = [];
    for (let n = Math.max(0, count - TOOL_RING); n < count; n++) {
      const k = n % TOOL_RING;
      const status = STATUS[Atomics.load(this.#i, i + RING_I + k * 2 + 1)] || "done";
      const f = slot * F64_PER_SLOT + RING_F + k * 2;
      const call: ToolCall = {
        tool: this.nameOf(Atomics.load(this.#i, i + RING_I + k * 2)),
        status,
        startedAt: Math.max(0, (this.#f[f]! - start) / 1000),
      };
      if (status !== "in flight") call.durationMs = this.#f[f + 1]!;
      out.push(call);
    }
    return out;
  }
}
