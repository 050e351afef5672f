/**
 * The settings of S3: defaults, their JSON Schema, and validation that never
 * throws. Pure: no file, clock or environment of its own.
 *
 * @module
 */

/** What the prologue and mid-run surfaces do when a tier is due (S6). */
export type Mode = "snapshot" | "notify" | "log-only";

/** A budget axis. */
export type Axis = "time" | "turns";

/** The S3 settings, every default filled in. */
export interface Settings {
  /** Master switch; false makes every hook a no-op. @default {true} */
  enabled: boolean;
  /** What a due tier does (S6). @default {"snapshot"} */
  mode: Mode;
  /** Tier 1 fraction, then an optional tier-2 fraction for both axes. @default {[0.5]} */
  tier_fractions: number[];
  /** Tier 2 on the time axis. @default {0.8} */
  tier2_time_fraction: number;
  /** Tier 2 on the turn axis. @default {0.9} */
  tier2_turn_fraction: number;
  /** A turn cap below this is ignored. @default {0} */
  min_budget_floor_turns: number;
  /** A time cap below this many seconds is ignored. @default {0} */
  min_budget_floor_seconds: number;
  /** Axes that count; empty makes every run capless. @default {["time", "turns"]} */
  enabled_axes: Axis[];
  /** Where checkpoint files go, `$VAR`, `${VAR}` and `~` expanded. @default {"<home>/agent-checkpoints"} */
  checkpoint_dir: string;
  /** Fire tier 1 even on tiny caps. @default {false} */
  allow_tiny_tier1: boolean;
  /** Caps the plugin supplies for runs whose own cap is not discoverable. */
  caps: { time_seconds?: number; turns?: number };
  /** Text put before the model call at tier 1 (S7). */
  tier1_template: string;
  /** Text put before the model call at tier 2 (S7). */
  tier2_template: string;
  /** False: no file writes from tool boundaries or the watchdog. @default {true} */
  mid_run_persist: boolean;
  /** Run the watchdog worker. @default {true} */
  watchdog: boolean;
  /** Watchdog poll interval in seconds, floored at 0.05. @default {10} */
  watchdog_poll_seconds: number;
  /** Capless runs: a checkpoint every this many seconds; 0 disables. @default {1800} */
  uncapped_interval_seconds: number;
  /** A checkpoint after this many silent seconds; 0 disables. @default {600} */
  stall_window_seconds: number;
}

/** Where one setting's value came from. */
export type SettingSource =
  | "default"
  | "config.yaml agent_checkpoint"
  | "config.yaml plugins.entries.agent-checkpoint.settings"
  | "override";

/** The built-in tier-1 template (S7). */
export const DEFAULT_TIER1_TEMPLATE =
  "Budget checkpoint: {budget}. Before you continue, write everything you have found so far into {checkpoint_file}, including what remains to be done, then carry on at normal pace.";

/** The built-in tier-2 template (S7). */
export const DEFAULT_TIER2_TEMPLATE =
  "Final budget checkpoint: {budget}. Stop expanding the work now. Bring {checkpoint_file} and your deliverable to a final state; if the task is unfinished, mark the checkpoint INCOMPLETE and write the exact next step. Post your summary, then verify that {checkpoint_file} exists.";

/** The floor under `watchdog_poll_seconds`. */
export const MIN_POLL_SECONDS = 0.05;

/** Defaults without `checkpoint_dir`, which depends on the home directory. */
export function defaultSettings(checkpointDir: string): Settings {
  return {
    enabled: true,
    mode: "snapshot",
    tier_fractions: [0.5],
    tier2_time_fraction: 0.8,
    tier2_turn_fraction: 0.9,
    min_budget_floor_turns: 0,
    min_budget_floor_seconds: 0,
    enabled_axes: ["time", "turns"],
    checkpoint_dir: checkpointDir,
    allow_tiny_tier1: false,
    caps: {},
    tier1_template: DEFAULT_TIER1_TEMPLATE,
    tier2_template: DEFAULT_TIER2_TEMPLATE,
    mid_run_persist: true,
    watchdog: true,
    watchdog_poll_seconds: 10,
    uncapped_interval_seconds: 1800,
    stall_window_seconds: 600,
  };
}

const fraction = {
  type: "number",
  exclusiveMinimum: 0,
  maximum: 1,
} as const;

