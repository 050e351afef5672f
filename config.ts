/**
 * Reading the settings, for the main thread and the watchdog worker alike:
 * the environment, the home directory, `<home>/config.yaml` (bounded reads,
 * bounded YAML), the layering of its two sections and the host's overrides,
 * and live reload; and the core context each thread of a keeper builds from
 * them ({@linkcode coreContext}), the main thread and the watchdog's alike. No
 * SQLite here: that is cap discovery's (`discover.ts`).
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import {
  defaultSettings,
  resolveSettings,
  type Settings,
  type SettingsLayer,
  type SettingSource,
} from "./settings.ts";
import { parseYaml } from "./_yaml.ts";
import {
  createLog,
  errorText,
  failOpen,
  type HostLogger,
  isMapping,
  type Log,
  nonEmptyText as text,
} from "./log.ts";
import { RunTable, type RunTableBuffers } from "./_run_table.ts";
import { CheckpointWriter, type WriterSinks } from "./_writer.ts";

/** Environment variables, as `process.env` holds them. */
export type Env = Record<string, string | undefined>;

/** Where to find settings. */
export interface SettingsOptions {
  /** The profile directory. @default {env.HERMES_HOME, else ~/.hermes} */
  home?: string;
  /** Environment for `HERMES_HOME`, `$VAR` expansion and cap discovery. @default {process.env} */
  env?: Env;
  /** Settings that win over the file, with the snake_case keys of `config.yaml`. */
  overrides?: Record<string, unknown>;
}

/** The largest `config.yaml` read, in bytes; a larger one gives the defaults and a warning. */
export const CONFIG_SIZE_LIMIT = 1024 * 1024;

/** The environment variable that names the run ledger's store; it wins over the file. */
export const STORE_ENV = "AGENT_CHECKPOINT_STORE";
/** The environment variable that names the machine runs are recorded under. */
const MACHINE_ENV = "AGENT_CHECKPOINT_MACHINE";

/** The most YAML aliases (`*name`) one `config.yaml` may hold. */
export const CONFIG_ALIAS_LIMIT = 1000;

/**
 * The environment to use: the one given, else a copy of the process's (an
 * empty one when it cannot be read, e.g. Deno without `--allow-env`).
 *
 * @example
 * ```ts
 * import { envOf } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(envOf({ A: "1" }), { A: "1" });
 * assert.equal(typeof envOf(undefined), "object");
 * ```
 */
export function envOf(env: Env | undefined): Env {
  // Deno's process.env cannot be cloned into the watchdog worker: a plain copy of it can.
  if (env === process.env) return { ...process.env };
  if (env !== undefined && env !== null && typeof env === "object") return env;
  try {
    return { ...process.env };
  } catch {
    // the environment cannot be read (a denied permission): no variables, the defaults
    return {};
  }
}

const userHome = (env: Env): string => {
  const home = text(env.HOME);
  if (home) return home;
  try {
    return os.homedir();
  } catch {
    // no home directory for this user: the root, whose use then says why
    return "/";
  }
};

/** `path.resolve`, which needs the working directory for a relative path, without throwing. */
function absolute(...parts: string[]): string {
  try {
    return path.resolve(...parts);
  } catch {
    // The working directory is gone (deleted, or not readable): the path stays
    // relative to it, and whatever uses it fails with a log line.
    return path.join(...parts);
  }
}

/**
 * The home directory: the option, else `HERMES_HOME`, else `~/.hermes`; made
 * absolute. Never throws: a relative home in a working directory that was
 * deleted stays relative; a home that is not a non-empty string counts as
 * not given.
 *
 * @example
 * ```ts
 * import { resolveHome } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(resolveHome("/srv/agent", {}), "/srv/agent");
 * assert.equal(resolveHome(undefined, { HERMES_HOME: "/h" }), "/h");
 * assert.equal(resolveHome(undefined, { HOME: "/home/me" }), "/home/me/.hermes");
 * ```
 */
export function resolveHome(home: string | undefined, env: Env): string {
  const chosen = text(home) ?? text(env.HERMES_HOME) ?? path.join(userHome(env), ".hermes");
  return absolute(chosen);
}

