import { test } from "node:test";
import assert from "node:assert/strict";
import { formatDuration, renderTemplate, type TemplateValues } from "../mod.ts";
import { DEFAULT_TIER1_TEMPLATE, DEFAULT_TIER2_TEMPLATE } from "../settings.ts";

test("formatDuration() writes each boundary in its unit", () => {
  const cases: Array<[number, string]> = [
    [0, "0s"],
    [0.99, "0s"],
    [1, "1s"],
    [59, "59s"],
    [59.999, "59s"],
    [60, "1m00s"],
    [61, "1m01s"],
    [1799, "29m59s"],
    [3599, "59m59s"],
    [3599.9, "59m59s"],
    [3600, "1h00m"],
    [3659, "1h00m"],
    [3660, "1h01m"],
    [86399, "23h59m"],
    [90000, "25h00m"],
    [-5, "0s"],
    [NaN, "0s"],
    [Infinity, "0s"],
  ];
  for (const [seconds, text] of cases) assert.equal(formatDuration(seconds), text, String(seconds));
});

const both = { turnsUsed: 0, turnsCap: 10, elapsedSeconds: 1800, timeCapSeconds: 3600 };

test("renderTemplate() writes the budget clause for both axes", () => {
  assert.equal(
    renderTemplate("{budget}", { ...both, elapsedSeconds: 1800.5 }),
    // The time used is floored and the rest rounded up: they add up to the cap.
    "you have used 0 of 10 turns (10 left) and 30m00s of 1h00m (30m00s left)",
  );
});

test("renderTemplate() writes the budget clause for one axis", () => {
  assert.equal(
    renderTemplate("{budget}", { turnsUsed: 3, turnsCap: 10 }),
    "you have used 3 of 10 turns (7 left)",
  );
  assert.equal(
    renderTemplate("{budget}", { elapsedSeconds: 45, timeCapSeconds: 90 }),
    "you have used 45s of 1m30s (45s left)",
  );
});

test("renderTemplate() never counts *_left below zero", () => {
  assert.equal(
    renderTemplate("{turns_left} {time_left}", {
      turnsUsed: 12,
      turnsCap: 10,
      elapsedSeconds: 99,
      timeCapSeconds: 60,
    }),
    "0 0s",
  );
});

test("renderTemplate() strips a clause naming an absent axis, with its separator", () => {
  const turnsOnly = { turnsUsed: 5, turnsCap: 10, checkpointFile: "F" };
  const timeOnly = { elapsedSeconds: 60, timeCapSeconds: 600, checkpointFile: "F" };
  const cases: Array<[string, TemplateValues, string]> = [
    [
      "Used {turns_used} turns, {time_used} so far. Save to {checkpoint_file}.",
      turnsOnly,
      "Used 5 turns. Save to F.",
    ],
    [
      "Used {turns_used} turns, {time_used} so far. Save to {checkpoint_file}.",
      timeOnly,
      "1m00s so far. Save to F.",
    ],
    [
      "{turns_left} turns left and {time_left} left; save now.",
      turnsOnly,
      "5 turns left; save now.",
    ],
    ["{turns_left} turns left and {time_left} left; save now.", timeOnly, "9m00s left; save now."],
    ["Budget — {time_cap} in all — keep going.", turnsOnly, "Budget — keep going."],
    ["Time: {time_used}. Turns: {turns_used}. Go!", turnsOnly, "Turns: 5. Go!"],
    ["A, {time_used}, {time_cap}. B.", turnsOnly, "A. B."],
    ["{time_used}, {time_cap}. B.", turnsOnly, "B."],
    ["Save to {checkpoint_file}, {budget}.", {}, "Save to your checkpoint file."],
  ];
  for (const [template, values, expected] of cases) {
    assert.equal(renderTemplate(template, values), expected, template);
  }
});

test("renderTemplate() keeps unknown placeholders as written", () => {
  assert.equal(renderTemplate("{nope} {turns_used}", { turnsUsed: 1, turnsCap: 5 }), "{nope} 1");
});

