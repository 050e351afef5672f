// deno-lint-ignore-file no-explicit-any no-import-prefix
/**
 * Just enough of vitest's globals (`describe`, `it`, their `.each` and `.skip`,
 * the four hooks, and `expect` from jest's own `expect` package) to run a
 * suite written for them under `deno test`: LangGraph's checkpointer
 * conformance suite (`@langchain/langgraph-checkpoint-validation`), which
 * registers its tests with these globals. Hooks run as vitest runs them: a
 * suite's `beforeAll` before its first test, `beforeEach` from the outermost
 * suite in, `afterEach` from the innermost out; a failed `beforeAll` fails the
 * suite's tests.
 */
import { expect } from "npm:expect@30";

type Fn = (...args: any[]) => unknown;

interface Suite {
  name: string;
  parent: Suite | undefined;
  children: (Suite | Case)[];
  beforeAll: Fn[];
  afterAll: Fn[];
  beforeEach: Fn[];
  afterEach: Fn[];
}

interface Case {
  name: string;
  fn: Fn;
  skip: boolean;
}

/** What a run of the registered tests came to. */
export interface SuiteResult {
  passed: number;
  skipped: number;
  failed: { name: string; error: string }[];
}

const newSuite = (name: string, parent: Suite | undefined): Suite => ({
  name,
  parent,
  children: [],
  beforeAll: [],
  afterAll: [],
  beforeEach: [],
  afterEach: [],
});

/** `%s` and `$key` in a test's name, from the item of its `.each`. */
const named = (name: string, item: unknown) =>
  name.replace(/%s/g, String(item)).replace(
    /\$(\w+)/g,
    (_, key: string) => String((item as Record<string, unknown>)?.[key]),
  );

/**
 * Install the globals, call `register` (which calls `describe`, `it`, …), and
 * return a function that runs what it registered, in order, one test at a time.
 */
export function collect(register: () => void): () => Promise<SuiteResult> {
  const root = newSuite("", undefined);
  let current = root;
  const g = globalThis as any;
  const describe = (name: string, body: () => void) => {
    const suite = newSuite(name, current);
    current.children.push(suite);
    const outer = current;
    current = suite;
    try {
      body();
    } finally {
      current = outer;
    }
  };
  describe.each = (items: unknown[]) => (name: string, body: Fn) => {
    for (const item of items) describe(named(name, item), () => body(item));
  };
  const it = (name: string, fn: Fn) => void current.children.push({ name, fn, skip: false });
  it.skip = (name: string, fn: Fn) => void current.children.push({ name, fn, skip: true });
  it.each = (items: unknown[]) => (name: string, fn: Fn) => {
    for (const item of items) it(named(name, item), () => fn(item));
  };
  const soft = Object.assign((actual: unknown) => expect(actual), expect, { soft: expect });
  const saved = Object.fromEntries(
    ["describe", "it", "test", "expect", "beforeAll", "afterAll", "beforeEach", "afterEach"]
      .map((k) => [k, g[k]]),
  );
  Object.assign(g, {
    describe,
    it,
    test: it,
    expect: soft,
    beforeAll: (fn: Fn) => void current.beforeAll.push(fn),
    afterAll: (fn: Fn) => void current.afterAll.push(fn),
    beforeEach: (fn: Fn) => void current.beforeEach.push(fn),
    afterEach: (fn: Fn) => void current.afterEach.push(fn),
  });
  try {
    register();
  } finally {
    // The tests' bodies keep using `expect`: it stays until the run ends.
    for (const [k, v] of Object.entries(saved)) if (k !== "expect") g[k] = v;
  }
  return async () => {
    const result: SuiteResult = { passed: 0, skipped: 0, failed: [] };
    const text = (error: unknown) =>
      error instanceof Error ? (error.stack ?? error.message) : String(error);
    const path = (suite: Suite, name: string) => {
      const names: string[] = [name];
      for (let s: Suite | undefined = suite; s && s !== root; s = s.parent) names.unshift(s.name);
      return names.join(" > ");
    };
    const chain = (suite: Suite) => {
      const out: Suite[] = [];
      for (let s: Suite | undefined = suite; s; s = s.parent) out.unshift(s);
      return out;
    };
    const run = async (suite: Suite): Promise<void> => {
      let broken: unknown;
      for (const hook of suite.beforeAll) {
        try {
          await hook();
        } catch (error) {
          broken = error;
          break;
        }
      }
      for (const child of suite.children) {
        if ("children" in child) {
          if (broken === undefined) await run(child);
          else result.failed.push({ name: path(child, "(every test)"), error: text(broken) });
          continue;
        }
        if (child.skip) {
          result.skipped++;
          continue;
        }
        const name = path(suite, child.name);
        if (broken !== undefined) {
          result.failed.push({ name, error: `beforeAll failed: ${text(broken)}` });
          continue;
        }
        const suites = chain(suite);
        let error: unknown;
        try {
          for (const s of suites) for (const hook of s.beforeEach) await hook();
          await child.fn();
        } catch (e) {
          error = e;
        }
        for (const s of suites.toReversed()) {
          for (const hook of s.afterEach) {
            try {
              await hook();
            } catch (e) {
              error ??= e;
            }
          }
        }
        if (error === undefined) result.passed++;
        else result.failed.push({ name, error: text(error) });
      }
      for (const hook of suite.afterAll) {
        try {
          await hook();
        } catch (error) {
          result.failed.push({ name: path(suite, "afterAll"), error: text(error) });
        }
      }
    };
    try {
      await run(root);
    } finally {
      g.expect = saved.expect;
    }
    return result;
  };
}
