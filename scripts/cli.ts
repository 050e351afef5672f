#!/usr/bin/env node
/** The `agent-checkpoint` command (the npm bin; `deno task cli` in the repository). */
import process from "node:process";
import { main } from "../cli.ts";

process.exitCode = main(process.argv.slice(2));
