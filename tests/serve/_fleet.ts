/**
 * A home with live, ended and cut-off runs, made with the real library: runs
 * of this process (live until ended), runs that ended, and runs of a child
 * process killed with SIGKILL (cut off inside a tool call), one of them with
 * script payloads in its id and its agent text.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createAgentCheckpoint, type Run } from "../../mod.ts";
import { loadSettings } from "../../config.ts";
import type { Settings } from "../../settings.ts";
import { openStore, type RunStore } from "../../store/mod.ts";
import { scriptCommand, tempHome, waitFor } from "../_helpers.ts";

/** A script payload: it sets `window.__pwned` if it ever runs. */
export const PAYLOAD = `<script>window.__pwned="script"</script>` +
  `<img src=x onerror="window.__pwned='img'">`;
/** The run id carrying the payload. */
export const EVIL_ID = `evil ${PAYLOAD}`;
/** The agent text of the cut-off run with the payload. */
export const EVIL_TEXT = `\nStep 2 of 4 done. ${PAYLOAD} INCOMPLETE\n`;
/** The agent text of the plain cut-off run. */
export const AGENT_TEXT = "\nMigrated 3 of 7 tables; next: orders. INCOMPLETE\n";

/** The fleet: the home, its settings, the library handle and its live run. */
export interface Fleet {
  home: string;
  settings: Settings;
  live: Run;
  ac: ReturnType<typeof createAgentCheckpoint>;
  /** A store of the home, opened for reading. */
  store: RunStore;
  close(): Promise<void>;
}

const holder = () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  return fileURLToPath(new URL(`./_holder${ext}`, import.meta.url));
};

/** A run of the holder: its session, caps and calls, the tool it holds in flight, its text. */
interface HeldRun {
  sessionId: string;
  turns: number;
  calls: number;
  inFlight: string;
  append?: string;
}

/**
 * Runs of a child process held inside a tool call, then SIGKILLed where they stand once the
 * ledger has each call in flight: they are cut off there.
 */
export async function cutOffInside(home: string, store: RunStore, runs: HeldRun[]): Promise<void> {
  const before = new Map<string, number>();
  for (const r of runs) {
    before.set(r.sessionId, (await store.latest(r.sessionId))?.record.attempt ?? 0);
  }
  const [cmd, args] = scriptCommand(holder(), [home, JSON.stringify({ runs })]);
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d) => out += d);
  if (!await waitFor(() => out.includes("ready"), 60_000)) {
    child.kill("SIGKILL");
    throw new Error("the run holder did not start");
  }
  // Wait until the ledger has this attempt's call in flight, then kill the child where it stands.
  const inFlight = async () => {
    for (const r of runs) {
      const view = await store.latest(r.sessionId);
      if (view?.record.attempt !== before.get(r.sessionId)! + 1) return false;
      if (view.record.inFlight.length !== 1) return false;
    }
    return true;
  };
  const end = Date.now() + 30_000;
  while (!await inFlight()) {
    if (Date.now() > end) {
      // What this store and a store opened now read: a stale read apart from a missing write.
      const fresh = openStore({
        home,
        settings: loadSettings({ home, env: {} }).settings,
        mode: "read",
      });
      const seen = [];
      for (const r of runs) {
        const of = (v: Awaited<ReturnType<RunStore["latest"]>>) =>
          v &&
          `attempt ${v.record.attempt}, ${v.record.status}, ${v.record.inFlight.length} in flight (${
            JSON.stringify({
              recent: v.record.recent.map((c) => `${c.tool}:${c.status}`),
              turns: v.record.turnsUsed,
              startedAt: v.record.startedAt,
              updatedAt: v.record.updatedAt,
              fileState: v.record.fileState,
            })
          })`;
        seen.push(
          `${r.sessionId.slice(0, 12)}: ${of(await store.latest(r.sessionId))} | fresh: ${
            of(await fresh?.latest(r.sessionId))
          } (attempt before: ${before.get(r.sessionId)})`,
        );
      }
      await fresh?.close();
      child.kill("SIGKILL");
      throw new Error(`the held runs' tool calls never reached the ledger: ${seen.join("; ")}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGKILL");
  await exited;
}

/** A tool name longer than a row's label has room for. */
export const LONG_TOOL = "write_file_to_the_workspace_with_a_long_name";

/**
 * A home with one run cut off three times (each attempt killed inside a tool call) whose fourth
 * attempt ended aborted, and one live run inside a tool with a long name.
 */
export async function makeRetried(): Promise<Omit<Fleet, "live" | "ac"> & { live: Run }> {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { progress_interval_seconds: 0.1 } });
  // The live run first: it makes the ledger, which the store below reads.
  const live = ac.startRun({ sessionId: "busy", caps: { turns: 30 } });
  live.preLlmCall();
  live.preToolCall(LONG_TOOL, { callId: "call-long" });
  const { settings } = loadSettings({ home, env: {} });
  const store = openStore({ home, settings, mode: "read" });
  if (!store) throw new Error("the ledger cannot be opened");
  for (let i = 0; i < 3; i++) {
    await cutOffInside(home, store, [
      { sessionId: "retried", turns: 20, calls: 2 + i, inFlight: "deploy" },
    ]);
  }
  const fourth = ac.startRun({ sessionId: "retried", caps: { turns: 20 } });
  fourth.preLlmCall();
  await fourth.end({ status: "aborted", summary: "stopped by hand" });
  // An end the busy ledger could not take at once (the watchdog's commit every 0.1 s) goes to the
  // watchdog's next commit: the views below read the ledger once it is there.
  const deadline = Date.now() + 30_000;
  while ((await store.latest("retried"))?.record.end?.status !== "aborted") {
    if (Date.now() > deadline) throw new Error("the fourth attempt's end never reached the ledger");
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return {
    home,
    settings,
    store,
    live,
    close: async () => {
      await ac.close();
      await store.close();
    },
  };
}

/** Make the fleet. */
export async function makeFleet(): Promise<Fleet> {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { progress_interval_seconds: 0.1 } });
  const done = ac.startRun({ sessionId: "ended-done", caps: { turns: 10 } });
  for (let i = 0; i < 4; i++) done.preLlmCall();
  await done.end({ status: "done" });
  const capped = ac.startRun({ sessionId: "ended-capped", caps: { turns: 20, timeSeconds: 600 } });
  for (let i = 0; i < 19; i++) capped.preLlmCall();
  await capped.end({ status: "capped", summary: "ran out of turns" });

  // A child holds two runs inside a tool call; SIGKILL cuts them off there.
  const { settings } = loadSettings({ home, env: {} });
  const store = openStore({ home, settings, mode: "read" });
  if (!store) throw new Error("the ledger cannot be opened");
  await cutOffInside(home, store, [
    { sessionId: "cut-1", turns: 20, calls: 3, inFlight: "deploy", append: AGENT_TEXT },
    { sessionId: EVIL_ID, turns: 8, calls: 2, inFlight: "shell", append: EVIL_TEXT },
  ]);

  const live = ac.startRun({ sessionId: "live-1", caps: { turns: 30, timeSeconds: 3600 } });
  for (let i = 0; i < 5; i++) live.preLlmCall();
  return {
    home,
    settings,
    live,
    ac,
    store,
    close: async () => {
      await ac.close();
      await store.close();
    },
  };
}
