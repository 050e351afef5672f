/**
 * Run state in shared memory, so the watchdog worker reads counters, activity
 * and latches, and claims tiers, without the main thread's help (S11).
 *
 * Int32 fields go through `Atomics`. Timestamps are Float64 and written with
 * plain stores: `Atomics` has no Float64 form, aligned 8-byte stores do not
 * tear on the platforms Deno and Node run on, and a stale read only moves a
 * deadline by one poll.
 *
 * @module
 */
import type { ToolCall } from "./record.ts";

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
const RING_I = 7; // TOOL_RING × [tool id, status]
const I32_PER_SLOT = RING_I + TOOL_RING * 2;
// Float64 fields of a slot.
const START = 0; // run start, ms on the shared clock
const ACTIVITY = 1; // last hook call, ms
const RING_F = 2; // TOOL_RING × [started at ms, duration ms]
const F64_PER_SLOT = RING_F + TOOL_RING * 2;

const STATUS = ["", "in flight", "ok", "failed", "done"] as const;
const IN_FLIGHT = 1;

/** Bytes of shared memory for all runs. */
export const SHARED_BYTES = MAX_RUNS * (F64_PER_SLOT * 8 + I32_PER_SLOT * 4);

/**
 * Milliseconds on a clock both threads share. `performance.now()` is monotonic
 * within a thread; adding the thread's time origin puts threads on one scale.
 */
export const nowMs = (): number => performance.timeOrigin + performance.now();

/** A view of the shared run table. */
export class SharedRuns {
  readonly buffer: SharedArrayBuffer;
  readonly #i: Int32Array;
  readonly #f: Float64Array;

  constructor(buffer: SharedArrayBuffer = new SharedArrayBuffer(SHARED_BYTES)) {
    this.buffer = buffer;
    this.#f = new Float64Array(buffer, 0, MAX_RUNS * F64_PER_SLOT);
    this.#i = new Int32Array(buffer, MAX_RUNS * F64_PER_SLOT * 8, MAX_RUNS * I32_PER_SLOT);
  }

  /** Take a free slot for a new run, or undefined when all are live. */
  claimSlot(now: number): { slot: number; gen: number } | undefined {
    for (let slot = 0; slot < MAX_RUNS; slot++) {
      const i = slot * I32_PER_SLOT;
      if (Atomics.compareExchange(this.#i, i + LIVE, 0, 1) !== 0) continue;
      for (let k = 1; k < I32_PER_SLOT; k++) if (k !== LIVE) Atomics.store(this.#i, i + k, 0);
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

  start(slot: number): number {
    return this.#f[slot * F64_PER_SLOT + START]!;
  }

  activity(slot: number): number {
    return this.#f[slot * F64_PER_SLOT + ACTIVITY]!;
  }

  /** Record a hook call: moves the stall deadline and re-arms the stall checkpoint. */
  touch(slot: number, now: number): void {
    this.#f[slot * F64_PER_SLOT + ACTIVITY] = now;
    const i = slot * I32_PER_SLOT + STALLED;
    if (Atomics.load(this.#i, i) !== 0) Atomics.store(this.#i, i, 0);
  }

  /**
   * Claim a tier on the mid-run surface. True for exactly one caller per tier
   * and run, whichever thread; tier 1 is never claimed once tier 2 has been.
   */
  claimTier(slot: number, tier: 1 | 2): boolean {
    const i = slot * I32_PER_SLOT + MID_LATCH;
    for (;;) {
      const old = Atomics.load(this.#i, i);
      if (tier === 2 ? old & 2 : old & 3) return false;
      if (Atomics.compareExchange(this.#i, i, old, old | tier | 1) === old) return true;
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

  /** The recent tool calls, oldest first, with names from `name`. */
  tools(slot: number, name: (id: number) => string): ToolCall[] {
    const i = slot * I32_PER_SLOT;
    const count = Atomics.load(this.#i, i + TOOL_COUNT);
    const start = this.start(slot);
    const out: ToolCall[] = [];
    for (let n = Math.max(0, count - TOOL_RING); n < count; n++) {
      const k = n % TOOL_RING;
      const status = STATUS[Atomics.load(this.#i, i + RING_I + k * 2 + 1)] || "done";
      const f = slot * F64_PER_SLOT + RING_F + k * 2;
      const call: ToolCall = {
        tool: name(Atomics.load(this.#i, i + RING_I + k * 2)),
        status,
        startedAt: Math.max(0, (this.#f[f]! - start) / 1000),
      };
      if (status !== "in flight") call.durationMs = this.#f[f + 1]!;
      out.push(call);
    }
    return out;
  }
}