/**
 * The JSON Schema (draft 2020-12) of the S3 settings section, for editors and
 * hosts that validate `config.yaml`.
 *
 * @example Every property has a default, except the ones with none
 * ```ts
 * import { settingsSchema } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(settingsSchema.properties.mode.default, "snapshot");
 * assert.deepEqual(settingsSchema.properties.tier_fractions.default, [0.5]);
 * ```
 */
export const settingsSchema = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  title: "agent-checkpoint settings",
  type: "object",
  additionalProperties: false,
  properties: {
    enabled: { type: "boolean", default: true },
    mode: {
      enum: ["snapshot", "notify", "log-only"],
      default: "snapshot",
    },
    tier_fractions: {
      type: "array",
      items: fraction,
      minItems: 1,
      maxItems: 2,
      default: [0.5],
    },
    tier2_time_fraction: { ...fraction, default: 0.8 },
    tier2_turn_fraction: { ...fraction, default: 0.9 },
    min_budget_floor_turns: { type: "integer", minimum: 0, default: 0 },
    min_budget_floor_seconds: { type: "number", minimum: 0, default: 0 },
    enabled_axes: {
      type: "array",
      items: { enum: ["time", "turns"] },
      uniqueItems: true,
      default: ["time", "turns"],
    },
    checkpoint_dir: {
      type: "string",
      minLength: 1,
      description: "Defaults to <home>/agent-checkpoints",
    },
    allow_tiny_tier1: { type: "boolean", default: false },
    caps: {
      type: "object",
      additionalProperties: false,
      properties: {
        time_seconds: { type: ["number", "string", "null"], exclusiveMinimum: 0 },
        turns: { type: ["integer", "string", "null"], exclusiveMinimum: 0 },
      },
      default: {},
    },
    tier1_template: { type: "string", minLength: 1, default: DEFAULT_TIER1_TEMPLATE },
    tier2_template: { type: "string", minLength: 1, default: DEFAULT_TIER2_TEMPLATE },
    mid_run_persist: { type: "boolean", default: true },
    watchdog: { type: "boolean", default: true },
    watchdog_poll_seconds: { type: "number", default: 10 },
    uncapped_interval_seconds: { type: "number", minimum: 0, default: 1800 },
    stall_window_seconds: { type: "number", minimum: 0, default: 600 },
  },
} as const;

/** A finite number > 0, or a numeric string for one; never a boolean (S4). */
export function budgetValue(value: unknown): number | undefined {
  let n: number;
  if (typeof value === "number") n = value;
  else if (typeof value === "string" && value.trim() !== "") n = Number(value);
  else return undefined;
  return Number.isFinite(n) && n > 0 ? n : undefined;
}

const isNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isFraction = (v: unknown) => isNumber(v) && v > 0 && v <= 1;

type Check = (value: unknown) => { ok: true; value: unknown } | { ok: false; rule: string };
const accept = (value: unknown) => ({ ok: true as const, value });
const reject = (rule: string) => ({ ok: false as const, rule });
const when = (test: (v: unknown) => boolean, rule: string): Check => (v) =>
  test(v) ? accept(v) : reject(rule);

const CHECKS: Record<Exclude<keyof Settings, "caps">, Check> = {
  enabled: when((v) => typeof v === "boolean", "must be true or false"),
  mode: when(
    (v) => v === "snapshot" || v === "notify" || v === "log-only",
    "must be snapshot, notify or log-only",
  ),
  tier_fractions: when(
    (v) => Array.isArray(v) && v.length >= 1 && v.length <= 2 && v.every(isFraction),
    "must be a list of 1 or 2 numbers in (0, 1]",
  ),
  tier2_time_fraction: when(isFraction, "must be a number in (0, 1]"),
  tier2_turn_fraction: when(isFraction, "must be a number in (0, 1]"),
  min_budget_floor_turns: when(
    (v) => Number.isInteger(v) && (v as number) >= 0,
    "must be a whole number >= 0",
  ),
  min_budget_floor_seconds: when((v) => isNumber(v) && v >= 0, "must be a number >= 0"),
  enabled_axes: when(
    (v) =>
      Array.isArray(v) && v.every((a) => a === "time" || a === "turns") &&
      new Set(v).size === v.length,
    "must be a list of time and/or turns",
  ),
  checkpoint_dir: when(
    (v) => typeof v === "string" && v.trim() !== "",
    "must be a non-empty string",
  ),
  allow_tiny_tier1: when((v) => typeof v === "boolean", "must be true or false"),
  tier1_template: when(
    (v) => typeof v === "string" && v.trim() !== "",
    "must be a non-empty string",
  ),
  tier2_template: when(
    (v) => typeof v === "string" && v.trim() !== "",
    "must be a non-empty string",
  ),
  mid_run_persist: when((v) => typeof v === "boolean", "must be true or false"),
  watchdog: when((v) => typeof v === "boolean", "must be true or false"),
  watchdog_poll_seconds: (v) =>
    isNumber(v) ? accept(Math.max(MIN_POLL_SECONDS, v)) : reject("must be a number"),
  uncapped_interval_seconds: when((v) => isNumber(v) && v >= 0, "must be a number >= 0"),
  stall_window_seconds: when((v) => isNumber(v) && v >= 0, "must be a number >= 0"),
};

