/**
 * The fleet store's connection thread's entry: the module the main thread's
 * fleet store (`_pg_bridge.ts`) starts its worker with. It starts the
 * thread's work only in a thread started with the store's own data; anywhere
 * else (the main thread, a host's own worker with data of its own or none) it
 * does nothing.
 *
 * @module
 */
import { parentPort, workerData } from "node:worker_threads";
import { isBridgeData } from "./_pg_protocol.ts";
import { bridge } from "./_pg_worker.ts";

if (parentPort !== null && isBridgeData(workerData)) bridge(parentPort, workerData);
