// Bad input of every kind is the caller's fault: always a 4xx with a message, never a 5xx.
import { describe, expect, it } from 'vitest';
import { handleApi } from '../../src/api/index.js';
import { testDatabase } from '../support/db.js';
import { registryWithEcho } from './jobs.js';
import { answer, apiDeps, apiEvent, call, uniqueTenant, type EventOptions, apiSuite } from '../support/api.js';
import { memoryLog } from '../support/log.js';

const suite = apiSuite({ 'one.txt': '1' }, { maxBodyBytes: 4096 });

const valid = () => ({ tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir } });

/** Nested arrays `depth` deep. */
const nested = (depth: number) => JSON.parse('['.repeat(depth) + ']'.repeat(depth)) as unknown;

interface Case {
  name: string;
  options: () => EventOptions;
  status: number;
  code: string;
  message: RegExp;
}

const cases: Case[] = [
  {
    name: 'missing tenant',
    options: () => ({ body: { ...valid(), tenant: undefined } }),
    status: 400,
    code: 'invalid_request',
    message: /^tenant: Required$/,
  },
  {
    name: 'every field missing',
    options: () => ({ body: {} }),
    status: 400,
    code: 'invalid_request',
    message: /^tenant: Required; datasource: Required; job: Required$/,
  },
  {
    name: 'tenant a number',
    options: () => ({ body: { ...valid(), tenant: 42 } }),
    status: 400,
    code: 'invalid_request',
    message: /^tenant: must be a string, got number$/,
  },
  {
    name: 'tenant empty',
    options: () => ({ body: { ...valid(), tenant: '' } }),
    status: 400,
    code: 'invalid_request',
    message: /^tenant: must not be empty/,
  },
  {
    name: 'tenant too long',
    options: () => ({ body: { ...valid(), tenant: 'x'.repeat(201) } }),
    status: 400,
    code: 'invalid_request',
    message: /^tenant: must be at most 200 characters$/,
  },
  {
    name: 'tenant with a slash',
    options: () => ({ body: { ...valid(), tenant: 'a/b' } }),
    status: 400,
    code: 'invalid_request',
    message: /^tenant: may contain only/,
  },
  {
    name: 'tenant with a NUL',
    options: () => ({ body: { ...valid(), tenant: 'a\u0000b' } }),
    status: 400,
    code: 'invalid_request',
    message: /^tenant: /,
  },
  {
    name: 'datasource null',
    options: () => ({ body: { ...valid(), datasource: null } }),
    status: 400,
    code: 'invalid_request',
    message: /^datasource: must be a string, got null$/,
  },
  {
    name: 'job an object',
    options: () => ({ body: { ...valid(), job: { name: 'checksum' } } }),
    status: 400,
    code: 'invalid_request',
    message: /^job: must be a string, got object$/,
  },
  {
    name: 'job too long',
    options: () => ({ body: { ...valid(), job: 'j'.repeat(201) } }),
    status: 400,
    code: 'invalid_request',
    message: /^job: /,
  },
  {
    name: 'unknown job',
    options: () => ({ body: { ...valid(), job: 'nope' } }),
    status: 404,
    code: 'unknown_job',
    message: /^job: unknown job "nope" \(this app's jobs: checksum, lambda-invoke\)$/,
  },
  {
    name: 'params an array',
    options: () => ({ body: { ...valid(), params: [suite.dir] } }),
    status: 400,
    code: 'invalid_request',
    message: /^params: must be a JSON object, got array$/,
  },
  {
    name: 'params a string',
    options: () => ({ body: { ...valid(), params: suite.dir } }),
    status: 400,
    code: 'invalid_request',
    message: /^params: must be a JSON object, got string$/,
  },
  {
    name: 'params null',
    options: () => ({ body: { ...valid(), params: null } }),
    status: 400,
    code: 'invalid_request',
    message: /^params: must be a JSON object, got null$/,
  },
  {
    name: 'params missing for a job that needs them',
    options: () => ({ body: { ...valid(), params: undefined } }),
    status: 400,
    code: 'invalid_params',
    message: /^params\.dir: /,
  },
  {
    name: 'params.dir a number',
    options: () => ({ body: { ...valid(), params: { dir: 7 } } }),
    status: 400,
    code: 'invalid_params',
    message: /^params\.dir: /,
  },
  {
    name: 'params.dir empty',
    options: () => ({ body: { ...valid(), params: { dir: '' } } }),
    status: 400,
    code: 'invalid_params',
    message: /^params\.dir: /,
  },
  {
    name: 'params.dir does not exist',
    options: () => ({ body: { ...valid(), params: { dir: `${suite.dir}/missing` } } }),
    status: 400,
    code: 'invalid_params',
    message: /^params\.dir: .*does not exist/,
  },
  {
    name: 'params.dir a file',
    options: () => ({ body: { ...valid(), params: { dir: `${suite.dir}/one.txt` } } }),
    status: 400,
    code: 'invalid_params',
    message: /^params\.dir: .*not a directory/,
  },
  {
    name: 'params.dir with a NUL',
    options: () => ({ body: { ...valid(), params: { dir: 'a\u0000b' } } }),
    status: 400,
    code: 'invalid_request',
    message: /^params\.dir: .*NUL/,
  },
  {
    name: 'params with an unknown field',
    options: () => ({ body: { ...valid(), params: { dir: suite.dir, depth: 2 } } }),
    status: 400,
    code: 'invalid_params',
    message: /^params/,
  },
  {
    name: 'params with an unpaired surrogate',
    options: () => ({ body: `{"tenant":"t","datasource":"d","job":"checksum","params":{"dir":"\\ud800"}}` }),
    status: 400,
    code: 'invalid_request',
    message: /^params\.dir: /,
  },
  {
    name: 'params nested too deep',
    options: () => ({ body: { ...valid(), params: { a: nested(40) } } }),
    status: 400,
    code: 'invalid_request',
    message: /^params\.a(\[0\])+: nested deeper than 32 levels$/,
  },
  {
    name: 'requestKey a number',
    options: () => ({ body: { ...valid(), requestKey: 5 } }),
    status: 400,
    code: 'invalid_request',
    message: /^requestKey: must be a string, got number$/,
  },
  {
    name: 'requestKey too long',
    options: () => ({ body: { ...valid(), requestKey: 'k'.repeat(201) } }),
    status: 400,
    code: 'invalid_request',
    message: /^requestKey: must be at most 200 characters$/,
  },
  {
    name: 'requestKey with a NUL',
    options: () => ({ body: { ...valid(), requestKey: 'k\u0000' } }),
    status: 400,
    code: 'invalid_request',
    message: /^requestKey: /,
  },
  {
    // A C1 control character (NEL) is a control character too, as docs/api.md says.
    name: 'requestKey with a C1 control character',
    options: () => ({ body: { ...valid(), requestKey: 'k\u0085' } }),
    status: 400,
    code: 'invalid_request',
    message: /^requestKey: must not contain control characters/,
  },
  {
    name: 'empty Idempotency-Key header',
    options: () => ({ body: valid(), headers: { 'idempotency-key': '' } }),
    status: 400,
    code: 'invalid_request',
    message: /^Idempotency-Key: must not be empty$/,
  },
  {
    name: 'misspelt field',
    options: () => ({ body: { ...valid(), requestkey: 'k' } }),
    status: 400,
    code: 'invalid_request',
    message: /^requestkey: unknown field$/,
  },
  {
    name: 'malformed JSON',
    options: () => ({ body: '{"tenant": "a",' }),
    status: 400,
    code: 'invalid_json',
    message: /^body: malformed JSON/,
  },
  {
    name: 'JSON array body',
    options: () => ({ body: '[1, 2]' }),
    status: 400,
    code: 'invalid_request',
    message: /^body: must be a JSON object, got array$/,
  },
  {
    name: 'JSON string body',
    options: () => ({ body: '"hello"' }),
    status: 400,
    code: 'invalid_request',
    message: /^body: must be a JSON object, got string$/,
  },
  {
    name: 'JSON null body',
    options: () => ({ body: 'null' }),
    status: 400,
    code: 'invalid_request',
    message: /^body: must be a JSON object, got null$/,
  },
  { name: 'empty body', options: () => ({ body: '' }), status: 400, code: 'invalid_request', message: /^body: Required/ },
  {
    name: 'whitespace body',
    options: () => ({ body: '  \n' }),
    status: 400,
    code: 'invalid_request',
    message: /^body: Required/,
  },
  { name: 'no body at all', options: () => ({}), status: 400, code: 'invalid_request', message: /^body: Required/ },
  {
    name: 'deeply nested body',
    options: () => ({ body: '['.repeat(2000) + ']'.repeat(2000) }),
    status: 400,
    code: 'invalid_request',
    message: /^body: must be a JSON object/,
  },
  {
    name: 'base64 body that is not JSON',
    options: () => ({ body: 'not json at all', base64: true }),
    status: 400,
    code: 'invalid_json',
    message: /^body: malformed JSON/,
  },
  {
    name: 'base64 body that is not UTF-8',
    options: () => ({ body: 'x', base64: true, headers: {} }),
    status: 400,
    code: 'invalid_json',
    message: /^body: is not valid UTF-8$/,
  },
  {
    name: 'oversized params',
    options: () => ({ body: { ...valid(), params: { dir: suite.dir, pad: 'x'.repeat(5000) } } }),
    status: 413,
    code: 'body_too_large',
    message: /^body: \d+ bytes is over the limit of 4096 bytes$/,
  },
  {
    name: 'oversized base64 body',
    options: () => ({ body: { ...valid(), params: { dir: suite.dir, pad: 'x'.repeat(5000) } }, base64: true }),
    status: 413,
    code: 'body_too_large',
    message: /^body: /,
  },
  {
    name: 'form content type',
    options: () => ({ body: 'tenant=a&datasource=b', headers: { 'content-type': 'application/x-www-form-urlencoded' } }),
    status: 415,
    code: 'unsupported_media_type',
    message: /^content-type: must be application\/json .*add -H 'content-type: application\/json'\)$/,
  },
  {
    name: 'JSON in Latin-1',
    options: () => ({ body: valid(), headers: { 'content-type': 'application/json; charset=iso-8859-1' } }),
    status: 415,
    code: 'unsupported_media_type',
    message: /^content-type: /,
  },
];

