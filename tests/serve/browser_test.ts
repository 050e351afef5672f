// deno-lint-ignore-file no-import-prefix -- full npm: specifiers, as the rest of the package has
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { Browser, Page } from "npm:playwright-core@1";
import { type RunServer, serveRuns } from "../../serve/mod.ts";
import { CHROMIUM, haveBrowser, launchBrowser } from "./_browser.ts";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { fixture, scriptCommand, tempHome, waitFor } from "../_helpers.ts";
import { freshSchema, skipFleet } from "../store/_pg.ts";
import { openPgStore } from "../../store/postgres.ts";
import { loadSettings } from "../../config.ts";
import { createAgentCheckpoint } from "../../mod.ts";
import { openStore } from "../../store/mod.ts";
import {
  AGENT_TEXT,
  EVIL_ID,
  EVIL_TEXT,
  type Fleet,
  LONG_TOOL,
  makeFleet,
  makeRetried,
  PAYLOAD,
} from "./_fleet.ts";

/** Where the screenshots the docs show are saved (docs/serve-*.png). */
const DOCS = fileURLToPath(new URL("../../docs/", import.meta.url));

if (!haveBrowser) {
  console.log(
    `serve: the browser tests did not run: no Chromium at ${CHROMIUM} (apt-get install chromium)`,
  );
}
const skip = !haveBrowser;

let fleet: Fleet;
let server: RunServer;
let browser: Browser;

before(async () => {
  if (skip) return;
  fleet = await makeFleet();
  server = await serveRuns({ store: fleet.store, settings: fleet.settings, port: 0 });
  browser = await launchBrowser();
});
after(async () => {
  if (skip) return;
  await browser.close();
  await server.close();
  await fleet.close();
});

/** A fresh page that records script errors, dialogs and CSP violations. */
async function open(hash = ""): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems: string[] = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("dialog", (d) => {
    problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console: ${m.text()}`);
  });
  await page.goto(server.url + hash);
  await page.waitForSelector("#rows [data-run]");
  return { page, problems };
}

/** The rows' run ids and statuses, as the page shows them. */
const rows = (page: Page) =>
  page.$$eval(
    "#rows [data-run]",
    (els) => els.map((e) => [e.getAttribute("data-run"), e.getAttribute("data-status")]),
  );

test("the page lists live, ended and cut-off runs", { skip }, async () => {
  const { page, problems } = await open();
  try {
    const shown = Object.fromEntries(await rows(page));
    assert.deepEqual(shown, {
      "live-1": "live",
      "ended-done": "done",
      "ended-capped": "capped",
      "cut-1": "cut-off",
      [EVIL_ID]: "cut-off",
    });
    // Each run's caps as bars, with a tick at each tier fraction.
    const capped = page.locator('#rows [data-run="ended-capped"]');
    assert.deepEqual(await capped.locator(".cap .axis").allTextContents(), ["turns", "time"]);
    assert.equal(await capped.locator(".cap").first().locator(".tick").count(), 2);
    assert.equal(await capped.locator(".mark.tier").count(), 2);
    assert.equal(await capped.locator(".mark.checkpoint").count(), 1);
    assert.match(await page.textContent("#status-filter") ?? "", /cut off 2/);
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});

test("the status filter narrows the list", { skip }, async () => {
  const { page } = await open();
  try {
    for (const s of ["live", "done", "capped", "failed", "aborted", "deadline"]) {
      await page.uncheck(`#status-filter input[value="${s}"]`);
    }
    await page.locator('#rows [data-run]:not([data-status="cut-off"])').first().waitFor({
      state: "detached",
    });
    assert.deepEqual((await rows(page)).map((r) => r[0]).sort(), ["cut-1", EVIL_ID].sort());
    assert.match(page.url(), /#status=cut-off$/);
  } finally {
    await page.close();
  }
});

