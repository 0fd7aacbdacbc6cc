// startBy of trigger firings (docs/design.md, "Pause, deadline and startBy"; issue 39): a firing
// not started by its startBy is dropped with a reason — deferred at maxOpen for too long, or
// arriving late — and one within it starts as before.
import { describe, expect, it } from 'vitest';
import { cancelBatch, findBatchByKey, type BatchExpander } from '../../src/batch/index.js';
import { handleTrigger, startDeferred, type TriggerDeps } from '../../src/trigger/index.js';
import { memoryLog } from '../support/log.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();

const jobs: BatchExpander = {
  expand: async (_job, params) => ({ items: [{ key: 'a', input: 1 }], params }),
};

function deps(): TriggerDeps & { entries: ReturnType<typeof memoryLog>['entries'] } {
  const { log, entries } = memoryLog();
  return {
    sql: db.sql,
    jobs,
    log,
    entries,
    config: {
      maxOpen: 1,
      batchConcurrency: 1,
      maxItems: 1_000,
      maxInputBytes: 65_536,
      maxTotalBytes: 1_000_000,
      itemTimeoutLimitMs: 900_000,
    },
  };
}

let n = 0;
/** A start-batch event of its own id, for tenant `tenant`, with `extra` in its detail. */
function event(tenant: string, extra: Record<string, unknown> = {}) {
  return {
    id: `ev-${process.pid}-${++n}`,
    'detail-type': 'leasehold.start-batch',
    source: 'app',
    time: new Date().toISOString(),
    resources: [],
    detail: { tenant, datasource: 'd', job: 'j', params: {}, ...extra },
  };
}

describe('startBy', () => {
  it('a firing deferred at maxOpen past its startBy is dropped with a reason; one without startBy starts', async () => {
    const d = deps();
    const tenant = `sb-${process.pid}-1`;
    const first = await handleTrigger(event(tenant), d);
    expect(first).toMatchObject({ outcome: 'started' });
    const late = event(tenant, { startByMs: 200 });
    expect(await handleTrigger(late, d)).toMatchObject({ outcome: 'deferred' });
    const patient = event(tenant);
    expect(await handleTrigger(patient, d)).toMatchObject({ outcome: 'deferred' });
    await sleep(300);
    await cancelBatch(db.sql, (first as { batchId: string }).batchId);
    const pass = await startDeferred(d);
    expect(pass).toMatchObject({ late: 1, waiting: 0 });
    expect(pass.started).toHaveLength(1);
    expect(await findBatchByKey(db.sql, tenant, `event:${late.id}`)).toBeUndefined();
    expect(await findBatchByKey(db.sql, tenant, `event:${patient.id}`)).toMatchObject({ id: pass.started[0] });
    expect(d.entries.find((e) => e.message.includes('startBy passed'))).toMatchObject({
      level: 'warn',
      fields: { code: 'start_by_passed', requestKey: `event:${late.id}` },
    });
  });

  it('an event arriving after its startBy is dropped at once; within it, it starts', async () => {
    const d = deps();
    const tenant = `sb-${process.pid}-2`;
    const past = new Date(Date.now() - 60_000).toISOString();
    expect(await handleTrigger(event(tenant, { startBy: past }), d)).toMatchObject({
      outcome: 'dropped',
      code: 'start_by_passed',
      reason: expect.stringContaining('not started by its startBy'),
    });
    const future = new Date(Date.now() + 60_000).toISOString();
    expect(await handleTrigger(event(tenant, { startBy: future }), d)).toMatchObject({ outcome: 'started' });
    expect(await handleTrigger(event(tenant, { startBy: future, startByMs: 5 }), d)).toMatchObject({
      outcome: 'dropped',
      code: 'invalid_request',
    });
  });
});
