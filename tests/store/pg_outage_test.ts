// The fleet store after an outage: a live process's runs read `live` again within 2 s of the
// server answering (a bounded probe, not a wait that grows to 30 s), so a retry or a scheduler
// that trusts "cut off" does not start a second live attempt. On a PostgreSQL server of the
// test's own, stopped and started: never the machine's shared one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { tempHome } from "../_helpers.ts";
import { privateServer, skipPrivateServer } from "./_pg.ts";
import { type Machine, machine } from "./_machines.ts";
import { openPgStore } from "../../store/postgres.ts";

const RUNS = ["r0", "r1", "r2", "r3", "r4"];
/** The store's promise after the server answers again, and a bound for a loaded machine. */
const BACK_MS = 2_000;
const LOAD_MS = 2_000;

test(
  "postgres: after a 20 s outage a live process's runs read live again within 2 s of the server answering",
  {
    skip: skipPrivateServer,
  },
  async () => {
    const server = privateServer(7919);
    const { url } = server;
    const pgCtl = server.ctl;
    const machines: Machine[] = [];
    const store = openPgStore({ url, hostTimeoutSeconds: 30 });
    const states = async () =>
      await Promise.all(
        RUNS.map(async (id) => (await store.latest(id).catch(() => undefined))?.state),
      );
    const allLive = async (ms: number) => {
      const end = Date.now() + ms;
      for (;;) {
        if ((await states()).every((s) => s === "live")) return true;
        if (Date.now() > end) return false;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    };
    try {
      const a = machine(tempHome(), {
        name: "machine-a",
        store: url,
        settings: { progress_interval_seconds: 0.2 },
      });
      machines.push(a);
      for (const id of RUNS) await a.hold(id);
      assert.ok(await allLive(30_000), "the runs read live before the outage");
      pgCtl("-w", "-m", "fast", "stop");
      // Long enough for a growing wait to pass 8 s: the store tries again 16 s after.
      await new Promise((resolve) => setTimeout(resolve, 20_000));
      pgCtl("-w", "start");
      const answering = Date.now();
      const live = await allLive(BACK_MS + LOAD_MS);
      const took = Date.now() - answering;
      assert.ok(
        live,
        `the runs read ${
          JSON.stringify(await states())
        } ${took} ms after the server answered again`,
      );
      for (const id of RUNS) await a.end(id);
    } finally {
      await Promise.all(machines.map((m) => m.close().catch(() => {})));
      await store.close().catch(() => {});
      server.remove();
    }
  },
);
