// The field schemas of a start that a chain rule checks too (LEASEHOLD_RULES, validated when a
// function starts): names, tolerated failures, steering spans. Apart from ./input.ts (the
// request parsing the API and the trigger do), so a worker's cold start carries only these.
import * as z from '../zod.js';
import { MAX_DEADLINE_MS } from './types.js';

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
/** A UTF-16 surrogate without its pair (PostgreSQL cannot store one). */
export const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

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

/** A span in ms from 1 to {@link MAX_DEADLINE_MS}: a batch's `deadlineMs`, a firing's `startByMs`. */
export const steerMsSchema = z
  .number({ error: (i) => `must be a whole number of ms from 1 to ${MAX_DEADLINE_MS}, got ${typeName(i.input)}` })
  .check(
    z.int(`must be a whole number of ms from 1 to ${MAX_DEADLINE_MS}`),
    z.gte(1, `must be a whole number of ms from 1 to ${MAX_DEADLINE_MS}`),
    z.lte(MAX_DEADLINE_MS, `must be a whole number of ms from 1 to ${MAX_DEADLINE_MS}`),
  );