/**
 * The Hermes root, which holds what all profiles share (the kanban board):
 * `~/.hermes` when the profile home is `~/.hermes` or lies under it;
 * `<root>` when the home is `<root>/profiles/<name>`; else the home itself.
 *
 * @param home The profile home, absolute (see {@linkcode resolveHome}).
 * @param env The environment, for `HOME`.
 *
 * @example
 * ```ts
 * import { hermesRoot } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const env = { HOME: "/home/me" };
 * assert.equal(hermesRoot("/home/me/.hermes/profiles/coder", env), "/home/me/.hermes");
 * assert.equal(hermesRoot("/srv/hermes/profiles/coder", env), "/srv/hermes");
 * assert.equal(hermesRoot("/srv/agent", env), "/srv/agent");
 * ```
 */
export function hermesRoot(home: string, env: Env): string {
  const dot = absolute(userHome(env), ".hermes");
  const rel = path.relative(dot, home);
  if (rel === "" || (!rel.startsWith("..") && !path.isAbsolute(rel))) return dot;
  const parent = path.dirname(home);
  if (path.basename(parent) === "profiles" && path.basename(home) !== "") {
    return path.dirname(parent);
  }
  return home;
}

/** The parsed `config.yaml` and what went wrong reading it. */
export interface ConfigFile {
  /** The document, when the file holds a mapping. */
  doc: Record<string, unknown> | undefined;
  /** One line per problem; the settings fall back to their defaults. */
  warnings: string[];
}

/**
 * Follow keys through nested mappings; only a mapping's own keys count, so
 * `valueOf` or `__proto__` never reach into `Object.prototype`.
 *
 * @example
 * ```ts
 * import { dig } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(dig({ agent: { max_turns: 60 } }, "agent", "max_turns"), 60);
 * assert.equal(dig({ agent: {} }, "agent", "valueOf"), undefined);
 * ```
 */
export function dig(doc: unknown, ...keys: string[]): unknown {
  let at = doc;
  for (const key of keys) {
    if (!isMapping(at) || !Object.hasOwn(at, key)) return undefined;
    at = at[key];
  }
  return at;
}

/** A file read under a bound: its text, or why it was not read. */
export type BoundedRead =
  | { ok: true; text: string }
  | { ok: false; missing: boolean; problem: string };

/**
 * Read a regular file of at most `limit` bytes as UTF-8, without ever
 * blocking on it or reading past the bound: it is opened non-blocking (a FIFO
 * with no writer does not hang), and anything but a regular file (a FIFO, a
 * device such as `/dev/zero`, a directory) is refused, as is a file over the
 * bound. Never throws.
 *
 * @example
 * ```ts
 * import { readBounded } from "./config.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "f.txt");
 * writeFileSync(file, "hello");
 * assert.deepEqual(readBounded(file, 10), { ok: true, text: "hello" });
 * assert.equal(readBounded(file, 4).ok, false);
 * assert.equal(readBounded("/dev/zero", 10).ok, false);
 * ```
 */
export function readBounded(file: string, limit: number): BoundedRead {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | (fs.constants.O_NONBLOCK ?? 0));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException)?.code;
    return {
      ok: false,
      missing: code === "ENOENT",
      problem: `cannot read ${file} (${errorText(error)})`,
    };
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) {
      return { ok: false, missing: false, problem: `cannot read ${file} (not a regular file)` };
    }
    if (stat.size > limit) {
      return {
        ok: false,
        missing: false,
        problem: `cannot read ${file} (${stat.size} bytes, over the bound of ${limit})`,
      };
    }
    // Read one byte past the bound, to notice a file that grew since fstat.
    const buffer = Buffer.alloc(Math.min(stat.size, limit) + 1);
    let length = 0;
    while (length < buffer.length) {
      const n = fs.readSync(fd, buffer, length, buffer.length - length, null);
      if (n <= 0) break;
      length += n;
    }
    if (length > limit) {
      return {
        ok: false,
        missing: false,
        problem: `cannot read ${file} (it grew over the bound of ${limit} bytes)`,
      };
    }
    return { ok: true, text: buffer.toString("utf8", 0, length) };
  } catch (error) {
    return { ok: false, missing: false, problem: `cannot read ${file} (${errorText(error)})` };
  } finally {
    try {
      fs.closeSync(fd);
    } catch { /* closed already */ }
  }
}

