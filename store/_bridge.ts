/**
 * The store's bridge: it carries any store that implements the store's
 * asynchronous port (a {@linkcode Backend}'s) to the host's thread, whose
 * hooks are synchronous. `startRun` is synchronous, and with a store over the
 * network the attempt number and the previous record come over the network;
 * so the main thread never holds a connection. A thread of the store's own
 * (`_bridge_worker.ts`, started from `_bridge_entry.ts`, which imports the
 * backend's module) owns it: a run's start is posted to that
 * thread and its answer read from a port with a bounded `Atomics.wait`
 * (one round trip, {@linkcode START_WAIT_MS} at most, and not at all while
 * the database is known to be away: the run then starts from its local file
 * and its record is written when the database returns). Ends, records at exit
 * and checkpoint files' content are posted, never waited for.
 *
 * @module
 */
import * as path from "node:path";
import {
  MessageChannel,
  type MessagePort,
  receiveMessageOnPort,
  Worker,
} from "node:worker_threads";
import type { CheckpointEvent } from "../_writer.ts";
import type { TreeRow } from "../_tree.ts";
import { thisHost } from "./_host.ts";
import {
  BRIDGE_ENTRY,
  type BridgeData,
  type CheckpointCall,
  type EffectsDone,
  type FromBridge,
  type FromWatchdog,
  type SessionCall,
  START_WAIT_MS,
  STATE_DOWN,
  STATE_UNKNOWN,
  STATE_UP,
  type ToBridge,
} from "./_bridge_protocol.ts";
// In the static module graph so that Deno, importing the library by URL, fetches the store
// thread's module with it. Outside the store thread the entry does nothing.
import "./_bridge_entry.ts";

export { START_WAIT_MS };
import type {
  AttemptStart,
  Backend,
  BackendOptions,
  CheckpointsPort,
  EffectBatch,
  EffectRow,
  EffectsPort,
  GraphCheckpointRow,
  JournalBatch,
  JournalEntry,
  JournalPort,
  LedgerEffects,
  LedgerJournal,
  LedgerRelay,
  LedgerStore,
  LedgerSync,
  LedgerTrees,
  ListQuery,
  RunRecord,
  RunStore,
  RunView,
  SessionsPort,
  StartOptions,
  StoreSummary,
  SummaryQuery,
  TreesPort,
  WriteBatch,
} from "./types.ts";

/**
 * The longest the first start of a process waits, ms: it also waits for the
 * store thread to start, load the driver and connect (at most its 5 s
 * connect timeout). A retry on another machine is usually that first start,
 * and the one that most needs the earlier attempt's record.
 */
export const FIRST_START_WAIT_MS = 8000;
/** How long the records at exit may take to reach the database, ms. */
export const EXIT_WAIT_MS = 1000;
/** How long `close()` lets the store thread write what waits, ms. */
export const CLOSE_WAIT_MS = 5000;

/** The store thread's entry module, next to this one (`.ts` under Deno, `.js` when built). */
function workerUrl(): URL {
  const url = new URL(
    import.meta.url.endsWith(".ts") ? "./_bridge_entry.ts" : "./_bridge_entry.js",
    import.meta.url,
  );
  if (url.protocol === "file:") return url;
  return new URL(
    `data:text/javascript,${encodeURIComponent(`import ${JSON.stringify(url.href)};`)}`,
  );
}

/** A bridged store with the embedded store's synchronous calls the supervisor makes. */
export interface SyncFleetStore {
  /** The newest record of a run id. */
  latestSync(runId: string): RunView | undefined;
  /** Record the start of an attempt. */
  startAttemptSync(record: RunRecord, options?: { minAttempt?: number }): AttemptStart;
  /** Write records, waiting (bounded) until they are in the database. */
  writeSync(batch: WriteBatch): void;
  /** Let the connection go. */
  closeSync(): void;
}

/** What the store's bridge needs. */
export interface BridgeOptions {
  /** The backend whose store the bridge carries. */
  backend: Backend;
  /** The `store` setting's URL. */
  url: string;
  /** A heartbeat older than this many seconds means its process is gone. */
  hostTimeoutSeconds: number;
  /** The most file content kept per record, KiB. */
  fileMaxKb: number;
  /** Where log lines go. */
  log?: (level: "info" | "warn" | "error", message: string) => void;
}

