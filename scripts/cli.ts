#!/usr/bin/env node
/** The `agent-checkpoint` command (the npm bin; `deno task cli` in the repository). */
import process from "node:process";
import { main } from "../cli/mod.ts";
import { releaseStdin } from "../cli/_stdin.ts";

/** Whether an error is a write to an output pipe whose reader is gone (`| head`). */
const closedPipe = (error: unknown): boolean =>
  (error as NodeJS.ErrnoException | undefined)?.code === "EPIPE" ||
  /\bEPIPE\b|broken pipe/i.test(String((error as Error | undefined)?.message ?? ""));

// A closed output pipe ends the command quietly, as it does any Unix tool.
process.stdout.on("error", (error) => {
  if (!closedPipe(error)) throw error;
  process.exit(0);
});

main(process.argv.slice(2)).then(
  (code) => void (process.exitCode = code),
  (error) => {
    if (closedPipe(error)) return process.exit(0);
    process.stderr.write(`agent-checkpoint: ${error?.stack ?? error}\n`);
    process.exitCode = 1;
  },
).finally(releaseStdin);
