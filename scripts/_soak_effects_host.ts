/**
 * A host for the effects soak (`deno task soak:effects`): one run whose
 * STEPS tool calls each act on the world through `run.once`, keyed by their
 * effect key: a line appended to a file (`file` mode; the tool, as an API
 * that honours idempotency keys does, skips a key the file already has), or
 * a row inserted into PostgreSQL with the key as a unique column (`pg`
 * mode). It writes the run's resume text to `HOME/resume-<attempt>.txt`,
 * prints `{"event":"ready","attempt":N}`, works through the steps, ends the
 * run and prints `{"event":"done"}`. Every call of a tool (each time `fn`
 * runs) is appended to `HOME/exec.log` first. The soak kills it (SIGKILL)
 * at random moments and starts it again.
 *
 *   deno run -A scripts/_soak_effects_host.ts HOME RUN_ID STEPS file TARGET_FILE
 *   deno run -A scripts/_soak_effects_host.ts HOME RUN_ID STEPS pg PG_URL TABLE
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { createAgentCheckpoint } from "../mod.ts";
import { loadDriver, pgTarget } from "../store/postgres.ts";

const [home, runId, stepsText, mode, target, table] = process.argv.slice(2) as string[];
const print = (value: unknown) => process.stdout.write(JSON.stringify(value) + "\n");
const settings: Record<string, unknown> = { watchdog: false, mid_run_persist: false };
if (mode === "pg") settings.store = target;
const ac = createAgentCheckpoint({
  home: home!,
  env: {},
  settings,
  logger: (r) => r.level !== "info" && print({ event: "log", level: r.level, message: r.message }),
});
const run = ac.startRun({ sessionId: runId! });
fs.writeFileSync(path.join(home!, `resume-${run.attempt}.txt`), run.preLlmCall() ?? "");
const exec = fs.openSync(path.join(home!, "exec.log"), "a");
const sql = mode === "pg"
  ? (await loadDriver())(pgTarget(target!).url, { max: 1, onnotice: () => {}, fetch_types: false })
  : undefined;
print({ event: "ready", attempt: run.attempt });

let deduped = 0;
/** The world: a file of keys, or a table whose key column is unique. */
async function apply(key: string): Promise<void> {
  fs.writeSync(exec, `${key}\n`);
  if (sql) {
    const rows = await sql.unsafe(
      `INSERT INTO ${table} (key) VALUES ($1) ON CONFLICT (key) DO NOTHING RETURNING key`,
      [key],
    );
    if (rows.length === 0) deduped++;
    return;
  }
  const file = target!;
  const have = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : "";
  if (have.includes(`${key}\n`)) {
    deduped++;
    return;
  }
  fs.appendFileSync(file, `${key}\n`);
}

for (let step = 0; step < Number(stepsText); step++) {
  await run.effects.once("apply", { step, runId }, async (key) => {
    await apply(key);
    return { step };
  });
}
await run.end();
await ac.close();
await sql?.end({ timeout: 1 });
print({ event: "done", deduped });
process.exit(0);