test("renderTemplate() turns {{ and }} into literal braces", () => {
  assert.equal(
    renderTemplate("{{turns_used}} is {turns_used}", { turnsUsed: 2, turnsCap: 5 }),
    "{turns_used} is 2",
  );
  assert.equal(renderTemplate("{{{turns_used}}}", { turnsUsed: 2, turnsCap: 5 }), "{2}");
  // A literal-brace clause names no placeholder, so it is not stripped.
  assert.equal(renderTemplate("json {{time_used}}, ok", {}), "json {time_used}, ok");
});

test("both default templates carry the budget clause and the checkpoint file", () => {
  for (const template of [DEFAULT_TIER1_TEMPLATE, DEFAULT_TIER2_TEMPLATE]) {
    const text = renderTemplate(template, { ...both, checkpointFile: "/cp/run.md" });
    assert.match(
      text,
      /you have used 0 of 10 turns \(10 left\) and 30m00s of 1h00m \(30m00s left\)/,
    );
    assert.match(text, /\/cp\/run\.md/);
  }
  const t1 = renderTemplate(DEFAULT_TIER1_TEMPLATE, both);
  assert.match(t1, /write everything you have found so far/);
  assert.match(t1, /including what remains/);
  assert.match(t1, /normal pace/);
  const t2 = renderTemplate(DEFAULT_TIER2_TEMPLATE, both);
  for (
    const phrase of [
      /Stop expanding/,
      /final state/,
      /INCOMPLETE/,
      /exact next step/,
      /summary/,
      /verify/,
    ]
  ) {
    assert.match(t2, phrase);
  }
});

/** A small deterministic generator, so a failure can be replayed. */
function rng(seed: number) {
  return () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
}

test("renderTemplate() never outputs undefined, NaN or a placeholder of an absent axis", () => {
  const random = rng(42);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const names = [
    "turns_used",
    "turns_cap",
    "turns_left",
    "time_used",
    "time_cap",
    "time_left",
    "budget",
    "checkpoint_file",
  ];
  const words = [
    "Save",
    "now",
    "you",
    "the file",
    "{{",
    "}}",
    "{",
    "}",
    "1.5",
    "e.g.",
    "—",
    "and",
    "x",
  ];
  const seps = [", ", "; ", " and ", " — ", ". ", "! ", "? ", "\n", " ", ""];
  const numbers = [undefined, NaN, Infinity, -1, 0, 0.5, 3, 10, 3600];
  for (let i = 0; i < 3000; i++) {
    let template = "";
    const n = 1 + Math.floor(random() * 8);
    for (let k = 0; k < n; k++) {
      template += random() < 0.5 ? `{${pick(names)}}` : pick(words);
      template += pick(seps);
    }
    const values: TemplateValues = {};
    for (const key of ["turnsUsed", "turnsCap", "elapsedSeconds", "timeCapSeconds"] as const) {
      const v = pick(numbers);
      if (v !== undefined) values[key] = v;
    }
    const out = renderTemplate(template, values);
    const context = `${JSON.stringify(template)} with ${JSON.stringify(values)} gave ${
      JSON.stringify(out)
    }`;
    assert.ok(!out.includes("undefined"), context);
    assert.ok(!out.includes("NaN"), context);
    assert.ok(!out.includes("Infinity"), context);
    const turns = Number.isFinite(values.turnsCap) && values.turnsCap! > 0;
    const time = Number.isFinite(values.timeCapSeconds) && values.timeCapSeconds! > 0;
    // Literal braces can spell a placeholder's name on purpose; count only real ones.
    const real = template.replace(/\{\{|\}\}/g, "").match(/\{(turns|time)_\w+\}/g) ?? [];
    for (const name of real) {
      if ((name.startsWith("{turns") && !turns) || (name.startsWith("{time") && !time)) {
        const literal = (template.match(/\{\{(turns|time)_\w+\}\}/g) ?? []).length;
        assert.ok(!out.includes(name) || literal > 0, context);
      }
    }
  }
});

/** Seconds in a duration as formatDuration() writes it. */
function seconds(text: string): number {
  const m = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(text);
  assert.ok(m, text);
  return Number(m[1] ?? 0) * 3600 + Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0);
}

