/**
 * A run store in memory: the store's port implemented over plain maps, with
 * every capability (records, leases, effects, journal, trees, files). It keeps
 * nothing past its thread; stores opened with the same `memory://` URL in
 * one thread share their runs. It is what the tests run the store's contract
 * against beside the embedded and the PostgreSQL stores, and the proof that
 * a backend is one module: this one, and its line in the list of backends
 * when a `store` setting is to name it.
 *
 * @module
 */
import type { TreeRow } from "../_tree.ts";
import { treeRowOf } from "./trees.ts";
import { boundContent } from "./_content.ts";
import { here } from "./_host.ts";
import { bodyKey, journalOrder, packBody, unpackBody } from "./_journal.ts";
import { writeOrder, writesOnce } from "./_checkpoints.ts";
import {
  type AttemptStart,
  type Backend,
  type BackendOptions,
  type CheckpointsPort,
  type EffectBatch,
  type EffectRow,
  type EffectsPort,
  type FencedRecord,
  type FilesPort,
  type GraphChannelValue,
  type GraphCheckpointPut,
  type GraphCheckpointQuery,
  type GraphCheckpointRow,
  type GraphWrite,
  type Heartbeat,
  type HostId,
  type JournalEntry,
  type JournalPort,
  type LeasesPort,
  type ListQuery,
  type RunRecord,
  runState,
  type RunStore,
  type RunView,
  type SessionsPort,
  type StartOptions,
  type StoreSummary,
  type SummaryQuery,
  type TreeQuery,
  type TreesPort,
  type WriteBatch,
} from "./types.ts";

/** One attempt's row: its record (without file content), whether it is its run's newest. */
interface Row {
  record: RunRecord;
  newest: boolean;
  fileContent?: string;
}

/** What the stores of one `memory://` URL share. */
interface Data {
  runs: Map<string, Map<number, Row>>;
  heartbeats: Map<string, { at: number; intervalSeconds: number }>;
  fences: Map<string, number>;
  trees: Map<string, { root: string; parent: string | undefined }>;
  effects: Map<string, Map<string, EffectRow>>;
  /** Each run's journal entries (bodies by their key), and the bodies, compressed. */
  journal: Map<string, Map<string, JournalEntry>>;
  bodies: Map<string, Uint8Array>;
  /** Graph checkpoints by thread, namespace and id; their values by thread, namespace, channel, version. */
  graph: Map<string, GraphCheckpoint>;
  graphValues: Map<string, GraphChannelValue>;
  /** Session transcripts by scope, session and subpath (`graphKey`). */
  sessions: Map<string, { json: string; uuid?: string; at: number }[]>;
}

/** A graph checkpoint as kept here, with its writes by task and index. */
interface GraphCheckpoint {
  /** Undefined while only writes for it came. */
  put: GraphCheckpointPut | undefined;
  writes: Map<string, GraphWrite>;
}

const graphKey = (...parts: string[]) => JSON.stringify(parts);

/** The data of each `memory://` URL of this thread. */
const shared = new Map<string, Data>();

const hostKey = (h: HostId) => `${h.machine}\u0000${h.pid}\u0000${h.start}`;
const sameHost = (a: HostId, b: HostId) =>
  a.machine === b.machine && a.pid === b.pid && a.start === b.start;
/** A record as a store keeps it: a copy, without its file content, times whole. */
const kept = (record: RunRecord): RunRecord => {
  const { fileContent: _f, ...rest } = record;
  const copy = JSON.parse(JSON.stringify(rest)) as RunRecord;
  copy.startedAt = Math.round(copy.startedAt);
  copy.updatedAt = Math.round(copy.updatedAt);
  return copy;
};

