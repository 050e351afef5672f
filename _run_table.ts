/**
 * The run table: every live run's state in shared memory, so the watchdog
 * worker reads counters, activity, latches, tool calls and each run's
 * description, and claims tiers, without the main thread's help (S11).
 * Nothing the worker needs travels by message: a message posted while a
 * worker is still starting can be lost (Deno), and one posted to the main
 * thread waits for its event loop.
 *
 * The table grows in chunks as runs start: its buffers are growable
 * `SharedArrayBuffer`s, which the worker sees grow. A slot is one run's
 * record: Float64 fields, Int32 fields, the ids of its recent tool calls, and
 * its description (JSON) when it is short; a longer one goes to the run's
 * block of a third buffer, which grows only when one does. Each chunk of
 * slots keeps each of the four parts together (every slot's Float64 fields,
 * then every slot's Int32 fields, and so on), so memory a run never writes is
 * never touched: a host that passes no call ids never pays for their bytes.
 *
 * Int32 fields go through `Atomics`. Timestamps are Float64 and written with
 * plain stores: `Atomics` has no Float64 form, aligned 8-byte stores do not
 * tear on the platforms Deno and Node run on, and a stale read only moves a
 * deadline by one poll.
 *
 * @module
 */
import type { ToolCall } from "./_record.ts";
import { fireTier } from "./tier.ts";

/** Tool calls remembered per run. */
export const TOOL_RING = 8;
/** A chunk's slot count, as a shift: a slot's chunk and place in it are two bit operations. */
const CHUNK_SHIFT = 8;
/** Runs added to the table at a time. */
export const SLOT_CHUNK = 1 << CHUNK_SHIFT;
/** The most runs one table holds: the bound memory sets (about 1.2 KiB each, 0.9 KiB of it touched without call ids; 3.3 KiB with a long description). */
export const MAX_SLOTS = 65_536;

// Float64 fields of a slot.
const START = 0; // run start, ms on the shared clock
const ACTIVITY = 1; // last hook call, ms
const DEADLINE_AT = 2; // when the run's deadline signal aborts, ms; 0 while nobody asked for it
const RING_F = 3; // TOOL_RING × [started at ms, duration ms]
const IN_TOKENS = RING_F + TOOL_RING * 2; // input tokens reported so far
const OUT_TOKENS = IN_TOKENS + 1; // output tokens reported so far
const USD = IN_TOKENS + 2; // dollars spent so far, of the calls whose cost is known (or NaN)
const TOOL_DEADLINE = IN_TOKENS + 3; // TOOL_RING × when the call times out, ms; 0 for never
const TIER_AT = TOOL_DEADLINE + TOOL_RING; // 2 × when tier 1, tier 2 was claimed, ms; 0 before
const F64_PER_SLOT = TIER_AT + 2;

// Int32 fields of a slot.
const GEN = 0; // bumped when the slot is freed, so stale handles see it
const TURNS = 1; // preLlmCall() calls so far
const MID_LATCH = 2; // bit 0: tier 1 claimed, bit 1: tier 2; bits 2, 3: its record settled
const STALLED = 3; // 1 while a stall checkpoint stands for the current silence
const UNCAPPED = 4; // the latest uncapped multiple persisted
const TOOL_COUNT = 5; // tool calls recorded so far
const LIVE = 6; // 1 while a run holds the slot
const INFO_SEQ = 7; // seqlock of the run's description: odd while it is written
const INFO_LEN = 8; // bytes of the description
const COMMENTED = 9; // a bit per record kind whose first kanban comment went out
const DEADLINE = 10; // 1 once the deadline checkpoint is claimed, 2 once written (or given up)
const RING_I = 11; // TOOL_RING × [tool id, status]
const FILE_LOCK = RING_I + TOOL_RING * 2; // 1 while a thread writes the run's file
const TIMED_OUT = FILE_LOCK + 1; // a bit per ring entry whose timeout record is claimed
const TIMED_CALLS = TIMED_OUT + 1; // tool calls started with a deadline so far
const CALL_IDS = TIMED_CALLS + 1; // a bit per ring entry whose call id is in the table
// A bit per ring entry whose claimed timeout record is written (or given up).
const SETTLED = CALL_IDS + 1;
// The run's checkpoint file: records made for it (each write's number), the newest that landed
// in the file, the newest whose write failed (0: none). A failed write is tried again until a
// record as new lands, and the run's ledger record says which of these holds.
const FILE_SEQ = SETTLED + 1;
const FILE_LANDED = FILE_SEQ + 1;
const FILE_FAILED = FILE_LANDED + 1;
// Records a burst (the watchdog's) is to make for the run and has not made yet: a run that ends
// meanwhile writes its end record even without a file, since the burst leaves its record unmade.
const FILE_DUE = FILE_FAILED + 1;
const I32_PER_SLOT = FILE_DUE + 1; // an even count keeps the parts after it 8-byte aligned

/** Bytes of a tool call's id in the ring: a length byte, then up to 47 bytes of UTF-8. */
const CALL_ID_BYTES = 48;
/** Bytes of each run's description (JSON). */
export const INFO_BYTES = 2048;
/**
 * Bytes of a description kept in the slot itself. A longer one goes to the
 * run's block of the overflow buffer, whose memory a run touches only then: a
 * slot holding all INFO_BYTES cost every run about 1.5 KB of resident memory
 * that a typical description (200–300 bytes) leaves unused.
 */
