/**
 * The watchdog thread's entry: the module its `AgentCheckpoint` starts the
 * worker with. It starts the watchdog's loop only in a thread started with
 * the watchdog's own data; anywhere else (the main thread, a documentation
 * check, a host's own worker with data of its own or none) it does nothing.
 *
 * @module
 */
import { parentPort, workerData } from "node:worker_threads";
import { isWatchdogData, watchdog } from "./watchdog.ts";

if (parentPort !== null && isWatchdogData(workerData)) watchdog(parentPort, workerData);
