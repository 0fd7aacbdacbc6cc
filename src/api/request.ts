// Turning an API Gateway v2 event into validated input. Every failure here is the caller's
// fault: an error whose code the API answers with a 4xx (src/api/errors.ts), its message naming the field.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import * as z from '../zod.js';
import { InvalidRequestError } from '../errors.js';
import { RequestError } from './errors.js';
import {
  MAX_NAME_LENGTH,
  MAX_CONCURRENCY,
  MAX_MIN_SUCCEEDED,
  MAX_POOL_LIMIT,
  MAX_POOL_NAME,
  MAX_ITEM_TIMEOUT_MS,
  MAX_PRIORITY,
  MAX_RATE_PER_SECOND,
  MIN_RATE_PER_SECOND,
  nameSchema,
  requestKeySchema,
  storedNameSchema,
  textSchema,
  toleratedFailuresSchema,
  typeName,
  instantSchema,
  steerMsSchema,
} from '../batch/index.js';
import { CSV_DELIMITERS, MAX_KEY_BYTES, parseInput, type CsvDelimiter } from '../batch/index.js';
import type { ApiDeps } from './deps.js';

/** The value of header `name` (case-insensitive; HTTP API v2 already lowercases names). */
export function header(event: APIGatewayProxyEventV2, name: string): string | undefined {
  const headers = event.headers ?? {};
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === lower) return v;
  return undefined;
}

/** Query string parameters, from the parsed map or, when absent, `rawQueryString`. */
export function query(event: APIGatewayProxyEventV2): Record<string, string> {
  if (event.queryStringParameters) {
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(event.queryStringParameters)) if (v !== undefined) out[k] = v;
    return out;
  }
  const out: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(event.rawQueryString ?? '')) out[k] = k in out ? `${out[k]},${v}` : v;
  return out;
}

/**
 * The request body as JSON.
 *
 * Decodes `isBase64Encoded` bodies, refuses bodies over `maxBodyBytes` (413), a content type
 * other than JSON (415), an empty body, bytes that are not UTF-8 and malformed JSON (400), and
 * what JSON.parse cannot keep as sent (400 `invalid_request`, docs/api.md "Errors"): a number
 * past the double range (`1e400` parses to Infinity, which would be stored as null) and a
 * `__proto__` key (an object built from it would take it for its prototype and drop it).
 * @throws {RequestError} | {InvalidRequestError}
 */
export function readJsonBody(event: APIGatewayProxyEventV2, maxBodyBytes: number): unknown {
  const raw = event.body ?? '';
  const encoding = event.isBase64Encoded ? 'base64' : 'utf8';
  // Measured before decoding, so an oversized body is refused without copying it.
  const size = Buffer.byteLength(raw, encoding);
  if (size > maxBodyBytes) {
    throw new RequestError('body_too_large', `body: ${size} bytes is over the limit of ${maxBodyBytes} bytes`);
  }
  const bytes = Buffer.from(raw, encoding);

  const type = header(event, 'content-type');
  if (type !== undefined && type.trim() !== '') {
    const [media, ...attrs] = type.split(';').map((s) => s.trim().toLowerCase());
    const charset = attrs
      .find((a) => a.startsWith('charset='))
      ?.slice('charset='.length)
      .replace(/"/g, '');
    if (!(media === 'application/json' || media.endsWith('+json')) || (charset && charset !== 'utf-8' && charset !== 'utf8')) {
      // curl's -d sends application/x-www-form-urlencoded unless told otherwise: say how.
      const hint =
        media === 'application/x-www-form-urlencoded' ? " (with curl -d, add -H 'content-type: application/json')" : '';
      throw new RequestError('unsupported_media_type', `content-type: must be application/json (UTF-8), got "${type}"${hint}`);
    }
  }
  if (bytes.length === 0) throw new InvalidRequestError('body: Required (a JSON object)');

  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new RequestError('invalid_json', 'body: is not valid UTF-8');
  }
  if (text.trim() === '') throw new InvalidRequestError('body: Required (a JSON object)');
  let body: unknown;
  try {
    // The reviver costs a call per value: only a body that may hold what it refuses pays it (a
    // key may spell `__proto__` with \u escapes; an overflowing number has a 3-digit exponent
    // or 309 digits).
    body = MAY_BE_UNKEPT.test(text) ? JSON.parse(text, refuseUnkept) : JSON.parse(text);
  } catch (e) {
    if (e instanceof InvalidRequestError) throw e;
    throw new RequestError('invalid_json', `body: malformed JSON (${(e as Error).message})`);
  }
  return body;
}

