/**
 * The settings: one table, {@linkcode SETTINGS}, describes each setting once;
 * the TypeScript type, the defaults, the JSON Schema and the validation are
 * all derived from it. Validation never throws. Pure: no file, clock or
 * environment of its own.
 *
 * @module
 */
import { isMapping, show } from "./log.ts";
import { AXES, type Axis, AXIS_NAMES, type BudgetAxis } from "./_record.ts";

export type { Axis };

/** A JSON Schema fragment: the keywords the settings' schema uses. */
export interface JsonSchema {
  /** The JSON type or types. */
  type?: string | string[];
  /** The values allowed. */
  enum?: readonly unknown[];
  /** The smallest number allowed. */
  minimum?: number;
  /** Numbers must be greater than this. */
  exclusiveMinimum?: number;
  /** The largest number allowed. */
  maximum?: number;
  /** The shortest string allowed. */
  minLength?: number;
  /** A regular expression a string must match. */
  pattern?: string;
  /** The schema of each item of an array. */
  items?: JsonSchema;
  /** The fewest items allowed. */
  minItems?: number;
  /** The most items allowed. */
  maxItems?: number;
  /** Whether items must differ. */
  uniqueItems?: boolean;
  /** Schemas of which the value must match one at least. */
  anyOf?: JsonSchema[];
  /** The schema of each key of an object. */
  properties?: Record<string, JsonSchema>;
  /** False: no keys but `properties`; a schema: what every other key holds. */
  additionalProperties?: boolean | JsonSchema;
  /** Keys that must be present. */
  required?: string[];
  /** The default value. */
  default?: unknown;
  /** What the value means. */
  description?: string;
}

/** The verdict of a setting's check: the value to use, or the rule it breaks. */
export type Verdict<T> = { ok: true; value: T } | { ok: false; rule: string };

/** One setting, described once. */
export interface SettingSpec<T> {
  /** What the setting does, in a sentence; the schema's `description`. */
  doc: string;
  /** The default value. */
  default: T;
  /** Whether the default is given in the schema (false for one that depends on the home). */
  schemaDefault: boolean;
  /** The JSON Schema of a valid value. */
  schema: JsonSchema;
  /** Check a raw value: the value to use, or the rule it breaks. */
  check(value: unknown): Verdict<T>;
  /** For a mapping setting: its keys, each checked on its own. */
  fields?: Record<string, SettingSpec<unknown>>;
}

const accept = <T>(value: T): Verdict<T> => ({ ok: true, value });
const reject = (rule: string): Verdict<never> => ({ ok: false, rule });
const isFiniteNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

function spec<T>(
  doc: string,
  defaultValue: T,
  schema: JsonSchema,
  check: (value: unknown) => Verdict<T>,
): SettingSpec<T> {
  return { doc, default: defaultValue, schemaDefault: true, schema, check };
}

/** `true` or `false`; a number is never a boolean. */
function boolean(doc: string, defaultValue: boolean): SettingSpec<boolean> {
  return spec(
    doc,
    defaultValue,
    { type: "boolean" },
    (v) => typeof v === "boolean" ? accept(v) : reject("must be true or false"),
  );
}

/** One of a few strings. */
function choice<const V extends string>(
  values: readonly V[],
  doc: string,
  defaultValue: V,
): SettingSpec<V> {
  const rule = `must be ${values.slice(0, -1).join(", ")} or ${values.at(-1)}`;
  return spec(
    doc,
    defaultValue,
    { enum: values },
    (v) => values.includes(v as V) ? accept(v as V) : reject(rule),
  );
}

interface Range {
  integer?: boolean;
  minimum?: number;
  exclusiveMinimum?: number;
  maximum?: number;
  /** Accepted values below this are raised to it. */
  floor?: number;
}

