// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import these by URL
/**
 * Runs as OpenTelemetry traces, with the real SDK: the in-memory exporter for
 * what a run's spans hold, and the real OTLP/HTTP exporter (JSON) posting to a
 * receiver this test runs on loopback, from a host process that is SIGKILLed
 * and then resumed: one trace across the attempts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as http from "node:http";
import { type ChildProcess, spawn } from "node:child_process";
import type { AddressInfo } from "node:net";
import process from "node:process";
import { trace } from "npm:@opentelemetry/api@^1.9.0";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "npm:@opentelemetry/sdk-trace-base@^2.2.0";
import { createAgentCheckpoint } from "../mod.ts";
import { openStore } from "../store/mod.ts";
import { openPgStore } from "../store/postgres.ts";
import { fixture, scriptCommand, sleep, tempHome, waitFor } from "./_helpers.ts";
import { freshSchema, skipFleet } from "./store/_pg.ts";

/** A tracer provider with the in-memory exporter, registered for the test. */
function register(): { exporter: InMemorySpanExporter; provider: BasicTracerProvider } {
  trace.disable();
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  trace.setGlobalTracerProvider(provider);
  return { exporter, provider };
}

const byName = (spans: ReadableSpan[], name: string) => spans.filter((s) => s.name === name);
const one = (spans: ReadableSpan[], name: string): ReadableSpan => {
  const found = byName(spans, name);
  assert.equal(found.length, 1, `one span ${name} in ${spans.map((s) => s.name).join(", ")}`);
  return found[0]!;
};

test("a run is an invoke_agent span, its tool calls execute_tool children, its tiers events", async () => {
  const { exporter, provider } = register();
  try {
    const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
    await ac.tracingReady;
    const run = ac.startRun({
      sessionId: "traced",
      caps: { turns: 20, tokens: 10_000 },
      agentName: "researcher",
    });
    for (let turn = 0; turn < 19; turn++) {
      run.preLlmCall();
      run.postLlmCall({ inputTokens: 100, outputTokens: 20 });
    }
    run.preToolCall("search", { callId: "c1" });
    run.postToolCall("search", { callId: "c1", ok: true });
    run.preToolCall("bash", { callId: "c2" });
    run.postToolCall("bash", { callId: "c2", error: new Error("exit 1") });
    await run.checkpoint("halfway");
    await run.end({ status: "capped", summary: "stopped at the turn cap" });
    await ac.close();
    await provider.forceFlush();
    const spans = exporter.getFinishedSpans();

    const root = one(spans, "invoke_agent researcher");
    assert.equal(root.parentSpanContext, undefined);
    assert.equal(root.attributes["gen_ai.operation.name"], "invoke_agent");
    assert.equal(root.attributes["gen_ai.agent.name"], "researcher");
    assert.equal(root.attributes["gen_ai.conversation.id"], run.runId);
    assert.equal(root.attributes["gen_ai.usage.input_tokens"], 1900);
    assert.equal(root.attributes["gen_ai.usage.output_tokens"], 380);
    assert.equal(root.attributes["agent_checkpoint.attempt"], 1);
    assert.equal(root.attributes["agent_checkpoint.caps.turns"], 20);
    assert.equal(root.attributes["agent_checkpoint.caps.tokens"], 10_000);
    assert.equal(root.attributes["agent_checkpoint.turns.fraction_used"], 0.95);
    assert.equal(root.attributes["agent_checkpoint.tokens.fraction_used"], 0.228);
    assert.equal(root.attributes["agent_checkpoint.tier"], 2);
    assert.equal(root.attributes["agent_checkpoint.end.status"], "capped");
    assert.equal(root.status.code, 0); // capped is not an error

    // Tier crossings and checkpoint writes: events with the record's kind, tier and file.
    const tiers = root.events.filter((e) => e.name === "agent_checkpoint.tier");
    assert.deepEqual(tiers.map((e) => e.attributes?.["agent_checkpoint.record.tier"]), [1, 2]);
    for (const e of tiers) {
      assert.equal(e.attributes?.["agent_checkpoint.record.kind"], "tier");
      assert.equal(e.attributes?.["agent_checkpoint.record.file"], run.checkpointFile);
    }
    const manual = root.events.filter((e) => e.name === "agent_checkpoint.manual");
    assert.equal(manual.length, 1);
    assert.equal(manual[0]!.attributes?.["agent_checkpoint.record.source"], "host");
    assert.deepEqual(root.events.at(-1)?.name, "agent_checkpoint.end");

    const search = one(spans, "execute_tool search");
    assert.equal(search.spanContext().traceId, root.spanContext().traceId);
    assert.equal(search.parentSpanContext?.spanId, root.spanContext().spanId);
    assert.equal(search.attributes["gen_ai.operation.name"], "execute_tool");
    assert.equal(search.attributes["gen_ai.tool.name"], "search");
    assert.equal(search.attributes["gen_ai.tool.call.id"], "c1");
    assert.equal(search.status.code, 0);
    const bash = one(spans, "execute_tool bash");
    assert.equal(bash.status.code, 2); // ERROR
    assert.equal(bash.status.message, "exit 1");
  } finally {
    trace.disable();
  }
});