/**
 * Read and parse `<home>/config.yaml`; a missing file is no warning. The file
 * is read under {@linkcode CONFIG_SIZE_LIMIT} and may hold at most
 * {@linkcode CONFIG_ALIAS_LIMIT} YAML aliases. Never throws.
 *
 * @example
 * ```ts
 * import { readConfig } from "./config.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * assert.deepEqual(readConfig(home), { doc: undefined, warnings: [] });
 * writeFileSync(join(home, "config.yaml"), "agent: { max_turns: 60 }\n");
 * assert.deepEqual(readConfig(home).doc, { agent: { max_turns: 60 } });
 * ```
 */
export function readConfig(home: string): ConfigFile {
  const file = path.join(String(home), "config.yaml");
  const read = readBounded(file, CONFIG_SIZE_LIMIT);
  if (!read.ok) {
    return read.missing
      ? { doc: undefined, warnings: [] }
      : { doc: undefined, warnings: [`${read.problem}; using default settings`] };
  }
  let doc: unknown;
  try {
    doc = parseYaml(read.text, { maxAliases: CONFIG_ALIAS_LIMIT });
  } catch (error) {
    const reason = errorText(error).split("\n")[0];
    return {
      doc: undefined,
      warnings: [`${file} is not valid YAML (${reason}); using default settings`],
    };
  }
  if (doc === undefined || doc === null) return { doc: undefined, warnings: [] };
  if (!isMapping(doc)) {
    return {
      doc: undefined,
      warnings: [`${file} does not hold a mapping; using default settings`],
    };
  }
  return { doc, warnings: [] };
}

/**
 * Expand `$VAR`, `${VAR}` and a leading `~`; a relative path is taken from
 * `home`. A variable that is not set is left as written, with a warning.
 *
 * @example
 * ```ts
 * import { expandDir } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const warnings: string[] = [];
 * assert.equal(expandDir("$BASE/cp", { BASE: "/srv" }, "/h", warnings), "/srv/cp");
 * assert.equal(expandDir("cp", {}, "/h", warnings), "/h/cp");
 * assert.deepEqual(warnings, []);
 * ```
 */
export function expandDir(
  dir: string,
  env: Env,
  home: string,
  warnings: string[],
): string {
  let out = dir.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, a?: string, b?: string) => {
    const name = (a ?? b) as string;
    const value = Object.hasOwn(env, name) ? env[name] : undefined;
    if (typeof value !== "string") {
      warnings.push(`checkpoint_dir names $${name}, which is not set; leaving it as written`);
      return whole;
    }
    return value;
  });
  if (out === "~" || out.startsWith("~/")) out = path.join(userHome(env), out.slice(1));
  return absolute(home, out);
}

/** Settings with where each came from. */
export interface LoadedSettings {
  /** Every setting, defaults filled in. */
  settings: Settings;
  /** What fell back to a default, and why, one line each. */
  warnings: string[];
  /** Where each setting came from (`caps.turns` and `caps.time_seconds` separately). */
  sources: Record<string, SettingSource>;
}

/**
 * Resolve settings from an already-read config file: its `agent_checkpoint`
 * section, then `plugins.entries.agent-checkpoint.config` (Hermes's older place), then
 * `plugins.entries.agent-checkpoint.settings`, then `overrides`.
 *
 * @example
 * ```ts
 * import { settingsFrom } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const config = { doc: { agent_checkpoint: { mode: "notify" } }, warnings: [] };
 * const { settings, sources } = settingsFrom(config, "/h", {}, undefined);
 * assert.equal(settings.mode, "notify");
 * assert.equal(sources.mode, "config.yaml agent_checkpoint");
 * assert.equal(settings.checkpoint_dir, "/h/agent-checkpoints");
 * ```
 */