/** What a body holding a value JSON.parse cannot keep must contain (false positives only cost time). */
const MAY_BE_UNKEPT = /__proto__|\\u|[eE][+]?\d{3}|\d{309}/;

/**
 * JSON.parse's reviver refusing a number that is not finite once parsed and a `__proto__` key.
 * @throws {InvalidRequestError} naming which.
 */
function refuseUnkept(key: string, value: unknown): unknown {
  if (key === '__proto__') throw new InvalidRequestError('body: a key "__proto__" is not accepted');
  if (typeof value === 'number' && !Number.isFinite(value)) {
    throw new InvalidRequestError(
      `body: a number past the double range (about ±1.8e308) is not accepted${key === '' ? '' : ` (at key ${JSON.stringify(key)})`}`,
    );
  }
  return value;
}

/** An S3 bucket name: 3 to 63 lowercase letters, digits, dots and hyphens. */
const bucketSchema = z
  .string()
  .check(
    z.regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'must be an S3 bucket name (3 to 63 lowercase letters, digits, dots, hyphens)'),
  );
/** An S3 key or prefix: at most 1,024 characters, no control characters. */
const s3KeySchema = (min: number) =>
  z.string().check(
    z.minLength(min, 'must not be empty'),
    z.maxLength(1024, 'must be at most 1,024 characters'),
    // eslint-disable-next-line no-control-regex -- control characters are what this rejects
    z.regex(/^[^\u0000-\u001f]*$/, 'must not contain control characters'),
  );

/** Most columns a given CSV header may name. */
const MAX_CSV_COLUMNS = 1_000;

/** A CSV source's options (docs/api.md, "source"; as Step Functions' ItemReader has them). */
const csvOptionsSchema = {
  delimiter: z.optional(
    z.enum(['comma', 'tab', 'semicolon', 'pipe', 'space'], { error: () => 'must be comma, tab, semicolon, pipe or space' }),
  ),
  header: z.optional(
    z.union(
      [
        z.literal('first-row'),
        z
          .array(z.string().check(z.minLength(1, 'a column name must not be empty'), z.maxLength(1000)))
          .check(
            z.minLength(1, 'must name at least one column'),
            z.maxLength(MAX_CSV_COLUMNS, `must name at most ${MAX_CSV_COLUMNS} columns`),
          ),
      ],
      { error: () => 'must be "first-row" or a list of column names' },
    ),
  ),
  quote: z.optional(
    z.nullable(z.string().check(z.regex(/^[\u0021-\u007e]$/, 'must be one printable ASCII character (or null: no quoting)'))),
  ),
};

/** What the CSV options of an object source must agree on: CSV only, distinct columns, the key among them. */
function checkCsvOptions(
  s: { format: 'jsonl' | 'csv'; keyColumn?: string; delimiter?: string; header?: string | string[]; quote?: string | null },
  ctx: z.core.$RefinementCtx,
): void {
  const issue = (path: string, message: string) => ctx.addIssue({ code: 'custom', path: [path], message });
  for (const f of ['keyColumn', 'delimiter', 'header', 'quote'] as const) {
    if (s[f] !== undefined && s.format !== 'csv') issue(f, 'only a csv source has it');
  }
  if (Array.isArray(s.header)) {
    const dup = s.header.find((c, i) => s.header!.indexOf(c) !== i);
    if (dup !== undefined) issue('header', `names the column ${JSON.stringify(dup)} twice`);
    if (s.keyColumn !== undefined && !s.header.includes(s.keyColumn)) issue('keyColumn', "must be one of the header's columns");
  }
  const delimiter = CSV_DELIMITERS[(s.delimiter ?? 'comma') as CsvDelimiter];
  if (s.quote === delimiter) issue('quote', 'must not be the delimiter');
}

/**
 * `source` of `POST /batches` (docs/design.md, "Sources and results"): `{ s3: { bucket, prefix } }`
 * (one item per object), `{ s3: { bucket, manifest } }` (one item per object an S3 Inventory
 * report lists) or `{ s3: { bucket, key, format: "jsonl" | "csv", keyColumn?, delimiter?,
 * header?, quote? } }` (one item per line or row; the last four for CSV only).
 */