test("a failed run's span has status error; the ledger keeps its span's ids", async () => {
  const { exporter, provider } = register();
  try {
    const home = tempHome();
    const ac = createAgentCheckpoint({ home, env: {} });
    await ac.tracingReady;
    const run = ac.startRun({ sessionId: "failing" });
    await run.end({ status: "failed", summary: "the API key was revoked" });
    await ac.close();
    await provider.forceFlush();
    const span = one(exporter.getFinishedSpans(), "invoke_agent");
    assert.equal(span.status.code, 2);
    assert.match(span.status.message ?? "", /failed: the API key was revoked/);
    const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" })!;
    try {
      const record = (await store.latest("failing"))?.record;
      assert.deepEqual(record?.trace, {
        traceId: span.spanContext().traceId,
        spanId: span.spanContext().spanId,
      });
    } finally {
      await store.close();
    }
  } finally {
    trace.disable();
  }
});

test("no tracer provider registered, or otel off: no span, and no ids in the ledger", async () => {
  trace.disable();
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {} });
  await ac.tracingReady;
  await ac.startRun({ sessionId: "plain" }).end();
  const { exporter, provider } = register();
  try {
    const off = createAgentCheckpoint({ home, env: {}, settings: { otel: false } });
    await off.tracingReady;
    const run = off.startRun({ sessionId: "off" });
    run.preToolCall("search");
    run.postToolCall("search");
    await run.end();
    await off.close();
    await ac.close();
    await provider.forceFlush();
    assert.deepEqual(exporter.getFinishedSpans(), []);
    const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" })!;
    try {
      assert.equal((await store.latest("plain"))?.record.trace, undefined);
      assert.equal((await store.latest("off"))?.record.trace, undefined);
    } finally {
      await store.close();
    }
  } finally {
    trace.disable();
  }
});