/**
 * The run store in memory. Open it with {@linkcode memoryBackend}'s `open`.
 *
 * @example
 * ```ts
 * import { memoryBackend } from "./memory.ts";
 * import { thisHost } from "./_host.ts";
 * import assert from "node:assert/strict";
 *
 * const store = memoryBackend.open({ url: "memory://doc", hostTimeoutSeconds: 30, fileMaxKb: 4 });
 * const at = Date.now();
 * const started = await store.startAttempt({
 *   runId: "r", attempt: 1, dialect: "chat", caps: {}, turnsUsed: 0, elapsedSeconds: 0,
 *   tier: 0, inFlight: [], recent: [], notes: [], host: thisHost(), status: "live",
 *   startedAt: at, updatedAt: at,
 * });
 * assert.equal(started.attempt, 1);
 * assert.equal((await store.latest("r"))?.state, "live");
 * await store.close();
 * ```
 */
export class MemoryRunStore implements RunStore {
  readonly engine = "memory";
  readonly location: string;
  readonly #data: Data;
  readonly #timeout: number;
  readonly #fileMaxKb: number;
  #fenced: FencedRecord[] = [];
  #closed = false;
  /** Admissions of a tree, one after another. */
  #admitting: Promise<unknown> = Promise.resolve();

  /** @internal Use {@linkcode memoryBackend}. */
  constructor(options: BackendOptions) {
    this.location = options.url;
    this.#timeout = options.hostTimeoutSeconds;
    this.#fileMaxKb = options.fileMaxKb;
    let data = shared.get(options.url);
    if (!data) {
      data = {
        runs: new Map(),
        heartbeats: new Map(),
        fences: new Map(),
        trees: new Map(),
        effects: new Map(),
        journal: new Map(),
        bodies: new Map(),
        graph: new Map(),
        graphValues: new Map(),
        sessions: new Map(),
      };
      shared.set(options.url, data);
    }
    this.#data = data;
  }

  /** {@linkcode RunStore.leases}: no server, so the process's lease is always held. */
  readonly leases: LeasesPort = {
    takeFenced: () => {
      const out = this.#fenced;
      this.#fenced = [];
      return out;
    },
    held: true,
    renew: () => this.#run(() => undefined),
  };