test("renderTemplate() floors the time used and rounds the time left up", () => {
  assert.equal(
    renderTemplate("{budget}", { elapsedSeconds: 16.2, timeCapSeconds: 20 }),
    "you have used 16s of 20s (4s left)",
  );
  assert.equal(
    renderTemplate("{time_used} {time_left}", { elapsedSeconds: 19.01, timeCapSeconds: 20 }),
    "19s 1s",
  );
  // 0s left only at or past the cap.
  for (const [elapsed, left] of [[19.999, "1s"], [20, "0s"], [20.5, "0s"], [400, "0s"]] as const) {
    assert.equal(
      renderTemplate("{time_left}", { elapsedSeconds: elapsed, timeCapSeconds: 20 }),
      left,
      String(elapsed),
    );
  }
  // In the hours form the time left is rounded up to the minute.
  assert.equal(
    renderTemplate("{time_left}", { elapsedSeconds: 30, timeCapSeconds: 7200 }),
    "2h00m",
  );
  assert.equal(
    renderTemplate("{time_left}", { elapsedSeconds: 3599.5, timeCapSeconds: 7200 }),
    "1h01m",
  );
});

test("the time used and the time left add up to the cap as printed", () => {
  const random = rng(7);
  for (const cap of [1, 7, 20, 59, 60, 61, 90, 930, 1800, 3599]) {
    for (let i = 0; i < 400; i++) {
      const elapsed = random() * cap * 1.1;
      const values = { elapsedSeconds: elapsed, timeCapSeconds: cap };
      const [used, total, left] = renderTemplate("{time_used} {time_cap} {time_left}", values)
        .split(" ") as [string, string, string];
      const context = `elapsed ${elapsed} of ${cap}`;
      assert.equal(seconds(total), cap, context);
      if (elapsed < cap) {
        assert.equal(seconds(used) + seconds(left), cap, context);
        assert.notEqual(left, "0s", context);
      } else assert.equal(left, "0s", context);
    }
  }
});

test("{previous} and {attempt} fill a resume text, and their clauses go when absent", () => {
  const template =
    "Resuming (attempt {attempt}): the earlier attempt {previous}. Read {checkpoint_file} first, and continue.";
  assert.equal(
    renderTemplate(template, {
      attempt: 3,
      previous: "stopped at tier 2\nafter 40 turns",
      checkpointFile: "/cp/t.md",
    }),
    "Resuming (attempt 3): the earlier attempt stopped at tier 2 after 40 turns. Read /cp/t.md first, and continue.",
  );
  assert.equal(
    renderTemplate(template, { checkpointFile: "/cp/t.md" }),
    "Read /cp/t.md first, and continue.",
  );
  for (const attempt of [NaN, 0, -1, Infinity]) {
    const out = renderTemplate("Attempt {attempt}. Go.", { attempt });
    assert.equal(out, "Go.", String(attempt));
  }
  assert.equal(renderTemplate("{previous}; go", { previous: "  " }), "go");
  // Budget and resume placeholders together.
  assert.equal(
    renderTemplate("attempt {attempt}, {budget}", {
      attempt: 2,
      turnsUsed: 1,
      turnsCap: 10,
    }),
    "attempt 2, you have used 1 of 10 turns (9 left)",
  );
});

test("renderTemplate() shows tokens and dollars, and leaves an unknown cost out", () => {
  const values = { tokensUsed: 41_000, tokensCap: 50_000, usdUsed: 0.5, usdCap: 4 };
  assert.equal(
    renderTemplate(
      "{budget}. Tokens {tokens_used}/{tokens_cap}, ${usd_used} of ${usd_cap}.",
      values,
    ),
    "you have used 41000 of 50000 tokens (9000 left) and $0.50 of $4.00 ($3.50 left). " +
      "Tokens 41000/50000, $0.50 of $4.00.",
  );
  assert.equal(
    renderTemplate("{budget}; your {nearest} budget is nearest its cap.", values),
    "you have used 41000 of 50000 tokens (9000 left) and $0.50 of $4.00 ($3.50 left); " +
      "your token budget is nearest its cap.",
  );
  // One axis: no {nearest} clause. A cost not known: the dollar axis is absent.
  assert.equal(
    renderTemplate("{budget}; your {nearest} budget is nearest its cap. Spent ${usd_used}.", {
      tokensUsed: 10,
      tokensCap: 100,
      usdUsed: NaN,
      usdCap: 1,
    }),
    "you have used 10 of 100 tokens (90 left).",
  );
});
