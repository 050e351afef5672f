/**
 * The fleet store's tests run against a real PostgreSQL server: the URL in
 * `AGENT_CHECKPOINT_TEST_PG`, else `postgres://postgres@127.0.0.1:5432/test`.
 * Each test works in a schema of its own, dropped at its end. Outside CI,
 * where no server answers, the tests are skipped with one line saying how to
 * run them; in CI (`CI=true`) they always run, and fail when it does not answer.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { loadDriver, type Sql } from "../../store/postgres.ts";

/** The server the tests use. */
export const PG_URL = process.env.AGENT_CHECKPOINT_TEST_PG ??
  "postgres://postgres@127.0.0.1:5432/test";

const inCi = /^(1|true)$/i.test(process.env.CI ?? "");

/** A connection for the test's own use (schemas, `pg_terminate_backend`). */
export async function admin(url: string = PG_URL): Promise<Sql> {
  const postgres = await loadDriver();
  return postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 3, fetch_types: false });
}

async function reachable(): Promise<string | undefined> {
  try {
    const sql = await admin();
    try {
      await sql.unsafe("SELECT 1");
      return undefined;
    } finally {
      await sql.end({ timeout: 1 });
    }
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

const unreachable = await reachable();
// One line per test process, however many test files (each in an isolate of its own) ask.
if (unreachable !== undefined && !inCi && firstToSay()) {
  console.log(
    `fleet store tests did not run: no PostgreSQL at ${PG_URL} (${unreachable}); start one (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start) or set AGENT_CHECKPOINT_TEST_PG, then run npx -y deno@2.9.6 test -A tests/store/`,
  );
}

/** Whether this isolate is the first of its process to tell the fleet tests did not run. */
function firstToSay(): boolean {
  try {
    fs.writeFileSync(path.join(os.tmpdir(), `agent-checkpoint-fleet-skip-${process.pid}`), "", {
      flag: "wx",
    });
    return true;
  } catch {
    return false;
  }
}

/** Skip (outside CI) when no server answers; in CI the tests run and fail. */
export const skipFleet: boolean | string = unreachable !== undefined && !inCi
  ? "no PostgreSQL server (see the line above)"
  : false;

/**
 * A schema of the test's own, empty (the store creates its tables in it on
 * first use): its store URL, and `drop()` for the end.
 */
export async function freshSchema(): Promise<
  { url: string; schema: string; drop(): Promise<void> }
> {
  const schema = `ac_test_${randomBytes(6).toString("hex")}`;
  const sql = await admin();
  try {
    await sql.unsafe(`CREATE SCHEMA "${schema}"`);
  } finally {
    await sql.end({ timeout: 1 });
  }

  const url = new URL(PG_URL);
  url.searchParams.set("schema", schema);
  return {
    url: url.href,
    schema,
    async drop() {
      const sql = await admin();
      try {
        await sql.unsafe(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await sql.end({ timeout: 1 });
      }
    },
  };
}

/** This machine's PostgreSQL binaries, when a test may start a server of its own (needs root). */
function pgBin(): string | undefined {
  if (process.platform !== "linux" || process.getuid?.() !== 0) return undefined;
  const root = "/usr/lib/postgresql";
  const version = (fs.existsSync(root) ? fs.readdirSync(root) : []).sort().at(-1);
  const bin = version === undefined ? "" : path.join(root, version, "bin");
  return bin !== "" && fs.existsSync(path.join(bin, "initdb")) ? bin : undefined;
}

/** Why a test that stops and starts a server of its own cannot run here, else false. */
export const skipPrivateServer: boolean | string = skipFleet ||
  (!pgBin() && "no PostgreSQL binaries to start a server of its own (needs root)");

/**
 * A PostgreSQL server of the test's own on loopback, started: one a test may stop, restart or
 * kill, never the machine's shared one. `ctl` runs its `pg_ctl` (`ctl("-w", "-m", "fast",
 * "stop")`); `remove` stops it at once and deletes its files.
 */
export function privateServer(salt: number): {
  url: string;
  ctl(...args: string[]): void;
  remove(): void;
} {
  const bin = pgBin()!;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ac-pg-"));
  fs.chownSync(dir, Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" })), 0);
  const port = 20_000 + ((process.pid + salt) % 20_000);
  const asPostgres = (tool: string, ...args: string[]) =>
    execFileSync("runuser", ["-u", "postgres", "--", path.join(bin, tool), ...args], {
      stdio: "ignore",
    });
  const ctl = (...args: string[]) =>
    asPostgres(
      "pg_ctl",
      "-D",
      path.join(dir, "data"),
      "-o",
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1`,
      "-l",
      path.join(dir, "log"),
      ...args,
    );
  asPostgres("initdb", "-D", path.join(dir, "data"), "-A", "trust");
  ctl("-w", "start");
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    ctl,
    remove() {
      try {
        ctl("-w", "-m", "immediate", "stop");
      } catch { /* already stopped */ }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
