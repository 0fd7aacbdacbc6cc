// Input every way of starting a batch checks the same: names, request keys, storable JSON,
// and zod parsing whose messages name the field. The HTTP API and the trigger both use it.
import * as z from '../zod.js';
import { InvalidRequestError } from '../errors.js';
import { MAX_DEADLINE_MS } from './types.js';

/** Most levels of nesting accepted inside `params` (deeper JSON cannot be stored or serialised safely). */
export const MAX_PARAMS_DEPTH = 32;

/** Longest tenant, datasource, job name and request key, in characters. */
export const MAX_NAME_LENGTH = 200;

/** `null`, `array` or the `typeof` of a value, for messages. */
export function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

// The C0 controls, DEL and the C1 controls (U+0080–U+009F: NEL, for one, breaks a line).
// eslint-disable-next-line no-control-regex -- control characters are what this rejects
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
// What names were checked against before C1 was refused: a stored name may hold a C1 character.
// eslint-disable-next-line no-control-regex -- control characters are what this rejects
const C0_CONTROL = /[\u0000-\u001f\u007f]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * A required string of 1..max characters without control characters (`control`: which; default
 * C0, DEL and C1).
 */
export function textSchema(max: number, control: RegExp = CONTROL) {
  return z.string({ error: (i) => (i.input === undefined ? 'Required' : `must be a string, got ${typeName(i.input)}`) }).check(
    z.minLength(1, 'must not be empty'),
    z.maxLength(max, `must be at most ${max} characters`),
    z.refine((s) => !control.test(s) && !LONE_SURROGATE.test(s), 'must not contain control characters or unpaired surrogates'),
  );
}

/** Tenant and datasource names: letters, digits, `.`, `_`, `:`, `-`, starting with a letter or digit. */
export const nameSchema = textSchema(MAX_NAME_LENGTH).check(
  z.regex(
    /^[A-Za-z0-9][A-Za-z0-9._:-]*$/,
    "may contain only letters, digits, '.', '_', ':' and '-', and must start with a letter or digit",
  ),
);

/** A request key (body `requestKey` or header `Idempotency-Key`). */
export const requestKeySchema = textSchema(MAX_NAME_LENGTH);

/**
 * Parse `input` with `schema`, or throw an error (`invalid_request`, 400 in the API) whose message names every offending field
 * (`tenant: Required; params: must be a JSON object, got array`).
 * @throws {InvalidRequestError}
 */
export function parseInput<T extends z.core.$ZodType>(schema: T, input: unknown, where = 'body'): z.output<T> {
  const r = z.safeParse(schema, input);
  if (r.success) return r.data;
  throw new InvalidRequestError(r.error.issues.map((i) => describeIssue(i, where)).join('; '));
}

function describeIssue(issue: z.core.$ZodIssue, where: string): string {
  if (issue.code === 'unrecognized_keys') {
    return issue.keys.map((k) => `${fieldPath([...issue.path, k], where)}: unknown field`).join('; ');
  }
  return `${fieldPath(issue.path, where)}: ${issue.message}`;
}

/** `params.items[2].name` from a path; `where` when the path is empty. */
export function fieldPath(path: readonly PropertyKey[], where = 'body'): string {
  if (path.length === 0) return where;
  let out = '';
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`;
    else out += out === '' ? String(p) : `.${String(p)}`;
  }
  return out;
}

/**
 * Refuse JSON that PostgreSQL cannot store or that is too deep to serialise: strings or keys
 * with NUL characters or unpaired surrogates, nesting deeper than `maxDepth`. Iterative, so
 * deep input cannot exhaust the stack here.
 * @throws {InvalidRequestError} naming the path, e.g. `params.a.b: nested deeper than 32 levels`.
 */
export function checkStorableJson(value: unknown, root: string, maxDepth = MAX_PARAMS_DEPTH): void {
  const stack: { v: unknown; path: PropertyKey[]; depth: number }[] = [{ v: value, path: [root], depth: 0 }];
  const bad = (path: PropertyKey[], why: string) => new InvalidRequestError(`${fieldPath(path)}: ${why}`);
  const badString = (s: string) => s.includes('\u0000') || LONE_SURROGATE.test(s);
  while (stack.length > 0) {
    const { v, path, depth } = stack.pop()!;
    if (typeof v === 'string') {
      if (badString(v)) throw bad(path, 'must not contain NUL characters or unpaired surrogates');
    } else if (v !== null && typeof v === 'object') {
      if (depth >= maxDepth) throw bad(path, `nested deeper than ${maxDepth} levels`);
      if (Array.isArray(v)) v.forEach((x, i) => stack.push({ v: x, path: [...path, i], depth: depth + 1 }));
      else
        for (const [k, x] of Object.entries(v)) {
          if (badString(k)) throw bad(path, 'keys must not contain NUL characters or unpaired surrogates');
          stack.push({ v: x, path: [...path, k], depth: depth + 1 });
        }
    }
  }
}

/** A tenant name as stored (any text a tenant may have been registered with), for lookups and deletes. */
export const storedNameSchema = textSchema(MAX_NAME_LENGTH, C0_CONTROL);

/**
 * `toleratedFailures` of a start: `{ count }` (a whole number from 0 to 2,147,483,647) or
 * `{ percent }` (a number from 0 to 100), exactly one of them; null: none (docs/design.md,
 * "Batches": "End").
 */
export const toleratedFailuresSchema = z.nullable(
  z.pipe(
    z
      .strictObject(
        {
          count: z.optional(
            z
              .number({ error: (i) => `must be a whole number from 0 to 2147483647, got ${typeName(i.input)}` })
              .check(
                z.int('must be a whole number from 0 to 2147483647'),
                z.gte(0, 'must be a whole number from 0 to 2147483647'),
                z.lte(2_147_483_647, 'must be a whole number from 0 to 2147483647'),
              ),
          ),
          percent: z.optional(
            z
              .number({ error: (i) => `must be a number from 0 to 100, got ${typeName(i.input)}` })
              .check(z.gte(0, 'must be a number from 0 to 100'), z.lte(100, 'must be a number from 0 to 100')),
          ),
        },
        { error: (i) => `must be { count } or { percent }, got ${typeName(i.input)}` },
      )
      .check(
        z.refine(
          (t) => (t.count === undefined) !== (t.percent === undefined),
          'must be { count } or { percent }: give exactly one',
        ),
      ),
    z.transform((t) => (t.count !== undefined ? { count: t.count } : { percent: t.percent! })),
  ),
);

/**
 * An instant as ISO 8601 text with its offset (`2026-05-01T12:00:00Z`, `…+02:00`), read as a
 * Date: a batch's `deadline`, a trigger firing's `startBy` (docs/design.md, "Pause, deadline and
 * startBy").
 */
export const instantSchema = z.pipe(
  z.iso.datetime({ offset: true, error: 'must be an ISO 8601 instant with its offset, e.g. 2026-05-01T12:00:00Z' }),
  z.transform((s: string) => new Date(s)),
);

/** A span in ms from 1 to {@link MAX_DEADLINE_MS}: a batch's `deadlineMs`, a firing's `startByMs`. */
export const steerMsSchema = z
  .number({ error: (i) => `must be a whole number of ms from 1 to ${MAX_DEADLINE_MS}, got ${typeName(i.input)}` })
  .check(
    z.int(`must be a whole number of ms from 1 to ${MAX_DEADLINE_MS}`),
    z.gte(1, `must be a whole number of ms from 1 to ${MAX_DEADLINE_MS}`),
    z.lte(MAX_DEADLINE_MS, `must be a whole number of ms from 1 to ${MAX_DEADLINE_MS}`),
  );