  /** {@linkcode RunStore.effects}. */
  readonly effects: EffectsPort = {
    write: (batch) => this.#run(() => this.#writeEffects(batch)),
    read: (runId) =>
      this.#run(() =>
        [...(this.#data.effects.get(runId)?.values() ?? [])]
          .sort((a, b) => a.at - b.at || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
          .map((e) => structuredClone(e))
      ),
  };

  /** {@linkcode RunStore.journal}. */
  readonly journal: JournalPort = {
    write: (batch) =>
      this.#run(() => {
        for (const e of batch.entries) {
          const entries = this.#data.journal.get(e.runId) ?? new Map<string, JournalEntry>();
          this.#data.journal.set(e.runId, entries);
          const k = `${e.attempt}\u0000${e.kind}\u0000${e.index}`;
          if (entries.has(k)) continue; // an entry already there is kept as it is
          const hash = bodyKey(e.body);
          if (!this.#data.bodies.has(hash)) this.#data.bodies.set(hash, packBody(e.body));
          const kept = { ...structuredClone(e), body: hash, at: Math.round(e.at) };
          if (e.ms !== undefined) kept.ms = Math.round(e.ms);
          entries.set(k, kept);
        }
      }),
    read: (runId) =>
      this.#run(() =>
        [...(this.#data.journal.get(runId)?.values() ?? [])]
          .map((e) => ({ ...structuredClone(e), body: unpackBody(this.#data.bodies.get(e.body)!) }))
          .sort(journalOrder)
      ),
  };

  /** Bodies no entry names any more. */
  #dropOrphans(): void {
    const named = new Set<string>();
    for (const entries of this.#data.journal.values()) {
      for (const e of entries.values()) named.add(e.body);
    }
    for (const hash of [...this.#data.bodies.keys()]) {
      if (!named.has(hash)) this.#data.bodies.delete(hash);
    }
  }

  /** {@linkcode RunStore.trees}. */
  readonly trees: TreesPort = {
    list: (query) => this.#run(() => this.#treeRuns(query)),
    read: (root) => this.#run(() => this.#treeRows(root)),
    join: (runId, root, parent) =>
      this.#run(() => void this.#data.trees.set(runId, { root, parent })),
    admit: (root, decide) => {
      // One admission at a time, its look and its write together, as a tree's lock holds them.
      const admitted = this.#admitting.then(async () => {
        const record = await decide(await this.#run(() => this.#treeRows(root)));
        if (record) await this.#run(() => this.#write(record));
      });
      // its caller hears the failure; the next admission goes on after it
      this.#admitting = admitted.catch(() => undefined);
      return admitted;
    },
  };

  /** {@linkcode RunStore.checkpoints}. */
  readonly checkpoints: CheckpointsPort = {
    put: (put) =>
      this.#run(() => {
        const kept = structuredClone(put);
        for (const v of kept.values) {
          const key = graphKey(put.thread, put.ns, v.channel, v.version);
          if (!this.#data.graphValues.has(key)) this.#data.graphValues.set(key, v);
        }
        const key = graphKey(put.thread, put.ns, put.id);
        const known = this.#data.graph.get(key);
        // A checkpoint kept again: its body and metadata new, its parent and writes as they were.
        if (known?.put) {
          const { parent: _new, ...rest } = kept;
          const parent = known.put.parent;
          known.put = parent === undefined ? rest : { ...rest, parent };
        } else if (known) known.put = kept;
        else this.#data.graph.set(key, { put: kept, writes: new Map() });
      }),
    putWrites: (batch) =>
      this.#run(() => {
        const key = graphKey(batch.thread, batch.ns, batch.id);
        let known = this.#data.graph.get(key);
        if (!known) {
          // Writes before their checkpoint: kept, read once it is.
          known = { put: undefined, writes: new Map() };
          this.#data.graph.set(key, known);
        }
        for (const w of writesOnce(batch.writes)) {
          const k = `${w.index}\u0000${w.taskId}`;
          if (w.index >= 0 && known.writes.has(k)) continue;
          known.writes.set(k, structuredClone(w));
        }
      }),
    get: (query) => this.#run(() => this.#graphRows({ ...query, limit: 1 })[0]),
    list: (query) => this.#run(() => this.#graphRows(query)),
    deleteThread: (thread) =>
      this.#run(() => {
        for (const map of [this.#data.graph, this.#data.graphValues]) {
          for (const key of [...map.keys()]) {
            if ((JSON.parse(key) as string[])[0] === thread) map.delete(key);
          }
        }
      }),
  };

  /** {@linkcode RunStore.sessions}. */
  readonly sessions: SessionsPort = {
    append: (key, entries) =>
      this.#run(() => {
        if (entries.length === 0) return;
        const k = graphKey(key.scope, key.sessionId, key.subpath);
        const kept = this.#data.sessions.get(k) ?? [];
        const uuids = new Set(kept.flatMap((e) => e.uuid === undefined ? [] : [e.uuid]));
        const at = Date.now();
        for (const e of entries) {
          if (e.uuid !== undefined) {
            if (uuids.has(e.uuid)) continue;
            uuids.add(e.uuid);
          }
          kept.push(
            e.uuid === undefined ? { json: e.json, at } : { json: e.json, uuid: e.uuid, at },
          );
        }
        this.#data.sessions.set(k, kept);
      }),
    load: (key, last) =>
      this.#run(() => {
        const kept = this.#data.sessions.get(graphKey(key.scope, key.sessionId, key.subpath));
        if (!kept || kept.length === 0) return null;
        const from = last === undefined
          ? 0
          : Math.max(0, kept.length - Math.max(0, Math.floor(last)));
        return kept.slice(from).map((e) => e.json);
      }),
    list: (scope) =>
      this.#run(() => {
        const mtimes = new Map<string, number>();
        for (const [k, kept] of this.#data.sessions) {
          const [s, sessionId] = JSON.parse(k) as string[];
          if (s !== scope || kept.length === 0) continue;
          const at = Math.max(...kept.map((e) => e.at));
          mtimes.set(sessionId!, Math.max(mtimes.get(sessionId!) ?? 0, at));
        }
        return [...mtimes].map(([sessionId, mtime]) => ({ sessionId, mtime }));
      }),
    delete: (key) =>
      this.#run(() => {
        for (const k of [...this.#data.sessions.keys()]) {
          const [s, sessionId, subpath] = JSON.parse(k) as string[];
          if (s !== key.scope || sessionId !== key.sessionId) continue;
          if (key.subpath === "" || subpath === key.subpath) this.#data.sessions.delete(k);
        }
      }),
    subkeys: (scope, sessionId) =>
      this.#run(() =>
        [...this.#data.sessions].flatMap(([k, kept]) => {
          const [s, id, subpath] = JSON.parse(k) as string[];
          return s === scope && id === sessionId && subpath !== "" && kept.length > 0
            ? [subpath!]
            : [];
        })
      ),
    pop: (key) =>
      this.#run(() =>
        this.#data.sessions.get(graphKey(key.scope, key.sessionId, key.subpath))?.pop()?.json
      ),
  };

  #graphRows(query: GraphCheckpointQuery): GraphCheckpointRow[] {
    const rows: GraphCheckpointRow[] = [];
    for (const { put, writes } of this.#data.graph.values()) {
      if (put === undefined) continue;
      if (query.thread !== undefined && put.thread !== query.thread) continue;
      if (query.ns !== undefined && put.ns !== query.ns) continue;
      if (query.id !== undefined && put.id !== query.id) continue;
      if (query.before !== undefined && !(put.id < query.before)) continue;
      const values = Object.entries(put.versions).flatMap(([channel, version]) => {
        const v = this.#data.graphValues.get(graphKey(put.thread, put.ns, channel, version));
        return v ? [structuredClone(v)] : [];
      }).sort((a, b) => (a.channel < b.channel ? -1 : a.channel > b.channel ? 1 : 0));
      const row: GraphCheckpointRow = {
        thread: put.thread,
        ns: put.ns,
        id: put.id,
        checkpoint: structuredClone(put.checkpoint),
        metadata: structuredClone(put.metadata),
        values,
        writes: [...writes.values()].map((w) => structuredClone(w)).sort(writeOrder),
      };
      if (put.parent !== undefined) row.parent = put.parent;
      rows.push(row);
    }
    rows.sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
    return query.limit === undefined ? rows : rows.slice(0, Math.max(0, Math.floor(query.limit)));
  }

  /** {@linkcode RunStore.files}. */
  readonly files: FilesPort = {
    write: (host, files) =>
      this.#run(() => {
        for (const f of files) {
          const row = this.#newest(f.runId);
          if (row && sameHost(row.record.host, host)) {
            row.fileContent = boundContent(f.content, this.#fileMaxKb);
          }
        }
      }),
    read: (runId, attempt) =>
      this.#run(() => this.#data.runs.get(runId)?.get(attempt)?.fileContent),
  };

  /** A body run as a store's call: rejected once the store is closed, or when it throws. */
  #run<T>(body: () => T): Promise<T> {
    if (this.#closed) return Promise.reject(new Error("the memory store is closed"));
    try {
      return Promise.resolve(body());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #newest(runId: string): Row | undefined {
    for (const row of this.#data.runs.get(runId)?.values() ?? []) if (row.newest) return row;
    return undefined;
  }

  #view(row: Row, vantage = here(this.#timeout)): RunView {
    const record = structuredClone(row.record);
    const view: RunView = { record, state: "live" };
    const beat = this.#data.heartbeats.get(hostKey(record.host));
    if (beat) view.heartbeat = { host: record.host, ...beat };
    view.state = runState(record, view.heartbeat, vantage);
    return view;
  }

  #beat(heartbeat: Heartbeat): void {
    const k = hostKey(heartbeat.host);
    const known = this.#data.heartbeats.get(k);
    this.#data.heartbeats.set(k, {
      at: Math.max(known?.at ?? -Infinity, Math.round(heartbeat.at)),
      intervalSeconds: heartbeat.intervalSeconds,
    });
  }

  /** Every other attempt of a run is no longer its newest. */
  #notNewest(runId: string, attempt?: number): void {
    for (const [a, row] of this.#data.runs.get(runId) ?? []) if (a !== attempt) row.newest = false;
  }

  /**
   * Insert or bring up to date one attempt's row: an end is never undone by a
   * live record, nor a newer live record by an older one.
   */
  #upsert(record: RunRecord): void {
    const attempts = this.#data.runs.get(record.runId) ?? new Map<number, Row>();
    this.#data.runs.set(record.runId, attempts);
    const known = attempts.get(record.attempt);
    const content = record.fileContent === undefined
      ? known?.fileContent
      : boundContent(record.fileContent, this.#fileMaxKb);
    if (!known) {
      const row: Row = { record: kept(record), newest: true };
      if (content !== undefined) row.fileContent = content;
      attempts.set(record.attempt, row);
      return;
    }
    const over = (known.record.status === "live" &&
      Math.round(record.updatedAt) >= known.record.updatedAt) || record.status !== "live";
    if (!over) return;
    known.record = kept(record);
    if (content !== undefined) known.fileContent = content;
  }

  /** One record, as the other stores write it: fenced, numbered, never undone. */
  #write(record: RunRecord): void {
    const fence = this.#data.fences.get(record.runId);
    if (fence !== undefined && fence > record.attempt) {
      if (this.#fenced.length < 1000) {
        this.#fenced.push({ runId: record.runId, attempt: record.attempt, holder: fence });
      }
      return;
    }
    const attempts = this.#data.runs.get(record.runId);
    const existing = attempts?.get(record.attempt);
    if (!existing) this.#notNewest(record.runId, record.attempt);
    else {
      const r = existing.record;
      if (r.startedAt !== Math.round(record.startedAt) || !sameHost(r.host, record.host)) {
        // Another start holds this attempt number: this record's start could not be recorded,
        // and guessed it. It is the run's next attempt (the one it was given here, when it was).
        let mine: number | undefined;
        for (const [a, row] of attempts!) {
          if (
            row.record.startedAt === Math.round(record.startedAt) &&
            sameHost(row.record.host, record.host) && (mine === undefined || a > mine)
          ) mine = a;
        }
        const attempt = mine ?? Math.max(0, ...attempts!.keys()) + 1;
        record = { ...record, attempt };
        if (mine === undefined) this.#notNewest(record.runId, attempt);
      }
    }
    this.#upsert(record);
  }

  write(batch: WriteBatch): Promise<void> {
    return this.#run(() => {
      for (const record of batch.records) this.#write(record);
      if (batch.heartbeat) this.#beat(batch.heartbeat);
    });
  }

  startAttempt(record: RunRecord, options?: StartOptions): Promise<AttemptStart> {
    return this.#run(() => {
      const newest = this.#newest(record.runId);
      const previous = newest ? this.#view(newest) : undefined;
      const min = Math.max(1, Math.floor(options?.minAttempt ?? 1));
      const afresh = options?.fresh || !previous;
      const attempt = afresh ? min : Math.max(min, previous.record.attempt + 1);
      const held = previous?.state === "live";
      const mode = options?.onDuplicate ?? "warn";
      if (held && mode === "refuse") return { attempt, previous: previous!, refused: true };
      if (afresh) {
        this.#data.runs.delete(record.runId);
        this.#data.fences.delete(record.runId);
        if (previous) {
          this.#data.effects.delete(record.runId);
          if (this.#data.journal.delete(record.runId)) this.#dropOrphans();
        }
      } else this.#notNewest(record.runId);
      const fenced = previous?.record.status === "live" && (!held || mode === "take-over");
      if (fenced) {
        this.#data.fences.set(
          record.runId,
          Math.max(this.#data.fences.get(record.runId) ?? 0, attempt),
        );
      }
      this.#upsert({ ...record, attempt });
      if (options?.heartbeat) this.#beat(options.heartbeat);
      const out: AttemptStart = { attempt };
      if (previous) out.previous = previous;
      if (fenced) out.fenced = true;
      return out;
    });
  }

  latest(runId: string): Promise<RunView | undefined> {
    return this.#run(() => {
      const row = this.#newest(runId);
      return row ? this.#view(row) : undefined;
    });
  }

  /** Rows matching a query's filters of run, time and machine. */
  #rows(query: ListQuery): Row[] {
    const out: Row[] = [];
    const earlier = query.earlierOf && new Set(query.earlierOf);
    for (const [runId, attempts] of this.#data.runs) {
      if (earlier && !earlier.has(runId)) continue;
      if (!earlier && query.runId !== undefined && query.runId !== runId) continue;
      for (const row of attempts.values()) {
        if (earlier ? row.newest : query.runId === undefined && !row.newest) continue;
        if (query.since !== undefined && row.record.updatedAt < Math.floor(query.since)) continue;
        if (query.machine !== undefined && row.record.host.machine !== query.machine) continue;
        out.push(row);
      }
    }
    return out;
  }

  list(query: ListQuery = {}): Promise<RunView[]> {
    return this.#run(() => {
      const vantage = here(this.#timeout);
      const limit = Math.max(0, Math.floor(query.limit ?? 1000));
      const views = this.#rows(query)
        .sort((a, b) => b.record.startedAt - a.record.startedAt)
        .map((row) => this.#view(row, vantage))
        .filter((v) => query.state === undefined || v.state === query.state);
      return views.slice(0, limit);
    });
  }

  summary(query: SummaryQuery = {}): Promise<StoreSummary> {
    return this.#run(() => {
      const out: StoreSummary = {
        total: 0,
        byState: { live: 0, ended: 0, "cut-off": 0 },
        byEnd: {},
        byMachine: {},
      };
      const rows = this.#rows({ ...query, limit: Infinity });
      const vantage = here(this.#timeout);
      const used = { runs: 0, inputTokens: 0, outputTokens: 0, usd: 0, usdRuns: 0 };
      for (const row of rows) {
        const r = row.record;
        const state = this.#view(row, vantage).state;
        out.total++;
        out.byState[state]++;
        (out.byMachine[r.host.machine] ??= { live: 0, ended: 0, "cut-off": 0 })[state]++;
        if (r.status !== "live") out.byEnd[r.status] = (out.byEnd[r.status] ?? 0) + 1;
        const usage = r.usage;
        if (query.usage && usage) {
          used.runs++;
          used.inputTokens += Number(usage.inputTokens) || 0;
          used.outputTokens += Number(usage.outputTokens) || 0;
          // Dollars of runs whose every call's cost is known.
          if (usage.usd !== undefined && usage.unpriced === undefined) {
            used.usd += Number(usage.usd) || 0;
            used.usdRuns++;
          }
        }
      }
      if (used.runs > 0) out.usage = used;
      return out;
    });
  }

  prune(before: number, limit: number): Promise<number> {
    return this.#run(() => {
      const n = Math.max(0, Math.floor(limit));
      if (n === 0) return 0;
      const ended: Row[] = [];
      for (const attempts of this.#data.runs.values()) {
        for (const row of attempts.values()) {
          if (row.record.status !== "live" && row.record.updatedAt < Math.floor(before)) {
            ended.push(row);
          }
        }
      }
      ended.sort((a, b) => a.record.updatedAt - b.record.updatedAt);
      const chosen = ended.slice(0, n);
      for (const row of chosen) {
        const { runId, attempt } = row.record;
        const attempts = this.#data.runs.get(runId);
        if (!attempts) continue;
        // Every attempt of a run whose newest ended goes with it; a live run's older ones stay.
        if ([...attempts.values()].some((r) => r.record.status === "live")) continue;
        for (const a of [...attempts.keys()]) if (a <= attempt) attempts.delete(a);
        if (attempts.size === 0) {
          this.#data.runs.delete(runId);
          this.#data.effects.delete(runId);
          if (this.#data.journal.delete(runId)) this.#dropOrphans();
          this.#data.fences.delete(runId);
        }
      }
      const named = new Set<string>();
      for (const attempts of this.#data.runs.values()) {
        for (const row of attempts.values()) named.add(hostKey(row.record.host));
      }
      for (const [k, beat] of this.#data.heartbeats) {
        if (beat.at < Math.floor(before) && !named.has(k)) this.#data.heartbeats.delete(k);
      }
      return chosen.length;
    });
  }

  close(): Promise<void> {
    this.#closed = true;
    return Promise.resolve();
  }

  #writeEffects(batch: EffectBatch): void {
    for (const i of batch.intents) {
      const effects = this.#data.effects.get(i.runId) ?? new Map<string, EffectRow>();
      this.#data.effects.set(i.runId, effects);
      const known = effects.get(i.key);
      // An intent is the newest attempt's until the call has a receipt, which it never undoes.
      if (known?.receipt) continue;
      const row: EffectRow = {
        runId: i.runId,
        key: i.key,
        tool: i.tool,
        inputDigest: i.inputDigest,
        attempt: i.attempt,
        at: Math.round(i.at),
      };
      if (i.callId !== undefined) row.callId = i.callId;
      effects.set(i.key, row);
    }
    for (const r of batch.receipts) {
      const effects = this.#data.effects.get(r.runId) ?? new Map<string, EffectRow>();
      this.#data.effects.set(r.runId, effects);
      const row = effects.get(r.key) ??
        { runId: r.runId, key: r.key, tool: r.tool, inputDigest: "", attempt: r.attempt, at: r.at };
      const receipt: NonNullable<EffectRow["receipt"]> = {
        ok: r.ok,
        attempt: r.attempt,
        at: Math.round(r.at),
      };
      if (r.result !== undefined) receipt.result = r.result;
      if (r.truncated) receipt.truncated = true;
      row.receipt = receipt;
      effects.set(r.key, row);
    }
  }

  #treeRuns(query: TreeQuery = {}): RunView[] {
    const limit = Math.max(0, Math.floor(query.limit ?? 1000));
    const vantage = here(this.#timeout);
    const out: Row[] = [];
    for (const [runId, place] of this.#data.trees) {
      if (query.root !== undefined && place.root !== query.root) continue;
      const row = this.#newest(runId);
      if (row) out.push(row);
    }
    return out.sort((a, b) => b.record.startedAt - a.record.startedAt).slice(0, limit)
      .map((row) => this.#view(row, vantage));
  }

  /** The tree's rows, decoded from each run's record by the other stores' own decoder. */
  #treeRows(root: string): TreeRow[] {
    const out: TreeRow[] = [];
    const now = Date.now();
    for (const [runId, place] of this.#data.trees) {
      if (place.root !== root) continue;
      const row = this.#newest(runId);
      if (!row) continue;
      out.push(treeRowOf({
        run_id: runId,
        record: JSON.stringify(row.record),
        parent: place.parent ?? null,
        status: row.record.status,
      }, now));
    }
    return out;
  }
}

/**
 * The in-memory backend: a `memory://<name>` URL names a store of this
 * thread (stores of one name share their runs).
 *
 * @example
 * ```ts
 * import { memoryBackend } from "./memory.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(memoryBackend.accepts("memory://tests"), true);
 * assert.equal(memoryBackend.accepts("postgres://db/fleet"), false);
 * ```
 */
export const memoryBackend: Backend = {
  engine: "memory",
  module: import.meta.url,
  accepts: (url) => /^memory:\/\//.test(url),
  locate: (url) => url,
  open: (options) => new MemoryRunStore(options),
};

/** The backend as the store's bridge imports it, by this module's URL. */
export const backend: Backend = memoryBackend;