export const INFO_INLINE_BYTES = 512;

const F64_BYTES = F64_PER_SLOT * 8;
const I32_BYTES = I32_PER_SLOT * 4;
const IDS_BYTES = TOOL_RING * CALL_ID_BYTES;
/** Bytes of one run's slot. */
export const SLOT_BYTES = F64_BYTES + I32_BYTES + IDS_BYTES + INFO_INLINE_BYTES;
// Where each part of a chunk's slots starts, from the chunk's start.
const I32_PART = SLOT_CHUNK * F64_BYTES;
const IDS_PART = I32_PART + SLOT_CHUNK * I32_BYTES;
const INFO_PART = IDS_PART + SLOT_CHUNK * IDS_BYTES;
const CHUNK_BYTES = SLOT_CHUNK * SLOT_BYTES;
/** The bytes of the runs buffer that hold `slots` slots: whole chunks. */
const runsBytes = (slots: number) => HEADER_BYTES + Math.ceil(slots / SLOT_CHUNK) * CHUNK_BYTES;

const STATUS = ["", "in flight", "ok", "failed", "done"] as const;
const IN_FLIGHT = 1;

// Header fields (Int32).
const WAKE = 0; // bumped (and notified) when the watchdog should look again
const NAMES_USED = 1; // bytes of the tool-name table in use
const CLOSING = 2; // 1 once close() began: the watchdog starts no new write
const WRITING = 3; // the watchdog's writes in flight
const SLOTS = 4; // slots in the table
const LOOKS = 5; // the watchdog's completed looks at the table, its writes flushed
const SETTINGS_SEEN = 6; // the version of the settings the watchdog last looked with
const WAKES_SERVED = 7; // the wake counter as the watchdog's last completed look began
const HEADER_BYTES = 64;
/** Where a slot's chunk starts in the runs buffer. */
const chunkAt = (slot: number) => HEADER_BYTES + (slot >>> CHUNK_SHIFT) * CHUNK_BYTES;
/** A slot's place in its chunk. */
const inChunk = (slot: number) => slot & (SLOT_CHUNK - 1);

/** Bytes the tool-name table starts with, and grows by. */
const NAME_CHUNK = 64 * 1024;
/** The most bytes of tool names one table holds. */
export const MAX_NAME_BYTES = 16 * 1024 * 1024;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * The UTF-8 text of `bytes[from, to)`, copied first (the bytes are shared
 * memory). Short ASCII, the common case of a tool name or call id, is read
 * without the decoder, whose cost per call dwarfs a few bytes' worth.
 */
function text(bytes: Uint8Array, from: number, to: number): string {
  if (to - from <= 64) {
    let out = "";
    for (let k = from; k < to; k++) {
      const c = bytes[k]!;
      if (c >= 0x80) return decoder.decode(bytes.slice(from, to));
      out += String.fromCharCode(c);
    }
    return out;
  }
  return decoder.decode(bytes.slice(from, to));
}

/** A typed array by slot, as the per-slot state beside the table keeps it. @internal */
export type SlotArray = Int32Array | Uint8Array | Float64Array;

/**
 * `old` grown to `length` entries, its entries kept and the rest zero: the
 * per-slot arrays a thread keeps beside the table follow its slot count.
 * @internal
 *
 * @example
 * ```ts
 * import { grownTo } from "./_run_table.ts";
 * import assert from "node:assert/strict";
 *
 * const grown = grownTo(Int32Array.of(7, 8), 4);
 * assert.ok(grown instanceof Int32Array);
 * assert.deepEqual([...grown], [7, 8, 0, 0]);
 * ```
 */
export function grownTo<T extends SlotArray>(old: T, length: number): T {
  const next = new (old.constructor as new (length: number) => T)(length);
  next.set(old);
  return next;
}

/**
 * Milliseconds on a clock both threads share. `performance.now()` is monotonic
 * within a thread; adding the thread's time origin puts threads on one scale.
 */
export const nowMs = (): number => performance.timeOrigin + performance.now();

/** The buffers of a run table, as the worker is started with them. */
export interface RunTableBuffers {
  runs: SharedArrayBuffer;
  names: SharedArrayBuffer;
  /** INFO_BYTES per slot, for descriptions longer than INFO_INLINE_BYTES; grown on demand. */
  infos: SharedArrayBuffer;
}

/** A view of the shared run table. */
export class RunTable {
  readonly buffers: RunTableBuffers;
  readonly #h: Int32Array;
  #i!: Int32Array;
  #f!: Float64Array;
  #b!: Uint8Array;
  /** Bytes the views above cover. */
  #viewed = -1;
  readonly #names: Uint8Array;
  readonly #infos: Uint8Array;
  /** Tool names read so far, by id: a name, once in the table, never changes. */
  readonly #nameCache = new Map<number, string>();
  readonly #maxSlots: number;

