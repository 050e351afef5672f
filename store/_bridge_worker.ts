/**
 * The store's thread (see `_bridge.ts`), for any backend that implements the
 * store's port: it opens the backend's store, answers a run's start (attempt
 * number, previous record) through a port the main thread reads
 * synchronously, and writes the main thread's records (ends, records at
 * exit) and checkpoint files' content in order, batched, kept in memory
 * (bounded) while the store is away.
 *
 * @module
 */
import type { MessagePort } from "node:worker_threads";
import { errorText } from "../log.ts";
// The same bounds as the embedded store's worker: the records that wait in memory, the
// longest wait between two tries.
import { MAX_BACKLOG } from "../_ledger.ts";
import { formatDuration } from "../template.ts";
import { readForStore } from "./_content.ts";
import { BACKENDS } from "./_backends.ts";
import type {
  Backend,
  GraphCheckpointRow,
  Heartbeat,
  HostId,
  RunRecord,
  RunStore,
  WriteBatch,
} from "./types.ts";
import {
  type BridgeData,
  type EffectsDone,
  type FromBridge,
  type FromWatchdog,
  START_WAIT_MS,
  STATE_DOWN,
  STATE_UP,
  type ToBridge,
} from "./_bridge_protocol.ts";

/** How often a store that is away is tried again, ms: at most this long after it answers again. */
const PROBE_MS = 1000;

/**
 * The store thread's work, over the data the main thread's side started it with: a backend
 * not among those a setting can name is imported first, and the messages that came meanwhile
 * are taken in order. Its
 * entry module (`_bridge_entry.ts`) calls it in the thread started for it; nothing on import.
 * @internal
 */
export function bridge(parent: MessagePort, data: BridgeData): void {
  // A backend a store setting can name is in this thread's static graph (Deno, importing the
  // library by URL, fetched it with the library): taken at once. Any other is imported by URL.
  const known = BACKENDS.find((b) => b.module === data.backend);
  if (known) {
    const take = serve(parent, data, known);
    parent.on("message", take);
    return;
  }
  const early: ToBridge[] = [];
  let take: ((message: ToBridge) => void) | undefined;
  parent.on("message", (message: ToBridge) => take ? take(message) : early.push(message));
  import(data.backend).then((module: { backend: Backend }) => {
    take = serve(parent, data, module.backend);
    for (const message of early.splice(0)) take(message);
  }).catch((error) => {
    // Starts then wait their bound and go on from their local files; said once, here.
    Atomics.store(new Int32Array(data.flag), 1, STATE_DOWN);
    parent.postMessage(
      {
        type: "log",
        level: "error",
        message: `the fleet store's thread could not load its backend (${errorText(error)})`,
      } satisfies FromBridge,
    );
  });
}

