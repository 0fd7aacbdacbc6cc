// POST /batches with a source or results (issue 21; docs/api.md): through the API handler, whose
// S3 client is the container's (`defaultS3Client`, from AWS_ENDPOINT_URL_S3), against a real
// local s3rver. A readable source answers 202 with the batch reading; a bad one a 4xx naming what
// is wrong, never a 500, and stores nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiDeps } from '../../src/api/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { apiDeps, call, InvokeEndpoint, uniqueTenant } from '../support/api.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { registryWithEcho } from './jobs.js';

const db = useTestDatabase();
let s3: LocalS3;
let endpoint: InvokeEndpoint;
let deps: ApiDeps;

beforeAll(async () => {
  s3 = await localS3();
  // The container's client reads these when it is first made (this file's module context).
  Object.assign(process.env, {
    AWS_ENDPOINT_URL_S3: s3.endpoint,
    AWS_ACCESS_KEY_ID: 'S3RVER',
    AWS_SECRET_ACCESS_KEY: 'S3RVER',
    AWS_REGION: 'us-east-1',
  });
  await s3.createBucket('api-in');
  await s3.put('api-in', 'p/a.txt', 'a');
  await s3.put('api-in', 'empty.jsonl', '');
  endpoint = await InvokeEndpoint.start();
  deps = apiDeps(db.sql, endpoint, { jobs: registryWithEcho() });
}, 60_000);
afterAll(async () => {
  await endpoint?.close();
  await s3?.close();
});

const count = async () => (await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_batches`)[0].n;
const body = (source: unknown, results?: unknown) => ({
  tenant: uniqueTenant(),
  datasource: 'd',
  job: 'echo',
  source,
  ...(results ? { results } : {}),
});

describe('POST /batches with a source', () => {
  it('answers 202 at once with the batch reading, its source and results target shown', async () => {
    const r = await call(deps, 'POST', '/batches', {
      body: body({ s3: { bucket: 'api-in', prefix: 'p/' } }, { s3: { bucket: 'api-in', prefix: 'out/' } }),
    });
    expect(r.status).toBe(202);
    expect(r.body).toMatchObject({
      status: 'open',
      reading: true,
      total: 0,
      source: { s3: { bucket: 'api-in', prefix: 'p/' } },
      results: { s3: { bucket: 'api-in', prefix: 'out/' } },
      resultsManifest: null,
      created: true,
    });
  });

  it.each([
    ['no such bucket', { s3: { bucket: 'api-none', prefix: 'p/' } }, undefined, 404, 'source_not_found'],
    ['no such key', { s3: { bucket: 'api-in', key: 'nope.csv', format: 'csv' } }, undefined, 404, 'source_not_found'],
    ['a 0-byte object', { s3: { bucket: 'api-in', key: 'empty.jsonl', format: 'jsonl' } }, undefined, 400, 'invalid_source'],
    [
      'a results bucket that does not exist',
      { s3: { bucket: 'api-in', prefix: 'p/' } },
      { s3: { bucket: 'api-gone', prefix: 'o/' } },
      404,
      'source_not_found',
    ],
    ['an unknown format', { s3: { bucket: 'api-in', key: 'a.xml', format: 'xml' } }, undefined, 400, 'invalid_request'],
    [
      'a keyColumn on JSON Lines',
      { s3: { bucket: 'api-in', key: 'a.jsonl', format: 'jsonl', keyColumn: 'id' } },
      undefined,
      400,
      'invalid_request',
    ],
    ...(
      [
        ['a delimiter on JSON Lines', { format: 'jsonl', delimiter: 'tab' }, 'delimiter: only a csv source has it'],
        ['an unknown delimiter', { delimiter: 'colon' }, 'delimiter: must be comma, tab, semicolon, pipe or space'],
        ['a header that is neither', { header: 'last-row' }, 'header: must be "first-row" or a list of column names'],
        ['an empty header list', { header: [] }, 'header: must name at least one column'],
        ['a header naming a column twice', { header: ['a', 'b', 'a'] }, 'names the column "a" twice'],
        [
          'a keyColumn outside a given header',
          { header: ['a', 'b'], keyColumn: 'id' },
          "keyColumn: must be one of the header's columns",
        ],
        ['a quote of two characters', { quote: '""' }, 'must be one printable ASCII character'],
        ['a quote that is the delimiter', { quote: ';', delimiter: 'semicolon' }, 'quote: must not be the delimiter'],
      ] as const
    ).map(([name, opts, says]) => [
      name,
      { s3: { bucket: 'api-in', key: 't.csv', format: 'csv', ...opts } },
      undefined,
      400,
      'invalid_request',
      says,
    ]),
  ] as [string, unknown, unknown, number, string, string?][])(
    '%s: %d, no 500, nothing stored',
    async (_name, source, results, status, code, says) => {
      const before = await count();
      const r = await call(deps, 'POST', '/batches', { body: body(source, results) });
      expect(r.status).toBe(status);
      expect(r.body).toMatchObject({ error: { code } });
      if (says !== undefined) expect(JSON.stringify(r.body)).toContain(JSON.stringify(says).slice(1, -1));
      expect(await count()).toBe(before);
    },
  );

  it('takes an inventory manifest (CSV) and refuses an ORC one, naming it', async () => {
    const files = [{ key: 'inv/part-0.csv', size: 19, MD5checksum: 'x' }];
    await s3.put('api-in', 'inv/part-0.csv', '"api-in","a+b","1"\n');
    await s3.put('api-in', 'inv/manifest.json', JSON.stringify({ fileFormat: 'CSV', fileSchema: 'Bucket, Key, Size', files }));
    await s3.put('api-in', 'inv/orc.json', JSON.stringify({ fileFormat: 'ORC', fileSchema: 'Bucket, Key', files }));
    const r = await call(deps, 'POST', '/batches', { body: body({ s3: { bucket: 'api-in', manifest: 'inv/manifest.json' } }) });
    expect(r.status).toBe(202);
    expect(r.body).toMatchObject({
      source: {
        s3: {
          bucket: 'api-in',
          manifest: 'inv/manifest.json',
          columns: ['Bucket', 'Key', 'Size'],
          parts: files.map(({ key, size }) => ({ key, size })),
        },
      },
    });
    const before = await count();
    const orc = await call(deps, 'POST', '/batches', { body: body({ s3: { bucket: 'api-in', manifest: 'inv/orc.json' } }) });
    expect(orc.status).toBe(400);
    expect(orc.body).toMatchObject({ error: { code: 'invalid_source' } });
    expect(JSON.stringify(orc.body)).toContain('only a CSV inventory report');
    const bad = await call(deps, 'POST', '/batches', { body: body({ s3: { bucket: 'api-in', manifest: '' } }) });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: { code: 'invalid_request' } });
    expect(await count()).toBe(before);
  });

  it('takes CSV options and shows them with the source', async () => {
    await s3.put('api-in', 'opts.tsv', 'k\tv\n');
    const source = {
      s3: {
        bucket: 'api-in',
        key: 'opts.tsv',
        format: 'csv',
        delimiter: 'tab',
        header: ['id', 'v'],
        keyColumn: 'id',
        quote: null,
      },
    };
    const r = await call(deps, 'POST', '/batches', { body: body(source) });
    expect(r.status).toBe(202);
    expect(r.body).toMatchObject({ source: { s3: { ...source.s3, size: 4 } } });
  });
});