export const sourceSchema = z.strictObject({
  s3: z.union(
    [
      z.strictObject({ bucket: bucketSchema, prefix: s3KeySchema(0) }),
      z.strictObject({ bucket: bucketSchema, manifest: s3KeySchema(1) }),
      z
        .strictObject({
          bucket: bucketSchema,
          key: s3KeySchema(1),
          format: z.enum(['jsonl', 'csv'], { error: () => 'must be jsonl or csv' }),
          keyColumn: z.optional(z.string().check(z.minLength(1), z.maxLength(1000))),
          ...csvOptionsSchema,
        })
        .check(z.superRefine(checkCsvOptions)),
    ],
    {
      // An object source's own fault (a CSV option of the wrong type) named, not only the union.
      error: (iss) => {
        const branches = (iss as { errors?: { path: PropertyKey[]; message: string }[][] }).errors;
        const input = iss.input as { key?: unknown } | undefined;
        const first = input && typeof input === 'object' && 'key' in input ? branches?.[2]?.[0] : undefined;
        return first
          ? `${first.path.map(String).join('.')}: ${first.message}`
          : 'must be { bucket, prefix }, { bucket, manifest } or { bucket, key, format }';
      },
    },
  ),
});

/** `results` of `POST /batches`: `{ s3: { bucket, prefix } }`. */
export const resultsSchema = z.strictObject({ s3: z.strictObject({ bucket: bucketSchema, prefix: s3KeySchema(0) }) });

/** A concurrency pool's name (docs/design.md, "Concurrency pools"): 1 to 200 characters. */
export const poolNameSchema = textSchema(MAX_POOL_NAME);

/** `completion` of `POST /batches`: `{ minSucceeded: N }` or `"firstSucceeded"` (docs/design.md, "End"). */
export const completionSchema = z.union(
  [z.literal('firstSucceeded'), z.strictObject({ minSucceeded: wholeNumber(1, MAX_MIN_SUCCEEDED) })],
  { error: () => 'must be { "minSucceeded": N } (N from 1) or "firstSucceeded"' },
);

/**
 * Body of `PUT /pools/{name}`: `{ limit }`, or per key `{ perKey, total? }` (total defaults to
 * perKey), each a whole number from 1 to 100,000.
 */
export const poolLimitsSchema = z.union(
  [
    z.strictObject({ limit: wholeNumber(1, MAX_POOL_LIMIT) }),
    z.strictObject({ perKey: wholeNumber(1, MAX_POOL_LIMIT), total: z.optional(wholeNumber(1, MAX_POOL_LIMIT)) }),
  ],
  { error: () => `must be { "limit": N } or { "perKey": N, "total": M } (whole numbers from 1 to ${MAX_POOL_LIMIT})` },
);

/** Body of `POST /batches`. Unknown fields are refused, so a misspelt `requestKey` is not silently ignored. */
export const startSchema = z
  .strictObject({
    tenant: nameSchema,
    datasource: nameSchema,
    job: textSchema(MAX_NAME_LENGTH),
    params: z._default(
      z.record(z.string(), z.unknown(), { error: (i) => `must be a JSON object, got ${typeName(i.input)}` }),
      {},
    ),
    requestKey: z.optional(requestKeySchema),
    toleratedFailures: z.optional(toleratedFailuresSchema),
    priority: z.optional(wholeNumber(0, MAX_PRIORITY)),
    maxConcurrency: z.optional(wholeNumber(1, MAX_CONCURRENCY)),
    timeoutMs: z.optional(wholeNumber(1, MAX_ITEM_TIMEOUT_MS)),
    rateLimit: z.optional(
      z.strictObject(
        { perSecond: z.number().check(z.gte(MIN_RATE_PER_SECOND), z.lte(MAX_RATE_PER_SECOND)) },
        { error: (i) => `must be a JSON object { "perSecond": … }, got ${typeName(i.input)}` },
      ),
    ),
    notify: z.optional(
      z.strictObject({ url: textSchema(2048) }, { error: (i) => `must be a JSON object { "url": … }, got ${typeName(i.input)}` }),
    ),
    source: z.optional(sourceSchema),
    results: z.optional(resultsSchema),
    deadline: z.optional(instantSchema),
    deadlineMs: z.optional(steerMsSchema),
    pool: z.optional(poolNameSchema),
    completion: z.optional(completionSchema),
  })
  .check(
    z.refine((b) => b.deadline === undefined || b.deadlineMs === undefined, {
      message: 'deadline and deadlineMs: give one of them, not both',
    }),
  );