test(
  "a cut-off run's detail shows where it stopped, its attempts and its file",
  { skip },
  async () => {
    const { page, problems } = await open();
    try {
      await page.click('#rows [data-run="cut-1"]');
      await page.waitForSelector("#d-stopped.cut-off");
      assert.match(
        await page.textContent("#d-stopped") ?? "",
        /^Where it stopped: attempt 1 cut off after 3 of 20 turns and .*, inside tool deploy \(call id held, for /,
      );
      assert.match(
        await page.textContent("#d-record") ?? "",
        /in flightdeploy \(call held\) since/,
      );
      assert.match(await page.textContent("#d-attempts") ?? "", /cut off/);
      assert.ok((await page.textContent("#d-file") ?? "").endsWith(AGENT_TEXT));
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  },
);

test(
  "a run id and agent text holding script payloads run nothing and show as text",
  { skip },
  async () => {
    // Opened with the payload's run selected, so its id reaches the page by the address too.
    const { page, problems } = await open(`#run=${encodeURIComponent(EVIL_ID)}`);
    try {
      await page.locator("#d-file").filter({ hasText: "Step 2 of 4" }).waitFor();
      const row = page.locator("#rows [data-run]").filter({ hasText: "evil" });
      assert.equal(await row.locator(".rid").textContent(), EVIL_ID);
      assert.equal(await page.textContent("#d-title .badge"), "cut off");
      assert.ok((await page.textContent("#d-title") ?? "").startsWith(EVIL_ID));
      assert.ok((await page.textContent("#d-file") ?? "").endsWith(EVIL_TEXT));
      assert.ok((await page.textContent("#d-json") ?? "").includes(JSON.stringify(EVIL_ID)));
      // Let the page poll (and redraw) once more before looking for the payload's effects.
      const drawn = await page.textContent("#updated");
      await page.locator("#updated").filter({ hasNotText: drawn ?? "" }).waitFor();
      assert.equal(
        await page.evaluate(() => (globalThis as { __pwned?: unknown }).__pwned),
        undefined,
      );
      assert.equal(await page.locator("img").count(), 0);
      assert.equal(await page.locator("script").count(), 1); // the page's own /app.js
      assert.ok(PAYLOAD.includes("<script>"));
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  },
);

test("the page updates when a run changes, without a reload", { skip }, async () => {
  const { page, problems } = await open();
  try {
    // A reload would forget this.
    await page.evaluate(() => (globalThis as { __same?: number }).__same = 1);
    assert.equal((Object.fromEntries(await rows(page)))["live-1"], "live");
    await page.click('#rows [data-run="live-1"]');
    await page.waitForSelector("#d-stopped:not(.cut-off)");
    assert.match(await page.textContent("#d-stopped") ?? "", /^Now: attempt 1 is still live/);

    await fleet.live.end({ status: "aborted", summary: "stopped by its user" });
    await page.waitForSelector('#rows [data-run="live-1"][data-status="aborted"]', {
      timeout: 30_000,
    });
    await page.locator("#d-stopped").filter({ hasText: /^Ended: attempt 1 ended aborted/ })
      .waitFor();
    const added = fleet.ac.startRun({ sessionId: "new-1", caps: { turns: 12 } });
    await page.waitForSelector('#rows [data-run="new-1"][data-status="live"]', { timeout: 30_000 });
    await added.end({ status: "done" });
    await page.waitForSelector('#rows [data-run="new-1"][data-status="done"]', { timeout: 30_000 });
    assert.equal(await page.evaluate(() => (globalThis as { __same?: number }).__same), 1);
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});

test(
  "a run cut off three times shows each attempt's end on its bar; a tool in flight has its full name and age",
  { skip },
  async () => {
    const retried = await makeRetried();
    const own = await serveRuns({ store: retried.store, settings: retried.settings, port: 0 });
    const page = await browser.newPage({ viewport: { width: 1400, height: 520 } });
    try {
      await page.goto(own.url + "#run=retried");
      // A mark is a zero-width line (its shape is drawn by ::before): attached, not "visible".
      await page.waitForSelector('#rows [data-run="retried"] .mark.attempt', { state: "attached" });
      const row = page.locator('#rows [data-run="retried"]');
      // An end the busy ledger could not take at once lands a moment later; the page polls.
      await page.locator('#rows [data-run="retried"][data-status="aborted"]').waitFor({
        state: "attached",
        timeout: 30_000,
      });
      assert.equal(await row.getAttribute("data-status"), "aborted");
      assert.deepEqual(
        await row.locator(".mark.attempt").evaluateAll((els) =>
          els.map((e) => [e.getAttribute("data-attempt"), e.getAttribute("title")])
        ).then((marks) => marks.map(([n, title]) => [n, /^attempt \d cut off at /.test(title!)])),
        [["1", true], ["2", true], ["3", true]],
      );
      assert.match(
        await row.locator(".meta").textContent() ?? "",
        /attempt 4 \(3 cut off before\)/,
      );
      assert.match(
        await page.textContent('#status-filter [data-status="cut-off"]') ?? "",
        /\(\+3 earlier attempts\)/,
      );
      // The tool in flight: its whole name and its age on a line of its own, shown whole (not
      // cut by an ellipsis), its call id in the tooltip.
      const inflight = page.locator('#rows [data-run="busy"] .inflight');
      assert.match(await inflight.textContent() ?? "", new RegExp(`^in ${LONG_TOOL} \\d+s$`));
      assert.ok(
        await inflight.evaluate((e) => e.scrollWidth <= e.clientWidth && e.clientWidth > 0),
        "the in-flight line is shown whole",
      );
      assert.match(
        await page.locator('#rows [data-run="busy"] .meta').getAttribute("title") ?? "",
        /in flight: .* \(call id call-long\) since /,
      );
      await page.locator("#d-attempts").filter({ hasText: "cut off" }).waitFor();
      await page.screenshot({ path: path.join(DOCS, "serve-attempts.png") });
    } finally {
      await page.close();
      await own.close();
      await retried.close();
    }
  },
);

/** Whether this process may give a child a host name of its own (a UTS namespace: root, Linux). */
const canRename = (() => {
  try {
    return execFileSync("unshare", ["--uts", "sh", "-c", "hostname runner-2 && hostname"], {
      stdio: ["ignore", "pipe", "ignore"],
    }).toString().trim() === "runner-2";
  } catch {
    return false;
  }
})();

test(
  "a fleet of two machines on one PostgreSQL store: each machine's runs, and the host filter",
  {
    skip: skip || skipFleet ||
      (!canRename && "no second host name (unshare --uts needs root on Linux)"),
  },
  async () => {
    const db = await freshSchema();
    const children: ChildProcess[] = [];
    const release = path.join(tempHome(), "release");
    /** An attempt on `machine` (a child with that host name): ended, or held live till release. */
    const attempt = (machine: string | undefined, plan: Record<string, unknown>) => {
      const [cmd, argv] = scriptCommand(fixture("pg_attempt"), [tempHome(), JSON.stringify(plan)]);
      const child = machine === undefined
        ? spawn(cmd, argv, {
          env: { ...process.env, AGENT_CHECKPOINT_STORE: db.url },
          stdio: ["ignore", "pipe", "inherit"],
        })
        : spawn("unshare", [
          "--uts",
          "sh",
          "-c",
          `hostname ${machine} && exec "$0" "$@"`,
          cmd,
          ...argv,
        ], {
          env: { ...process.env, AGENT_CHECKPOINT_STORE: db.url },
          stdio: ["ignore", "pipe", "inherit"],
        });
      children.push(child);
      let out = "";
      child.stdout!.on("data", (d) => out += d);
      return { child, printed: () => out.includes("\n") };
    };
    const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
    const { settings } = loadSettings({ home: tempHome(), env: {} });
    let own: RunServer | undefined;
    try {
      const ended = [
        attempt("runner-2", { sessionId: "nightly-build", turns: 12, calls: 7, end: "done" }),
        attempt("runner-2", { sessionId: "e2e-suite", turns: 10, calls: 9, end: "capped" }),
        attempt(undefined, { sessionId: "unit-tests", turns: 20, calls: 3, end: "failed" }),
      ];
      const held = [
        attempt("runner-2", { sessionId: "deploy-3", turns: 20, calls: 11, hold: release }),
        attempt(undefined, { sessionId: "migrate-9", turns: 30, calls: 16, hold: release }),
      ];
      for (const a of [...ended, ...held]) {
        assert.ok(await waitFor(a.printed, 90_000), "an attempt of the fleet started");
      }
      // Killed where it stands: this machine's run is cut off at once (its pid is gone).
      const killed = held[1]!.child;
      const exited = new Promise((r) => killed.once("exit", r));
      killed.kill("SIGKILL");
      await exited;
      own = await serveRuns({ store, settings, port: 0 });
      const page = await browser.newPage({ viewport: { width: 1400, height: 420 } });
      try {
        await page.goto(own.url);
        await page.waitForSelector('#rows [data-run="migrate-9"][data-status="cut-off"]');
        const shown = Object.fromEntries(await rows(page));
        assert.deepEqual(shown, {
          "nightly-build": "done",
          "e2e-suite": "capped",
          "unit-tests": "failed",
          "deploy-3": "live",
          "migrate-9": "cut-off",
        });
        const machines = await page.$$eval("#host option", (os) => os.map((o) => o.value));
        assert.ok(machines.includes("runner-2") && machines.length === 3, machines.join(", "));
        assert.match(
          await page.textContent('#rows [data-run="deploy-3"] .meta') ?? "",
          /^live · runner-2 · /,
        );
        await page.screenshot({ path: path.join(DOCS, "serve-fleet.png") });
        // The host filter narrows the list to one machine.
        await page.selectOption("#host", "runner-2");
        await page.locator('#rows [data-run="unit-tests"]').waitFor({ state: "detached" });
        assert.deepEqual(
          (await rows(page)).map((r) => r[0]).sort(),
          ["deploy-3", "e2e-suite", "nightly-build"],
        );
      } finally {
        await page.close();
      }
    } finally {
      fs.writeFileSync(release, "");
      for (const c of children) {
        if (c.exitCode === null && c.signalCode === null) {
          await new Promise((r) => c.once("close", r));
        }
      }
      await own?.close();
      await store.close();
      await db.drop();
    }
  },
);

test(
  "a tree's runs: a child's row names its parent; the root's detail lists its children and the tree's totals",
  {
    skip,
  },
  async () => {
    const home = tempHome();
    const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
    const lead = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
    lead.preLlmCall();
    lead.postLlmCall({ inputTokens: 100, outputTokens: 50, usd: 0.2 });
    const helper = ac.startRun({ sessionId: "helper", parent: lead });
    helper.preLlmCall();
    helper.postLlmCall({ inputTokens: 1000, outputTokens: 500, usd: 0.3 });
    await helper.end();
    await lead.end();
    await ac.close();
    const { settings } = loadSettings({ home, env: {} });
    const store = openStore({ home, settings, mode: "read" })!;
    const own = await serveRuns({ store, settings, port: 0 });
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    try {
      await page.goto(own.url);
      await page.waitForSelector('#rows [data-run="helper"]');
      assert.match(
        await page.textContent('#rows [data-run="helper"] .meta') ?? "",
        /child of lead/,
      );
      await page.click('#rows [data-run="lead"]');
      await page.waitForSelector("#d-tree-box:not([hidden])");
      const tree = await page.textContent("#d-tree") ?? "";
      assert.match(tree, /rootlead \(this run\)/);
      assert.match(tree, /childrenhelper \(done\)/);
      assert.match(tree, /totals2 runs: 2 turns, 1650 tokens, \$0\.50 of \$1\.00/);
      // A child opens its own detail, which has no children.
      await page.click('#d-tree a[data-run="helper"]');
      await page.locator("#d-title", { hasText: "helper" }).waitFor();
      assert.match(await page.textContent("#d-tree") ?? "", /parentlead/);
    } finally {
      await page.close();
      await own.close();
      await store.close();
    }
  },
);