test(
  "the fleet store keeps a run's span ids, so an attempt on another machine links to it",
  { skip: skipFleet },
  async () => {
    const db = await freshSchema();
    const { exporter, provider } = register();
    try {
      const settings = { store: db.url };
      const first = createAgentCheckpoint({ home: tempHome(), env: {}, settings });
      await first.tracingReady;
      await first.startRun({ sessionId: "fleet-run" }).end({ status: "aborted" });
      await first.close();
      // Another home: another machine's view of the run, through the fleet store alone.
      const second = createAgentCheckpoint({ home: tempHome(), env: {}, settings });
      // A first start connects this process's store thread (its wait is the longer one).
      await second.startRun({ sessionId: "warm-up" }).end();
      const run = second.startRun({ sessionId: "fleet-run" });
      assert.equal(run.attempt, 2);
      await run.end();
      await second.close();
      await provider.forceFlush();
      const [a, b] = byName(exporter.getFinishedSpans(), "invoke_agent")
        .filter((span) => span.attributes["gen_ai.conversation.id"] === "fleet-run");
      assert.ok(a && b);
      assert.equal(b.spanContext().traceId, a.spanContext().traceId);
      assert.equal(b.parentSpanContext?.spanId, a.spanContext().spanId);
      assert.deepEqual(b.links.map((l) => l.context.spanId), [a.spanContext().spanId]);
      const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
      try {
        const record = (await store.latest("fleet-run"))?.record;
        assert.equal(record?.attempt, 2);
        assert.deepEqual(record?.trace, {
          traceId: b.spanContext().traceId,
          spanId: b.spanContext().spanId,
        });
      } finally {
        await store.close();
      }
    } finally {
      trace.disable();
      await db.drop();
    }
  },
);

/** An OTLP/JSON span as the receiver gets it. */
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes?: { key: string; value: Record<string, unknown> }[];
}

/** An OTLP/HTTP receiver on loopback: what it got, and its URL. */
async function receiver(): Promise<
  { url: string; spans: OtlpSpan[]; posts: { path: string; type: string }[]; close(): void }