/** Body of `PATCH /batches/{id}`: what may change while a batch runs (at least one of them). */
export const patchBatchSchema = z
  .strictObject({
    maxConcurrency: z.optional(wholeNumber(1, MAX_CONCURRENCY)),
    rateLimit: z.optional(
      z.strictObject(
        { perSecond: z.number().check(z.gte(MIN_RATE_PER_SECOND), z.lte(MAX_RATE_PER_SECOND)) },
        { error: (i) => `must be a JSON object { "perSecond": … }, got ${typeName(i.input)}` },
      ),
    ),
    // null clears the deadline.
    deadline: z.optional(z.nullable(instantSchema)),
    deadlineMs: z.optional(steerMsSchema),
  })
  .check(
    z.refine((b) => b.deadline === undefined || b.deadlineMs === undefined, {
      message: 'deadline and deadlineMs: give one of them, not both',
    }),
    z.refine(
      (b) =>
        b.maxConcurrency !== undefined || b.rateLimit !== undefined || b.deadline !== undefined || b.deadlineMs !== undefined,
      {
        message: 'must set at least one of maxConcurrency, rateLimit, deadline, deadlineMs',
      },
    ),
  );

/** Validated body of `POST /batches`. */
export type StartRequest = z.infer<typeof startSchema>;

/**
 * The states `GET /batches?status=` and an action's filter may name: a stored status, or an open
 * batch that runs or is paused.
 */
export const FILTER_STATUSES = ['open', 'running', 'paused', 'succeeded', 'failed', 'cancelled'] as const;

/** Largest `limit` of `GET /batches`. */
export const MAX_LIST_LIMIT = 1000;

/** A `limit` query parameter: a whole number from 1 to `max`, given as a string. */
function limitSchema(max: number) {
  const message = `must be an integer from 1 to ${max}`;
  return z
    .pipe(z.string().check(z.regex(/^\d{1,7}$/, message)), z.transform(Number))
    .check(z.refine((n) => n >= 1 && n <= max, message));
}

/** Query of `GET /batches`; empty values count as absent. */
export const listSchema = z.strictObject({
  // Not the start charset: batches started another way (CLI, trigger) can still be listed.
  tenant: z.optional(textSchema(MAX_NAME_LENGTH)),
  // The action filters' statuses too: `running` and `paused` are open batches as lists show them.
  status: z.optional(z.enum(FILTER_STATUSES, { error: () => `must be one of ${FILTER_STATUSES.join(', ')}` })),
  limit: z.optional(limitSchema(MAX_LIST_LIMIT)),
});

/**
 * `GET /tenants/{tenant}?from=&to=`: the range of the tenant's usage (docs/design.md, "Usage and
 * cost"), ISO 8601 instants; `from` before `to`.
 */
export const tenantUsageSchema = z.strictObject({ from: z.optional(instantSchema), to: z.optional(instantSchema) }).check(
  z.refine((r) => r.from === undefined || r.to === undefined || r.from < r.to, {
    message: 'from must be before to',
    path: ['from'],
  }),
);

/** Item states accepted by `GET /batches/{id}/items?state=`. */
export const ITEM_STATES = ['pending', 'running', 'waiting', 'done', 'failed'] as const;

// eslint-disable-next-line no-control-regex -- a NUL is what this rejects
const NO_NUL = /^[^\u0000]*$/;

/** Query of `GET /batches/{id}/items`: `after` (a key, exclusive), `limit` (1..1000) and `state`. */
export const itemsPageSchema = z.strictObject({
  // Item keys are at most MAX_KEY_BYTES (1,024) bytes and never hold a NUL; any other character,
  // a TAB or a CR included, may be in one (an S3 object's key), and so in the `next` answered.
  after: z.optional(z.string().check(z.maxLength(MAX_KEY_BYTES), z.regex(NO_NUL, 'must not contain a NUL character'))),
  limit: z.optional(limitSchema(1000)),
  state: z.optional(z.enum(ITEM_STATES, { error: () => `must be one of ${ITEM_STATES.join(', ')}` })),
});

/** Query of `GET /batches/{id}/finished`: `buckets` (1..500, default 60). */
export const seriesSchema = z.strictObject({
  buckets: z.optional(limitSchema(500)),
});

/** A whole number from `min` to `max`, given as a JSON number. */
function wholeNumber(min: number, max: number) {
  return z
    .number({
      error: (i) =>
        i.input === undefined ? 'Required' : `must be a whole number from ${min} to ${max}, got ${typeName(i.input)}`,
    })
    .check(
      z.int(`must be a whole number from ${min} to ${max}`),
      z.gte(min, `must be a whole number from ${min} to ${max}`),
      z.lte(max, `must be a whole number from ${min} to ${max}`),
    );
}