describe('POST /batches with bad input', () => {
  it.each(cases)('$name → $status $code', async (c) => {
    const options = c.options();
    const event = apiEvent('POST', '/batches', options);
    if (c.name === 'base64 body that is not UTF-8') event.body = Buffer.from([0x7b, 0xff, 0xfe, 0x7d]).toString('base64');
    const { log, entries } = memoryLog();
    const res = answer(await handleApi(event, { ...suite.deps, log }));
    expect(res.status, JSON.stringify(res.body)).toBe(c.status);
    expect(res.body.error.code).toBe(c.code);
    expect(res.body.error.message).toMatch(c.message);
    expect(entries.filter((e) => e.level === 'error')).toEqual([]);
  });

  it('never starts a batch for bad input', async () => {
    const [{ n }] = await suite.db.sql<{ n: number }[]>`select count(*) as n from leasehold_batches`;
    expect(n).toBe(0);
    expect(suite.endpoint.invokes).toEqual([]);
  });

  it('accepts a base64-encoded JSON body and JSON with a charset or +json type', async () => {
    const a = await call(suite.deps, 'POST', '/batches', { body: valid(), base64: true });
    const b = await call(suite.deps, 'POST', '/batches', {
      body: valid(),
      headers: { 'content-type': 'application/json; charset=UTF-8' },
    });
    const c = await call(suite.deps, 'POST', '/batches', {
      body: valid(),
      headers: { 'content-type': 'application/vnd.api+json' },
    });
    expect([a.status, b.status, c.status]).toEqual([201, 201, 201]);
  });

  it('accepts params at the depth limit', async () => {
    const echoDeps = { ...suite.deps, jobs: registryWithEcho() };
    const res = await call(echoDeps, 'POST', '/batches', { body: { ...valid(), job: 'echo', params: { a: nested(31) } } });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
  });
});

