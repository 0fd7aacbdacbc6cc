// A value an item throws that cannot even be read (a proxy whose traps throw, a revoked proxy)
// fails that item and nothing else (invariants 3 and 7; docs/design.md, "Attempts, backoff,
// failures"). Such a value threw again at `instanceof` and in the error's description, the
// attempt's promise rejected with nobody to handle it, its slot stayed taken, and the run beat
// for ever over a batch that never ended. Found by an adversarial test.
import { describe, expect, it } from 'vitest';
import { createBatch, type ItemWork } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';

const db = useTestDatabase();
let seq = 0;

const trapsThrow = () =>
  new Proxy(
    {},
    {
      get: () => {
        throw new Error('proxy get');
      },
      getPrototypeOf: () => {
        throw new Error('proxy getPrototypeOf');
      },
      ownKeys: () => {
        throw new Error('proxy keys');
      },
    },
  );
const revoked = () => {
  const p = Proxy.revocable({}, {});
  p.revoke();
  return p.proxy;
};

describe('an item that throws a value that cannot be read', () => {
  for (const [name, value] of [
    ['a proxy whose traps throw', trapsThrow],
    ['a revoked proxy', revoked],
  ] as const) {
    it(`(${name}) fails alone with a stored error; the other items run and the batch ends`, async () => {
      seq += 1;
      const items = Array.from({ length: 6 }, (_, i) => ({ key: `k${i}`, input: { i } }));
      const { batch } = await createBatch(db.sql, {
        tenant: 'thrown',
        datasource: `ds${seq}`,
        requestKey: `thrown-${seq}`,
        job: 'echo',
        params: {},
        items,
        maxConcurrency: 1,
      });
      const work: ItemWork = async ({ input }) => {
        if ((input as { i: number }).i < 2) throw value();
        return { ok: true };
      };
      const ended = await runUntilEnd(db.sql, batch.id, () => ({ work, attempts: 1 }), {
        runner: { beatMs: 150, staleMs: 1_500, parallel: 2, maxRuns: 1 },
        watchMs: 50,
        timeoutMs: 20_000,
        everyMs: 50,
      });
      const rows = await db.sql<{ key: string; state: string; error: string | null }[]>`
        select key, state, error from leasehold_items where batch_id = ${batch.id} order by key`;
      expect(rows.map((r) => r.state)).toEqual(['failed', 'failed', 'done', 'done', 'done', 'done']);
      for (const r of rows.slice(0, 2)) expect(r.error).toMatch(/cannot be read/);
      expect(ended.status).toBe('failed');
    }, 60_000);
  }
});
