// ls, show and audit over the run ledger show a tree of runs sharing one budget: each run's
// parent, a run's children, and the tree's totals against the root's caps.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createAgentCheckpoint } from "../../mod.ts";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { tempHome } from "../_helpers.ts";

/** A lead with two helpers under an enforced $1.00 cap: $0.20 + $0.30 + $0.60 spent. */
async function treeHome(): Promise<string> {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { enforce: ["usd"] } });
  const lead = ac.startRun({ sessionId: "lead", caps: { usd: 1, turns: 50 } });
  lead.preLlmCall();
  lead.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.2 });
  const a = ac.startRun({ sessionId: "helper-a", parent: lead });
  a.preLlmCall();
  a.postLlmCall({ inputTokens: 1000, outputTokens: 500, usd: 0.3 });
  const b = ac.startRun({ sessionId: "helper-b", parent: lead });
  b.preLlmCall();
  b.postLlmCall({ inputTokens: 2000, outputTokens: 500, usd: 0.6 });
  b.preLlmCall(); // the tree passed $1.00: every run of it stops
  assert.equal(lead.signal.aborted, true);
  for (const run of [a, b, lead]) await run.end();
  await ac.close();
  // One run that is in no tree: it gets no parent and counts toward no tree.
  const other = createAgentCheckpoint({ home, env: {} });
  await other.startRun({ sessionId: "solo" }).end();
  await other.close();
  return home;
}

async function cli(home: string, ...args: string[]): Promise<string> {
  const m = memoryIo({ env: {} });
  const code = await main([...args, "--home", home], m.io);
  assert.equal(code, 0, m.stderr());
  return m.stdout();
}

const TOTALS = "3 runs: 4 of 50 turns, 4150 tokens, $1.10 of $1.00";

test("ls gives each run of a tree its parent, and the tree's totals against the root's caps", async () => {
  const home = await treeHome();
  const ls = await cli(home, "ls");
  assert.match(ls, /^RUN .* PARENT$/m);
  assert.match(ls, /^helper-a .* lead$/m);
  assert.match(ls, /^helper-b .* lead$/m);
  assert.match(ls, /^lead .* -$/m);
  assert.match(ls, /^solo .* -$/m);
  assert.match(ls, new RegExp(`^tree lead: ${TOTALS.replace(/[$.]/g, "\\$&")}$`, "m"));
  const json = JSON.parse(await cli(home, "ls", "--json"));
  assert.equal(json.trees.length, 1);
  const { usd, ...totals } = json.trees[0].totals;
  assert.deepEqual(totals, { turns: 4, tokens: 4150, usdUnknown: 0 });
  assert.ok(Math.abs(usd - 1.1) < 1e-9, `$${usd}`);
  assert.deepEqual(json.trees[0].caps, { turns: 50, usd: 1 });
  assert.equal(
    json.runs.find((r: { runId: string }) => r.runId === "helper-a").tree.parent,
    "lead",
  );
});

test("show of a tree's root names its children and the tree's totals; show of a child names its parent", async () => {
  const home = await treeHome();
  const lead = await cli(home, "show", "lead");
  assert.match(lead, /^tree +its root/m);
  assert.match(lead, /^children +helper-b \(ended capped\), helper-a \(ended capped\)$/m);
  assert.match(lead, new RegExp(`^tree totals +${TOTALS.replace(/[$.]/g, "\\$&")}$`, "m"));
  const child = await cli(home, "show", "helper-a");
  assert.match(child, /^tree +lead$/m);
  assert.match(child, /^parent +lead$/m);
  assert.doesNotMatch(child, /^children/m);
  assert.match(child, /^tree totals +3 runs: /m);
  const solo = await cli(home, "show", "solo");
  assert.doesNotMatch(solo, /^(tree|parent|children)\b/m);
  const json = JSON.parse(await cli(home, "show", "lead", "--json"));
  assert.equal(json.tree.root, "lead");
  assert.equal(json.tree.members.length, 3);
});

test("audit lists each tree with its totals", async () => {
  const home = await treeHome();
  const audit = await cli(home, "audit");
  assert.match(audit, /^trees +1 \(runs sharing one budget\)$/m);
  assert.match(audit, new RegExp(`^  tree lead +${TOTALS.replace(/[$.]/g, "\\$&")}$`, "m"));
  const json = JSON.parse(await cli(home, "audit", "--json"));
  assert.equal(json.trees[0].root, "lead");
  assert.ok(Math.abs(json.trees[0].totals.usd - 1.1) < 1e-9);
});