  /**
   * A new table (main thread), or a view of one (worker).
   *
   * @param buffers The buffers of an existing table.
   * @param maxSlots The most runs a new table holds.
   */
  constructor(buffers?: RunTableBuffers, maxSlots: number = MAX_SLOTS) {
    this.#maxSlots = Math.max(1, Math.min(MAX_SLOTS, Math.floor(maxSlots)));
    this.buffers = buffers ?? {
      runs: new SharedArrayBuffer(HEADER_BYTES, {
        maxByteLength: runsBytes(this.#maxSlots),
      }),
      names: new SharedArrayBuffer(NAME_CHUNK, { maxByteLength: MAX_NAME_BYTES }),
      infos: new SharedArrayBuffer(0, { maxByteLength: this.#maxSlots * INFO_BYTES }),
    };
    const runs = this.buffers.runs;
    this.#h = new Int32Array(runs, 0, HEADER_BYTES / 4);
    this.refresh();
    // Length-tracking: it grows with its buffer, in this thread and the other.
    this.#names = new Uint8Array(this.buffers.names);
    this.#infos = new Uint8Array(this.buffers.infos);
  }

  /**
   * Cover the buffer as it is now. Fixed-length views: V8 reads and writes
   * them several times faster than length-tracking ones, so the table renews
   * them when it grows, and the worker calls this before it looks at the slots.
   */
  refresh(): void {
    const runs = this.buffers.runs;
    const bytes = runs.byteLength;
    if (bytes === this.#viewed) return;
    this.#i = new Int32Array(runs, 0, bytes / 4);
    this.#f = new Float64Array(runs, 0, bytes / 8);
    this.#b = new Uint8Array(runs, 0, bytes);
    this.#viewed = bytes;
  }

  /** The most runs the table holds. */
  get maxSlots(): number {
    return this.#maxSlots;
  }

  /** Slots in the table now. */
  get slots(): number {
    return Atomics.load(this.#h, SLOTS);
  }

  /**
   * Add a chunk of free slots; false when the table is at its bound or
   * memory cannot be had. One writer: the main thread.
   */
  grow(): boolean {
    const slots = this.slots;
    const next = Math.min(this.#maxSlots, slots + SLOT_CHUNK);
    if (next === slots) return false;
    try {
      this.buffers.runs.grow(runsBytes(next));
    } catch {
      // no address space to grow into: the caller takes its bounded path and says so
      return false;
    }
    this.refresh();
    Atomics.store(this.#h, SLOTS, next);
    return true;
  }

  // Where a slot's fields are, in each view's units: its chunk, the part, its place in it.
  #fAt(slot: number): number {
    return (chunkAt(slot) + inChunk(slot) * F64_BYTES) / 8;
  }
  #iAt(slot: number): number {
    return (chunkAt(slot) + I32_PART + inChunk(slot) * I32_BYTES) / 4;
  }
  #idAt(slot: number, k: number): number {
    return chunkAt(slot) + IDS_PART + inChunk(slot) * IDS_BYTES + k * CALL_ID_BYTES;
  }
  #infoAt(slot: number): number {
    return chunkAt(slot) + INFO_PART + inChunk(slot) * INFO_INLINE_BYTES;
  }

  /** Ask the watchdog to look again now; the wake counter after this wake. */
  wake(): number {
    const wakes = Atomics.add(this.#h, WAKE, 1) + 1;
    Atomics.notify(this.#h, WAKE);
    return wakes;
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
   * Count one completed look of the watchdog (its writes flushed), made with
   * settings `version`, begun when the wake counter read `wakes`.
   */
  looked(version: number, wakes: number): void {
    Atomics.store(this.#h, SETTINGS_SEEN, version);
    Atomics.store(this.#h, WAKES_SERVED, wakes);
    Atomics.add(this.#h, LOOKS, 1);
  }

  /** The wake counter as the watchdog's last completed look began: every wake up to it is served. */
  wakesServed(): number {
    return Atomics.load(this.#h, WAKES_SERVED);
  }

  /** The version of the settings (a count of their changes) the watchdog last looked with. */
  settingsSeen(): number {
    return Atomics.load(this.#h, SETTINGS_SEEN);
  }

  /**
   * The watchdog's completed looks so far: a look reloads the settings when a
   * poll is due and weighs every run whose moment has come, so what it did
   * not write after a look it will not write without a new reason.
   */
  looks(): number {
    return Atomics.load(this.#h, LOOKS);
  }

  /** Tell the watchdog to start no new write: `close()` has begun. */
  beginClose(): void {
    Atomics.store(this.#h, CLOSING, 1);
    this.wake();
  }

  /** Whether `close()` has begun. */
  closing(): boolean {
    return Atomics.load(this.#h, CLOSING) === 1;
  }

  /**
   * Count a watchdog write in (true) or out (false). A write counted in after
   * `close()` began is refused: the caller must not write.
   */
  writing(starts: boolean): boolean {
    if (!starts) {
      Atomics.sub(this.#h, WRITING, 1);
      return true;
    }
    Atomics.add(this.#h, WRITING, 1);
    if (!this.closing()) return true;
    this.writing(false);
    return false;
  }

  /** Whether a watchdog write is in flight. */
  watchdogWriting(): boolean {
    return Atomics.load(this.#h, WRITING) > 0;
  }

  /** Resolve once no watchdog write is in flight, or after `ms`; whether none is. */
  async writesDone(ms: number): Promise<boolean> {
    const end = performance.now() + ms;
    for (;;) {
      if (Atomics.load(this.#h, WRITING) <= 0) return true;
      if (performance.now() >= end) return false;
      // A timer, not Atomics.waitAsync: a pending waitAsync does not keep an event loop alive.
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }

  /**
   * Add a tool name to the table; its id (offset + 1) or 0 when the table is
   * at its bound. One writer: the main thread. The bytes are in place before
   * the id is published, so a reader that sees an id sees its whole name.
   */
  internName(name: string): number {
    const bytes = encoder.encode(name);
    const at = Atomics.load(this.#h, NAMES_USED);
    const length = Math.min(bytes.length, 0xffff);
    const end = at + 2 + length;
    if (end > this.#names.length) {
      const size = Math.ceil(end / NAME_CHUNK) * NAME_CHUNK;
      if (size > MAX_NAME_BYTES) return 0;
      try {
        this.buffers.names.grow(size);
      } catch {
        // no address space for the name: 0 (no name), as for one too long
        return 0;
      }
    }
    this.#names[at] = length >> 8;
    this.#names[at + 1] = length & 0xff;
    this.#names.set(bytes.subarray(0, length), at + 2);
    Atomics.store(this.#h, NAMES_USED, end);
    return at + 1;
  }

  /** The tool name of an id from {@linkcode RunTable.internName}. */
  nameOf(id: number): string {
    const cached = this.#nameCache.get(id);
    if (cached !== undefined) return cached;
    const at = id - 1;
    if (id <= 0 || at + 2 > Atomics.load(this.#h, NAMES_USED)) return "(unknown)";
    const length = (this.#names[at]! << 8) | this.#names[at + 1]!;
    const name = text(this.#names, at + 2, at + 2 + length);
    this.#nameCache.set(id, name);
    return name;
  }

  /**
   * Write a run's description (seqlock: readers retry while it is odd); false
   * when it is longer than INFO_BYTES or its overflow block cannot be had.
   */
  writeInfo(slot: number, bytes: Uint8Array): boolean {
    if (bytes.length > INFO_BYTES) return false;
    const long = bytes.length > INFO_INLINE_BYTES;
    if (long && !this.#overflowFor(slot)) return false;
    const i = this.#iAt(slot);
    Atomics.add(this.#i, i + INFO_SEQ, 1);
    if (long) this.#infos.set(bytes, slot * INFO_BYTES);
    else this.#b.set(bytes, this.#infoAt(slot));
    Atomics.store(this.#i, i + INFO_LEN, bytes.length);
    Atomics.add(this.#i, i + INFO_SEQ, 1);
    return true;
  }

  /** The description's version: changes whenever it is rewritten. */
  infoSeq(slot: number): number {
    return Atomics.load(this.#i, this.#iAt(slot) + INFO_SEQ);
  }

  /** Read a run's description, or undefined while it is being written. */
  readInfo(slot: number): { seq: number; text: string } | undefined {
    const i = this.#iAt(slot);
    const seq = Atomics.load(this.#i, i + INFO_SEQ);
    if (seq % 2 === 1) return undefined;
    const length = Atomics.load(this.#i, i + INFO_LEN);
    let copy: Uint8Array;
    if (length > INFO_INLINE_BYTES) {
      const at = slot * INFO_BYTES;
      if (at + length > this.#infos.length) return undefined;
      copy = this.#infos.slice(at, at + length);
    } else {
      const at = this.#infoAt(slot);
      copy = this.#b.slice(at, at + length);
    }
    if (Atomics.load(this.#i, i + INFO_SEQ) !== seq) return undefined;
    return { seq, text: decoder.decode(copy) };
  }

  /**
   * Make the overflow buffer cover the slot's block, growing it by at least
   * SLOT_CHUNK blocks; false when memory cannot be had. One writer: the main thread.
   */
  #overflowFor(slot: number): boolean {
    const infos = this.buffers.infos;
    const end = (slot + 1) * INFO_BYTES;
    if (end <= infos.byteLength) return true;
    try {
      infos.grow(
        Math.min(infos.maxByteLength, Math.max(end, infos.byteLength + SLOT_CHUNK * INFO_BYTES)),
      );
    } catch {
      // no address space to grow into: the caller says the description is not published
      return false;
    }
    return true;
  }

  /** Whether a run holds the slot. */
  live(slot: number): boolean {
    return Atomics.load(this.#i, this.#iAt(slot) + LIVE) === 1;
  }

  /** Give a free slot to a new run; returns its generation. One writer: the main thread. */
  claim(slot: number, now: number): number {
    const i = this.#iAt(slot);
    for (let k = 1; k < I32_PER_SLOT; k++) {
      if (k !== LIVE && k !== INFO_SEQ) Atomics.store(this.#i, i + k, 0);
    }
    const f = this.#fAt(slot);
    this.#f.fill(0, f, f + F64_PER_SLOT);
    this.#f[f + START] = now;
    this.#f[f + ACTIVITY] = now;
    Atomics.store(this.#i, i + LIVE, 1);
    return Atomics.load(this.#i, i + GEN);
  }

  /** Free a slot; handles holding its old generation go inert. */
  free(slot: number): void {
    const i = this.#iAt(slot);
    Atomics.add(this.#i, i + GEN, 1);
    Atomics.store(this.#i, i + LIVE, 0);
  }

  /** The slot's generation. */
  gen(slot: number): number {
    return Atomics.load(this.#i, this.#iAt(slot) + GEN);
  }

  /** Count a model call; returns the turns used before it. */
  addTurn(slot: number): number {
    return Atomics.add(this.#i, this.#iAt(slot) + TURNS, 1);
  }

  /**
   * Raise the run's turns used to `n` when it is below: a stored goal's
   * `turns_used` (where a goal run starts, and what the watchdog reads again).
   * Never lowers them; either thread.
   */
  raiseTurns(slot: number, n: number): void {
    const i = this.#iAt(slot) + TURNS;
    const to = Math.min(Math.floor(n), 0x7fffffff);
    for (;;) {
      const old = Atomics.load(this.#i, i);
      if (old >= to || Atomics.compareExchange(this.#i, i, old, to) === old) return;
    }
  }

  turns(slot: number): number {
    return Atomics.load(this.#i, this.#iAt(slot) + TURNS);
  }

  /**
   * Add one model call's use (one writer: the main thread): a known cost (a
   * call of unknown cost adds 0 here and is marked in the run's description,
   * or, where no dollar cap asks, `NaN`: the dollars are unknown from then on).
   * Dollars stop at the largest finite number, which passes every cap.
   */
  addUsage(slot: number, inputTokens: number, outputTokens: number, usd: number): void {
    const f = this.#fAt(slot);
    this.#f[f + IN_TOKENS] = this.#f[f + IN_TOKENS]! + inputTokens;
    this.#f[f + OUT_TOKENS] = this.#f[f + OUT_TOKENS]! + outputTokens;
    this.#f[f + USD] = Math.min(this.#f[f + USD]! + usd, Number.MAX_VALUE);
  }

  /** Set the dollars spent so far, as the framework counts them (one writer: the main thread). */
  setUsd(slot: number, usd: number): void {
    this.#f[this.#fAt(slot) + USD] = usd;
  }

  /** Tokens used so far, input and output. */
  tokens(slot: number): number {
    const f = this.#fAt(slot);
    return this.#f[f + IN_TOKENS]! + this.#f[f + OUT_TOKENS]!;
  }

  /** Dollars spent so far, of the calls whose cost is known; `NaN` when unknown (see addUsage). */
  usd(slot: number): number {
    return this.#f[this.#fAt(slot) + USD]!;
  }

  /** Input and output tokens so far, and dollars. */
  usage(slot: number): { inputTokens: number; outputTokens: number; usd: number } {
    const f = this.#fAt(slot);
    return {
      inputTokens: this.#f[f + IN_TOKENS]!,
      outputTokens: this.#f[f + OUT_TOKENS]!,
      usd: this.#f[f + USD]!,
    };
  }

  /**
   * When tool call `n` (a sequence number) times out, ms, or 0 when it has no
   * deadline, has ended or left the ring.
   */
  toolDeadline(slot: number, n: number): number {
    const i = this.#iAt(slot);
    const count = Atomics.load(this.#i, i + TOOL_COUNT);
    if (n < 0 || n >= count || count - n > TOOL_RING) return 0;
    const k = n % TOOL_RING;
    if (Atomics.load(this.#i, i + RING_I + k * 2 + 1) !== IN_FLIGHT) return 0;
    return this.#f[this.#fAt(slot) + TOOL_DEADLINE + k]!;
  }

  /** Claim the timeout record of tool call `n`: true for exactly one caller, whichever thread. */
  claimTimeout(slot: number, n: number): boolean {
    const bit = 1 << (n % TOOL_RING);
    return (Atomics.or(this.#i, this.#iAt(slot) + TIMED_OUT, bit) & bit) === 0;
  }

  /** Whether tool call `n`'s timeout was claimed (while it is in the ring). */
  timedOut(slot: number, n: number): boolean {
    const bit = 1 << (n % TOOL_RING);
    return (Atomics.load(this.#i, this.#iAt(slot) + TIMED_OUT) & bit) !== 0;
  }

  /**
   * Say that the timeout record of tool call `n`, claimed with
   * {@linkcode RunTable.claimTimeout}, is written, or will not be: the thread
   * that did not claim it aborts the call's signal only after this.
   */
  settleTimeout(slot: number, n: number): void {
    Atomics.or(this.#i, this.#iAt(slot) + SETTLED, 1 << (n % TOOL_RING));
  }

  /** Whether tool call `n`'s claimed timeout record is written or given up. */
  timeoutSettled(slot: number, n: number): boolean {
    const bit = 1 << (n % TOOL_RING);
    return (Atomics.load(this.#i, this.#iAt(slot) + SETTLED) & bit) !== 0;
  }

  /** Tool calls started with a deadline so far: a new one calls for the watchdog's look. */
  timedCalls(slot: number): number {
    return Atomics.load(this.#i, this.#iAt(slot) + TIMED_CALLS);
  }

  /** The sequence numbers of the recent tool calls, oldest first. */
  recentTools(slot: number): { from: number; to: number } {
    const count = Atomics.load(this.#i, this.#iAt(slot) + TOOL_COUNT);
    return { from: Math.max(0, count - TOOL_RING), to: count };
  }

  /** Move a run's start (and last activity) back by `ms`, as if it had started earlier. */
  rewind(slot: number, ms: number): void {
    const f = this.#fAt(slot);
    this.#f[f + START] = this.#f[f + START]! - ms;
    this.#f[f + ACTIVITY] = this.#f[f + ACTIVITY]! - ms;
  }

  /**
   * Start the run's clock at `ms` (on the shared clock), earlier than its
   * claim: when Hermes started the task's run. Its activity stays.
   */
  setStart(slot: number, ms: number): void {
    this.#f[this.#fAt(slot) + START] = ms;
  }

  start(slot: number): number {
    return this.#f[this.#fAt(slot) + START]!;
  }

  activity(slot: number): number {
    return this.#f[this.#fAt(slot) + ACTIVITY]!;
  }

  /**
   * Record a hook call: moves the stall deadline, and re-arms the stall
   * checkpoint (waking the watchdog, which has no deadline while stalled).
   */
  touch(slot: number, now: number): void {
    this.#f[this.#fAt(slot) + ACTIVITY] = now;
    const i = this.#iAt(slot) + STALLED;
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
    const i = this.#iAt(slot) + MID_LATCH;
    for (;;) {
      const old = Atomics.load(this.#i, i);
      const next = fireTier(old, tier);
      if (next === undefined) return false;
      if (Atomics.compareExchange(this.#i, i, old, next) === old) {
        // When it was crossed, for the run's record (the time line places its tier marks there).
        this.#f[this.#fAt(slot) + TIER_AT + tier - 1] = nowMs();
        return true;
      }
    }
  }

  /**
   * Say that the record of a tier this thread claimed is written, or will not
   * be: a hook that returns the tier's directive waits for it
   * ({@linkcode RunTable.tierSettled}), so the file the directive names is there.
   */
  settleTier(slot: number, tier: 1 | 2): void {
    const i = this.#iAt(slot) + MID_LATCH;
    Atomics.or(this.#i, i, tier === 1 ? 4 : 8);
    Atomics.notify(this.#i, i);
  }

  /**
   * Wait at most `ms` (blocking the thread) until the record of the tier
   * claimed on the mid-run surface is settled; true at once when it is, or
   * when no record of it was claimed. A claim of tier 2 that skipped tier 1
   * settles both.
   */
  tierSettled(slot: number, tier: 1 | 2, ms = 0): boolean {
    const i = this.#iAt(slot) + MID_LATCH;
    const end = performance.now() + ms;
    for (;;) {
      const latch = Atomics.load(this.#i, i);
      if ((latch & tier) === 0) return true;
      if ((latch & 2 ? latch & 8 : latch & 4) !== 0) return true;
      const left = end - performance.now();
      if (left <= 0) return false;
      Atomics.wait(this.#i, i, latch, left);
    }
  }

  /** When the mid-run surface claimed this tier, ms on the shared clock; undefined before. */
  tierAt(slot: number, tier: 1 | 2): number | undefined {
    const at = this.#f[this.#fAt(slot) + TIER_AT + tier - 1]!;
    return at > 0 ? at : undefined;
  }

  /** Whether the mid-run surface already has this tier (or a higher one). */
  tierClaimed(slot: number, tier: 1 | 2): boolean {
    return (Atomics.load(this.#i, this.#iAt(slot) + MID_LATCH) & tier) !== 0;
  }

  /** Claim the first kanban comment of a record kind (bit); false when it went out already. */
  claimComment(slot: number, bit: number): boolean {
    return (Atomics.or(this.#i, this.#iAt(slot) + COMMENTED, bit) & bit) === 0;
  }

  /** Arm the run's deadline at `at` ms (when its signal is first asked for). */
  armDeadline(slot: number, at: number): void {
    this.#f[this.#fAt(slot) + DEADLINE_AT] = at;
    this.wake();
  }

  /** When the run's deadline aborts, ms, or 0 when nobody asked for it. */
  deadlineAt(slot: number): number {
    return this.#f[this.#fAt(slot) + DEADLINE_AT]!;
  }

  /** Claim the deadline checkpoint: true for exactly one caller, whichever thread. */
  claimDeadline(slot: number): boolean {
    return Atomics.compareExchange(this.#i, this.#iAt(slot) + DEADLINE, 0, 1) === 0;
  }

  /** Whether the deadline checkpoint was claimed, by either thread. */
  deadlineClaimed(slot: number): boolean {
    return Atomics.load(this.#i, this.#iAt(slot) + DEADLINE) !== 0;
  }

  /**
   * Say that the claimed deadline checkpoint is written, or will not be: the
   * thread that did not claim it aborts the run's deadline signal only after this.
   */
  settleDeadline(slot: number): void {
    Atomics.compareExchange(this.#i, this.#iAt(slot) + DEADLINE, 1, 2);
  }

  /** Whether the claimed deadline checkpoint is written or given up. */
  deadlineSettled(slot: number): boolean {
    return Atomics.load(this.#i, this.#iAt(slot) + DEADLINE) === 2;
  }

  /**
   * Take the run's file for one write, so the two threads never rewrite it
   * at the same instant (an agent's append between them could be lost).
   * Waits at most `ms`; false when the other thread still holds it then.
   */
  lockFile(slot: number, ms: number): boolean {
    const i = this.#iAt(slot) + FILE_LOCK;
    const end = performance.now() + ms;
    while (Atomics.compareExchange(this.#i, i, 0, 1) !== 0) {
      const left = end - performance.now();
      if (left <= 0) return false;
      Atomics.wait(this.#i, i, 1, left);
    }
    return true;
  }

  /**
   * {@linkcode RunTable.lockFile} without blocking the thread, for a burst of
   * writes: it looks again every few ms (not `Atomics.waitAsync`, whose
   * promise does not keep Deno's event loop alive).
   */
  async lockFileAsync(slot: number, ms: number): Promise<boolean> {
    const i = this.#iAt(slot) + FILE_LOCK;
    const end = performance.now() + ms;
    for (
      let pause = 1;
      Atomics.compareExchange(this.#i, i, 0, 1) !== 0;
      pause = Math.min(pause * 2, 16)
    ) {
      const left = end - performance.now();
      if (left <= 0) return false;
      await new Promise((resolve) => setTimeout(resolve, Math.min(pause, left)));
    }
    return true;
  }

  /** Give the run's file back after {@linkcode RunTable.lockFile}. */
  unlockFile(slot: number): void {
    const i = this.#iAt(slot) + FILE_LOCK;
    Atomics.store(this.#i, i, 0);
    Atomics.notify(this.#i, i);
  }

  /** Number the next record made for the run's file (1, 2, …), whichever thread makes it. */
  nextFileSeq(slot: number): number {
    return Atomics.add(this.#i, this.#iAt(slot) + FILE_SEQ, 1) + 1;
  }

  /** The newest record (by its number) that landed in the run's file; 0 for none. */
  fileLanded(slot: number): number {
    return Atomics.load(this.#i, this.#iAt(slot) + FILE_LANDED);
  }

  /** Say that record `seq` landed in the run's file (or failed to: `landed` false). */
  fileWrite(slot: number, seq: number, landed: boolean): void {
    const i = this.#iAt(slot) + (landed ? FILE_LANDED : FILE_FAILED);
    for (let old = Atomics.load(this.#i, i); old < seq; old = Atomics.load(this.#i, i)) {
      if (Atomics.compareExchange(this.#i, i, old, seq) === old) return;
    }
  }

  /** Count records a burst is to make for the run (`n` > 0), or made or left out (`n` < 0). */
  writesDue(slot: number, n: number): void {
    Atomics.add(this.#i, this.#iAt(slot) + FILE_DUE, n);
  }

  /** Whether a burst is yet to make a record for the run. */
  writeDue(slot: number): boolean {
    return Atomics.load(this.#i, this.#iAt(slot) + FILE_DUE) > 0;
  }

  /**
   * The run's checkpoint file as its writes left it: `pending` while a write
   * failed and no record as new has landed since, `written` once one landed,
   * undefined before any write.
   */
  fileState(slot: number): "written" | "pending" | undefined {
    const i = this.#iAt(slot);
    const landed = Atomics.load(this.#i, i + FILE_LANDED);
    if (Atomics.load(this.#i, i + FILE_FAILED) > landed) return "pending";
    return landed > 0 ? "written" : undefined;
  }

  /** Whether a stall checkpoint stands for the current silence. */
  stalled(slot: number): boolean {
    return Atomics.load(this.#i, this.#iAt(slot) + STALLED) !== 0;
  }

  /** Claim the stall checkpoint of the current silence. */
  claimStall(slot: number): boolean {
    return Atomics.compareExchange(this.#i, this.#iAt(slot) + STALLED, 0, 1) === 0;
  }

  /** Claim uncapped multiple `n`; false when it or a later one was taken. */
  claimMultiple(slot: number, n: number): boolean {
    const i = this.#iAt(slot) + UNCAPPED;
    for (;;) {
      const old = Atomics.load(this.#i, i);
      if (old >= n) return false;
      if (Atomics.compareExchange(this.#i, i, old, n) === old) return true;
    }
  }

  /** Tool calls recorded so far: the next call's sequence number. */
  toolCount(slot: number): number {
    return Atomics.load(this.#i, this.#iAt(slot) + TOOL_COUNT);
  }

  /** Whether any recent tool call of the run is still in flight. */
  toolInFlight(slot: number): boolean {
    const i = this.#iAt(slot);
    for (let k = 0; k < TOOL_RING; k++) {
      if (Atomics.load(this.#i, i + RING_I + k * 2 + 1) === IN_FLIGHT) return true;
    }
    return false;
  }

  /**
   * Record the start of a tool call, and when it times out (`deadlineAt`,
   * ms; 0 for never); returns its sequence number.
   */
  toolStart(slot: number, toolId: number, now: number, callId?: string, deadlineAt = 0): number {
    const i = this.#iAt(slot);
    const n = Atomics.load(this.#i, i + TOOL_COUNT);
    const k = n % TOOL_RING;
    const f = this.#fAt(slot) + RING_F + k * 2;
    this.#f[f] = now;
    this.#f[f + 1] = -1;
    this.#f[this.#fAt(slot) + TOOL_DEADLINE + k] = deadlineAt;
    Atomics.and(this.#i, i + TIMED_OUT, ~(1 << k));
    Atomics.and(this.#i, i + SETTLED, ~(1 << k));
    if (deadlineAt > 0) Atomics.add(this.#i, i + TIMED_CALLS, 1);
    // The id's bytes are written only when there is one: the bit says whether they are its.
    // One writer (this thread), so the bit is read before it is changed, and only changed then.
    const withIds = Atomics.load(this.#i, i + CALL_IDS);
    if (callId === undefined) {
      if (withIds & (1 << k)) Atomics.and(this.#i, i + CALL_IDS, ~(1 << k));
    } else {
      const id = this.#idAt(slot, k);
      const { written } = encoder.encodeInto(
        callId,
        this.#b.subarray(id + 1, id + CALL_ID_BYTES),
      );
      this.#b[id] = written ?? 0;
      if (!(withIds & (1 << k))) Atomics.or(this.#i, i + CALL_IDS, 1 << k);
    }
    Atomics.store(this.#i, i + RING_I + k * 2, toolId);
    Atomics.store(this.#i, i + RING_I + k * 2 + 1, IN_FLIGHT);
    Atomics.add(this.#i, i + TOOL_COUNT, 1);
    return n;
  }

  /**
   * The sequence number of the oldest call of this tool still in flight in
   * the ring, or -1.
   */
  oldestInFlight(slot: number, toolId: number): number {
    const i = this.#iAt(slot);
    const count = Atomics.load(this.#i, i + TOOL_COUNT);
    for (let n = Math.max(0, count - TOOL_RING); n < count; n++) {
      const k = n % TOOL_RING;
      if (
        Atomics.load(this.#i, i + RING_I + k * 2) === toolId &&
        Atomics.load(this.#i, i + RING_I + k * 2 + 1) === IN_FLIGHT
      ) return n;
    }
    return -1;
  }

  /**
   * Record the end of tool call `n` (a sequence number from
   * {@linkcode RunTable.toolStart}); when it is no longer in the ring
   * (or -1), the end is recorded as a call of its own.
   */
  toolEnd(
    slot: number,
    n: number,
    toolId: number,
    ok: boolean | undefined,
    ms: number,
    now: number,
    callId?: string,
  ): void {
    const i = this.#iAt(slot);
    const count = Atomics.load(this.#i, i + TOOL_COUNT);
    const status = ok === undefined ? 4 : ok ? 2 : 3;
    const known = Number.isFinite(ms) && ms >= 0;
    if (n >= 0 && n < count && count - n <= TOOL_RING) {
      const k = n % TOOL_RING;
      if (Atomics.load(this.#i, i + RING_I + k * 2 + 1) === IN_FLIGHT) {
        const f = this.#fAt(slot) + RING_F + k * 2;
        this.#f[f + 1] = known ? ms : now - this.#f[f]!;
        Atomics.store(this.#i, i + RING_I + k * 2 + 1, status);
        return;
      }
    }
    const m = this.toolStart(slot, toolId, known ? now - ms : now, callId);
    const k = m % TOOL_RING;
    this.#f[this.#fAt(slot) + RING_F + k * 2 + 1] = known ? ms : 0;
    Atomics.store(this.#i, i + RING_I + k * 2 + 1, status);
  }

  /**
   * A number that changes when what a run's ledger record shows does: a
   * turn, a tool call's start or end (or its timeout), a tier, its model use,
   * its description. Reads only, allocates nothing: the watchdog compares it
   * for every run each interval.
   */
  changeStamp(slot: number): number {
    const i = this.#iAt(slot);
    let h = Atomics.load(this.#i, i + TURNS);
    h = (h * 31 + Atomics.load(this.#i, i + TOOL_COUNT)) | 0;
    h = (h * 31 + Atomics.load(this.#i, i + INFO_SEQ)) | 0;
    h = (h * 31 + (Atomics.load(this.#i, i + MID_LATCH) & 3)) | 0;
    h = (h * 31 + Atomics.load(this.#i, i + GEN)) | 0;
    for (let k = 0; k < TOOL_RING; k++) {
      h = (h * 31 + Atomics.load(this.#i, i + RING_I + k * 2 + 1)) | 0;
    }
    h = (h * 31 + Atomics.load(this.#i, i + TIMED_OUT)) | 0;
    h = (h * 31 + Atomics.load(this.#i, i + FILE_LANDED)) | 0;
    h = (h * 31 + Atomics.load(this.#i, i + FILE_FAILED)) | 0;
    // The model use: tokens, and dollars to the micro-dollar (NaN, cost unknown, counts as 0).
    const f = this.#fAt(slot);
    h = (h * 31 + ((this.#f[f + IN_TOKENS]! + this.#f[f + OUT_TOKENS]!) % 2 ** 31)) | 0;
    h = (h * 31 + (Math.round(this.#f[f + USD]! * 1e6) % 2 ** 31)) | 0;
    return h;
  }

  /** The recent tool calls, oldest first, with their sequence numbers. */
  tools(slot: number): (ToolCall & { seq: number })[] {
    const i = this.#iAt(slot);
    const count = Atomics.load(this.#i, i + TOOL_COUNT);
    const start = this.start(slot);
    const out: (ToolCall & { seq: number })[] = [];
    for (let n = Math.max(0, count - TOOL_RING); n < count; n++) {
      const k = n % TOOL_RING;
      const status = STATUS[Atomics.load(this.#i, i + RING_I + k * 2 + 1)] || "done";
      const f = this.#fAt(slot) + RING_F + k * 2;
      const call: ToolCall & { seq: number } = {
        seq: n,
        tool: this.nameOf(Atomics.load(this.#i, i + RING_I + k * 2)),
        status,
        startedAt: Math.max(0, (this.#f[f]! - start) / 1000),
      };
      if (Atomics.load(this.#i, i + CALL_IDS) & (1 << k)) {
        const id = this.#idAt(slot, k);
        const idLength = this.#b[id]!;
        if (idLength > 0) call.callId = text(this.#b, id + 1, id + 1 + idLength);
      }
      if (status !== "in flight") call.durationMs = this.#f[f + 1]!;
      if (this.timedOut(slot, n)) call.timedOut = true;
      out.push(call);
    }
    return out;
  }
}