export function settingsFrom(
  config: ConfigFile,
  home: string,
  env: Env,
  overrides: Record<string, unknown> | undefined,
): LoadedSettings {
  const layers: SettingsLayer[] = [
    { source: "config.yaml agent_checkpoint", values: dig(config.doc, "agent_checkpoint") },
    // Hermes's older place for a plugin's settings: `.settings` wins over it key by key.
    {
      source: "config.yaml plugins.entries.agent-checkpoint.config",
      values: dig(config.doc, "plugins", "entries", "agent-checkpoint", "config"),
    },
    {
      source: "config.yaml plugins.entries.agent-checkpoint.settings",
      values: dig(config.doc, "plugins", "entries", "agent-checkpoint", "settings"),
    },
    { source: "override", values: overrides },
  ];
  // The fleet store's URL from the environment wins over the file (not over the host's code).
  const store = env[STORE_ENV];
  if (typeof store === "string" && store.trim() !== "") {
    layers.splice(layers.length - 1, 0, {
      source: "env AGENT_CHECKPOINT_STORE",
      values: { store },
    });
  }
  // So does the machine's name: a container or a fleet tried on one box names itself.
  const machine = env[MACHINE_ENV];
  if (typeof machine === "string" && machine.trim() !== "") {
    layers.splice(layers.length - 1, 0, {
      source: "env AGENT_CHECKPOINT_MACHINE",
      values: { machine: machine.trim() },
    });
  }
  const resolved = resolveSettings(defaultSettings(path.join(home, "agent-checkpoints")), layers);
  const warnings = [...config.warnings, ...resolved.warnings];
  if (resolved.sources.checkpoint_dir !== "default") {
    resolved.settings.checkpoint_dir = expandDir(
      resolved.settings.checkpoint_dir,
      env,
      home,
      warnings,
    );
  }
  return { settings: resolved.settings, warnings, sources: resolved.sources };
}

/**
 * Load the settings: the `agent_checkpoint` section of `<home>/config.yaml`,
 * then `plugins.entries.agent-checkpoint.settings` (which wins key by key),
 * then `overrides`. Never throws: every problem becomes a warning and that
 * key's default.
 *
 * @param options Home directory, environment and overrides.
 * @returns The settings, every default filled in, and the warnings.
 *
 * @example A bad value falls back to its default, with a warning
 * ```ts
 * import { loadSettings } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const { settings, warnings } = loadSettings({
 *   home: "/nonexistent",
 *   env: {},
 *   overrides: { tier_fractions: [0.7], watchdog_poll_seconds: true },
 * });
 * assert.deepEqual(settings.tier_fractions, [0.7]);
 * assert.equal(settings.watchdog_poll_seconds, 10);
 * assert.match(warnings[0]!, /watchdog_poll_seconds = true .* using 10/);
 * ```
 */
export function loadSettings(options: SettingsOptions = {}): LoadedSettings {
  const opts: SettingsOptions = isMapping(options) ? options : {};
  const env = envOf(opts.env);
  const home = resolveHome(opts.home, env);
  return settingsFrom(readConfig(home), home, env, opts.overrides);
}

/** Rejected-file problems remembered, so that each is told once. */
const MAX_WARNED = 64;

/**
 * The settings in force as one look at a {@linkcode SettingsSource} gives
 * them: a reader holds one and asks again only once its `until` has passed.
 */
export interface SettingsReading {
  /** The settings. */
  readonly settings: Settings;
  /** Their version: increases whenever the settings change. */
  readonly version: number;
  /**
   * Until when, ms since the epoch, these are the settings in force without
   * a look at the file. It moves on at each look that finds nothing new, and
   * drops to 0 when a reload replaces them, whoever's look saw the change: a
   * reader holding them then asks again at once.
   */
  readonly until: number;
}

/** A reading as its source keeps it: only the source moves its `until`. */
type HeldReading = { -readonly [K in keyof SettingsReading]: SettingsReading[K] };

