// docs/configuration.md's "Runtime settings" table against the config schema (src/runtime/config.ts).
//
// The schema object is not exported, so the test asks `loadConfig` itself:
// - which variables it reads: `loadConfig` is given an environment that records every name it
//   looks up (a Proxy), so the table must list exactly those;
// - each default: a default written as one literal in backticks must change nothing when set
//   explicitly (`loadConfig({ VAR: default })` equals `loadConfig({})`);
// - each numeric range (`a–b` or `≥ a` at the start of the cell): a value just outside it is
//   refused naming the variable, and the bound itself is accepted (or refused only by a check
//   against another variable).
// One small parse of the schema's source text remains: a variable documented without a literal
// default (unset or computed) must have no `.default(` in its schema entry.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/runtime/config.js';

const ROOT = resolve(import.meta.dirname, '../..');
const DOC = readFileSync(join(ROOT, 'docs', 'configuration.md'), 'utf8');
const SCHEMA_SOURCE = readFileSync(join(ROOT, 'src', 'runtime', 'config.ts'), 'utf8');

interface Row {
  variable: string;
  default: string;
  range: string;
}

/** The rows of the first table under `## Runtime settings`. */
function documentedRows(): Row[] {
  const start = DOC.indexOf('\n## Runtime settings');
  expect(start, 'docs/configuration.md has a "## Runtime settings" section').toBeGreaterThan(0);
  const end = DOC.indexOf('\n## ', start + 1);
  const section = DOC.slice(start, end < 0 ? undefined : end);
  const lines = section.split('\n').filter((l) => l.startsWith('| `'));
  return lines.map((line) => {
    const cells = line
      .slice(1, line.endsWith('|') ? -1 : undefined)
      .split(' | ')
      .map((c) => c.trim());
    const variable = /^`([A-Z0-9_]+)`$/.exec(cells[0]!)?.[1];
    expect(variable, `a variable in backticks: ${line}`).toBeDefined();
    expect(cells.length, `five cells: ${line}`).toBe(5);
    return { variable: variable!, default: cells[1]!, range: cells[3]! };
  });
}

/** The names `loadConfig` looks up in its environment. */
function variablesRead(): string[] {
  const read = new Set<string>();
  const env = new Proxy({} as Record<string, string | undefined>, {
    get(target, name) {
      if (typeof name === 'string') read.add(name);
      return Reflect.get(target, name);
    },
  });
  loadConfig(env);
  return [...read];
}

/** The name of the variable a `ConfigError` blames (`variable`, else the `NAME:` its message starts with). */
function blamed(error: unknown): string | undefined {
  const e = error as { variable?: unknown; message?: unknown } | null;
  if (typeof e?.variable === 'string') return e.variable;
  return typeof e?.message === 'string' ? /^([A-Z][A-Z0-9_]+):/.exec(e.message)?.[1] : undefined;
}

/** What `loadConfig(env)` does: the config, or the error it throws. */
function attempt(env: Record<string, string>): { config?: unknown; error?: Error } {
  try {
    return { config: loadConfig(env) };
  } catch (error) {
    return { error: error as Error };
  }
}

/** A documented default that is one literal in backticks, e.g. `10000`; undefined for prose. */
function literal(cell: string): string | undefined {
  return /^`([^`]+)`$/.exec(cell)?.[1];
}

/** The numeric bounds a range cell starts with: `a–b` or `≥ a`. */
function bounds(cell: string): { min: number; max?: number } | undefined {
  const both = /^(\d+(?:\.\d+)?)–(\d+(?:\.\d+)?)(?![\d.])/.exec(cell);
  if (both) return { min: Number(both[1]), max: Number(both[2]) };
  const atLeast = /^≥ (\d+(?:\.\d+)?)(?![\d.])/.exec(cell);
  return atLeast ? { min: Number(atLeast[1]) } : undefined;
}

/** The source text of `name`'s entry in the schema object, up to the next entry. */
function schemaEntry(name: string): string | undefined {
  const at = SCHEMA_SOURCE.search(new RegExp(`\\n\\s+${name}:`));
  if (at < 0) return undefined;
  const rest = SCHEMA_SOURCE.slice(at + 1);
  const next = rest.slice(1).search(/\n\s+[A-Z][A-Z0-9_]+:|\n\}/);
  return next < 0 ? rest : rest.slice(0, next + 1);
}

describe('docs/configuration.md', () => {
  const rows = documentedRows();
  const baseline = loadConfig({});

  it('lists every variable the config schema reads, and nothing else, once each', () => {
    const read = variablesRead();
    // The recording must see the schema: far more than a handful of names.
    expect(read.length).toBeGreaterThan(40);
    const listed = rows.map((r) => r.variable);
    expect(new Set(listed).size, 'no variable listed twice').toBe(listed.length);
    expect([...listed].sort()).toEqual([...read].sort());
  });

  it('gives each literal default as the value the schema fills in', () => {
    const literals = rows.filter((r) => literal(r.default) !== undefined);
    expect(literals.length).toBeGreaterThan(30);
    for (const row of literals) {
      const { config, error } = attempt({ [row.variable]: literal(row.default)! });
      expect(error, `${row.variable}=${literal(row.default)} loads`).toBeUndefined();
      expect(config, `${row.variable}: documented default ${row.default}`).toEqual(baseline);
    }
  });

  it('documents a variable without a literal default only when its schema entry has none', () => {
    for (const row of rows.filter((r) => literal(r.default) === undefined)) {
      const entry = schemaEntry(row.variable);
      expect(entry, `${row.variable}: its entry in src/runtime/config.ts`).toBeDefined();
      expect(entry, `${row.variable}: documented as ${row.default}`).not.toMatch(/\.default\(/);
    }
  });

  it('gives each numeric range as the schema bounds it', () => {
    const ranged = rows.filter((r) => bounds(r.range) !== undefined);
    expect(ranged.length).toBeGreaterThan(30);
    for (const row of ranged) {
      const { min, max } = bounds(row.range)!;
      const step = Number.isInteger(min) && (max === undefined || Number.isInteger(max)) ? 1 : 0.001;
      for (const outside of [min - step, ...(max === undefined ? [] : [max + step])]) {
        const { error } = attempt({ [row.variable]: String(outside) });
        expect(blamed(error), `${row.variable}=${outside} is refused, naming it`).toBe(row.variable);
      }
      for (const bound of [min, ...(max === undefined ? [] : [max])]) {
        const { error } = attempt({ [row.variable]: String(bound) });
        if (!error || blamed(error) !== row.variable) continue;
        // Refused at the bound only for another setting it must agree with (a default of that one).
        expect(error.message, `${row.variable}=${bound} is within the documented range`).toMatch(
          new RegExp(`^${row.variable}: .*\\b(?!${row.variable}\\b)(LEASEHOLD_[A-Z_]+|AWS_REGION)`),
        );
      }
    }
  });
});
