#!/usr/bin/env node
/** The `agent-checkpoint` command (the npm bin; `deno task cli` in the repository). */
import process from "node:process";
import { main } from "../cli/mod.ts";
import { releaseStdin } from "../cli/_common.ts";

main(process.argv.slice(2)).then(
  (code) => void (process.exitCode = code),
  (error) => {
    process.stderr.write(`agent-checkpoint: ${error?.stack ?? error}\n`);
    process.exitCode = 1;
  },
).finally(releaseStdin);