/**
 * Settings that follow `config.yaml` as it changes: the file is looked at
 * (one stat) at most once per poll interval, and parsed only when it changed.
 * Only a valid file changes them: one that turns empty, unreadable or not
 * valid YAML (caught mid-rewrite, say) keeps the settings in force, with one
 * warning per such content. At start, such a file gives the defaults.
 * Used by the main thread and the watchdog worker alike.
 *
 * @example
 * ```ts
 * import { SettingsSource } from "./config.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * const source = new SettingsSource(home, {}, { watchdog_poll_seconds: 1 });
 * assert.equal(source.at(0).mode, "snapshot");
 * writeFileSync(join(home, "config.yaml"), "agent_checkpoint: { mode: notify }\n");
 * assert.equal(source.at(500).mode, "snapshot"); // not looked at before the poll interval
 * assert.equal(source.at(1000).mode, "notify");
 * assert.equal(source.version, 1);
 * writeFileSync(join(home, "config.yaml"), ""); // caught mid-rewrite
 * assert.equal(source.at(2000).mode, "notify");
 *
 * // A reader that holds a reading asks again only when its `until` has passed.
 * const held = source.read(2000);
 * assert.equal(held.until, 3000);
 * writeFileSync(join(home, "config.yaml"), "agent_checkpoint: { mode: log-only }\n");
 * assert.equal(source.at(3000).mode, "log-only"); // another reader saw the change first
 * assert.equal(held.until, 0); // so the holder asks again at once
 * assert.equal(source.read(3000).version, 2);
 * ```
 */
export class SettingsSource {
  /** The settings in force, with their sources and warnings. */
  current: LoadedSettings;
  /** The config file as last read. */
  config: ConfigFile;
  /** The settings in force, their version, and until when they hold without a look. */
  #reading: HeldReading;
  #stamp: string;
  /** The problems of rejected files already told, so each is told once. */
  readonly #warned = new Set<string>();
  readonly #file: string;
  readonly #onChange: (loaded: LoadedSettings) => void;

  /**
   * Read the settings now, and tell `onChange` (now and on every change).
   *
   * @param home The home directory, absolute.
   * @param env The environment.
   * @param overrides The host's settings, which win over the file.
   * @param onChange Told of the settings and their warnings on every (re)load,
   * and of the settings kept, with one warning, when a changed file is rejected.
   */
  constructor(
    readonly home: string,
    readonly env: Env,
    readonly overrides: Record<string, unknown> | undefined,
    onChange: (loaded: LoadedSettings) => void = () => {},
  ) {
    this.#file = path.join(home, "config.yaml");
    this.#onChange = onChange;
    this.#stamp = this.#statStamp();
    this.config = readConfig(home);
    this.current = settingsFrom(this.config, home, env, overrides);
    // Looked at again on the first read: the poll interval counts from there.
    this.#reading = { settings: this.current.settings, version: 0, until: 0 };
    onChange(this.current);
  }

  /** Increases whenever the settings change. */
  get version(): number {
    return this.#reading.version;
  }

  /** A changed file that cannot be used: say so once per problem, keep what is in force. */
  #rejected(problem: string): void {
    if (this.#warned.has(problem)) return;
    if (this.#warned.size >= MAX_WARNED) this.#warned.clear();
    this.#warned.add(problem);
    const warning = `${problem.replace(/; using default settings/g, "")}; ` +
      "keeping the settings in force until the file is valid again";
    this.#onChange({ ...this.current, warnings: [warning] });
  }

  #statStamp(): string {
    try {
      const s = fs.statSync(this.#file);
      return `${s.ino}:${s.size}:${s.mtimeMs}`;
    } catch (error) {
      // a stamp naming the error: the file's change (back) is still noticed
      return `missing:${(error as NodeJS.ErrnoException)?.code}`;
    }
  }

  /**
   * The settings in force as of `nowMs`, with their version and until when
   * they hold: the file is looked at when the poll interval has passed.
   */
  read(nowMs: number): SettingsReading {
    if (nowMs >= this.#reading.until) this.#look(nowMs);
    return this.#reading;
  }

  /** The settings as of `nowMs`: those of {@linkcode SettingsSource.read}. */
  at(nowMs: number): Settings {
    return this.read(nowMs).settings;
  }

  /**
   * Look at the file now. A changed file that is empty, not valid YAML, not
   * a mapping or unreadable (another process rewriting it in place, say)
   * changes nothing: the settings in force stay, and `onChange` is told them
   * with one warning, once per such content. A missing file is the defaults.
   */
  #look(nowMs: number): void {
    const stamp = this.#statStamp();
    if (stamp !== this.#stamp) {
      this.#stamp = stamp;
      const config = readConfig(this.home);
      const empty = config.doc === undefined && config.warnings.length === 0 &&
        !stamp.startsWith("missing:");
      if (empty || config.warnings.length > 0) {
        this.#rejected(empty ? `${this.#file} is empty` : config.warnings.join("; "));
      } else {
        this.config = config;
        this.current = settingsFrom(config, this.home, this.env, this.overrides);
        const replaced = this.#reading;
        this.#reading = {
          settings: this.current.settings,
          version: replaced.version + 1,
          until: 0,
        };
        replaced.until = 0;
        this.#onChange(this.current);
      }
    }
    // After a reload, so that a new poll interval counts from now.
    this.#reading.until = nowMs + this.current.settings.watchdog_poll_seconds * 1000;
  }
}

