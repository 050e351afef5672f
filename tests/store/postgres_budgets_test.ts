// Tokens and cost in the fleet store: its records keep them, and `ls` and `audit` over it show them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createAgentCheckpoint } from "../../mod.ts";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { tempHome } from "../_helpers.ts";
import { freshSchema, skipFleet } from "./_pg.ts";

test("the fleet store keeps tokens and cost; ls and audit over it show them", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  try {
    const home = tempHome();
    const ac = createAgentCheckpoint({ home, env: {}, settings: { store: db.url } });
    const a = ac.startRun({ sessionId: "a", caps: { usd: 5 } });
    a.postLlmCall({ inputTokens: 9000, outputTokens: 3000, usd: 0.42 });
    await a.end();
    const b = ac.startRun({ sessionId: "b" });
    b.postLlmCall({ inputTokens: 1000, outputTokens: 0 });
    await b.end({ status: "failed" });
    const c = ac.startRun({ sessionId: "c" }); // no use reported
    await c.end();
    await ac.close();
    const cli = async (...args: string[]) => {
      const m = memoryIo();
      const code = await main([...args, "--store", db.url, "--home", home], m.io);
      assert.equal(code, 0, m.stderr());
      return m.stdout();
    };
    const ls = await cli("ls");
    assert.match(ls, /^a .* 12000 tok, \$0\.42\/\$5\.00$/m);
    assert.match(ls, /^c .* -$/m);
    const audit = await cli("audit");
    assert.match(audit, /^tokens +13000 over 2 runs \(10000 in, 3000 out\)$/m);
    assert.match(audit, /^cost +\$0\.42 over 1 run \(1 run with no known cost\)$/m);
  } finally {
    await db.drop();
  }
});