> {
  const spans: OtlpSpan[] = [];
  const posts: { path: string; type: string }[] = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (d) => body += d);
    req.on("end", () => {
      posts.push({ path: req.url ?? "", type: String(req.headers["content-type"]) });
      const parsed = JSON.parse(body) as {
        resourceSpans: { scopeSpans: { scope?: { name: string }; spans: OtlpSpan[] }[] }[];
      };
      for (const r of parsed.resourceSpans) {
        for (const s of r.scopeSpans) spans.push(...s.spans);
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    spans,
    posts,
    close: () => server.close(),
  };
}

const attr = (span: OtlpSpan, key: string) =>
  span.attributes?.find((a) => a.key === key)?.value.stringValue;

test(
  "a run killed by SIGKILL and resumed is one trace: the OTLP receiver has the first attempt's tool span, the resumed span and a cut-off stand-in link to the dead span",
  async () => {
    const home = tempHome();
    const otlp = await receiver();
    let child: ChildProcess | undefined;
    try {
      const [cmd, argv] = scriptCommand(fixture("otel_killed"), [home, otlp.url]);
      child = spawn(cmd, argv, { env: process.env, stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      let err = "";
      child.stdout!.on("data", (d) => out += d);
      child.stderr!.on("data", (d) => err += d);
      assert.ok(await waitFor(() => out.includes("ready"), 60_000), `no ready: ${err}`);
      // The finished tool call reached the receiver over OTLP/HTTP, as JSON.
      assert.ok(
        await waitFor(() => otlp.spans.some((s) => s.name === "execute_tool search"), 30_000),
        "the receiver got no execute_tool span",
      );
      assert.ok(otlp.posts.every((p) => p.path === "/v1/traces" && /json/.test(p.type)));
      // The ledger holds the attempt's span ids and where it got to before the kill.
      const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" })!;
      let before;
      try {
        const deadline = Date.now() + 30_000;
        do {
          before = (await store.latest("otel-run"))?.record;
          if (before?.trace && before.turnsUsed === 9 && before.inFlight.length === 1) break;
          await sleep(50);
        } while (Date.now() < deadline);
      } finally {
        await store.close();
      }
      assert.ok(before?.trace, "the ledger has the span's ids");
      assert.equal(before.inFlight[0]?.tool, "fetch_page");
      const dead = before.trace;
      const tool = otlp.spans.find((s) => s.name === "execute_tool search")!;
      assert.equal(tool.traceId, dead.traceId);
      assert.equal(tool.parentSpanId, dead.spanId);
      assert.equal(attr(tool, "gen_ai.tool.name"), "search");
      assert.equal(attr(tool, "gen_ai.tool.call.id"), "c1");
      const exited = new Promise((resolve) => child!.on("close", resolve));
      child.kill("SIGKILL");
      await exited;
      // The dead attempt's own span never reached the receiver: its process started it.
      assert.ok(!otlp.spans.some((s) => s.spanId === dead.spanId));

      const { exporter, provider } = register();
      try {
        const ac = createAgentCheckpoint({ home, env: {} });
        await ac.tracingReady;
        const run = ac.startRun({
          sessionId: "otel-run",
          caps: { turns: 10 },
          agentName: "researcher",
        });
        assert.equal(run.attempt, 2);
        run.preLlmCall();
        run.preToolCall("fetch_page", { callId: "c3" });
        run.postToolCall("fetch_page", { callId: "c3", ok: true });
        await run.end();
        await ac.close();
        await provider.forceFlush();
        const spans = exporter.getFinishedSpans();

        // The stand-in for the dead attempt: same trace, child of and linked to the dead span.
        const cut = one(spans, "invoke_agent researcher (cut off)");
        assert.equal(cut.spanContext().traceId, dead.traceId);
        assert.equal(cut.parentSpanContext?.spanId, dead.spanId);
        assert.deepEqual(cut.links.map((l) => l.context.spanId), [dead.spanId]);
        assert.equal(cut.status.code, 2);
        assert.match(
          cut.status.message ?? "",
          /attempt 1 was cut off \(turn 9, .*tier 2, in fetch_page\)/,
        );
        assert.equal(cut.attributes["agent_checkpoint.attempt"], 1);
        assert.equal(cut.attributes["agent_checkpoint.cut_off.turns_used"], 9);
        assert.equal(cut.attributes["agent_checkpoint.cut_off.tier"], 2);
        assert.deepEqual(cut.attributes["agent_checkpoint.cut_off.in_flight"], ["fetch_page"]);
        // It spans the dead attempt's life: from its start to its last sign of life.
        const startMs = cut.startTime[0] * 1000 + cut.startTime[1] / 1e6;
        assert.ok(Math.abs(startMs - before.startedAt) < 2, `${startMs} vs ${before.startedAt}`);

        // The resumed attempt: same trace, under the stand-in, linked to the dead span.
        const resumed = one(spans, "invoke_agent researcher");
        assert.equal(resumed.spanContext().traceId, dead.traceId);
        assert.equal(resumed.parentSpanContext?.spanId, cut.spanContext().spanId);
        assert.deepEqual(resumed.links.map((l) => l.context.spanId), [dead.spanId]);
        assert.equal(resumed.links[0]!.attributes?.["agent_checkpoint.attempt"], 1);
        assert.equal(resumed.attributes["agent_checkpoint.attempt"], 2);
        const resume = resumed.events.find((e) => e.name === "agent_checkpoint.resume");
        assert.equal(resume?.attributes?.["agent_checkpoint.previous.state"], "cut-off");
        assert.equal(resume?.attributes?.["agent_checkpoint.previous.attempt"], 1);
        const fetch = one(spans, "execute_tool fetch_page");
        assert.equal(fetch.spanContext().traceId, dead.traceId);
        assert.equal(fetch.parentSpanContext?.spanId, resumed.spanContext().spanId);
      } finally {
        trace.disable();
      }
    } finally {
      if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      otlp.close();
    }
  },
);

test("the watchdog's stall, tool-timeout and deadline checkpoints are events on the run's span", async () => {
  const { exporter, provider } = register();
  try {
    const kinds: string[] = [];
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      settings: { stall_window_seconds: 0.3, deadline_grace_seconds: 0.2 },
      onCheckpoint: (event) => kinds.push(event.kind),
    });
    await ac.tracingReady;
    const run = ac.startRun({ sessionId: "watched", caps: { timeSeconds: 1.5 } });
    run.preToolCall("slow_fetch", { callId: "c1", timeoutSeconds: 0.2 });
    const deadline = run.time.stopAtDeadline(); // a deadline record at the time cap + the grace
    const all = ["tool_timeout", "stall", "deadline"];
    assert.ok(await waitFor(() => all.every((k) => kinds.includes(k)), 30_000), kinds.join());
    assert.ok(await waitFor(() => deadline.aborted));
    run.postToolCall("slow_fetch", { callId: "c1", error: run.time.toolSignal("c1").reason });
    await run.end({ status: "deadline" });
    await ac.close();
    await provider.forceFlush();
    const spans = exporter.getFinishedSpans();
    const root = one(spans, "invoke_agent");
    const names = root.events.map((e) => e.name);
    for (const kind of all) assert.ok(names.includes(`agent_checkpoint.${kind}`), names.join());
    const stall = root.events.find((e) => e.name === "agent_checkpoint.stall")!;
    assert.equal(stall.attributes?.["agent_checkpoint.record.file"], run.checkpointFile);
    assert.equal(root.status.code, 2); // a run ended by its deadline is an error
    assert.equal(root.attributes["agent_checkpoint.caps.time_seconds"], 1.5);
    assert.equal(one(spans, "execute_tool slow_fetch").status.code, 2);
  } finally {
    trace.disable();
  }
});

test("tool spans whose end never comes are bounded, and all are ended by the run's end", async () => {
  const { exporter, provider } = register();
  try {
    const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
    await ac.tracingReady;
    const run = ac.startRun({ sessionId: "leaky" });
    for (let i = 0; i < 70; i++) run.preToolCall("spawn", { callId: `c${i}` });
    await Promise.resolve(); // the spans are made after the hooks, in a microtask
    await provider.forceFlush();
    const early = byName(exporter.getFinishedSpans(), "execute_tool spawn");
    assert.deepEqual(early.map((s) => s.attributes["gen_ai.tool.call.id"]), [
      "c0",
      "c1",
      "c2",
      "c3",
      "c4",
      "c5",
    ]);
    assert.match(early[0]!.status.message ?? "", /never reported/);
    await run.end();
    await ac.close();
    await provider.forceFlush();
    const all = byName(exporter.getFinishedSpans(), "execute_tool spawn");
    assert.equal(all.length, 70);
    assert.equal(all.at(-1)!.status.message, "the run ended first");
  } finally {
    trace.disable();
  }
});

test("a run started right after the keeper is made (before the API's import settles) gets its span, from its real start, with what it missed", async () => {
  const [cmd, args] = scriptCommand(fixture("otel_first_run"), [tempHome()]);
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"] });
    let text = "";
    child.stdout.on("data", (d) => text += d);
    child.on("error", reject);
    child.on("exit", (code) => code === 0 ? resolve(text) : reject(new Error(`exit ${code}`)));
  });
  const { startedAt, spans } = JSON.parse(out) as {
    startedAt: number;
    spans: {
      name: string;
      start: number;
      parent?: string;
      id: string;
      events: string[];
      status?: string;
    }[];
  };
  const runs = spans.filter((s) => s.name === "invoke_agent researcher");
  assert.equal(runs.length, 1, JSON.stringify(spans));
  const span = runs[0]!;
  // Its real start: when startRun was called, not when the API was loaded (a few ms either way).
  assert.ok(Math.abs(span.start - startedAt) < 1000, `${span.start} vs ${startedAt}`);
  assert.equal(span.status, "done");
  assert.deepEqual(
    span.events.filter((e) => e !== "agent_checkpoint.end"),
    ["agent_checkpoint.tier", "agent_checkpoint.tier"],
  );
  assert.ok(span.events.includes("agent_checkpoint.end"));
  const tool = spans.find((s) => s.name === "execute_tool search");
  assert.equal(tool?.parent, span.id);
});