/** What a thread of a keeper builds its core context from. @internal */
export interface CoreParts {
  /** The home directory, absolute. */
  home: string;
  env: Env;
  /** The host's settings, which win over the file. */
  overrides: Record<string, unknown> | undefined;
  /** The run table's memory, made by the main thread (the watchdog's); else a new table. */
  buffers?: RunTableBuffers;
  /** The most live runs of a new table. */
  maxRuns?: number;
  /** Where log lines go, made by the thread (the watchdog's go to the main thread). */
  log?: Log;
  /** Else the host's logger, else the bounded file under the home. */
  logger?: HostLogger;
  /** Called once the log is made, before the settings are read (the main thread moves in). */
  beforeSettings?: (log: Log) => void;
  /** Told of the settings and their warnings on every (re)load. */
  onLoad?: (loaded: LoadedSettings, log: Log) => void;
  /** Where the writer's comments and written files go, on this thread. */
  sinks(log: Log): Omit<WriterSinks, "log">;
}

/** What the runs of a keeper work with on one thread. @internal */
export interface CoreContext {
  home: string;
  env: Env;
  log: Log;
  /** The run table, shared by the keeper's two threads. */
  shared: RunTable;
  source: SettingsSource;
  writer: CheckpointWriter;
  /** Where the writer's log lines, comments and written files go. */
  sinks: WriterSinks;
}

/**
 * The core context of one thread of a keeper: its log, its run table (new, or
 * over the main thread's memory), its settings and its checkpoint writer.
 * The main thread and the watchdog build theirs here, so the two never drift.
 * Never throws: no address space for a new table's reservation gets a smaller one.
 * @internal
 *
 * @example
 * ```ts
 * import { coreContext } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const main = coreContext({
 *   home: "/nonexistent",
 *   env: {},
 *   overrides: { stall_window_seconds: 60 },
 *   log: (_level, message) => lines.push(message),
 *   sinks: () => ({ comment: () => {}, written: () => {} }),
 * });
 * // The watchdog's thread: the same table, the same settings.
 * const worker = coreContext({
 *   home: "/nonexistent",
 *   env: {},
 *   overrides: { stall_window_seconds: 60 },
 *   buffers: main.shared.buffers,
 *   log: (_level, message) => lines.push(message),
 *   sinks: () => ({ comment: () => {}, written: () => {} }),
 * });
 * assert.equal(worker.source.at(0).stall_window_seconds, 60);
 * assert.equal(worker.shared.maxSlots, main.shared.maxSlots);
 * ```
 */
export function coreContext(parts: CoreParts): CoreContext {
  const { home, env } = parts;
  const log = parts.log ?? createLog(home, parts.logger);
  parts.beforeSettings?.(log);
  const shared = parts.buffers
    ? new RunTable(parts.buffers)
    : failOpen(() => new RunTable(undefined, parts.maxRuns), () => new RunTable(undefined, 512));
  const onLoad = parts.onLoad;
  const source = new SettingsSource(
    home,
    env,
    parts.overrides,
    onLoad ? (loaded) => onLoad(loaded, log) : undefined,
  );
  const sinks: WriterSinks = { log, ...parts.sinks(log) };
  const writer = new CheckpointWriter(shared, sinks);
  return { home, env, log, shared, source, writer, sinks };
}