/**
 * A store as the main thread sees it through the bridge: synchronous starts
 * (bounded), writes that never wait. Reads (`list`, `latest`, `summary`) go
 * through a store of the main thread's own, which connects on first use; the
 * core never reads.
 */
export class StoreBridge implements RunStore, LedgerStore {
  readonly engine: string;
  readonly location: string;
  readonly #options: BridgeOptions;
  readonly #worker: Worker;
  readonly #port: MessagePort;
  readonly #flag: Int32Array;
  #seq = 0;
  #closed = false;
  readonly #reader: RunStore;

  /** {@linkcode LedgerStore.sync}: starts waited for (bounded), records handed on. */
  readonly sync: LedgerSync = {
    write: (batch) => void this.write(batch),
    writeEach: (records, heartbeat) => {
      const batch: WriteBatch = { records: [...records] };
      if (heartbeat) batch.heartbeat = heartbeat;
      void this.write(batch);
    },
    startAttempt: (record, options) => this.startAttemptSync(record, options),
    latest: (runId) => this.latestSync(runId),
  };
  // No leases here: the store's thread says in the log which attempts lost their run.
  /** {@linkcode LedgerStore.effects}, when the backend keeps them. */
  readonly effects?: EffectsPort & LedgerEffects;
  /** {@linkcode LedgerStore.journal}, when the backend keeps one. */
  readonly journal?: JournalPort & LedgerJournal;
  /** {@linkcode LedgerStore.checkpoints}, when the backend keeps them: through the store's thread. */
  readonly checkpoints?: CheckpointsPort;
  /** {@linkcode LedgerStore.sessions}, when the backend keeps them: through the store's thread. */
  readonly sessions?: SessionsPort;
  /** {@linkcode LedgerStore.trees}, when the backend keeps them. */
  readonly trees?: TreesPort & LedgerTrees;
  /** {@linkcode LedgerStore.relay}: what is handed to the store's thread. */
  readonly relay: LedgerRelay;