const CAP_CHECKS: Record<"time_seconds" | "turns", Check> = {
  time_seconds: (v) => {
    const n = budgetValue(v);
    return n === undefined ? reject("must be a number > 0") : accept(n);
  },
  turns: (v) => {
    const n = budgetValue(v);
    return n === undefined || !Number.isInteger(n)
      ? reject("must be a whole number > 0")
      : accept(n);
  },
};

/** One layer of raw settings and the name it is reported under. */
export interface SettingsLayer {
  source: SettingSource;
  values: unknown;
}

/** Settings with the source of each key and the warnings met on the way. */
export interface ResolvedSettings {
  settings: Settings;
  warnings: string[];
  sources: Record<string, SettingSource>;
}

const show = (v: unknown): string => {
  try {
    return typeof v === "string" ? JSON.stringify(v) : String(JSON.stringify(v) ?? v);
  } catch {
    return String(v);
  }
};

const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Merge layers (lowest precedence first) key by key over the defaults. An
 * invalid value falls back to the default with a warning naming key, value and
 * default; a layer that is not a mapping is skipped with a warning.
 */
export function resolveSettings(
  defaults: Settings,
  layers: readonly SettingsLayer[],
): ResolvedSettings {
  const settings: Settings = { ...defaults, caps: { ...defaults.caps } };
  const warnings: string[] = [];
  const sources: Record<string, SettingSource> = {};
  for (const key of Object.keys(CHECKS)) sources[key] = "default";
  sources["caps.time_seconds"] = "default";
  sources["caps.turns"] = "default";

  const bad = (key: string, value: unknown, rule: string, fallback: unknown, src: string) =>
    warnings.push(
      `setting ${key} = ${show(value)} from ${src} is invalid (${rule}); using ${
        fallback === undefined ? "no value" : show(fallback)
      }`,
    );

  for (const { source, values } of layers) {
    if (values === undefined || values === null) continue;
    if (!isMapping(values)) {
      warnings.push(
        `settings in ${source} are not a mapping (got ${show(values)}); ignoring them`,
      );
      continue;
    }
    for (const [key, value] of Object.entries(values)) {
      if (value === null || value === undefined) continue;
      if (key === "caps") {
        if (!isMapping(value)) {
          bad("caps", value, "must be a mapping", {}, source);
          continue;
        }
        for (const [capKey, capValue] of Object.entries(value)) {
          const check = CAP_CHECKS[capKey as keyof typeof CAP_CHECKS];
          if (!check) {
            warnings.push(`unknown setting caps.${capKey} in ${source}; ignoring it`);
            continue;
          }
          if (capValue === null || capValue === undefined) continue;
          const result = check(capValue);
          if (result.ok) {
            settings.caps[capKey as keyof Settings["caps"]] = result.value as number;
            sources[`caps.${capKey}`] = source;
          } else {
            delete settings.caps[capKey as keyof Settings["caps"]];
            sources[`caps.${capKey}`] = "default";
            bad(`caps.${capKey}`, capValue, result.rule, undefined, source);
          }
        }
        continue;
      }
      const check = CHECKS[key as keyof typeof CHECKS];
      if (!check) {
        warnings.push(`unknown setting ${key} in ${source}; ignoring it`);
        continue;
      }
      const result = check(value);
      if (result.ok) {
        (settings as unknown as Record<string, unknown>)[key] = result.value;
        sources[key] = source;
      } else {
        (settings as unknown as Record<string, unknown>)[key] = defaults[key as keyof Settings];
        sources[key] = "default";
        bad(key, value, result.rule, defaults[key as keyof Settings], source);
      }
    }
  }
  return { settings, warnings, sources };
}
