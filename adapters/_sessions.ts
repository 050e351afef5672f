/**
 * What the adapters' session stores share: a call of a keeper's session
 * transcripts, tried again while another process holds the store locked for
 * a moment.
 *
 * @module
 */
import type { AgentCheckpoint } from "../mod.ts";
import type { LedgerSessions } from "../_ledger.ts";

/** How long a call waits, at most, for a store another process holds locked, ms. */
const BUSY_WAIT_MS = 5000;

/** Whether a store's failure is a lock another process holds for a moment (tried again). */
const busy = (error: unknown) =>
  /database is locked|SQLITE_BUSY|handed on/i.test(
    error instanceof Error ? error.message : String(error),
  );

/**
 * A call of a keeper's session transcripts, tried again (for up to 5 s) while
 * another process holds the store locked.
 *
 * @param ac The keeper whose run store keeps the transcripts.
 * @param call What to do with them.
 * @returns What the call returns.
 *
 * @example
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { transcripts } from "./_sessions.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const key = { scope: "demo", sessionId: "s", subpath: "" };
 * await transcripts(ac, (s) => s.append(key, [{ json: '{"type":"user"}' }]));
 * assert.deepEqual(await transcripts(ac, (s) => s.load(key)), ['{"type":"user"}']);
 * await ac.close();
 * ```
 */
export async function transcripts<T>(
  ac: AgentCheckpoint,
  call: (sessions: LedgerSessions) => Promise<T>,
): Promise<T> {
  const until = Date.now() + BUSY_WAIT_MS;
  for (let wait = 10;; wait = Math.min(wait * 2, 250)) {
    try {
      return await call(ac.sessionTranscripts());
    } catch (error) {
      if (!busy(error) || Date.now() + wait > until) throw error;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}
