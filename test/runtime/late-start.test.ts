// An invocation that starts past its deadline (issue 38, item 10; docs/deploy.md, "Faults and how
// leasehold answers them"): an init that spilled into the invoke leaves a negative or tiny
// remaining time. The worker returns within a second, writes no process row, claims nothing (not
// its invocation, a unit or a batch), sends its event on at most once and warns once.
import { beforeEach, expect, it } from 'vitest';
import { createBatch, type Dispatcher, type WorkerEvent } from '../../src/batch/index.js';
import { putTenantUnits, reserveInvocations, setDesired } from '../../src/lease/index.js';
import { loadConfig, runWorker } from '../../src/runtime/index.js';
import { createLog } from '../../src/log.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { slowJobs } from '../support/fleet.js';

const db = useTestDatabase();
beforeEach(async () => {
  for (const t of ['leasehold_processes', 'leasehold_invocations', 'leasehold_items', 'leasehold_batches']) {
    await db.sql`delete from ${db.sql(t)}`;
  }
});

const config = () => loadConfig({ DATABASE_URL: db.url, LEASEHOLD_DEADLINE_MARGIN_MS: '1000' });

it('a worker that starts past its deadline acts on nothing, returns within 1 s, re-sends its event once and warns once', async () => {
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 2 });
  await setDesired(db.sql, 1);
  const { batch } = await createBatch(db.sql, {
    tenant: 't',
    datasource: 'd',
    job: 'slow',
    params: { ms: 10 },
    requestKey: 'late-start',
    items: [{ key: 'a' }, { key: 'b' }],
  });
  const timings: number[] = [];
  // Remaining time as a spilled init leaves it: negative, nothing, less than the margin.
  for (const remaining of [-2_000, 0, 300]) {
    for (const withBatch of [false, true]) {
      await db.sql`delete from leasehold_invocations`;
      const [reserved] = await reserveInvocations(db.sql, { batchIds: [batch.id], maxWorkers: 100, pendingMs: 30_000 });
      const event: WorkerEvent = withBatch ? reserved : { invocationId: reserved.invocationId };
      const sent: WorkerEvent[] = [];
      const dispatcher: Dispatcher = { invoke: async (e) => void sent.push(e) };
      const warnings: string[] = [];
      const log = createLog((level, message) => {
        if (level === 'warn' || level === 'error') warnings.push(message);
      });
      const deps = { sql: db.sql, jobs: slowJobs(), config: config(), dispatcher, log };
      const t0 = performance.now();
      const r = await runWorker(event, { getRemainingTimeInMillis: () => remaining }, deps);
      timings.push(performance.now() - t0);
      expect(r).toMatchObject({ reason: 'late', runs: [], continued: [], replacements: 1 });
      expect(warnings).toHaveLength(1);
      expect(sent).toEqual([{ ...event, late: true }]);
      // The re-sent event starting late too is not sent on again.
      const again = await runWorker(sent[0], { getRemainingTimeInMillis: () => remaining }, deps);
      expect(again).toMatchObject({ reason: 'late', replacements: 0 });
      expect(sent).toHaveLength(1);
      expect(warnings).toHaveLength(2);
      const [db1] = await db.sql<{ processes: number; claimed: boolean; owned: number; runs: number; attempts: number }[]>`select
          (select count(*)::int from leasehold_processes) as processes,
          (select claimed from leasehold_invocations where id = ${reserved.invocationId}) as claimed,
          (select count(*)::int from leasehold_units where owner is not null) as owned,
          (select count(*)::int from leasehold_runs) as runs,
          (select coalesce(sum(attempts), 0)::int from leasehold_items) as attempts`;
      expect(db1).toEqual({ processes: 0, claimed: false, owned: 0, runs: 0, attempts: 0 });
    }
  }
  console.log(`late start: returned in ${timings.map((t) => Math.round(t)).join(', ')} ms`);
  for (const t of timings) expect(t).toBeLessThan(1_000);
});
