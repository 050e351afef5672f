/**
 * Holds a run ledger locked from a process of its own, as another program
 * would: `exclusive` takes SQLite's exclusive locking mode and an exclusive
 * transaction (nobody can open, read or write the file), `write` an
 * exclusive transaction alone (readers go on in WAL mode, writers wait). It
 * prints `locked` once it holds the lock, and lets go after MS milliseconds,
 * or when its stdin closes (MS 0), then prints `released` and exits.
 * Usage: _ledger_locker.ts FILE MS exclusive|write
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { sqliteDriver } from "../_sqlite.ts";

const [file, ms, mode] = process.argv.slice(2) as [string, string, string];
fs.mkdirSync(path.dirname(file), { recursive: true });
const db = sqliteDriver()!.open(file, { readOnly: false });
db.exec("PRAGMA busy_timeout = 20000"); // the host's worker may be in a commit
if (mode === "exclusive") db.exec("PRAGMA locking_mode = EXCLUSIVE");
db.exec("BEGIN EXCLUSIVE");
process.stdout.write("locked\n");
await new Promise<void>((resolve) => {
  if (Number(ms) > 0) setTimeout(resolve, Number(ms));
  else {
    process.stdin.on("close", () => resolve());
    process.stdin.on("end", () => resolve());
    process.stdin.resume();
  }
});
db.exec("ROLLBACK");
db.close();
process.stdout.write("released\n");
process.exit(0);
