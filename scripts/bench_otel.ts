// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import these by URL
/**
 * Benchmark of runs as OpenTelemetry traces: what a tool call's two hooks
 * (`preToolCall` + `postToolCall`) and a model call's `preLlmCall` cost
 *
 * 1. with no tracer provider registered, in a keeper with the tracer plugged
 *    in against one without it (the hooks as they were before tracing), in
 *    interleaved rounds of the same process;
 * 2. with the SDK's BasicTracerProvider registered (a span per tool call), on
 *    the hook itself and with the span work done after it, beside the SDK's
 *    own `startSpan` + `end` of the same span in the same run.
 *
 * The span processor is a SimpleSpanProcessor whose exporter drops what it is
 * given, so the figures are the spans' making and ending, not an exporter's.
 * Figures are medians of rounds, in CPU time (the process's user + system
 * time: on a shared machine, wall time counts the other tenants' turns), ns
 * per call; never a pass/fail.
 *
 *   deno run -A scripts/bench_otel.ts [--quick]
 */
import process from "node:process";
import { context, trace } from "npm:@opentelemetry/api@^1.9.0";
import {
  BasicTracerProvider,
  type ReadableSpan,
  SimpleSpanProcessor,
  type SpanExporter,
} from "npm:@opentelemetry/sdk-trace-base@^2.2.0";
import { AgentCheckpoint, createAgentCheckpoint } from "../mod.ts";
import { openRunStore, type SqliteRunStore, type StoreBridge, thisHost } from "../store/mod.ts";
import { Workspaces } from "../workspace/mod.ts";
import { median, tempDir } from "./_bench_util.ts";

const quick = process.argv.includes("--quick");
const ROUNDS = quick ? 7 : 15;
const CALLS = quick ? 5_000 : 20_000;
const SETTINGS = { watchdog: false, ledger: false };

/** The process's CPU time, ms (the watchdog is off: the main thread's, nearly all). */
const cpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

/** An exporter that drops every span: the figures are the SDK's, not an exporter's. */
class Dropping implements SpanExporter {
  spans = 0;
  export(spans: ReadableSpan[], done: (result: { code: number }) => void): void {
    this.spans += spans.length;
    done({ code: 0 });
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

/** A keeper as the library was before tracing: the same subsystems, no tracer. */
const untraced = () =>
  new AgentCheckpoint({ home: tempDir("ac-bench-otel-"), env: {}, settings: SETTINGS }, {
    openStore: (options) => openRunStore(options) as SqliteRunStore | StoreBridge | undefined,
    thisHost,
    storeModule: new URL("../store/mod.ts", import.meta.url).href,
    workspaces: (options) => new Workspaces(options),
  });
const traced = () =>
  createAgentCheckpoint({ home: tempDir("ac-bench-otel-"), env: {}, settings: SETTINGS });

type Keeper = ReturnType<typeof traced>;

/**
 * ns per tool call (its two hooks) in one run, timed on the hooks alone; then
 * with the microtasks after them (where a traced run makes and ends its spans).
 */
async function toolCalls(ac: Keeper, calls: number): Promise<{ hook: number; total: number }> {
  const run = ac.startRun({ sessionId: "bench", caps: { turns: 1_000_000 } });
  const ids = Array.from({ length: 64 }, (_, i) => `call_${i}`);
  let hooks = 0;
  const started = cpu();
  for (let i = 0; i < calls; i += 64) {
    const t = cpu();
    for (let j = 0; j < 64; j++) {
      run.preToolCall("search", { callId: ids[j]! });
      run.postToolCall("search", { callId: ids[j]!, ok: true });
    }
    hooks += cpu() - t;
    await Promise.resolve(); // the host awaits its tools: the deferred span work runs here
  }
  const total = cpu() - started;
  await run.end();
  return { hook: hooks * 1e6 / calls, total: total * 1e6 / calls };
}

/** ns per preLlmCall in one run. */
function modelCalls(ac: Keeper, calls: number): number {
  const run = ac.startRun({ sessionId: "bench-llm", caps: { turns: calls * 10 } });
  const t = cpu();
  for (let i = 0; i < calls; i++) run.preLlmCall();
  const ns = (cpu() - t) * 1e6 / calls;
  void run.end();
  return ns;
}

/** ns per the SDK's own startSpan + end of the span a tool call gets. */
function sdkSpans(calls: number): number {
  const tracer = trace.getTracer("bench");
  const parent = tracer.startSpan("invoke_agent");
  const ctx = trace.setSpan(context.active(), parent);
  const t = cpu();
  for (let i = 0; i < calls; i++) {
    tracer.startSpan("execute_tool search", {
      attributes: {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": `call_${i & 63}`,
      },
      startTime: Date.now(),
    }, ctx).end(Date.now());
  }
  const ns = (cpu() - t) * 1e6 / calls;
  parent.end();
  return ns;
}

const row = (cells: string[]) => console.log(`| ${cells.join(" | ")} |`);
const ns = (x: number) => `${x.toFixed(0)} ns`;

async function main(): Promise<void> {
  trace.disable();
  const plain = untraced();
  const withTracer = traced();
  await withTracer.tracingReady;
  // Warm both paths before the rounds.
  await toolCalls(plain, CALLS);
  await toolCalls(withTracer, CALLS);
  const none = { plain: [] as number[], tracer: [] as number[], llmPlain: [] as number[] };
  const noneLlm: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    none.plain.push((await toolCalls(plain, CALLS)).hook);
    none.tracer.push((await toolCalls(withTracer, CALLS)).hook);
    none.llmPlain.push(modelCalls(plain, CALLS));
    noneLlm.push(modelCalls(withTracer, CALLS));
  }
  await plain.close();

  const exporter = new Dropping();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  trace.setGlobalTracerProvider(provider);
  const spanned = traced();
  await spanned.tracingReady;
  await toolCalls(spanned, CALLS);
  sdkSpans(CALLS);
  const hook: number[] = [];
  const total: number[] = [];
  const sdk: number[] = [];
  const llm: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t = await toolCalls(spanned, CALLS);
    hook.push(t.hook);
    total.push(t.total);
    sdk.push(sdkSpans(CALLS));
    llm.push(modelCalls(spanned, CALLS));
  }
  await spanned.close();
  await withTracer.close();
  await provider.shutdown();
  trace.disable();

  console.log(
    `\nTool call = preToolCall + postToolCall with a call id; medians of ${ROUNDS} rounds of ${CALLS} calls`,
  );
  row(["case", "tool call (hooks)", "tool call (with the span work)", "preLlmCall"]);
  row(["---", "---", "---", "---"]);
  row([
    "no provider, no tracer (before tracing)",
    ns(median(none.plain)),
    "",
    ns(median(none.llmPlain)),
  ]);
  row(["no provider, tracer plugged in", ns(median(none.tracer)), "", ns(median(noneLlm))]);
  row([
    "provider registered: a span per call",
    ns(median(hook)),
    ns(median(total)),
    ns(median(llm)),
  ]);
  row(["the SDK's own startSpan + end, same span", "", ns(median(sdk)), ""]);
  console.log(`(${exporter.spans} spans ended into the dropping exporter)`);
}

await main();
