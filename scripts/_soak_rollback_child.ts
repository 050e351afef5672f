/**
 * A rollback in a process of its own, for the rollback soak to kill:
 * `<home> <project> <target>` prints the rollback's result as one JSON line.
 *
 * @module
 */
import process from "node:process";
import { rollback } from "../workspace/mod.ts";

const [home = "", project = "", target = "1"] = process.argv.slice(2);
process.stdout.write(JSON.stringify(rollback({ home, project, target })) + "\n");