/** A small seeded PRNG (mulberry32), so a failing random case can be replayed. */
function prng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('random bodies', () => {
  it('never answer 5xx', async () => {
    const rand = prng(20240611);
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)];
    const strings = [
      '',
      'a',
      'acme',
      'checksum',
      suite.dir,
      '/',
      '../..',
      'x'.repeat(300),
      'a\u0000',
      '\ud83d',
      '😀',
      'é',
      ' ',
      'a b',
      'null',
    ];
    const value = (depth: number): unknown => {
      switch (Math.floor(rand() * (depth > 3 ? 5 : 7))) {
        case 0:
          return null;
        case 1:
          return rand() < 0.5;
        case 2:
          return pick([0, -1, 1.5, 1e308, 2 ** 53 + 1]);
        case 3:
        case 4:
          return pick(strings);
        case 5:
          return Array.from({ length: Math.floor(rand() * 3) }, () => value(depth + 1));
        default:
          return Object.fromEntries(
            Array.from({ length: Math.floor(rand() * 3) }, () => [pick(['dir', 'a', '', 'x\u0000']), value(depth + 1)]),
          );
      }
    };
    const fields = ['tenant', 'datasource', 'job', 'params', 'requestKey', 'extra'];
    const statuses = new Map<number, number>();
    for (let i = 0; i < 300; i++) {
      // Half the bodies are valid but for one field, so the later stages (key look-up, expand) are reached too.
      const body: Record<string, unknown> = rand() < 0.5 ? { ...valid(), requestKey: `r${i}` } : {};
      const based = 'tenant' in body;
      const mutate = based ? (rand() < 0.3 ? [] : [pick(fields)]) : fields.filter(() => rand() < 0.8);
      for (const f of mutate) body[f] = f === 'params' && rand() < 0.5 ? { dir: value(0) } : value(0);
      const text = rand() < 0.1 ? JSON.stringify(body).slice(0, Math.floor(rand() * 40)) : JSON.stringify(body);
      const { log, entries } = memoryLog();
      const res = answer(
        await handleApi(apiEvent('POST', '/batches', { body: text, base64: rand() < 0.2 }), { ...suite.deps, log }),
      );
      expect(res.status, `${text} → ${JSON.stringify(res.body)}`).toBeLessThan(500);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      expect(
        entries.filter((e) => e.level === 'error'),
        text,
      ).toEqual([]);
      if (res.status >= 400) expect(res.body.error.message, text).toMatch(/^[A-Za-z][\w.[\]-]*: /);
    }
    // The random bodies reach every stage: some start batches, some fail in the job's expand.
    expect(statuses.get(201)).toBeGreaterThan(0);
    expect(statuses.get(404)).toBeGreaterThan(0);
  });
});

