/**
 * The store's thread's entry: the module the main thread's side of the
 * store's bridge (`_bridge.ts`) starts its worker with. It starts the
 * thread's work only in a thread started with the bridge's own data;
 * anywhere else (the main thread, a host's own worker with data of its own or
 * none) it does nothing.
 *
 * @module
 */
import { parentPort, workerData } from "node:worker_threads";
import { isBridgeData } from "./_bridge_protocol.ts";
import { bridge } from "./_bridge_worker.ts";

if (parentPort !== null && isBridgeData(workerData)) bridge(parentPort, workerData);
