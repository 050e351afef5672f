/**
 * The web view (`agent-checkpoint serve`): a small read-only HTTP server over
 * a run store, serving one page (`/`, its script `/app.js` and style
 * `/app.css`) and a JSON API (`/api/runs`, `/api/runs/:id`). It runs on
 * `node:http`, so the same code serves in Deno and Node; the page and its
 * script are string constants of this package, so nothing is read from disk
 * or fetched from a network to serve them.
 *
 * Only GET and HEAD are answered (anything else is 405). Every answer carries
 * a Content-Security-Policy that lets only the server's own script run (no
 * inline script), and `X-Content-Type-Options: nosniff`. Whatever the address
 * it listens on, a request naming a host (`Host:`) that is not this machine's
 * (the bound address, its own names and addresses, `localhost`) nor on the
 * `allowHosts` list is refused, so a web page elsewhere cannot read the runs
 * by rebinding a name of its own to this machine.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as os from "node:os";
import { errorText } from "../log.ts";
import type { Settings } from "../settings.ts";
import type { RunStore } from "../store/types.ts";
import { APP_CSS, APP_JS, PAGE_HTML } from "./_assets.ts";
import { type ApiContext, QueryError, runPayload, runsPayload } from "./_api.ts";

export {
  DEFAULT_LIMIT,
  FILE_CHARS,
  MAX_LIMIT,
  SCAN_LIMIT,
  SHOWN_STATUSES,
  shownStatus,
} from "./_api.ts";
export type {
  AttemptRow,
  CapUse,
  FileView,
  RunMark,
  RunPayload,
  RunRow,
  RunsPayload,
  ShownStatus,
  TreeDetail,
} from "./_api.ts";

/** The port `serve` listens on unless told otherwise. */
export const DEFAULT_PORT = 7433;

/**
 * The headers every answer carries: only this server's own script and style
 * (no inline script, no `eval`), no framing, no sniffing.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; " +
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; " +
    "frame-ancestors 'none'",
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  "Referrer-Policy": "no-referrer",
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Resource-Policy": "same-origin",
};

/** What {@linkcode serveRuns} needs. */
export interface ServeOptions {
  /**
   * The store to read, or how to open it: a function is called again (at
   * most once a second) until it gives one, and its rejection's message is
   * what the page shows meanwhile (a home whose first run has not made its
   * ledger yet).
   */
  store: RunStore | (() => Promise<RunStore>);
  /** The settings of the home served: tier fractions, the checkpoint directory. */
  settings: Settings;
  /** The address to listen on. @default {"127.0.0.1"} */
  host?: string;
  /**
   * More host names (or addresses) a request may name in its `Host:` header,
   * beside the bound address, this machine's own names and addresses and
   * `localhost`: e.g. the name a proxy or a DNS entry gives this machine.
   * @default {[]}
   */
  allowHosts?: readonly string[];
  /** The port; 0 picks a free one. @default {DEFAULT_PORT} */
  port?: number;
  /** The clock, ms since the epoch. @default {Date.now} */
  now?: () => number;
  /** Where a failure to answer is reported. @default {nothing} */
  log?: (message: string) => void;
}

/** A running web view. */
export interface RunServer {
  /** The page's address, e.g. `http://127.0.0.1:7433/`. */
  url: string;
  /** The port it listens on. */
  port: number;
  /** Stop listening and close the store it opened (a store given as a value is the caller's). */
  close(): Promise<void>;
}

/**
 * Whether an address is the loopback: only this machine can reach it.
 *
 * @param host An address or name, IPv6 with or without brackets.
 * @returns True for `localhost`, `127.x.y.z` and `::1`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isLoopback } from "./mod.ts";
 *
 * assert.ok(isLoopback("127.0.0.1") && isLoopback("[::1]") && isLoopback("localhost"));
 * assert.ok(!isLoopback("0.0.0.0") && !isLoopback("192.168.1.5"));
 * ```
 */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127(?:\.\d{1,3}){3}$/.test(h);
}

/** The host name of a `Host:` header, without its port (and without a trailing dot). */
function hostName(header: string): string {
  const m = /^\[([^\]]*)\]|^([^:]*)/.exec(header.trim());
  return (m?.[1] ?? m?.[2] ?? "").toLowerCase().replace(/\.$/, "");
}

/**
 * The names a request may address this machine by: its host name (and that
 * name's first label), every address of its interfaces, and the wildcards a
 * client may connect to literally.
 */
function ownNames(): Set<string> {
  const names = new Set<string>(["0.0.0.0", "::"]);
  try {
    const name = os.hostname().toLowerCase();
    if (name !== "") names.add(name).add(name.split(".")[0] as string);
  } catch {
    // No host name: the addresses and the allow list still answer.
  }
  try {
    for (const list of Object.values(os.networkInterfaces())) {
      for (const a of list ?? []) names.add(a.address.toLowerCase().replace(/%.*$/, ""));
    }
  } catch {
    // Interfaces cannot be listed (a sandbox): the names and the allow list still answer.
  }
  return names;
}

/**
 * Whether a `Host:` header addresses this server: never a name a web page
 * could point at this machine by DNS rebinding.
 *
 * @param header The request's `Host:` header, with or without its port.
 * @param accepted The bound address and the allowed names, lower-cased.
 * @returns True for the loopback, the accepted names, and this machine's own
 * names and addresses.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { hostAllowed } from "./mod.ts";
 *
 * const accepted = new Set(["runs.internal"]);
 * assert.ok(hostAllowed("localhost:7433", accepted));
 * assert.ok(hostAllowed("runs.internal:7433", accepted));
 * assert.ok(!hostAllowed("evil.example", accepted));
 * ```
 */