const rangeRule = (r: Range): string => {
  const what = r.integer ? "a whole number" : "a number";
  if (r.exclusiveMinimum !== undefined && r.maximum !== undefined) {
    return `must be ${what} in (${r.exclusiveMinimum}, ${r.maximum}]`;
  }
  if (r.minimum !== undefined && r.maximum !== undefined) {
    return `must be ${what} in [${r.minimum}, ${r.maximum}]`;
  }
  if (r.exclusiveMinimum !== undefined) return `must be ${what} > ${r.exclusiveMinimum}`;
  if (r.minimum !== undefined) return `must be ${what} >= ${r.minimum}`;
  return `must be ${what}`;
};

const rangeSchema = (r: Range): JsonSchema => {
  const schema: JsonSchema = { type: r.integer ? "integer" : "number" };
  if (r.minimum !== undefined) schema.minimum = r.minimum;
  if (r.exclusiveMinimum !== undefined) schema.exclusiveMinimum = r.exclusiveMinimum;
  if (r.maximum !== undefined) schema.maximum = r.maximum;
  return schema;
};

const inRange = (v: unknown, r: Range): v is number =>
  isFiniteNumber(v) && (!r.integer || Number.isInteger(v)) &&
  (r.minimum === undefined || v >= r.minimum) &&
  (r.exclusiveMinimum === undefined || v > r.exclusiveMinimum) &&
  (r.maximum === undefined || v <= r.maximum);

/** A finite number within a range; a boolean or a string is never a number. */
function number(range: Range, doc: string, defaultValue: number): SettingSpec<number> {
  const rule = rangeRule(range);
  const floor = range.floor;
  return spec(
    doc,
    defaultValue,
    rangeSchema(range),
    (v) => inRange(v, range) ? accept(floor === undefined ? v : Math.max(floor, v)) : reject(rule),
  );
}

/** A list of items of one kind. */
function list<I>(
  item: SettingSpec<I>,
  bounds: { minItems?: number; maxItems?: number; uniqueItems?: boolean; rule: string },
  doc: string,
  defaultValue: I[],
): SettingSpec<I[]> {
  const schema: JsonSchema = { type: "array", items: item.schema };
  if (bounds.minItems !== undefined) schema.minItems = bounds.minItems;
  if (bounds.maxItems !== undefined) schema.maxItems = bounds.maxItems;
  if (bounds.uniqueItems) schema.uniqueItems = true;
  return spec(doc, defaultValue, schema, (v) => {
    if (!Array.isArray(v)) return reject(bounds.rule);
    if (v.length < (bounds.minItems ?? 0) || v.length > (bounds.maxItems ?? Infinity)) {
      return reject(bounds.rule);
    }
    const out: I[] = [];
    for (const raw of v) {
      const verdict = item.check(raw);
      if (!verdict.ok) return reject(bounds.rule);
      out.push(verdict.value);
    }
    if (bounds.uniqueItems && new Set(out).size !== out.length) return reject(bounds.rule);
    return accept(out); // a copy: the caller's array may change later
  });
}

/** A string with something other than white space in it. */
function text(doc: string, defaultValue: string): SettingSpec<string> {
  return spec(
    doc,
    defaultValue,
    { type: "string", minLength: 1, pattern: "\\S" },
    (v) => typeof v === "string" && /\S/.test(v) ? accept(v) : reject("must be a non-empty string"),
  );
}

/**
 * A positive number as a numeric string, e.g. `"850"`: up to 15 digits before
 * and after the point, and an exponent of up to two digits, so that every
 * match is a finite number > 0.
 */
const POSITIVE_NUMBER_TEXT =
  "^\\s*\\+?(?=[0-9.]*[1-9])(?:[0-9]{1,15}(?:\\.[0-9]{0,15})?|\\.[0-9]{1,15})(?:[eE][+-]?[0-9]{1,2})?\\s*$";
/** A positive whole number as a numeric string, e.g. `"40"` or `"40.0"`. */
const POSITIVE_INTEGER_TEXT = "^\\s*\\+?0{0,15}[1-9][0-9]{0,14}(?:\\.0{0,15})?\\s*$";