  /** @internal Use {@linkcode openBridge}. */
  constructor(options: BridgeOptions) {
    this.#options = options;
    this.engine = options.backend.engine;
    this.location = options.backend.locate(options.url);
    // Nothing over the network until a read: it says what the backend keeps.
    this.#reader = options.backend.open(this.#backendOptions());
    const reader = this.#reader;
    if (reader.effects) {
      const effects = reader.effects;
      this.effects = {
        write: (batch) => this.writeEffects(batch),
        read: (runId) => effects.read(runId),
        readSync: (runId) => this.effectsSync(runId),
      };
    }
    if (reader.journal) {
      this.journal = {
        write: (batch) => this.writeJournal(batch),
        // Through the store's thread, as a write is: a backend whose data lives in that thread
        // (the in-memory one) answers there.
        read: (runId) => this.readJournal(runId),
      };
    }
    if (reader.checkpoints) {
      this.checkpoints = {
        put: (put) => this.#checkpoints({ op: "put", put }).then(() => {}),
        putWrites: (writes) =>
          writes.writes.length === 0
            ? Promise.resolve()
            : this.#checkpoints({ op: "putWrites", writes }).then(() => {}),
        get: async (query) =>
          (await this.#checkpoints({ op: "list", query: { ...query, limit: 1 } }))[0],
        list: (query) => this.#checkpoints({ op: "list", query }),
        deleteThread: (thread) => this.#checkpoints({ op: "deleteThread", thread }).then(() => {}),
      };
    }
    if (reader.sessions) {
      const call = <T>(c: SessionCall) => this.#sessions(c) as Promise<T>;
      this.sessions = {
        append: (key, entries) =>
          entries.length === 0 ? Promise.resolve() : call({ op: "append", key, entries }),
        load: (key, last) =>
          call<string[] | undefined>({ op: "load", key, ...(last === undefined ? {} : { last }) })
            .then((entries) => entries ?? null),
        list: (scope) => call({ op: "list", scope }),
        delete: (key) => call({ op: "delete", key }),
        subkeys: (scope, sessionId) => call({ op: "subkeys", scope, sessionId }),
        pop: (key) => call({ op: "pop", key }),
      };
    }
    const trees = reader.trees;
    if (trees) {
      this.trees = {
        // Reads of every tree go through the main thread's own store, as other reads do.
        list: (query) => trees.list(query),
        read: (root) => trees.read(root),
        join: (runId, root, parent) => trees.join(runId, root, parent),
        admit: (root, decide) => trees.admit(root, decide),
        readSync: (root) => this.treeSync(root),
        admitSync: (root, decide) => this.admitSync(root, decide),
        writeSync: (record) => this.writeTreeSync(record),
        joinSync: (runId, root, parent) => this.joinTreeSync(runId, root, parent),
      };
    }
    const { port1, port2 } = new MessageChannel();
    this.#port = port1;
    this.#flag = new Int32Array(new SharedArrayBuffer(12));
    const flag = this.#flag;
    this.relay = {
      fileWritten: (event) => this.fileWritten(event),
      drainSync: () => this.drainSync(),
      watchdogPort: () => this.watchdogPort(),
      get statements() {
        return Atomics.load(flag, 2);
      },
    };
    const data: BridgeData = {
      entry: BRIDGE_ENTRY,
      backend: options.backend.module,
      options: this.#backendOptions(),
      host: thisHost(),
      flag: this.#flag.buffer as SharedArrayBuffer,
      reply: port2,
    };
    this.#worker = new Worker(workerUrl(), { workerData: data, transferList: [port2] });
    this.#worker.on("message", (message: FromBridge | EffectsDone) => {
      if (message.type === "log") options.log?.(message.level, message.message);
      else if (message.type === "effected") this.#effected(message);
    });
    this.#worker.on("error", (error) => {
      this.#closed = true;
      options.log?.("error", `the fleet store's thread stopped: ${String(error)}`);
    });
    // After the listeners: in Node, adding a message listener re-refs the worker.
    this.#worker.unref();
    (this.#port as { unref?: () => void }).unref?.();
  }

  /** Whether the store thread last found the database reachable (undefined: not yet tried). */
  get reachable(): boolean | undefined {
    const state = Atomics.load(this.#flag, 1);
    return state === STATE_UNKNOWN ? undefined : state === STATE_UP;
  }

  /** The statements the store thread has sent (each one round trip), for benchmarks. */
  get statements(): number {
    return Atomics.load(this.#flag, 2);
  }

  /** Wait, at most `ms`, for the answer `id`; undefined when it did not come. */
  #await(id: number, ms: number): FromBridge | undefined {
    const deadline = performance.now() + ms;
    for (;;) {
      const seen = Atomics.load(this.#flag, 0);
      for (
        let got = receiveMessageOnPort(this.#port);
        got;
        got = receiveMessageOnPort(this.#port)
      ) {
        const message = got.message as FromBridge;
        if ("id" in message && message.id === id) return message;
        if (message.type === "tree") this.#treeAnswered(message); // a read for a later look
        // An answer that came too late for its start: that start went on as provisional.
      }
      const left = deadline - performance.now();
      if (left <= 0) return undefined;
      Atomics.wait(this.#flag, 0, seen, Math.ceil(left));
    }
  }

  /**
   * Start an attempt: posted to the store thread, its answer awaited at most
   * {@linkcode START_WAIT_MS} ({@linkcode FIRST_START_WAIT_MS} before the
   * database has answered once). While the database is known to be away, or
   * when the answer does not come in time, the attempt starts at
   * `minAttempt` (the local file's count) without a previous record, with one
   * log line per outage; its record reaches the database with the next batch
   * after it returns. A start that must know the holder (`on_duplicate`
   * `refuse` or `take-over`) asks the database even while it is known to be
   * away, so one made just after the server is back (before the thread's next
   * probe) is refused or fenced as it should be, not run beside the holder.
   */
  startAttemptSync(record: RunRecord, options?: StartOptions): AttemptStart {
    // The store thread says in the log why, once per outage.
    const provisional = (): AttemptStart => ({
      attempt: Math.max(1, Math.floor(options?.minAttempt ?? 1)),
    });
    if (this.#closed) throw new Error("the fleet store is closed");
    const holderMatters = (options?.onDuplicate ?? "warn") !== "warn";
    if (Atomics.load(this.#flag, 1) === STATE_DOWN && !holderMatters) return provisional();
    const id = ++this.#seq;
    const message: ToBridge = { type: "start", id, record };
    if (options) message.options = options;
    this.#worker.postMessage(message);
    const first = Atomics.load(this.#flag, 1) === STATE_UNKNOWN;
    const answer = this.#await(id, first ? FIRST_START_WAIT_MS : START_WAIT_MS);
    if (!answer || answer.type !== "started") {
      // The store thread says it in the log, once: when the start lands, or the database is away.
      this.#worker.postMessage({ type: "late", id } satisfies ToBridge);
      Atomics.compareExchange(this.#flag, 1, STATE_UP, STATE_DOWN);
      Atomics.compareExchange(this.#flag, 1, STATE_UNKNOWN, STATE_DOWN);
      return provisional();
    }
    if (answer.error !== undefined || !answer.started) return provisional();
    return answer.started;
  }

  /**
   * The newest record of a run id, waited for at most `ms` (one round trip).
   * Throws when the database is away or does not answer in time.
   */
  latestSync(runId: string, ms: number = START_WAIT_MS): RunView | undefined {
    if (this.#closed) throw new Error("the fleet store is closed");
    if (Atomics.load(this.#flag, 1) === STATE_DOWN) {
      throw new Error(`the fleet store at ${this.location} cannot be reached`);
    }
    const id = ++this.#seq;
    this.#worker.postMessage({ type: "latest", id, runId } satisfies ToBridge);
    const answer = this.#await(id, ms);
    if (!answer || answer.type !== "latest") {
      throw new Error(`the fleet store at ${this.location} did not answer within ${ms} ms`);
    }
    if (answer.error !== undefined) throw new Error(answer.error);
    return answer.view;
  }

  /** Effect batches posted and not yet answered, by id. */
  readonly #effectsWaiting = new Map<
    number,
    {
      resolve: (
        answer: { entries?: JournalEntry[]; rows?: GraphCheckpointRow[]; answer?: unknown },
      ) => void;
      reject: (error: Error) => void;
    }
  >();

  /**
   * Write intents and receipts: posted to the store thread, which writes
   * them in one statement; resolves once they are committed. While one
   * waits, the store thread keeps the process alive.
   */
  writeEffects(batch: EffectBatch): Promise<void> {
    if (this.#closed) return Promise.reject(new Error("the fleet store is closed"));
    if (batch.intents.length === 0 && batch.receipts.length === 0) return Promise.resolve();
    const id = ++this.#seq;
    return new Promise<void>((resolve, reject) => {
      if (this.#effectsWaiting.size === 0) this.#worker.ref();
      this.#effectsWaiting.set(id, { resolve: () => resolve(), reject });
      this.#worker.postMessage({ type: "effects", id, batch } satisfies ToBridge);
    });
  }

  /**
   * Write journal entries: posted to the store thread in order with the
   * effects; resolves once they are committed, as an effect batch does.
   */
  writeJournal(batch: JournalBatch): Promise<void> {
    if (this.#closed) return Promise.reject(new Error("the fleet store is closed"));
    if (batch.entries.length === 0) return Promise.resolve();
    const id = ++this.#seq;
    return new Promise<void>((resolve, reject) => {
      if (this.#effectsWaiting.size === 0) this.#worker.ref();
      this.#effectsWaiting.set(id, { resolve: () => resolve(), reject });
      this.#worker.postMessage({ type: "journal", id, batch } satisfies ToBridge);
    });
  }

  /** The journal of a run id, read by the store's thread in order with the writes before it. */
  readJournal(runId: string): Promise<JournalEntry[]> {
    if (this.#closed) return Promise.reject(new Error("the fleet store is closed"));
    const id = ++this.#seq;
    return new Promise<JournalEntry[]>((resolve, reject) => {
      if (this.#effectsWaiting.size === 0) this.#worker.ref();
      this.#effectsWaiting.set(id, { resolve: (answer) => resolve(answer.entries ?? []), reject });
      this.#worker.postMessage({ type: "journalOf", id, runId } satisfies ToBridge);
    });
  }

  /**
   * A call of the graph checkpoints, made by the store's thread in order with the effects and
   * the journal; resolves with a read's rows once it is done (a write's once it is committed).
   */
  #checkpoints(call: CheckpointCall): Promise<GraphCheckpointRow[]> {
    if (this.#closed) return Promise.reject(new Error("the fleet store is closed"));
    const id = ++this.#seq;
    return new Promise<GraphCheckpointRow[]>((resolve, reject) => {
      if (this.#effectsWaiting.size === 0) this.#worker.ref();
      this.#effectsWaiting.set(id, { resolve: (answer) => resolve(answer.rows ?? []), reject });
      this.#worker.postMessage({ type: "graph", id, call } satisfies ToBridge);
    });
  }

  /**
   * A call of the session transcripts, made by the store's thread in order with the effects,
   * the journal and the checkpoints; resolves with its answer once it is done (a write's once
   * it is committed).
   */
  #sessions(call: SessionCall): Promise<unknown> {
    if (this.#closed) return Promise.reject(new Error("the fleet store is closed"));
    const id = ++this.#seq;
    return new Promise<unknown>((resolve, reject) => {
      if (this.#effectsWaiting.size === 0) this.#worker.ref();
      this.#effectsWaiting.set(id, { resolve: (answer) => resolve(answer.answer), reject });
      this.#worker.postMessage({ type: "sessions", id, call } satisfies ToBridge);
    });
  }

  #effected(message: EffectsDone): void {
    const waiting = this.#effectsWaiting.get(message.id);
    if (!waiting) return;
    this.#effectsWaiting.delete(message.id);
    if (this.#effectsWaiting.size === 0 && !this.#closed) this.#worker.unref();
    if (message.error === undefined) {
      waiting.resolve({
        ...(message.entries ? { entries: message.entries } : {}),
        ...(message.rows ? { rows: message.rows } : {}),
        ...("answer" in message ? { answer: message.answer } : {}),
      });
    } else waiting.reject(new Error(message.error));
  }

  /**
   * The effects recorded for a run id, waited for at most `ms` (one round
   * trip). Throws when the database is away or does not answer in time.
   */
  effectsSync(runId: string, ms: number = START_WAIT_MS): EffectRow[] {
    if (this.#closed) throw new Error("the fleet store is closed");
    if (Atomics.load(this.#flag, 1) === STATE_DOWN) {
      throw new Error(`the fleet store at ${this.location} cannot be reached`);
    }
    const id = ++this.#seq;
    this.#worker.postMessage({ type: "effectsOf", id, runId } satisfies ToBridge);
    const answer = this.#await(id, ms);
    if (!answer || answer.type !== "effectsOf") {
      throw new Error(`the fleet store at ${this.location} did not answer within ${ms} ms`);
    }
    if (answer.error !== undefined) throw new Error(answer.error);
    return answer.rows ?? [];
  }

  /**
   * The same, synchronously, for the supervisor: what it writes is waited for
   * (bounded) before it goes on, as it is with the embedded store.
   */
  syncView(): SyncFleetStore {
    return {
      latestSync: (runId) => this.latestSync(runId),
      startAttemptSync: (record, options) => this.startAttemptSync(record, options),
      writeSync: (batch) => {
        void this.write(batch);
        if (!this.drainSync(START_WAIT_MS)) {
          throw new Error(`the fleet store at ${this.location} did not take the record`);
        }
      },
      closeSync: () => void this.close(),
    };
  }

  /**
   * The newest attempt of every run in the tree rooted at `root`. The first
   * look at a tree waits for the database (one round trip, at most
   * {@linkcode START_WAIT_MS}); later ones never wait: they get the rows of
   * the last answer (or admission), and ask for newer ones for the next look.
   * Throws when the database is away or the first answer does not come in time.
   */
  treeSync(root: string): TreeRow[] {
    const known = this.#treeRows.get(root);
    if (known && !this.#closed && Atomics.load(this.#flag, 1) !== STATE_DOWN) {
      this.#drainTrees();
      if (known.asked === undefined) {
        known.asked = ++this.#seq;
        this.#worker.postMessage({ type: "tree", id: known.asked, root } satisfies ToBridge);
      }
      return known.rows;
    }
    const answer = this.#tree({ type: "tree", id: ++this.#seq, root });
    if (answer.error !== undefined) throw new Error(answer.error);
    const rows = answer.rows ?? [];
    this.#keepTree(root, rows);
    return rows;
  }

  /** Each tree's rows as last read, and the read in flight for the next look. */
  readonly #treeRows = new Map<string, { rows: TreeRow[]; asked?: number | undefined }>();

  #keepTree(root: string, rows: TreeRow[]): void {
    const known = this.#treeRows.get(root);
    if (known) known.rows = rows;
    else {
      // Bounded: a process that ran many trees keeps the newest few.
      if (this.#treeRows.size >= 64) this.#treeRows.delete(this.#treeRows.keys().next().value!);
      this.#treeRows.set(root, { rows });
    }
  }

  /** An answer to a tree's read for the next look: its rows kept. */
  #treeAnswered(message: FromBridge & { type: "tree" }): void {
    for (const known of this.#treeRows.values()) {
      if (known.asked !== message.id) continue;
      known.asked = undefined;
      if (message.error === undefined && message.rows) known.rows = message.rows;
    }
  }

  /** Take in the answers that came, without waiting. */
  #drainTrees(): void {
    for (let got = receiveMessageOnPort(this.#port); got; got = receiveMessageOnPort(this.#port)) {
      const message = got.message as FromBridge;
      if (message.type === "tree") this.#treeAnswered(message);
    }
  }

  /**
   * Look at a tree and write the record `decide` makes of it, in one
   * transaction of the database that holds the tree's lock, so that model
   * calls of the tree on any machine are admitted one at a time. The rows are
   * waited for at most {@linkcode START_WAIT_MS}; the record is posted, and
   * the lock is let go once it is written. Throws, before deciding, when the
   * database is away or does not answer in time.
   */
  admitSync(root: string, decide: (rows: TreeRow[]) => RunRecord | undefined): void {
    const id = ++this.#seq;
    let record: RunRecord | undefined;
    const answer = this.#tree({ type: "admit", id, root }, () =>
      // No rows in time: the store thread lets the lock go without writing when they come.
      this.#worker.postMessage({ type: "decided", id } satisfies ToBridge));
    if (answer.error !== undefined) throw new Error(answer.error);
    this.#keepTree(root, answer.rows ?? []);
    try {
      record = decide(answer.rows ?? []);
    } finally {
      this.#worker.postMessage(
        (record ? { type: "decided", id, record } : { type: "decided", id }) satisfies ToBridge,
      );
    }
  }

  /** A tree's rows asked for, and the answer waited for (bounded). */
  #tree(
    message: ToBridge & { type: "tree" | "admit" },
    late?: () => void,
  ): FromBridge & { type: "tree" } {
    if (this.#closed) throw new Error("the fleet store is closed");
    if (Atomics.load(this.#flag, 1) === STATE_DOWN) {
      throw new Error(`the fleet store at ${this.location} cannot be reached`);
    }
    this.#worker.postMessage(message);
    const answer = this.#await(message.id, START_WAIT_MS);
    if (!answer || answer.type !== "tree") {
      late?.();
      throw new Error(
        `the fleet store at ${this.location} did not answer within ${START_WAIT_MS} ms`,
      );
    }
    return answer;
  }

  /** Write a run of a tree's record now (posted), for the tree's other processes. */
  writeTreeSync(record: RunRecord): void {
    void this.write({ records: [record] });
  }

  /** Record that a run sits in a tree (posted, before the run's next look at its tree). */
  joinTreeSync(runId: string, root: string, parent: string | undefined): void {
    if (this.#closed) return;
    const message: ToBridge = { type: "join", runId, root };
    if (parent !== undefined) message.parent = parent;
    this.#worker.postMessage(message);
  }

  /** Post records to be written; never waits. */
  write(batch: WriteBatch): Promise<void> {
    if (!this.#closed && batch.records.length > 0) {
      this.#worker.postMessage({ type: "write", records: batch.records } satisfies ToBridge);
    }
    return Promise.resolve();
  }

  /**
   * A port for the watchdog thread: its batches go to this store's thread,
   * which writes them with its own in one statement, so a process has one
   * connection, one backlog and one voice in the log.
   */
  watchdogPort(): MessagePort | undefined {
    if (this.#closed) return undefined;
    const { port1, port2 } = new MessageChannel();
    this.#worker.postMessage({ type: "port", port: port2 } satisfies ToBridge, [port2]);
    return port1;
  }

  /** A checkpoint file was written: its content goes to the run's newest record. */
  fileWritten(event: CheckpointEvent): void {
    if (this.#closed || !path.isAbsolute(event.file)) return;
    this.#worker.postMessage(
      { type: "file", runId: event.runId, file: event.file, host: thisHost() } satisfies ToBridge,
    );
  }

  /** Wait, at most `ms`, for what was posted to reach the database (the process exits). */
  drainSync(ms: number = EXIT_WAIT_MS): boolean {
    if (this.#closed || Atomics.load(this.#flag, 1) === STATE_DOWN) return false;
    const id = ++this.#seq;
    this.#worker.postMessage({ type: "drain", id, ms } satisfies ToBridge);
    const answer = this.#await(id, ms + 100);
    return answer?.type === "drained" && answer.waiting === 0;
  }

  #backendOptions(): BackendOptions {
    return {
      url: this.#options.url,
      hostTimeoutSeconds: this.#options.hostTimeoutSeconds,
      fileMaxKb: this.#options.fileMaxKb,
    };
  }

  #read(): RunStore {
    return this.#reader;
  }

  startAttempt(record: RunRecord, options?: StartOptions): Promise<AttemptStart> {
    return this.#read().startAttempt(record, options);
  }
  latest(runId: string): Promise<RunView | undefined> {
    return this.#read().latest(runId);
  }
  list(query?: ListQuery): Promise<RunView[]> {
    return this.#read().list(query);
  }
  summary(query?: SummaryQuery): Promise<StoreSummary> {
    return this.#read().summary(query);
  }
  /** Pruning is the watchdog's, at each process's start. */
  prune(_before: number, _limit: number): Promise<number> {
    return Promise.resolve(0);
  }

  /** Let the store thread write what waits (at most {@linkcode CLOSE_WAIT_MS}), then stop it. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Kept alive until it has written what waits.
    this.#worker.ref();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const done = new Promise<void>((resolve) => {
      this.#worker.on("message", (m: FromBridge) => m.type === "closed" && resolve());
      this.#worker.once("exit", () => resolve());
      timer = setTimeout(resolve, CLOSE_WAIT_MS + 2000);
    });
    this.#worker.postMessage({ type: "close", ms: CLOSE_WAIT_MS } satisfies ToBridge);
    await done;
    clearTimeout(timer);
    for (const waiting of this.#effectsWaiting.values()) {
      waiting.reject(new Error("the fleet store closed before it took the effects"));
    }
    this.#effectsWaiting.clear();
    await this.#worker.terminate();
    this.#port.close();
    await this.#reader.close();
  }
}

/**
 * Open the main thread's side of the store's bridge: it starts the store's
 * thread, which opens the backend's store and connects on its own. Throws on
 * a URL the backend cannot read.
 *
 * @example
 * ```ts
 * import { openBridge } from "./_bridge.ts";
 * import { backend } from "./postgres.ts";
 * import assert from "node:assert/strict";
 *
 * const store = openBridge({
 *   backend,
 *   url: "postgres://u:pw@db.invalid/fleet",
 *   hostTimeoutSeconds: 30,
 *   fileMaxKb: 256,
 * });
 * assert.equal(store.location, "postgres://u:***@db.invalid/fleet");
 * await store.close();
 * ```
 */
export function openBridge(options: BridgeOptions): StoreBridge {
  return new StoreBridge(options);
}

/**
 * A bridged store as the watchdog thread sees it: each interval's batch is
 * handed to the store thread of its process, which keeps it (in order,
 * bounded) until the database takes it; so `write` resolves at once.
 *
 * @example
 * ```ts
 * import { MessageChannel } from "node:worker_threads";
 * import { PortStore } from "./_bridge.ts";
 * import assert from "node:assert/strict";
 *
 * const { port1, port2 } = new MessageChannel();
 * const got = new Promise((resolve) => port2.once("message", resolve));
 * const store = new PortStore(port1, "postgres://db/fleet", "postgres");
 * await store.write({ records: [] , heartbeat: { host: { machine: "m", pid: 1, start: "" }, at: 1, intervalSeconds: 1 } });
 * assert.equal((await got as { type: string }).type, "batch");
 * await store.close();
 * port2.close();
 * ```
 */
export class PortStore implements LedgerStore {
  readonly engine: string;
  readonly location: string;
  readonly #port: MessagePort;

  /**
   * @param port The port the store thread listens on. @param location Where the store is, to
   * show. @param engine Which engine.
   */
  constructor(port: MessagePort, location: string, engine: string) {
    this.#port = port;
    this.location = location;
    this.engine = engine;
  }

  /** Hand a batch to the store thread. */
  write(batch: WriteBatch): Promise<void> {
    this.#port.postMessage({ type: "batch", batch } satisfies FromWatchdog);
    return Promise.resolve();
  }

  /** Ask the store thread to prune; how many went is not waited for. */
  prune(before: number, limit: number): Promise<number> {
    this.#port.postMessage({ type: "prune", before, limit } satisfies FromWatchdog);
    return Promise.resolve(0);
  }

  /** Let go of the port. */
  close(): Promise<void> {
    this.#port.close();
    return Promise.resolve();
  }
}