export function hostAllowed(header: string, accepted: ReadonlySet<string>): boolean {
  const name = hostName(header);
  if (name === "") return false;
  if (isLoopback(name) || accepted.has(name)) return true;
  // Asked again each time: an interface may have come up since the server started.
  return ownNames().has(name);
}

const STATIC: Record<string, { type: string; body: string }> = {
  "/": { type: "text/html; charset=utf-8", body: PAGE_HTML },
  "/app.js": { type: "text/javascript; charset=utf-8", body: APP_JS },
  "/app.css": { type: "text/css; charset=utf-8", body: APP_CSS },
};

/**
 * Start the web view over a run store: one page and a JSON API, read-only.
 *
 * @param options The store, the home's settings, where to listen.
 * @returns The server, listening; `url` is its page.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 * import { loadSettings } from "../config.ts";
 * import { openStore } from "../store/mod.ts";
 * import { serveRuns } from "./mod.ts";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * const { settings } = loadSettings({ home, env: {} });
 * const store = openStore({ home, settings })!;
 * const server = await serveRuns({ store, settings, port: 0 });
 * const answer = await fetch(`${server.url}api/runs`);
 * assert.equal(answer.status, 200);
 * assert.deepEqual((await answer.json()).runs, []);
 * assert.equal((await fetch(server.url, { method: "POST" })).status, 405);
 * await server.close();
 * await store.close();
 * ```
 */
export async function serveRuns(options: ServeOptions): Promise<RunServer> {
  const host = options.host ?? "127.0.0.1";
  const accepted = new Set(
    [host, ...(options.allowHosts ?? [])].map((h) => {
      // An IPv6 address (two colons or more) as it is, else a name with its port taken off.
      const bare = h.trim().replace(/^\[|\]$/g, "");
      return (bare.match(/:/g)?.length ?? 0) > 1 ? bare.toLowerCase() : hostName(h);
    }),
  );
  const log = options.log ?? (() => {});
  const now = options.now ?? Date.now;
  let store: RunStore | undefined = typeof options.store === "function" ? undefined : options.store;
  const opener = typeof options.store === "function" ? options.store : undefined;
  let openError = "";
  let triedAt = -Infinity;
  const storeNow = async (): Promise<RunStore> => {
    if (store) return store;
    if (opener && now() - triedAt >= 1000) {
      triedAt = now();
      try {
        store = await opener();
        return store;
      } catch (error) {
        openError = errorText(error);
      }
    }
    throw new StoreMissing(openError);
  };

  const server = http.createServer((req, res) => {
    const send = (
      status: number,
      type: string,
      body: string,
      extra: Record<string, string> = {},
    ) => {
      res.writeHead(status, {
        ...SECURITY_HEADERS,
        "Content-Type": type,
        "Content-Length": String(Buffer.byteLength(body)),
        "Cache-Control": "no-store",
        ...extra,
      });
      res.end(req.method === "HEAD" ? undefined : body);
    };
    const json = (status: number, value: unknown) =>
      send(status, "application/json; charset=utf-8", JSON.stringify(value));
    if (req.method !== "GET" && req.method !== "HEAD") {
      json(405, { error: `${req.method} is not allowed: this server is read-only` });
      return;
    }
    if (!hostAllowed(req.headers.host ?? "", accepted)) {
      json(421, {
        error:
          "this server answers only requests addressed to this machine's own names and addresses, or to a name given with --allow-host",
      });
      return;
    }
    let url: URL;
    try {
      url = new URL(req.url ?? "/", "http://localhost");
    } catch {
      json(400, { error: "the request's address cannot be read" });
      return;
    }
    if (url.pathname === "/favicon.ico") {
      send(204, "image/x-icon", "");
      return;
    }
    const page = STATIC[url.pathname];
    if (page) {
      send(200, page.type, page.body);
      return;
    }
    const ctx = (s: RunStore): ApiContext => ({ store: s, settings: options.settings, now });
    const answer = async () => {
      if (url.pathname === "/api/runs") {
        json(200, await runsPayload(ctx(await storeNow()), url.searchParams));
        return;
      }
      const m = /^\/api\/runs\/(.+)$/.exec(url.pathname);
      if (m) {
        let runId: string;
        try {
          runId = decodeURIComponent(m[1] as string);
        } catch {
          json(400, { error: "the run id is not valid percent-encoding" });
          return;
        }
        const detail = await runPayload(ctx(await storeNow()), runId);
        if (detail) json(200, detail);
        else json(404, { error: "no run with that id in the store" });
        return;
      }
      json(404, { error: "not found" });
    };
    answer().catch((error) => {
      if (error instanceof QueryError) json(400, { error: error.message });
      else if (error instanceof StoreMissing) json(503, { error: error.message });
      else {
        log(`serve: ${url.pathname} failed: ${errorText(error)}`);
        try {
          json(503, { error: `the store could not answer: ${errorText(error)}` });
        } catch {
          res.destroy();
        }
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? DEFAULT_PORT, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  server.on("error", (error) => log(`serve: ${errorText(error)}`));
  const port = (server.address() as AddressInfo).port;
  const shown = host.includes(":") ? `[${host}]` : host;
  return {
    url: `http://${shown}:${port}/`,
    port,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections?.();
      });
      if (opener && store) await store.close();
    },
  };
}

/** The store is not there (yet): answered 503 with the reason. */
class StoreMissing extends Error {
  constructor(reason: string) {
    super(reason === "" ? "the run store is not open yet" : reason);
    this.name = "StoreMissing";
  }
}