/** A cap: a finite number > 0 or a numeric string for one; unset by default. */
function budget(integer: boolean, doc: string): SettingSpec<number | undefined> {
  const pattern = integer ? POSITIVE_INTEGER_TEXT : POSITIVE_NUMBER_TEXT;
  const re = new RegExp(pattern);
  const range: Range = integer ? { integer, exclusiveMinimum: 0 } : { exclusiveMinimum: 0 };
  const rule = rangeRule(range);
  return {
    doc,
    default: undefined,
    schemaDefault: false,
    schema: { anyOf: [rangeSchema(range), { type: "string", pattern }, { type: "null" }] },
    check: (v) =>
      inRange(v, range)
        ? accept(v)
        : typeof v === "string" && re.test(v)
        ? accept(Number(v))
        : reject(rule),
  };
}

/** The floor under `watchdog_poll_seconds`. */
export const MIN_POLL_SECONDS = 0.05;

/** The built-in tier-1 template. */
export const DEFAULT_TIER1_TEMPLATE =
  "Budget checkpoint: {budget}; your {nearest} budget is nearest its cap. Before you continue, write everything you have found so far into {checkpoint_file}, including what remains to be done, then carry on at normal pace.";

/** The built-in tier-2 template. */
export const DEFAULT_TIER2_TEMPLATE =
  "Final budget checkpoint: {budget}; your {nearest} budget is nearest its cap. Stop expanding the work now. Bring {checkpoint_file} and your deliverable to a final state; if the task is unfinished, mark the checkpoint INCOMPLETE and write the exact next step. Post your summary, then verify that {checkpoint_file} exists.";

/** The built-in text for the first model call of a resumed run. */
export const DEFAULT_RESUME_TEMPLATE =
  "Resuming (attempt {attempt}): the earlier attempt stopped ({previous}). Its checkpoint is in {checkpoint_file}: read it first, continue from the next step it names, and do not redo finished work.";

const fraction = (doc: string, defaultValue: number): SettingSpec<number> =>
  number({ exclusiveMinimum: 0, maximum: 1 }, doc, defaultValue);

/** The `caps` setting made from a table of axes: one cap setting per axis. */
export function capsSetting(
  axes: readonly BudgetAxis[],
): SettingSpec<Record<string, number | undefined>> {
  const fields = Object.fromEntries(
    axes.map((a) => [a.setting, budget(a.integer, a.settingDoc) as SettingSpec<unknown>]),
  );
  return {
    doc: "Caps the plugin supplies for runs whose own cap is not discoverable.",
    default: {},
    schemaDefault: true,
    schema: {
      type: "object",
      additionalProperties: false,
      properties: Object.fromEntries(axes.map((a) => [a.setting, fields[a.setting]!.schema])),
    },
    check: () => reject("must be a mapping"), // resolved key by key, from `fields`
    fields,
  };
}

/** The rule an axis list breaks: `must be a list of time, turns, tokens and/or usd`. */
const axesRule = `must be a list of ${AXIS_NAMES.slice(0, -1).join(", ")} and/or ${
  AXIS_NAMES.at(-1)
}`;

/** A setting that is a list of axes. */
const axisList = (doc: string, example: Axis, defaultValue: Axis[]) =>
  list(
    choice(AXIS_NAMES, "A budget axis.", example),
    { uniqueItems: true, rule: axesRule },
    doc,
    defaultValue,
  );

/** The `caps` setting's value: a cap per axis, by its setting's key. */
export type CapsSetting = { [A in (typeof AXES)[number] as A["setting"]]?: number };

const caps = capsSetting(AXES) as SettingSpec<CapsSetting>;

/** A model's price, in US dollars per million tokens. */
export interface ModelPrice {
  /** Dollars per million input tokens. */
  input: number;
  /** Dollars per million output tokens. */
  output: number;
}

const PRICE_RULE =
  "must be a mapping of model names to { input, output }, dollars per million tokens, each >= 0";
