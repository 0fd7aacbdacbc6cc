// Turning an API Gateway v2 event into validated input. Every failure here is the caller's
// fault and becomes an ApiError with a 4xx status and a message naming the field.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import * as z from 'zod';

/**
 * A request the API refuses, with the HTTP status, a stable `code` and a message naming the
 * offending field (`tenant: Required`).
 */
export class ApiError extends Error {
  constructor(
    /** HTTP status, 4xx. */
    readonly status: number,
    /** Stable machine-readable code. */
    readonly code: string,
    message: string,
    /** Extra response headers (for example `allow` on a 405). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** Most levels of nesting accepted inside `params` (deeper JSON cannot be stored or serialised safely). */
export const MAX_PARAMS_DEPTH = 32;

/** Longest tenant, datasource, job name and request key, in characters. */
export const MAX_NAME_LENGTH = 200;

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
 * other than JSON (415), an empty body, bytes that are not UTF-8 and malformed JSON (400).
 * @throws {ApiError}
 */
export function readJsonBody(event: APIGatewayProxyEventV2, maxBodyBytes: number): unknown {
  const raw = event.body ?? '';
  const encoding = event.isBase64Encoded ? 'base64' : 'utf8';
  // Measured before decoding, so an oversized body is refused without copying it.
  const size = Buffer.byteLength(raw, encoding);
  if (size > maxBodyBytes) {
    throw new ApiError(413, 'body_too_large', `body: ${size} bytes is over the limit of ${maxBodyBytes} bytes`);
  }
  const bytes = Buffer.from(raw, encoding);

  const type = header(event, 'content-type');
  if (type !== undefined && type.trim() !== '') {
    const [media, ...attrs] = type.split(';').map((s) => s.trim().toLowerCase());
    const charset = attrs.find((a) => a.startsWith('charset='))?.slice('charset='.length).replace(/"/g, '');
    if (!(media === 'application/json' || media.endsWith('+json')) || (charset && charset !== 'utf-8' && charset !== 'utf8')) {
      throw new ApiError(415, 'unsupported_media_type', `content-type: must be application/json (UTF-8), got "${type}"`);
    }
  }
  if (bytes.length === 0) throw new ApiError(400, 'invalid_request', 'body: Required (a JSON object)');

  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new ApiError(400, 'invalid_json', 'body: is not valid UTF-8');
  }
  if (text.trim() === '') throw new ApiError(400, 'invalid_request', 'body: Required (a JSON object)');
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ApiError(400, 'invalid_json', `body: malformed JSON (${(e as Error).message})`);
  }
}

/** `null`, `array` or the `typeof` of a value, for messages. */
export function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

const CONTROL = /[\u0000-\u001f\u007f]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** A required string of 1..max characters without control characters. */
function text(max: number) {
  return z
    .string({ error: (i) => (i.input === undefined ? 'Required' : `must be a string, got ${typeName(i.input)}`) })
    .min(1, 'must not be empty')
    .max(max, `must be at most ${max} characters`)
    .refine((s) => !CONTROL.test(s) && !LONE_SURROGATE.test(s), 'must not contain control characters or unpaired surrogates');
}

/** Tenant and datasource names: letters, digits, `.`, `_`, `:`, `-`, starting with a letter or digit. */
export const nameSchema = text(MAX_NAME_LENGTH).regex(
  /^[A-Za-z0-9][A-Za-z0-9._:-]*$/,
  "may contain only letters, digits, '.', '_', ':' and '-', and must start with a letter or digit",
);

/** A request key (body `requestKey` or header `Idempotency-Key`). */
export const requestKeySchema = text(MAX_NAME_LENGTH);

/** Highest batch priority (0 is the lowest; docs/design.md, "Tenant fairness"). */
export const MAX_PRIORITY = 9;

/** Body of `POST /batches`. Unknown fields are refused, so a misspelt `requestKey` is not silently ignored. */
export const startSchema = z
  .object({
    tenant: nameSchema,
    datasource: nameSchema,
    job: text(MAX_NAME_LENGTH),
    params: z
      .record(z.string(), z.unknown(), { error: (i) => `must be a JSON object, got ${typeName(i.input)}` })
      .default({}),
    requestKey: requestKeySchema.optional(),
    toleratedFailures: z.lazy(() => toleratedFailuresSchema).optional(),
    priority: wholeNumber(0, MAX_PRIORITY).optional(),
  })
  .strict();

/**
 * `toleratedFailures` of a start: `{ count }` (a whole number from 0 to 2,147,483,647) or
 * `{ percent }` (a number from 0 to 100), exactly one of them; null: none (docs/design.md,
 * "Batches": "End").
 */
export const toleratedFailuresSchema = z
  .object(
    {
      count: z
        .number({ error: (i) => `must be a whole number from 0 to 2147483647, got ${typeName(i.input)}` })
        .int('must be a whole number from 0 to 2147483647')
        .min(0, 'must be a whole number from 0 to 2147483647')
        .max(2_147_483_647, 'must be a whole number from 0 to 2147483647')
        .optional(),
      percent: z
        .number({ error: (i) => `must be a number from 0 to 100, got ${typeName(i.input)}` })
        .min(0, 'must be a number from 0 to 100')
        .max(100, 'must be a number from 0 to 100')
        .optional(),
    },
    { error: (i) => `must be { count } or { percent }, got ${typeName(i.input)}` },
  )
  .strict()
  .refine((t) => (t.count === undefined) !== (t.percent === undefined), 'must be { count } or { percent }: give exactly one')
  .transform((t) => (t.count !== undefined ? { count: t.count } : { percent: t.percent! }))
  .nullable();

/** Validated body of `POST /batches`. */
export type StartRequest = z.infer<typeof startSchema>;

/** Batch statuses accepted by `GET /batches?status=`. */
export const STATUSES = ['open', 'succeeded', 'failed', 'cancelled'] as const;

/** Largest `limit` of `GET /batches`. */
export const MAX_LIST_LIMIT = 1000;

/** A `limit` query parameter: a whole number from 1 to `max`, given as a string. */
function limitSchema(max: number) {
  const message = `must be an integer from 1 to ${max}`;
  return z
    .string()
    .regex(/^\d{1,7}$/, message)
    .transform(Number)
    .refine((n) => n >= 1 && n <= max, message);
}

/** Query of `GET /batches`; empty values count as absent. */
export const listSchema = z
  .object({
    // Not the start charset: batches started another way (CLI, trigger) can still be listed.
    tenant: text(MAX_NAME_LENGTH).optional(),
    status: z.enum(STATUSES, { error: () => `must be one of ${STATUSES.join(', ')}` }).optional(),
    limit: limitSchema(MAX_LIST_LIMIT).optional(),
  })
  .strict();

/**
 * Parse `input` with `schema`, or throw a 400 whose message names every offending field
 * (`tenant: Required; params: must be a JSON object, got array`).
 * @throws {ApiError}
 */
export function parse<T extends z.ZodType>(schema: T, input: unknown, where = 'body'): z.output<T> {
  const r = schema.safeParse(input);
  if (r.success) return r.data;
  throw new ApiError(400, 'invalid_request', r.error.issues.map((i) => describeIssue(i, where)).join('; '));
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
 * @throws {ApiError} 400 naming the path, e.g. `params.a.b: nested deeper than 32 levels`.
 */
export function checkStorableJson(value: unknown, root: string, maxDepth = MAX_PARAMS_DEPTH): void {
  const stack: { v: unknown; path: PropertyKey[]; depth: number }[] = [{ v: value, path: [root], depth: 0 }];
  const bad = (path: PropertyKey[], why: string) => new ApiError(400, 'invalid_request', `${fieldPath(path)}: ${why}`);
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

/** Item states accepted by `GET /batches/{id}/items?state=`. */
export const ITEM_STATES = ['pending', 'running', 'done', 'failed'] as const;

/** Query of `GET /batches/{id}/items`: `after` (a key, exclusive), `limit` (1..1000) and `state`. */
export const itemsPageSchema = z
  .object({
    // Item keys are at most 1,000 bytes and never hold control characters.
    after: z.string().max(1_000).regex(/^[^\u0000-\u001f]*$/, 'must not contain control characters').optional(),
    limit: limitSchema(1000).optional(),
    state: z.enum(ITEM_STATES, { error: () => `must be one of ${ITEM_STATES.join(', ')}` }).optional(),
  })
  .strict();

/** Query of `GET /batches/{id}/finished`: `buckets` (1..500, default 60). */
export const seriesSchema = z
  .object({
    buckets: limitSchema(500).optional(),
  })
  .strict();

/** A whole number from `min` to `max`, given as a JSON number. */
function wholeNumber(min: number, max: number) {
  return z
    .number({ error: (i) => (i.input === undefined ? 'Required' : `must be a whole number from ${min} to ${max}, got ${typeName(i.input)}`) })
    .int(`must be a whole number from ${min} to ${max}`)
    .min(min, `must be a whole number from ${min} to ${max}`)
    .max(max, `must be a whole number from ${min} to ${max}`);
}

/** Most shards one tenant may register. */
export const MAX_SHARDS = 10_000;

/** Largest unit weight accepted by `PUT /tenants/{tenant}/units`. */
export const MAX_UNIT_WEIGHT = 1_000_000;

/**
 * Body of `PUT /tenants/{tenant}/units`. `endpoints` is shorthand for `config.endpoints`; the
 * unit job's own schema validates the resulting config.
 */
export const putUnitsSchema = z
  .object({
    job: text(MAX_NAME_LENGTH),
    shards: wholeNumber(1, MAX_SHARDS),
    weight: wholeNumber(0, MAX_UNIT_WEIGHT).optional(),
    endpoints: z.array(z.unknown(), { error: (i) => `must be an array of URLs, got ${typeName(i.input)}` }).optional(),
    config: z.record(z.string(), z.unknown(), { error: (i) => `must be a JSON object, got ${typeName(i.input)}` }).optional(),
  })
  .strict();

/** A tenant name as stored (any text a tenant may have been registered with), for lookups and deletes. */
export const storedNameSchema = text(MAX_NAME_LENGTH);

/** Query of `GET /units`; empty values count as absent. */
export const listUnitsSchema = z
  .object({
    tenant: storedNameSchema.optional(),
    limit: limitSchema(MAX_SHARDS).optional(),
  })
  .strict();

/** Most live processes `PUT /concurrency` may ask for. */
export const MAX_DESIRED = 1000;

/** Body of `PUT /concurrency`. */
export const concurrencySchema = z.object({ desired: wholeNumber(0, MAX_DESIRED) }).strict();

/** Largest per-tenant limit of running batches (a PostgreSQL integer). */
export const MAX_TENANT_LIMIT = 2_147_483_647;

/** Body of `PUT /tenants/{tenant}/limits`: `maxRunning` a whole number, or null for the default. */
export const tenantLimitsSchema = z.object({ maxRunning: wholeNumber(0, MAX_TENANT_LIMIT).nullable() }).strict();

/** Body of `POST /tenants/{tenant}/outbox`: `key` picks the shard; `payload` is any JSON value. */
export const outboxSchema = z
  .object({
    key: text(MAX_NAME_LENGTH),
    payload: z.unknown().refine((v) => v !== undefined, 'Required'),
  })
  .strict();
