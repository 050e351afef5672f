// deno-lint-ignore-file no-import-prefix -- full npm: specifiers, as the rest of the package has
/**
 * The real headless browser the web view's tests and benchmark drive:
 * Debian's Chromium, through playwright-core (no browser download).
 */
import * as fs from "node:fs";
import type { Browser } from "npm:playwright-core@1";

/** Where Debian installs Chromium. */
export const CHROMIUM = "/usr/bin/chromium";

/** Headless, and quiet: no sandbox (root in CI), no network of its own. */
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Whether Chromium is installed here. */
export const haveBrowser = fs.existsSync(CHROMIUM);

/** Launch it; playwright-core is loaded only when a browser is there to drive. */
export async function launchBrowser(): Promise<Browser> {
  const { chromium } = await import("npm:playwright-core@1");
  return await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
}