const priceSchema: JsonSchema = {
  type: "object",
  additionalProperties: false,
  required: ["input", "output"],
  properties: {
    input: { type: "number", minimum: 0 },
    output: { type: "number", minimum: 0 },
  },
};
const prices: SettingSpec<Record<string, ModelPrice>> = spec(
  "Prices per model, in dollars per million input and output tokens, for frameworks that report no cost.",
  {},
  { type: "object", additionalProperties: priceSchema },
  (v) => {
    if (!isMapping(v)) return reject(PRICE_RULE);
    const out: Record<string, ModelPrice> = {};
    for (const [model, price] of Object.entries(v)) {
      if (!isMapping(price)) return reject(PRICE_RULE);
      const { input, output, ...extra } = price as Record<string, unknown>;
      if (
        Object.keys(extra).length > 0 || !inRange(input, { minimum: 0 }) ||
        !inRange(output, { minimum: 0 })
      ) return reject(PRICE_RULE);
      out[model] = { input, output };
    }
    return accept(out);
  },
);

/**
 * A set of tools for workspace snapshots: their `names`, and the input keys
 * read for what they act on; a key left out keeps its default.
 */
function toolSet<const K extends string>(
  keys: K,
  doc: string,
  defaultValue: { names: string[] } & Record<K, string[]>,
): SettingSpec<{ names: string[] } & Record<K, string[]>> {
  const words: JsonSchema = { type: "array", items: { type: "string", minLength: 1 } };
  const rule = `must be a mapping of names and ${keys}, each a list of non-empty strings`;
  return spec(doc, defaultValue, {
    type: "object",
    additionalProperties: false,
    properties: { names: words, [keys]: words },
  }, (v) => {
    if (typeof v !== "object" || v === null || Array.isArray(v)) return reject(rule);
    const out: Record<string, string[]> = { names: defaultValue.names, [keys]: defaultValue[keys] };
    for (const [k, list] of Object.entries(v)) {
      if (k !== "names" && k !== keys) return reject(rule);
      if (!Array.isArray(list) || !list.every((w) => typeof w === "string" && w !== "")) {
        return reject(rule);
      }
      out[k] = [...list];
    }
    return accept(out as { names: string[] } & Record<K, string[]>);
  });
}

/** A list of gitignore patterns, one line each: no line breaks, not a comment. */
function patterns(doc: string, defaultValue: string[]): SettingSpec<string[]> {
  const rule = "must be a list of gitignore patterns (non-empty strings without line breaks)";
  const ok = (v: unknown) => typeof v === "string" && /\S/.test(v) && !/[\r\n]/.test(v);
  return spec(doc, defaultValue, {
    type: "array",
    items: { type: "string", minLength: 1, pattern: "^[^\\r\\n]*\\S[^\\r\\n]*$" },
  }, (v) => Array.isArray(v) && v.every(ok) ? accept([...v] as string[]) : reject(rule));
}

/**
 * What workspace snapshots leave out by default beside the fixed list (`.git`,
 * `node_modules/`, virtual environments, caches): what Hermes's checkpoints
 * leave out, logs, build output, archives and shared objects. The setting
 * `workspace_exclude` replaces it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_WORKSPACE_EXCLUDE } from "./settings.ts";
 *
 * assert.ok(DEFAULT_WORKSPACE_EXCLUDE.includes("*.log"));
 * ```
 */
export const DEFAULT_WORKSPACE_EXCLUDE: readonly string[] = [
  "*.log",
  "dist/",
  "build/",
  "target/",
  "out/",
  ".next/",
  "env/",
  "*.zip",
  "*.tar",
  "*.tar.gz",
  "*.tgz",
  "*.tar.bz2",
  "*.tbz2",
  "*.tar.xz",
  "*.txz",
  "*.7z",
  "*.rar",
  "*.so",
  "*.so.*",
  "*.dylib",
  "*.dll",
];

/**
 * Secrets, left out of workspace snapshots unless `workspace_include` names them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { WORKSPACE_SECRETS } from "./settings.ts";
 *
 * assert.deepEqual(WORKSPACE_SECRETS, [".env", ".env.*"]);
 * ```
 */
export const WORKSPACE_SECRETS: readonly string[] = [".env", ".env.*"];

/**
 * Every setting, each described once: what it does, its default, its JSON
 * Schema and its check. {@linkcode Settings}, {@linkcode defaultSettings},
 * {@linkcode settingsSchema} and {@linkcode resolveSettings} derive from it.
 */
