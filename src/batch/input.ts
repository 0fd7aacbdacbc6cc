// Input every way of starting a batch checks the same: names, request keys, storable JSON,
// and zod parsing whose messages name the field. The HTTP API and the trigger both use it; the
// field schemas a chain rule checks too are ./input-fields.ts (re-exported here).
import * as z from '../zod.js';
import { InvalidRequestError } from '../errors.js';
import { LONE_SURROGATE, MAX_NAME_LENGTH, textSchema } from './input-fields.js';

export { MAX_NAME_LENGTH, nameSchema, steerMsSchema, textSchema, toleratedFailuresSchema, typeName } from './input-fields.js';

/** Most levels of nesting accepted inside `params` (deeper JSON cannot be stored or serialised safely). */
export const MAX_PARAMS_DEPTH = 32;

// What names were checked against before C1 was refused: a stored name may hold a C1 character.
// eslint-disable-next-line no-control-regex -- control characters are what this rejects
const C0_CONTROL = /[\u0000-\u001f\u007f]/;

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
 * An instant as ISO 8601 text with its offset (`2026-05-01T12:00:00Z`, `…+02:00`), read as a
 * Date: a batch's `deadline`, a trigger firing's `startBy` (docs/design.md, "Pause, deadline and
 * startBy"), a bulk action's `createdAfter` and `createdBefore`. It must be the epoch
 * (`1970-01-01T00:00:00Z`) or later: PostgreSQL has no year 0 (JavaScript's year 0 is its 1 BC)
 * and refused `0000-01-01T00:00:00Z` as a statement's parameter (the request failed with a 500),
 * and the driver reads the years 1–99 back as 1950–2049. No such field means anything before
 * leasehold existed.
 */
export const instantSchema = z
  .pipe(
    z.iso.datetime({ offset: true, error: 'must be an ISO 8601 instant with its offset, e.g. 2026-05-01T12:00:00Z' }),
    z.transform((s: string) => new Date(s)),
  )
  .check(z.refine((d) => d.getTime() >= 0, { error: 'must be an instant from 1970-01-01T00:00:00Z on' }));