describe('routes', () => {
  it.each([
    ['GET', '/'],
    ['GET', '/nothing'],
    ['POST', '/batches/x/y/z'],
    ['GET', '/jobs/checksum'],
  ])('%s %s → 404 not_found', async (method, path) => {
    const res = await call(suite.deps, method, path);
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('not_found');
    expect(res.body.error.message).toContain(path);
  });

  it.each([
    ['DELETE', '/batches', 'POST, GET'],
    ['PUT', '/batches/00000000-0000-0000-0000-000000000000', 'GET, PATCH'],
    ['GET', '/batches/00000000-0000-0000-0000-000000000000/cancel', 'POST'],
    ['POST', '/jobs', 'GET'],
  ])('%s %s → 405 with allow: %s', async (method, path, allow) => {
    const res = await call(suite.deps, method, path);
    expect(res.status).toBe(405);
    expect(res.body.error.code).toBe('method_not_allowed');
    expect(res.headers.allow).toBe(allow);
  });

  it('lists the jobs with their descriptions', async () => {
    const res = await call(suite.deps, 'GET', '/jobs');
    expect(res.status).toBe(200);
    expect(res.body.jobs).toContainEqual({ name: 'checksum', description: expect.stringContaining('SHA-256') });
  });

  it('tolerates a trailing slash and a named stage in front of the path', async () => {
    expect((await call(suite.deps, 'GET', '/jobs/')).status).toBe(200);
    expect((await call(suite.deps, 'GET', '/prod/jobs', { stage: 'prod' })).status).toBe(200);
  });
});

describe('internal failures', () => {
  it('answer 500 internal without details, and log them', async () => {
    const broken = await testDatabase({ migrate: false });
    try {
      const { log, entries } = memoryLog();
      const res = await call({ ...apiDeps(broken.sql, suite.endpoint), log }, 'GET', '/batches');
      expect(res.status).toBe(500);
      expect(res.body.error.code).toBe('internal');
      const logged = entries.find((e) => e.level === 'error' && String(e.fields?.error).includes('leasehold_batches'));
      expect(logged).toBeDefined();
      // The answer names the log entry's request id, and nothing of the failure itself.
      expect(res.body.error.message).toBe(`internal error: its details are logged with request id ${logged!.fields!.requestId}`);
    } finally {
      await broken.close();
    }
  });
});