export const SETTINGS = {
  enabled: boolean("Master switch; false makes every hook a no-op.", true),
  mode: choice(
    ["snapshot", "notify", "log-only"],
    "What a due tier does: snapshot (directive and file), notify (budget numbers only), log-only.",
    "snapshot",
  ),
  tier_fractions: list(
    fraction("A budget fraction.", 0.5),
    { minItems: 1, maxItems: 2, rule: "must be a list of 1 or 2 numbers in (0, 1]" },
    "Tier 1's budget fraction, then an optional tier-2 fraction for both axes.",
    [0.5],
  ),
  tier2_time_fraction: fraction("Tier 2 on the time axis.", 0.8),
  tier2_turn_fraction: fraction("Tier 2 on the turn axis.", 0.9),
  min_budget_floor_turns: number(
    { integer: true, minimum: 0 },
    "A turn cap below this is ignored.",
    0,
  ),
  min_budget_floor_seconds: number(
    { minimum: 0 },
    "A time cap below this many seconds is ignored.",
    0,
  ),
  enabled_axes: axisList(
    "Axes that count; an empty list makes every run capless.",
    "time",
    [...AXIS_NAMES],
  ),
  checkpoint_dir: {
    ...text(
      "Where checkpoint files go; $VAR, ${VAR} and ~ are expanded. Defaults to <home>/agent-checkpoints.",
      "",
    ),
    schemaDefault: false,
  },
  allow_tiny_tier1: boolean("Fire tier 1 even on tiny caps.", false),
  caps,
  tier1_template: text("Text put before the model call at tier 1.", DEFAULT_TIER1_TEMPLATE),
  tier2_template: text("Text put before the model call at tier 2.", DEFAULT_TIER2_TEMPLATE),
  mid_run_persist: boolean(
    "False: no file writes from tool boundaries, the watchdog or its timers.",
    true,
  ),
  watchdog: boolean("Run the watchdog worker.", true),
  watchdog_poll_seconds: number(
    { floor: MIN_POLL_SECONDS },
    `The watchdog's poll interval in seconds, raised to at least ${MIN_POLL_SECONDS}.`,
    10,
  ),
  uncapped_interval_seconds: number(
    { minimum: 0 },
    "Runs with no cap: a checkpoint every this many seconds; 0 disables.",
    1800,
  ),
  stall_window_seconds: number(
    { minimum: 0 },
    "A checkpoint after this many seconds without activity; 0 disables.",
    600,
  ),
  resume: boolean(
    "Resume a run whose earlier attempt did not finish, from its checkpoint file.",
    true,
  ),
  resume_template: text(
    "Text put before the first model call of a resumed run; also takes {previous} and {attempt}.",
    DEFAULT_RESUME_TEMPLATE,
  ),
  deadline_grace_seconds: number(
    { minimum: 0 },
    "Seconds past the time cap before the deadline aborts run.signal.",
    0,
  ),
  workspace_snapshots: boolean("Snapshot the working tree before the agent writes.", false),
  max_file_size_mb: number(
    { exclusiveMinimum: 0 },
    "Files larger than this many MB are left out of workspace snapshots.",
    10,
  ),
  max_total_size_mb: number(
    { exclusiveMinimum: 0 },
    "Workspace snapshots together take at most this many MB.",
    500,
  ),
  max_snapshots: number(
    { integer: true, minimum: 1 },
    "Workspace snapshots kept per project.",
    20,
  ),
  workspace_file_tools: toolSet(
    "path_keys",
    "Tools that write the files their input names (names), and the input keys that name them (path_keys).",
    {
      names: ["write_file", "patch", "Write", "Edit", "MultiEdit", "NotebookEdit"],
      path_keys: ["path", "file_path", "filePath", "notebook_path", "target_file", "paths"],
    },
  ),
  workspace_shell_tools: toolSet(
    "command_keys",
    "Tools that run a shell command (names), and the input keys that hold it (command_keys).",
    {
      names: ["bash", "shell", "terminal", "Bash", "run_shell_command", "execute_command"],
      command_keys: ["command", "cmd"],
    },
  ),
  workspace_exclude: patterns(
    "Gitignore patterns workspace snapshots leave out beside the fixed list; replaces the default list.",
    [...DEFAULT_WORKSPACE_EXCLUDE],
  ),
  workspace_include: patterns(
    "Gitignore patterns put back into workspace snapshots: secrets (.env, .env.*) only when named here.",
    [],
  ),
  max_tree_files: number(
    { integer: true, minimum: 1 },
    "Trees with more files than this are not snapshotted.",
    200_000,
  ),
  ledger: boolean(
    "Keep a record of every run, brought up to date throughout, in <home>/agent-checkpoint/runs.db.",
    true,
  ),
  otel: boolean(
    "Trace runs with OpenTelemetry when @opentelemetry/api is present and a tracer provider is registered.",
    true,
  ),
  progress_interval_seconds: number(
    { exclusiveMinimum: 0 },
    "A run's ledger record is at most this many seconds behind the run.",
    1,
  ),
  host_timeout_seconds: number(
    { exclusiveMinimum: 0 },
    "A live run whose process has not been heard of for this many seconds is cut off.",
    30,
  ),
  ledger_retention_days: number(
    { exclusiveMinimum: 0 },
    "Ended runs are kept in the ledger this many days.",
    30,
  ),
  store: spec(
    "The run ledger's store: empty for the embedded one in the home, or a postgres:// URL that a fleet of machines shares (the environment's AGENT_CHECKPOINT_STORE wins over the file).",
    "",
    { type: "string", anyOf: [{ enum: [""] }, { pattern: "^postgres(ql)?://" }] },
    (v) =>
      typeof v === "string" && (v === "" || /^postgres(ql)?:\/\//.test(v))
        ? accept(v)
        : reject("must be empty or a postgres:// URL"),
  ),
  store_file_max_kb: number(
    { exclusiveMinimum: 0 },
    "The fleet store keeps each run's checkpoint file up to this many KiB, so a retry on another machine can recreate it.",
    256,
  ),
  on_duplicate: choice(
    ["warn", "refuse", "take-over"],
    "A start of a run id that another live attempt holds: warn (it runs, with a warning), refuse (run.refused; its hooks do nothing) or take-over (the new attempt takes the run; the old one's later records are refused).",
    "refuse",
  ),
  machine: spec(
    "The machine name runs are recorded under: empty for the host name (the environment's AGENT_CHECKPOINT_MACHINE wins over the file).",
    "",
    { type: "string", pattern: "^[^\\s]{0,200}$" },
    (v) =>
      typeof v === "string" && v.length <= 200 && !/\s/.test(v)
        ? accept(v)
        : reject("must be a name of at most 200 characters without spaces"),
  ),
  resume_budget: choice(
    ["fresh", "remaining"],
    "A resumed run's caps: fresh (the full caps again) or remaining (less what earlier attempts used).",
    "fresh",
  ),
  prices,
  tool_timeout_seconds: budget(
    false,
    "Seconds a tool call may run before a tool_timeout checkpoint and its signal's abort; unset: no limit.",
  ),
  enforce: axisList(
    "Axes whose cap stops the run: past it, a budget record is written and run.signal aborts.",
    "usd",
    [],
  ),
  effect_tools: list(
    text("A tool's name.", "send_email"),
    { uniqueItems: true, rule: "must be a list of distinct tool names" },
    "Tools that act on the world: each call's intent is in the ledger before it runs, and its receipt after.",
    [] as string[],
  ),
  effect_result_max_bytes: number(
    { integer: true, minimum: 0 },
    "The most bytes of a tool's result an effect's receipt keeps (longer ones are cut, and say so).",
    4096,
  ),
  journal: boolean(
    "Journal every model and tool call of a run in the ledger, so a retry replays them instead of paying for them again.",
    true,
  ),
  journal_max_bytes: number(
    { integer: true, minimum: 0 },
    "The most bytes of responses and results a run's attempt journals; past it, the run goes on unjournaled (one log line).",
    64 * 1024 * 1024,
  ),
} as const;

/**
 * The settings, every default filled in; see {@linkcode settingsSchema} for
 * what each does.
 */
export type Settings = {
  -readonly [K in keyof typeof SETTINGS]: typeof SETTINGS[K] extends SettingSpec<infer T> ? T
    : never;
};

/** What the prologue and mid-run surfaces do when a tier is due. */
export type Mode = Settings["mode"];

/** Where one setting's value came from. */
export type SettingSource =
  | "default"
  | "config.yaml agent_checkpoint"
  | "config.yaml plugins.entries.agent-checkpoint.config"
  | "config.yaml plugins.entries.agent-checkpoint.settings"
  | "env AGENT_CHECKPOINT_STORE"
  | "env AGENT_CHECKPOINT_MACHINE"
  | "override";

const KEYS = Object.keys(SETTINGS) as (keyof Settings)[];
const specOf = (key: string): SettingSpec<unknown> | undefined =>
  Object.hasOwn(SETTINGS, key)
    ? (SETTINGS as Record<string, SettingSpec<unknown>>)[key]
    : undefined;
const fieldOf = (spec: SettingSpec<unknown>, key: string) =>
  spec.fields && Object.hasOwn(spec.fields, key) ? spec.fields[key] : undefined;

const copyDefault = (value: unknown): unknown =>
  Array.isArray(value)
    ? [...value]
    : typeof value === "object" && value !== null
    ? { ...value }
    : value;

/**
 * Every default, with `checkpoint_dir` given (it depends on the home directory).
 *
 * @example
 * ```ts
 * import { defaultSettings } from "./settings.ts";
 * import assert from "node:assert/strict";
 *
 * const settings = defaultSettings("/tmp/cp");
 * assert.equal(settings.mode, "snapshot");
 * assert.equal(settings.checkpoint_dir, "/tmp/cp");
 * ```
 */
export function defaultSettings(checkpointDir: string): Settings {
  const out: Record<string, unknown> = {};
  for (const key of KEYS) out[key] = copyDefault(SETTINGS[key].default);
  out.checkpoint_dir = checkpointDir;
  return out as Settings;
}

const propertySchema = (s: SettingSpec<unknown>): JsonSchema => {
  const out: JsonSchema = { ...s.schema, description: s.doc };
  if (s.schemaDefault) out.default = copyDefault(s.default);
  return out;
};

/**
 * The JSON Schema (draft 2020-12) of the settings section, for editors and
 * hosts that validate `config.yaml`. It accepts exactly what the settings'
 * checks accept, except `NaN` and infinities, which JSON cannot hold.
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
export const settingsSchema: {
  $schema: string;
  title: string;
  type: "object";
  additionalProperties: false;
  properties: {
    [K in keyof Settings]:
      & JsonSchema
      & (typeof SETTINGS[K] extends { schemaDefault: false } ? unknown : { default: Settings[K] });
  };
} = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  title: "agent-checkpoint settings",
  type: "object",
  additionalProperties: false,
  properties: Object.fromEntries(
    KEYS.map((key) => [key, propertySchema(SETTINGS[key] as SettingSpec<unknown>)]),
  ) as typeof settingsSchema.properties,
};

/**
 * A budget value (cap discovery): a finite number > 0, or a numeric string for
 * one; never a boolean.
 *
 * @example
 * ```ts
 * import { budgetValue } from "./settings.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(budgetValue("850"), 850);
 * assert.equal(budgetValue(true), undefined);
 * assert.equal(budgetValue(0), undefined);
 * ```
 */
export function budgetValue(value: unknown): number | undefined {
  let n: number;
  if (typeof value === "number") n = value;
  else if (typeof value === "string" && value.trim() !== "") n = Number(value);
  else return undefined;
  return Number.isFinite(n) && n > 0 ? n : undefined;
}

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

/** The own enumerable string keys and values of a mapping, read one by one. */
function* entriesOf(
  values: Record<string, unknown>,
  unreadable: (key: string, error: unknown) => void,
): Generator<[string, unknown]> {
  for (const key of Object.keys(values)) {
    let value: unknown;
    try {
      value = values[key];
    } catch (error) {
      unreadable(key, error);
      continue;
    }
    yield [key, value];
  }
}

/** A key as a warning shows it: control characters escaped, at most 100 characters. */
const keyText = (key: string): string => JSON.stringify(key.slice(0, 100)).slice(1, -1);

const reason = (error: unknown): string => {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    // the error's own message throws: a fixed text stands in
    return "an unprintable error";
  }
};

