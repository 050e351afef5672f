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
