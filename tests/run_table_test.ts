import { test } from "node:test";
import assert from "node:assert/strict";
import { INFO_BYTES, INFO_INLINE_BYTES, RunTable } from "../_run_table.ts";

const encoder = new TextEncoder();
/** A JSON description of exactly `bytes` bytes. */
const description = (bytes: number) => {
  const head = '{"note":"';
  return head + "x".repeat(bytes - head.length - 2) + '"}';
};

test("a description longer than the slot's own bytes reaches the worker's view whole, and a short one after it", () => {
  const table = new RunTable(undefined, 600);
  while (table.slots < 600) assert.ok(table.grow());
  const worker = new RunTable(table.buffers); // the view the watchdog gets
  const slot = 513; // past the overflow buffer's first growth
  table.claim(slot, Date.now());
  const short = description(200);
  assert.ok(table.writeInfo(slot, encoder.encode(short)));
  assert.equal(worker.readInfo(slot)?.text, short);
  // Short descriptions leave the overflow buffer untouched (no resident memory for it).
  assert.equal(table.buffers.infos.byteLength, 0);

  for (const bytes of [INFO_INLINE_BYTES + 1, 1500, INFO_BYTES]) {
    const long = description(bytes);
    assert.ok(table.writeInfo(slot, encoder.encode(long)), `${bytes} bytes`);
    worker.refresh();
    assert.equal(worker.readInfo(slot)?.text, long, `${bytes} bytes`);
  }
  assert.ok(table.writeInfo(slot, encoder.encode(short)));
  assert.equal(worker.readInfo(slot)?.text, short);
  // Too long is refused, as before, and the last description stands.
  assert.equal(table.writeInfo(slot, encoder.encode(description(INFO_BYTES + 1))), false);
  assert.equal(worker.readInfo(slot)?.text, short);
});

test("each slot's long description is its own", () => {
  const table = new RunTable(undefined, 4);
  assert.ok(table.grow());
  const texts = [0, 1, 2, 3].map((slot) => description(INFO_INLINE_BYTES + 100 * (slot + 1)));
  for (let slot = 0; slot < 4; slot++) {
    table.claim(slot, Date.now());
    assert.ok(table.writeInfo(slot, encoder.encode(texts[slot]!)));
  }
  for (let slot = 0; slot < 4; slot++) assert.equal(table.readInfo(slot)?.text, texts[slot]);
});

test("each slot's fields, call ids and description are its own, in every chunk, and a call without an id shows none", () => {
  const table = new RunTable(undefined, 600);
  while (table.slots < 600) assert.ok(table.grow());
  const worker = new RunTable(table.buffers);
  const tool = table.internName("search");
  const slots = [0, 255, 256, 511, 599]; // both ends of each chunk, and a partial last chunk
  for (const slot of slots) {
    table.claim(slot, 1000 + slot);
    assert.ok(table.writeInfo(slot, encoder.encode(description(100 + slot))));
    table.toolStart(slot, tool, 1000 + slot, `call-${slot}`);
    table.toolStart(slot, tool, 1001 + slot);
  }
  for (const slot of slots) {
    assert.equal(worker.readInfo(slot)?.text, description(100 + slot));
    assert.equal(worker.start(slot), 1000 + slot);
    assert.deepEqual(worker.tools(slot).map((call) => call.callId), [`call-${slot}`, undefined]);
  }
  // A ring entry that held an id, reused by a call without one, and a slot given to a new run.
  const slot = 256;
  for (let k = 0; k < 8; k++) table.toolStart(slot, tool, 2000);
  assert.ok(worker.tools(slot).every((call) => call.callId === undefined));
  table.free(slot);
  table.claim(slot, 3000);
  table.toolStart(slot, tool, 3000);
  assert.deepEqual(worker.tools(slot).map((call) => call.callId), [undefined]);
  assert.equal(worker.tools(255)[0]?.callId, "call-255");
});