/**
 * Merge layers (lowest precedence first) key by key over the defaults. An
 * invalid value falls back to the default with a warning naming key, value and
 * default; a layer that is not a mapping is skipped with a warning. Never
 * throws, whatever the layers hold.
 *
 * @example
 * ```ts
 * import { defaultSettings, resolveSettings } from "./settings.ts";
 * import assert from "node:assert/strict";
 *
 * const { settings, warnings } = resolveSettings(defaultSettings("/tmp/cp"), [
 *   { source: "override", values: { mode: "notify", valueOf: 1 } },
 * ]);
 * assert.equal(settings.mode, "notify");
 * assert.deepEqual(warnings, ["unknown setting valueOf in override; ignoring it"]);
 * ```
 */
export function resolveSettings(
  defaults: Settings,
  layers: readonly SettingsLayer[],
): ResolvedSettings {
  const settings = { ...defaults, caps: { ...defaults.caps } } as Record<string, unknown>;
  const warnings: string[] = [];
  const sources: Record<string, SettingSource> = {};
  for (const key of KEYS) {
    const fields = (SETTINGS[key] as SettingSpec<unknown>).fields;
    if (fields) { for (const field of Object.keys(fields)) sources[`${key}.${field}`] = "default"; }
    else sources[key] = "default";
  }
  const bad = (key: string, value: unknown, rule: string, fallback: unknown, src: string) =>
    warnings.push(
      `setting ${key} = ${show(value)} from ${src} is invalid (${rule}); using ${
        fallback === undefined ? "no value" : show(fallback)
      }`,
    );

  for (const { source, values } of layers) {
    try {
      if (values === undefined || values === null) continue;
      if (!isMapping(values)) {
        warnings.push(
          `settings in ${source} are not a mapping (got ${show(values)}); ignoring them`,
        );
        continue;
      }
      const unreadable = (key: string) => (name: string, error: unknown) =>
        warnings.push(
          `setting ${key}${name} in ${source} cannot be read (${reason(error)}); ignoring it`,
        );
      for (const [key, value] of entriesOf(values, unreadable(""))) {
        if (value === null || value === undefined) continue;
        const s = specOf(key);
        if (!s) {
          warnings.push(`unknown setting ${keyText(key)} in ${source}; ignoring it`);
          continue;
        }
        if (s.fields) {
          if (!isMapping(value)) {
            bad(key, value, "must be a mapping", s.default, source);
            continue;
          }
          const nested = settings[key] as Record<string, unknown>;
          for (const [field, raw] of entriesOf(value, unreadable(`${key}.`))) {
            const f = fieldOf(s, field);
            const name = `${key}.${field}`;
            if (!f) {
              warnings.push(
                `unknown setting ${key}.${keyText(field)} in ${source}; ignoring it`,
              );
              continue;
            }
            if (raw === null || raw === undefined) continue;
            const verdict = f.check(raw);
            if (verdict.ok) {
              nested[field] = verdict.value;
              sources[name] = source;
            } else {
              delete nested[field];
              sources[name] = "default";
              bad(name, raw, verdict.rule, f.default, source);
            }
          }
          continue;
        }
        const verdict = s.check(value);
        if (verdict.ok) {
          settings[key] = verdict.value;
          sources[key] = source;
        } else {
          const fallback = (defaults as Record<string, unknown>)[key];
          settings[key] = copyDefault(fallback);
          sources[key] = "default";
          bad(key, value, verdict.rule, fallback, source);
        }
      }
    } catch (error) {
      warnings.push(`settings in ${source} cannot be read (${reason(error)}); ignoring the rest`);
    }
  }
  return { settings: settings as Settings, warnings, sources };
}
