/**
 * `agent-checkpoint serve`: the web view of every run in the ledger (or the
 * fleet store), until interrupted.
 *
 * @module
 */
import * as fs from "node:fs";
import process from "node:process";
import { loadSettings } from "../config.ts";
import { errorText } from "../log.ts";
import { DEFAULT_PORT, isLoopback, serveRuns } from "../serve/mod.ts";
import { isPostgresUrl, openPgStore, openStore, storeFile } from "../store/mod.ts";
import type { RunStore } from "../store/types.ts";
import { type CliIo, type Command, NAME } from "./_io.ts";
import { homeDir } from "./_home.ts";
import { explainDamage } from "./_ledger.ts";
import { parseArgs, UsageError } from "./_args.ts";

const SERVE_HELP = `Usage: ${NAME} serve [--port N] [--host ADDR] [--allow-host NAMES] [--home DIR]
                      [--store URL]

Serves a read-only web view of every run in the run ledger: runs on a shared
time line colored by status (live, done, capped, failed, aborted, deadline,
cut off), tiers reached and checkpoint writes marked, each cap's use against
its tier fractions, filters by status, host and time, and each run's record,
attempts and checkpoint file. The page refreshes itself every 2 seconds. The
same data is JSON at /api/runs (status, host, since, limit) and
/api/runs/RUN. It stops on Ctrl-C.

  --port N      the port (default ${DEFAULT_PORT}; 0 picks a free one)
  --host ADDR   the address to listen on (default 127.0.0.1, this machine
                only); any other address lets anyone who reaches it read
                every run, and prints a warning
  --allow-host NAMES
                more host names (comma-separated) the page may be opened
                by, e.g. a DNS name of this machine; beside them only the
                bound address, this machine's own names and addresses and
                localhost are answered (a page elsewhere cannot rebind a
                name of its own to this server)
  --home DIR    the profile directory (default $HERMES_HOME, else ~/.hermes)
  --store URL   a postgres:// fleet store instead of the home's ledger
                (default: the store setting, else the home's ledger)`;

/** The command, with the wait for its end given: a signal, or a test's promise. */
export async function runServe(
  args: string[],
  io: CliIo,
  stopped: () => Promise<unknown>,
): Promise<number> {
  const parsed = parseArgs(args, {
    command: "serve",
    values: ["--port", "--host", "--store", "--allow-host"],
  });
  const portText = parsed.values["--port"] ?? String(DEFAULT_PORT);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) {
    throw new UsageError(`--port takes a port number from 0 to 65535, not "${portText}"`);
  }
  const url = parsed.values["--store"];
  if (url !== undefined && !/^postgres(?:ql)?:\/\//.test(url)) {
    throw new UsageError(`--store takes a postgres:// or postgresql:// URL, not "${url}"`);
  }
  const host = parsed.values["--host"] ?? "127.0.0.1";
  const allowHosts = (parsed.values["--allow-host"] ?? "").split(",").map((h) => h.trim())
    .filter((h) => h !== "");
  for (const h of allowHosts) {
    if (
      !/^(?:\[[0-9a-fA-F:.]+\]|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*|[A-Za-z0-9._-]+)(?::\d+)?$/.test(h)
    ) {
      throw new UsageError(`--allow-host takes host names separated by commas, not "${h}"`);
    }
  }
  const home = homeDir(parsed, io);
  const loaded = loadSettings({ home, env: io.env });
  const settings = url === undefined ? loaded.settings : { ...loaded.settings, store: url };
  const open = async (): Promise<RunStore> => {
    let reason = "";
    if (
      url === undefined && typeof (settings as Record<string, unknown>).store !== "string" &&
      !fs.existsSync(storeFile(home))
    ) {
      throw new Error(
        `no run ledger in ${home} yet (${storeFile(home)}): the first run there makes it`,
      );
    }
    const fleet = url ?? settings.store;
    if (isPostgresUrl(fleet)) {
      const pg = openPgStore({
        url: fleet,
        hostTimeoutSeconds: settings.host_timeout_seconds,
        fileMaxKb: settings.store_file_max_kb,
      });
      try {
        // One read now, so an unreachable server is said at the start, not on the page.
        await pg.summary({});
      } catch (error) {
        // The read's own failure is what is said; a close that fails too adds nothing to it.
        await pg.close().catch(() => {});
        throw new Error(`the fleet store ${pg.location} cannot be read: ${errorText(error)}`);
      }
      return pg;
    }
    const store = await openStore({
      home,
      settings,
      mode: "read",
      log: (_level, message) => void (reason = message),
    });
    if (!store) throw new Error(reason || "the run store cannot be opened");
    // A damaged file: every answer says which, and how to set it aside.
    return store.engine === "sqlite" ? explainDamage(store, store.location) : store;
  };
  let opened: RunStore | undefined;
  try {
    opened = await open();
  } catch (error) {
    if (url !== undefined) {
      io.stderr(`${NAME} serve: ${errorText(error)}\n`);
      return 1;
    }
    io.stderr(`${NAME} serve: ${errorText(error)}; the page shows its runs once it is there\n`);
  }
  if (!isLoopback(host)) {
    io.stderr(
      `${NAME} serve: warning: listening on ${host}, beyond this machine: anyone who can reach it reads every run, its notes and its checkpoint file, without a password\n`,
    );
  }
  const first = opened;
  let server;
  try {
    server = await serveRuns({
      store: first ? () => Promise.resolve(first) : open,
      settings: loaded.settings,
      host,
      allowHosts,
      port,
      log: (message) => io.stderr(`${NAME} ${message}\n`),
    });
  } catch (error) {
    await first?.close();
    const code = (error as { code?: unknown }).code;
    io.stderr(
      `${NAME} serve: cannot listen on ${host} port ${port}: ${
        code === "EADDRINUSE"
          ? "the port is in use (pick another with --port; 0 picks a free one)"
          : errorText(error)
      }\n`,
    );
    return 1;
  }
  io.stdout(
    `Serving ${
      first?.location ?? storeFile(home)
    } (read-only) at ${server.url}\nCtrl-C stops it.\n`,
  );
  await stopped();
  await server.close();
  io.stdout("Stopped.\n");
  return 0;
}

/** Resolves on the first SIGINT or SIGTERM. */
function interrupted(): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      process.off("SIGINT", done);
      process.off("SIGTERM", done);
      resolve();
    };
    process.on("SIGINT", done);
    process.on("SIGTERM", done);
  });
}

/**
 * `agent-checkpoint serve`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { serveCommand } from "./_serve.ts";
 * import { memoryIo } from "./_io.ts";
 * import { UsageError } from "./_args.ts";
 *
 * assert.equal(serveCommand.name, "serve");
 * await assert.rejects(serveCommand.run(["--port", "http"], memoryIo().io), UsageError);
 * ```
 */
export const serveCommand: Command = {
  name: "serve",
  summary: "a read-only web view of every run: live, ended, cut off, and their caps",
  help: SERVE_HELP,
  run: (args, io) => runServe(args, io, interrupted),
};
