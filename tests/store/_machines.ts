/**
 * Machines of a fleet as processes (`tests/fixtures/lease_machine.ts`), for
 * the lease tests and their benchmark: each answers its commands in order,
 * one JSON line each.
 */
import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";
import { fixture, scriptCommand } from "../_helpers.ts";

/** What a machine answers a start with. */
export interface StartAnswer {
  runId: string;
  attempt: number;
  refused: boolean;
  holder?: string;
  previous?: string;
  at: number;
  /** The first prologue: the resume text of a resumed run. */
  resume?: string;
  tries?: number;
}

/** One machine: a process with its own name, settings and home. */
export interface Machine {
  child: ChildProcess;
  /** Start `runId` and hold it live. */
  hold(runId: string): Promise<StartAnswer>;
  /** Start `runId` until a start is not refused. */
  retry(runId: string): Promise<StartAnswer>;
  /** End the held run `runId` done. */
  end(runId: string): Promise<void>;
  /** Every log line so far. */
  logs(): Promise<string[]>;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  /** Close stdin: the machine closes its keeper and exits. */
  close(): Promise<void>;
}

/**
 * Start a machine: `name` for `AGENT_CHECKPOINT_MACHINE` (undefined: the host
 * name), `store` for `AGENT_CHECKPOINT_STORE` (empty: the home's ledger).
 */
export function machine(
  home: string,
  options: { name?: string; store?: string; settings?: Record<string, unknown> },
): Machine {
  const [cmd, argv] = scriptCommand(fixture("lease_machine"), [
    home,
    JSON.stringify(options.settings ?? {}),
  ]);
  const env: Record<string, string | undefined> = {
    ...process.env,
    AGENT_CHECKPOINT_STORE: options.store ?? "",
  };
  if (options.name !== undefined) env.AGENT_CHECKPOINT_MACHINE = options.name;
  else delete env.AGENT_CHECKPOINT_MACHINE;
  const child = spawn(cmd, argv, { env, stdio: ["pipe", "pipe", "inherit"] });
  const waiting: ((value: unknown) => void)[] = [];
  let buffer = "";
  child.stdout!.on("data", (chunk) => {
    buffer += chunk;
    for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      waiting.shift()?.(JSON.parse(line));
    }
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const ask = <T>(command: Record<string, unknown>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${command.op}`)), 120_000);
      waiting.push((value) => {
        clearTimeout(timer);
        resolve(value as T);
      });
      child.stdin!.write(JSON.stringify(command) + "\n");
    });
  return {
    child,
    hold: (runId) => ask({ op: "hold", runId }),
    retry: (runId) => ask({ op: "retry", runId }),
    end: async (runId) => void await ask({ op: "end", runId }),
    logs: async () => (await ask<{ logs: string[] }>({ op: "logs" })).logs,
    kill: async () => {
      child.kill("SIGKILL");
      await exited;
    },
    close: async () => {
      child.stdin!.end();
      await exited;
    },
  };
}