/** The store's thread's work over its backend's store: what takes each message. */
function serve(
  parent: MessagePort,
  data: BridgeData,
  backend: Backend,
): (message: ToBridge) => void {
  /** The lease connection ended: it is taken again at once, not at the next batch. */
  let relock = false;
  // This thread's connection holds the process's lease (a backend with leases): the server lets
  // it go when the process dies or the connection ends, and every other machine then knows its
  // runs are cut off.
  const store: RunStore = backend.open(data.options, {
    host: data.host,
    lost: () => {
      relock = true;
      soon();
    },
  });
  /** Reach the store (and take the lease again): a backend without leases reads one record. */
  const ping = (): Promise<unknown> => store.leases?.renew() ?? store.latest("");
  const flag = new Int32Array(data.flag);
  const reply = data.reply;
  const log = (level: "info" | "warn" | "error", message: string) =>
    parent.postMessage({ type: "log", level, message } satisfies FromBridge);

  /** Records waiting to be written, in order, the newest of each run and attempt. */
  let records = new Map<string, RunRecord>();
  /** A prune asked for, run after the next write that lands. */
  let prune: { before: number; limit: number } | undefined;
  /** Starts whose waiter gave up, by id: said in the log when they land or fail. */
  const late = new Set<number>();
  /** The newest heartbeat not yet written. */
  let beat: Heartbeat | undefined;
  /** File contents waiting, by run id. */
  let files = new Map<string, { host: HostId; content: string }>();
  let dropped = 0;
  let down = false;
  let failures = 0;
  let retryTimer: ReturnType<typeof setTimeout> | undefined;
  let flushing: Promise<void> | undefined;
  let closing = false;
  /** The effect batches' writes, one after another. */
  let effects: Promise<void> = Promise.resolve();

  const answer = (message: FromBridge) => {
    reply.postMessage(message);
    Atomics.add(flag, 0, 1);
    Atomics.notify(flag, 0);
  };

  const up = () => {
    Atomics.store(flag, 2, store.roundTrips ?? 0);
    Atomics.store(flag, 1, STATE_UP);
    if (down) {
      down = false;
      log(
        "info",
        `the fleet store at ${store.location} is reachable again${
          dropped > 0
            ? `; ${dropped} record update(s) were dropped meanwhile (at most ${MAX_BACKLOG} wait in memory)`
            : ""
        }`,
      );
      dropped = 0;
    }
    failures = 0;
  };

  const fail = (error: unknown, waiting: number) => {
    Atomics.store(flag, 1, STATE_DOWN);
    failures++;
    // A bounded probe, not a wait that grows to 30 s: the live runs' leases and
    // heartbeats are back within PROBE_MS of the server answering, so they never read as cut
    // off for long after an outage. A try against a server that is away fails fast (refused).
    const wait = Math.min(PROBE_MS, 500 * 2 ** Math.min(10, failures - 1));
    if (!down) {
      down = true;
      log(
        "warn",
        `the fleet store at ${store.location} cannot be reached (${
          errorText(error)
        }); runs start from their local files, and ${waiting} record(s) wait in memory (at most ${MAX_BACKLOG}); tried again every ${
          formatDuration(PROBE_MS / 1000)
        }`,
      );
    }
    if (retryTimer === undefined && !closing) {
      retryTimer = setTimeout(() => {
        retryTimer = undefined;
        void flush();
      }, wait);
    }
  };

  /** The runs whose attempt lost them, said once each (bounded). */
  const lost = new Set<string>();
  const sayLost = () => {
    for (const f of store.leases?.takeFenced() ?? []) {
      const k = `${f.attempt}\u0000${f.runId}`;
      if (lost.has(k)) continue;
      if (lost.size > 10_000) lost.clear();
      lost.add(k);
      log(
        "warn",
        `run id ${f.runId}: attempt ${f.attempt} lost the run to attempt ${f.holder}, which took it over; the store refuses this attempt's records from now on`,
      );
    }
  };

  const keep = (record: RunRecord) => {
    const k = `${record.attempt}\u0000${record.runId}`;
    // An end is never undone: the watchdog's live record may come after the main thread's end.
    const known = records.get(k);
    if (known && known.status !== "live" && record.status === "live") return;
    // Nor is a newer live record put back by an older one: the watchdog's interval record may
    // arrive after the main thread's own (a tree's use and reservation, pushed at a model call).
    if (known && known.status === "live" && record.status === "live") {
      if (record.updatedAt < known.updatedAt) return;
    }
    records.delete(k);
    records.set(k, record);
    while (records.size > MAX_BACKLOG) {
      records.delete(records.keys().next().value as string);
      dropped++;
    }
  };

  /** Write what waits: the records in one statement, then the files in one. */
  function flush(): Promise<void> {
    if (flushing) return flushing.then(() => (records.size + files.size > 0 ? flush() : undefined));
    if (records.size === 0 && files.size === 0 && !beat && !down && !prune && !relock) {
      return Promise.resolve();
    }
    flushing = (async () => {
      const batch = records;
      const contents = files;
      const heartbeat = beat;
      records = new Map();
      files = new Map();
      beat = undefined;
      try {
        const write: WriteBatch = { records: [...batch.values()] };
        if (heartbeat) write.heartbeat = heartbeat;
        const again = relock;
        relock = false;
        if (batch.size > 0 || heartbeat) await store.write(write);
        // Away, the lease to take again, or a prune that must not be the store's first word.
        else if (down || again || prune) await ping();
        sayLost();
        if (contents.size > 0 && store.files) {
          const byHost = new Map<
            string,
            { host: HostId; files: { runId: string; content: string }[] }
          >();
          for (const [runId, f] of contents) {
            const k = `${f.host.machine}\u0000${f.host.pid}\u0000${f.host.start}`;
            const entry = byHost.get(k) ?? { host: f.host, files: [] };
            entry.files.push({ runId, content: f.content });
            byHost.set(k, entry);
          }
          for (const entry of byHost.values()) await store.files.write(entry.host, entry.files);
        }
        up();
        if (prune) {
          const { before, limit } = prune;
          prune = undefined;
          await store.prune(before, limit).catch(async (error) => {
            // A server gone since the write above is an outage, said once as such; the prune
            // waits for the next write that lands. Only a prune the server refused is its own.
            if (await ping().then(() => true, () => false)) {
              log("warn", `pruning the fleet store failed: ${errorText(error)}`);
            } else {
              prune ??= { before, limit };
              fail(error, records.size);
            }
          });
        }
      } catch (error) {
        // Back in, in order, behind nothing: newer ones taken meanwhile come after.
        const newer = records;
        records = new Map();
        for (const r of batch.values()) keep(r);
        for (const r of newer.values()) keep(r);
        for (const [k, f] of files) contents.set(k, f);
        files = contents;
        beat ??= heartbeat;
        if (store.leases && !store.leases.held) relock = true;
        fail(error, records.size);
      }
    })().finally(() => {
      flushing = undefined;
    });
    return flushing;
  }

  /**
   * Write what waits, trying again a little apart, until it is written or
   * `deadline` passes. With `once`, one try only when the database was
   * already away (the process exits). `close()` tries on to its deadline: a
   * database that was away, or whose connection was just cut, may be back
   * within it, and the runs' ends must reach it then.
   */
  async function settle(deadline: number, once: boolean): Promise<void> {
    const away = once && down;
    for (;;) {
      await flush();
      // Also a flush begun meanwhile (a write's own, scheduled): its batch is not written yet, and
      // the store closed under it would lose it.
      if ((records.size + files.size === 0 && !beat && flushing === undefined) || away) return;
      const left = deadline - Date.now();
      if (left <= 0) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(100, left)));
    }
  }

  /**
   * Trees: joins, reads and admissions one after another, in the order the
   * main thread posted them (a run's join before its first look).
   */
  let treeOps: Promise<void> = Promise.resolve();
  const inOrder = (op: () => Promise<void>) => {
    treeOps = treeOps.then(op).catch((error) =>
      log("error", `the fleet store's thread failed: ${errorText(error)}`)
    );
  };
  /** Joins not yet in the database (it was away): tried again before each look. */
  const joins = new Map<string, { root: string; parent: string | undefined }>();
  let joinsFailing = false;
  const join = async () => {
    for (const [runId, place] of [...joins]) {
      try {
        await trees().join(runId, place.root, place.parent);
        joins.delete(runId);
        joinsFailing = false;
      } catch (error) {
        if (!joinsFailing) {
          log(
            "warn",
            `the fleet store at ${store.location} could not record runs in their tree (${
              errorText(error)
            }); tried again at their next look`,
          );
        }
        joinsFailing = true;
        return;
      }
    }
  };
  /** What the main thread decided of an admission: its waiter, or the decision come first. */
  const decisions = new Map<number, (record: RunRecord | undefined) => void>();
  const decided = new Map<number, RunRecord | undefined>();
  const decision = (id: number) =>
    new Promise<RunRecord | undefined>((resolve) => {
      if (decided.has(id)) {
        resolve(decided.get(id));
        decided.delete(id);
        return;
      }
      // The main thread waits at most as long for the rows; it decides at once after.
      const timer = setTimeout(() => {
        decisions.delete(id);
        resolve(undefined);
      }, START_WAIT_MS);
      decisions.set(id, (record) => {
        clearTimeout(timer);
        decisions.delete(id);
        resolve(record);
      });
    });

  let scheduled = false;
  const soon = () => {
    if (scheduled || down) return;
    scheduled = true;
    setTimeout(() => {
      scheduled = false;
      void flush();
    }, 0);
  };

  /** The store's trees, or the failure a backend without them gives each look. */
  const trees = () => {
    if (!store.trees) throw new Error(`the ${backend.engine} store keeps no trees of runs`);
    return store.trees;
  };
  /** The store's effects, or the failure a backend without them gives. */
  const effectsOf = () => {
    if (!store.effects) throw new Error(`the ${backend.engine} store keeps no side effects`);
    return store.effects;
  };

  return async (message: ToBridge) => {
    try {
      switch (message.type) {
        case "start": {
          try {
            // What this thread was told before the start goes first: an end of the same id.
            if (records.size > 0 && !down) await flush();
            const t = Date.now();
            const started = await store.startAttempt(message.record, message.options).catch(
              (error) => {
                // A start that must know the holder is tried once more on a new connection: the
                // first try may have met the one a server restart ended, as the database is back.
                if ((message.options?.onDuplicate ?? "warn") === "warn") throw error;
                return store.startAttempt(message.record, message.options);
              },
            );
            up();
            answer({ type: "started", id: message.id, started });
            if (late.delete(message.id)) {
              log(
                "warn",
                `the fleet store at ${store.location} took ${
                  Date.now() - t
                } ms to answer a run's start (more than ${START_WAIT_MS} ms); that run started from its local file, and its record is attempt ${started.attempt} in the store`,
              );
            }
          } catch (error) {
            late.delete(message.id);
            answer({ type: "started", id: message.id, error: errorText(error) });
            fail(error, records.size);
          }
          break;
        }
        case "latest": {
          try {
            const view = await store.latest(message.runId);
            up();
            answer(
              view ? { type: "latest", id: message.id, view } : { type: "latest", id: message.id },
            );
          } catch (error) {
            answer({ type: "latest", id: message.id, error: errorText(error) });
            fail(error, records.size);
          }
          break;
        }
        case "effects": {
          // Written at once, in order with each other: an intent waits for nothing else.
          effects = effects.then(async () => {
            try {
              await effectsOf().write(message.batch);
              up();
              parent.postMessage({ type: "effected", id: message.id } satisfies EffectsDone);
            } catch (error) {
              parent.postMessage(
                { type: "effected", id: message.id, error: errorText(error) } satisfies EffectsDone,
              );
              fail(error, records.size);
            }
          });
          break;
        }
        case "journal": {
          // In order with the effects: one queue of commits the main thread waits for.
          effects = effects.then(async () => {
            try {
              if (!store.journal) throw new Error(`the ${backend.engine} store keeps no journal`);
              await store.journal.write(message.batch);
              up();
              parent.postMessage({ type: "effected", id: message.id } satisfies EffectsDone);
            } catch (error) {
              parent.postMessage(
                { type: "effected", id: message.id, error: errorText(error) } satisfies EffectsDone,
              );
              fail(error, records.size);
            }
          });
          break;
        }
        case "journalOf": {
          // After the writes posted before it: a read sees what this process journaled.
          effects = effects.then(async () => {
            try {
              if (!store.journal) throw new Error(`the ${backend.engine} store keeps no journal`);
              const entries = await store.journal.read(message.runId);
              up();
              parent.postMessage(
                { type: "effected", id: message.id, entries } satisfies EffectsDone,
              );
            } catch (error) {
              parent.postMessage(
                { type: "effected", id: message.id, error: errorText(error) } satisfies EffectsDone,
              );
              fail(error, records.size);
            }
          });
          break;
        }
        case "graph": {
          // In order with the effects and the journal: a read sees what this process kept.
          effects = effects.then(async () => {
            try {
              const port = store.checkpoints;
              if (!port) throw new Error(`the ${backend.engine} store keeps no checkpoints`);
              const call = message.call;
              let rows: GraphCheckpointRow[] | undefined;
              if (call.op === "put") await port.put(call.put);
              else if (call.op === "putWrites") await port.putWrites(call.writes);
              else if (call.op === "deleteThread") await port.deleteThread(call.thread);
              else rows = await port.list(call.query);
              up();
              parent.postMessage(
                {
                  type: "effected",
                  id: message.id,
                  ...(rows ? { rows } : {}),
                } satisfies EffectsDone,
              );
            } catch (error) {
              parent.postMessage(
                { type: "effected", id: message.id, error: errorText(error) } satisfies EffectsDone,
              );
              fail(error, records.size);
            }
          });
          break;
        }
        case "sessions": {
          // In order with the effects, the journal and the checkpoints: a read sees what this
          // process kept.
          effects = effects.then(async () => {
            try {
              const port = store.sessions;
              if (!port) {
                throw new Error(`the ${backend.engine} store keeps no session transcripts`);
              }
              const call = message.call;
              let answer: unknown;
              if (call.op === "append") await port.append(call.key, call.entries);
              else if (call.op === "load") answer = await port.load(call.key, call.last);
              else if (call.op === "list") answer = await port.list(call.scope);
              else if (call.op === "delete") await port.delete(call.key);
              else if (call.op === "subkeys") {
                answer = await port.subkeys(call.scope, call.sessionId);
              } else answer = await port.pop(call.key);
              up();
              parent.postMessage(
                {
                  type: "effected",
                  id: message.id,
                  ...(answer === undefined || answer === null ? {} : { answer }),
                } satisfies EffectsDone,
              );
            } catch (error) {
              parent.postMessage(
                { type: "effected", id: message.id, error: errorText(error) } satisfies EffectsDone,
              );
              fail(error, records.size);
            }
          });
          break;
        }
        case "effectsOf": {
          try {
            const rows = await effectsOf().read(message.runId);
            up();
            answer({ type: "effectsOf", id: message.id, rows });
          } catch (error) {
            answer({ type: "effectsOf", id: message.id, error: errorText(error) });
            fail(error, records.size);
          }
          break;
        }
        case "late":
          late.add(message.id);
          break;
        case "join":
          joins.set(message.runId, { root: message.root, parent: message.parent });
          inOrder(join);
          break;
        case "tree": {
          const { id, root } = message;
          inOrder(async () => {
            try {
              await join();
              const rows = await trees().read(root);
              up();
              answer({ type: "tree", id, rows });
            } catch (error) {
              answer({ type: "tree", id, error: errorText(error) });
              fail(error, records.size);
            }
          });
          break;
        }
        case "admit": {
          const { id, root } = message;
          inOrder(async () => {
            let asked = false;
            try {
              await join();
              await trees().admit(root, (rows) => {
                asked = true;
                answer({ type: "tree", id, rows });
                return decision(id);
              });
              up();
            } catch (error) {
              if (!asked) answer({ type: "tree", id, error: errorText(error) });
              else decisions.get(id)?.(undefined);
              // 55P03: the tree's lock was held past its bound (busy, not away); the call goes on.
              if ((error as { code?: string }).code !== "55P03") fail(error, records.size);
            }
          });
          break;
        }
        case "decided": {
          const waiter = decisions.get(message.id);
          if (waiter) waiter(message.record);
          else {
            decided.set(message.id, message.record);
            // One whose admission failed before it asked, or gave up waiting: never taken.
            if (decided.size > 100) decided.delete(decided.keys().next().value as number);
          }
          break;
        }
        case "write":
          for (const r of message.records) keep(r);
          soon();
          break;
        case "port":
          message.port.on("message", (m: FromWatchdog) => {
            if (m.type === "batch") {
              for (const r of m.batch.records) keep(r);
              if (m.batch.heartbeat && (!beat || beat.at <= m.batch.heartbeat.at)) {
                beat = m.batch.heartbeat;
              }
              soon();
            } else if (m.type === "prune") {
              // After the next write that lands: an away database says so once, through it.
              prune = { before: m.before, limit: m.limit };
              soon();
            }
          });
          (message.port as { unref?: () => void }).unref?.();
          break;
        case "file": {
          if (!store.files) break; // a backend that keeps no files
          const content = readForStore(message.file, data.options.fileMaxKb);
          if (content !== undefined) {
            files.set(message.runId, { host: message.host, content });
            soon();
          }
          break;
        }
        case "drain": {
          await settle(Date.now() + message.ms, true);
          answer({ type: "drained", id: message.id, waiting: records.size + files.size });
          break;
        }
        case "close": {
          closing = true;
          await settle(Date.now() + message.ms, false);
          if (records.size > 0) {
            log(
              "warn",
              `the fleet store at ${store.location} did not take ${records.size} record(s) before close`,
            );
          }
          if (retryTimer !== undefined) clearTimeout(retryTimer);
          await effects;
          // closing at the end: what did not land was said just above
          await store.close().catch(() => {});
          reply.close();
          parent.postMessage({ type: "closed" } satisfies FromBridge);
          break;
        }
      }
    } catch (error) {
      log("error", `the fleet store's thread failed: ${errorText(error)}`);
    }
  };
}
