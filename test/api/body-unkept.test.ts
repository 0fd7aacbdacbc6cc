// Values JSON.parse cannot bring through as sent are refused, never changed silently
// (docs/api.md, "Error codes"): a number past the double range (`1e400` parses to Infinity,
// stored as null) and a `__proto__` key (dropped when the body's objects are copied), in start
// params and outbox payloads; nothing is stored.
import { describe, expect, it } from 'vitest';
import { registryWithEcho } from './jobs.js';
import { apiSuite, call, uniqueTenant } from '../support/api.js';

const suite = apiSuite({ 'one.txt': '1' });

describe('a body JSON.parse cannot keep as sent', () => {
  for (const [what, params, message] of [
    ['a number past the double range', '{"a":1e400}', /^body: a number past the double range .* \(at key "a"\)$/],
    ['a negative one, spelled with digits', `{"a":[-${'9'.repeat(400)}]}`, /^body: a number past the double range/],
    ['a __proto__ key', '{"__proto__":{"x":1}}', /^body: a key "__proto__" is not accepted$/],
    ['a __proto__ key spelled with escapes', '{"b":{"\\u005f_proto__":1}}', /^body: a key "__proto__" is not accepted$/],
  ] as const) {
    it(`start params with ${what}: 400 invalid_request, no batch`, async () => {
      const deps = { ...suite.deps, jobs: registryWithEcho() };
      const tenant = uniqueTenant();
      const res = await call(deps, 'POST', '/batches', {
        body: `{"tenant":"${tenant}","datasource":"d","job":"echo","params":${params}}`,
      });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      expect(res.body.error.message).toMatch(message);
      const rows = await suite.db.sql`select 1 from leasehold_batches where tenant = ${tenant}`;
      expect(rows).toHaveLength(0);
    });
  }

  it('an outbox payload past the double range: 400 invalid_request, nothing stored', async () => {
    const t = uniqueTenant();
    await call(suite.deps, 'PUT', `/tenants/${t}/units`, {
      body: { job: 'outbox-delivery', shards: 1, endpoints: ['https://example.com/'] },
    });
    const res = await call(suite.deps, 'POST', `/tenants/${t}/outbox`, { body: '{"key":"k","payload":{"n":-1E+400}}' });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    const rows = await suite.db.sql`select 1 from leasehold_outbox where tenant = ${t}`;
    expect(rows).toHaveLength(0);
  });

  it('what only looks like it is kept as sent: large finite numbers, tiny ones, "__proto__" as a value', async () => {
    const deps = { ...suite.deps, jobs: registryWithEcho() };
    const res = await call(deps, 'POST', '/batches', {
      body: `{"tenant":"${uniqueTenant()}","datasource":"d","job":"echo","params":{"big":1e308,"tiny":1e-400,"s":"__proto__ \\u00e9"}}`,
    });
    expect(res.status).toBe(201);
    expect(res.body.params).toEqual({ big: 1e308, tiny: 0, s: '__proto__ é' });
  });
});
