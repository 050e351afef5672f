/**
 * A receipt is durable before the model sees the tool's result, in every
 * adapter, for a tool in `effect_tools` without replay: a host process is
 * SIGKILLed the moment its next model request arrives (the process frozen
 * there, so nothing more is committed), and the retry finds the call done, not
 * of unknown outcome.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createAgentCheckpoint } from "../../mod.ts";
import { scriptCommand, tempHome } from "../_helpers.ts";

const HOST = fileURLToPath(
  new URL(`./_receipt_host${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url),
);
const INPUT = { to: "boss@example.com", subject: "report" };

/** Run the host until its second model call, and SIGKILL it there. */
function killedAtSecondCall(framework: string, home: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const [cmd, argv] = scriptCommand(HOST, [framework, home]);
    const child = spawn(cmd, argv, {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    let killed = false;
    child.stdout.on("data", (chunk) => {
      out += chunk;
      if (!killed && out.includes("MODEL 2")) {
        killed = true;
        child.kill("SIGKILL");
      }
    });
    child.stderr.on("data", (chunk) => err += chunk);
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      if (killed && signal === "SIGKILL") resolve(out);
      else {reject(
          new Error(
            `the host ended ${code ?? signal} before its second model call: ${err.slice(-2000)}`,
          ),
        );}
    });
  });
}

const FRAMEWORKS = [
  ["ai-sdk", "send_email"],
  ["openai-agents", "send_email"],
  ["langchain", "send_email"],
  ["langgraph", "send_email"],
  ["claude-agent-sdk", "mcp__t__send_email"],
] as const;

for (const [framework, tool] of FRAMEWORKS) {
  test(`${framework}: an effect tool's receipt is in the ledger before the next model call (killed there, the retry finds it done)`, async () => {
    const home = tempHome();
    await killedAtSecondCall(framework, home);
    const ac = createAgentCheckpoint({
      home,
      env: {},
      settings: { watchdog: false },
      logger: () => {},
    });
    try {
      const run = ac.startRun({ sessionId: "receipt" });
      const known = await run.effects.state(run.effects.key(tool, INPUT));
      assert.equal(known?.state, "done", `the call of ${tool}: ${JSON.stringify(known)}`);
      await run.end();
    } finally {
      await ac.close();
    }
  });
}