/** Most shards one tenant may register. */
export const MAX_SHARDS = 10_000;

/** Largest unit weight accepted by `PUT /tenants/{tenant}/units`. */
export const MAX_UNIT_WEIGHT = 1_000_000;

/**
 * Body of `PUT /tenants/{tenant}/units`. `endpoints` is shorthand for `config.endpoints`; the
 * unit job's own schema validates the resulting config.
 */
export const putUnitsSchema = z.strictObject({
  job: textSchema(MAX_NAME_LENGTH),
  shards: wholeNumber(1, MAX_SHARDS),
  weight: z.optional(wholeNumber(0, MAX_UNIT_WEIGHT)),
  endpoints: z.optional(z.array(z.unknown(), { error: (i) => `must be an array of URLs, got ${typeName(i.input)}` })),
  config: z.optional(z.record(z.string(), z.unknown(), { error: (i) => `must be a JSON object, got ${typeName(i.input)}` })),
});

/** The `{shard}` path segment: a whole number from 0 to 9,999, or a 400 naming `shard`. */
export function shardParam(shard: string): number {
  const n = /^\d{1,5}$/.test(shard) ? Number(shard) : NaN;
  if (!(n >= 0 && n < MAX_SHARDS)) {
    throw new InvalidRequestError(`shard: must be a whole number from 0 to ${MAX_SHARDS - 1}, got ${JSON.stringify(shard)}`);
  }
  return n;
}

/** Query of `GET /units`; empty values count as absent. */
export const listUnitsSchema = z.strictObject({
  tenant: z.optional(storedNameSchema),
  limit: z.optional(limitSchema(MAX_SHARDS)),
});

/** Most live processes `PUT /concurrency` may ask for. */
export const MAX_DESIRED = 1000;

/** Body of `PUT /concurrency`. */
export const concurrencySchema = z.strictObject({ desired: wholeNumber(0, MAX_DESIRED) });

/** Largest per-tenant limit of running batches (a PostgreSQL integer). */
export const MAX_TENANT_LIMIT = 2_147_483_647;

/** Body of `PUT /tenants/{tenant}/limits`: `maxRunning` a whole number, or null for the default. */
export const tenantLimitsSchema = z.strictObject({ maxRunning: z.nullable(wholeNumber(0, MAX_TENANT_LIMIT)) });

/** Body of `POST /tenants/{tenant}/outbox`: `key` picks the shard; `payload` is any JSON value. */
export const outboxSchema = z.strictObject({
  key: textSchema(MAX_NAME_LENGTH),
  payload: z.unknown().check(z.refine((v) => v !== undefined, 'Required')),
});

/** A JSON object body, or a 400 naming the body. */
export function objectBody(event: APIGatewayProxyEventV2, deps: ApiDeps): Record<string, unknown> {
  const raw = readJsonBody(event, deps.config.maxBodyBytes);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new InvalidRequestError(`body: must be a JSON object, got ${typeName(raw)}`);
  }
  return raw as Record<string, unknown>;
}

/** The `{tenant}` path segment, validated like every tenant name. */
export function tenantParam(tenant: string): string {
  return parseInput(nameSchema, tenant, 'tenant');
}

/** What `POST /actions` may do to each batch it matches. */
export const ACTION_KINDS = ['cancel', 'pause', 'resume', 'redrive'] as const;

/**
 * Body of `POST /actions`: the action, its filter (at least one field; `status` one state or a
 * list) and the request key (or the `Idempotency-Key` header).
 */
export const actionSchema = z.strictObject({
  action: z.enum(ACTION_KINDS),
  requestKey: z.optional(requestKeySchema),
  filter: z
    .strictObject({
      tenant: z.optional(storedNameSchema),
      datasource: z.optional(storedNameSchema),
      job: z.optional(textSchema(MAX_NAME_LENGTH)),
      status: z.optional(
        z.pipe(
          z.union([z.enum(FILTER_STATUSES), z.array(z.enum(FILTER_STATUSES)).check(z.minLength(1))]),
          z.transform((s: (typeof FILTER_STATUSES)[number] | (typeof FILTER_STATUSES)[number][]) => (Array.isArray(s) ? s : [s])),
        ),
      ),
      createdAfter: z.optional(instantSchema),
      createdBefore: z.optional(instantSchema),
    })
    .check(
      z.refine((f) => Object.values(f).some((v) => v !== undefined), {
        message: 'give at least one of tenant, datasource, job, status, createdAfter, createdBefore',
      }),
    ),
});
