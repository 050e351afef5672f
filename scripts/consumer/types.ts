// (b) A TypeScript consumer, checked by tsc with module NodeNext and skipLibCheck false.
import {
  type AgentCheckpoint,
  type Caps,
  createAgentCheckpoint,
  discoverCaps,
  type DiscoveredCaps,
  dueTier,
  formatDuration,
  loadSettings,
  renderTemplate,
  type Run,
  type RunCaps,
  type Settings,
  settingsSchema,
  type TemplateValues,
  type Tier,
  writeFileAtomic,
} from "agent-checkpoint";

const ac: AgentCheckpoint = createAgentCheckpoint({
  home: "/tmp/x",
  env: {},
  settings: { mode: "notify" },
  postComment: ({ taskId, body }) => console.log(taskId, body.length),
  logger: ({ level, message, runId }) => console.log(level, message, runId),
});
const run: Run = ac.startRun({ sessionId: "s", taskId: "t", caps: { turns: 10 } });
const text: string | undefined = run.preLlmCall();
run.preToolCall("search");
run.postToolCall("search", { ok: true, durationMs: 3 });
run.activity();
run.note("n");
const caps: RunCaps = run.caps;
const turnCap: number | undefined = caps.turns?.value;
const caps2: Caps = { turns: 10 };
const tier: Tier = dueTier({ caps: caps2, turnsUsed: 8, elapsedSeconds: 0 });
const values: TemplateValues = { turnsUsed: 1, turnsCap: 10 };
const rendered: string = renderTemplate("{budget}", values) + formatDuration(61);
const settings: Settings = loadSettings({ home: "/tmp/x" }).settings;
const mode: "snapshot" | "notify" | "log-only" = settings.mode;
const found: Promise<DiscoveredCaps> = discoverCaps({ sessionId: "s" });
const schemaMode: string = settingsSchema.properties.mode.default;
const done: Promise<void> = writeFileAtomic("/tmp/x/file", "text");
// @ts-expect-error: the mode is one of three strings, not any string
const wrong: Settings["mode"] = "loud";
// @ts-expect-error: internals are stripped from the published declarations
ac.sharedRuns;
void [text, turnCap, tier, rendered, mode, found, schemaMode, done, wrong, run.end(), ac.close()];
