// Retention in the scheduler (docs/design.md, "Retention"): a scheduler run deletes what is older
// than LEASEHOLD_RETENTION_DAYS, and usage rows older than LEASEHOLD_USAGE_RETENTION_DAYS, reports
// it and records it as EMF; every statement of a pass reads about its chunk of rows through an
// index, beside a lived-in, analyzed history.
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteExpiredBatches, deleteExpiredUsage, type Dispatcher } from '../../src/batch/index.js';
import { loadConfig, metricsFor, recordRetention, runScheduler, setLogSink } from '../../src/runtime/index.js';
import type { Sql } from '../../src/store/index.js';
import { deleteDeliveredOutboxMessages } from '../../src/units/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { loadHistory } from '../support/history.js';

const db = useTestDatabase();

const nobody: Dispatcher = { invoke: async () => {} };

/** `n` usage rows of each of `tenants` tenants (`u-<t>`) recorded `days` days ago and up to a day before. */
async function usageRows(tenants: number, n: number, days: number): Promise<void> {
  await db.sql`insert into leasehold_run_usage (run_id, batch_id, tenant, process, recorded_at, worker_ms, memory_mb, architecture)
    select gen_random_uuid(), gen_random_uuid(), 'u-' || lpad((g % ${tenants})::text, 4, '0'), gen_random_uuid(),
      now() - make_interval(days => ${days}) - make_interval(secs => g % 86400), 1000, 1024, 'arm64'
    from generate_series(1, ${tenants * n}) g`;
}

async function count(table: string): Promise<number> {
  const [r] = await db.sql.unsafe<{ n: number }[]>(`select count(*)::int as n from ${table}`);
  return r.n;
}

describe('retention in the scheduler', () => {
  it('a scheduler run deletes expired batches, items and delivered outbox messages, keeps undelivered ones, reports it and records it as EMF', async () => {
    await loadHistory(db.sql, { batches: 4, items: 2_000, units: 0, outbox: 300, olderDays: 31, spreadDays: 2 });
    await loadHistory(db.sql, { batches: 1, items: 10, units: 0, outbox: 20, olderDays: 1, spreadDays: 1 });
    // An old message one endpoint still has to take, and an old one never assigned: both kept.
    const [kept] = await db.sql<{ id: number }[]>`select id::int from leasehold_outbox order by id limit 1`;
    await db.sql`insert into leasehold_outbox_deliveries (message_id, endpoint, tenant, shard) select id, 'https://failing.invalid', tenant, shard from leasehold_outbox where id = ${kept.id}`;
    await db.sql`insert into leasehold_outbox (tenant, shard, key, payload, created_at) values ('t', 0, 'unassigned', '{}', now() - interval '60 days')`;
    // Usage rows: 3 tenants' 250 older than the usage retention (400 days), and 60 within it.
    await usageRows(3, 250, 401);
    await usageRows(3, 20, 45);

    const config = loadConfig({ DATABASE_URL: db.url, LEASEHOLD_RETENTION_CHUNK_ROWS: '100' });
    const r = await runScheduler({ sql: db.sql, config, dispatcher: nobody });
    expect(r.retention).toEqual({
      retentionDays: 30,
      batches: 4,
      items: 2_000,
      redrives: 0,
      deferred: 0,
      outbox: { messages: 299, deliveries: 299 },
      usage: { rows: 750, retentionDays: 400 },
      more: false,
    });
    expect(await count('leasehold_run_usage')).toBe(60);
    expect(await count('leasehold_batches')).toBe(1);
    expect(await count('leasehold_items')).toBe(10);
    expect(await count('leasehold_outbox')).toBe(20 + 2);
    expect(await count('leasehold_outbox_deliveries')).toBe(20 + 2);

    const lines: string[] = [];
    setLogSink((line) => lines.push(line));
    try {
      const m = metricsFor('scheduler-retention-test');
      recordRetention(m, r);
      m.flush();
    } finally {
      setLogSink(undefined);
    }
    const emf = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => '_aws' in l);
    expect(emf).toMatchObject({
      RetentionBatchesDeleted: 4,
      RetentionItemsDeleted: 2_000,
      RetentionOutboxDeleted: 299,
      RetentionDeliveriesDeleted: 299,
      RetentionUsageDeleted: 750,
      RetentionBacklog: 0,
    });

    // LEASEHOLD_RETENTION_DAYS=0 keeps everything, however old; usage rows have their own days.
    await loadHistory(db.sql, { batches: 1, items: 10, units: 0, outbox: 10, olderDays: 400, spreadDays: 1 });
    const keep = await runScheduler({
      sql: db.sql,
      config: loadConfig({ DATABASE_URL: db.url, LEASEHOLD_RETENTION_DAYS: '0', LEASEHOLD_USAGE_RETENTION_DAYS: '40' }),
      dispatcher: nobody,
    });
    expect(keep.retention).toMatchObject({
      retentionDays: 0,
      batches: 0,
      items: 0,
      outbox: { messages: 0, deliveries: 0 },
      usage: { rows: 60, retentionDays: 40 },
    });
    expect(await count('leasehold_batches')).toBe(2);
    // LEASEHOLD_USAGE_RETENTION_DAYS=0 keeps every usage row, however old.
    await usageRows(2, 5, 3_000);
    const keepUsage = await runScheduler({
      sql: db.sql,
      config: loadConfig({ DATABASE_URL: db.url, LEASEHOLD_USAGE_RETENTION_DAYS: '0' }),
      dispatcher: nobody,
    });
    expect(keepUsage.retention.usage).toEqual({ rows: 0, retentionDays: 0 });
    expect(await count('leasehold_run_usage')).toBe(10);
  });
});

describe('the plans of retention beside a lived-in history', () => {
  const sent: { query: string; parameters: unknown[] }[] = [];
  let traced: Sql;
  beforeAll(async () => {
    await db.sql`truncate leasehold_batches, leasehold_outbox cascade`;
    // 300,000 finished items over 30 batches and 100,000 delivered messages, half of each
    // expired, analyzed: the statistics of a database with history.
    await loadHistory(db.sql, { batches: 15, items: 150_000, units: 0, outbox: 50_000, olderDays: 40, spreadDays: 5 });
    await loadHistory(db.sql, { batches: 15, items: 150_000, units: 0, outbox: 50_000, olderDays: 1, spreadDays: 5 });
    // And 50,000 more finished batch rows (months of small batches), half of them expired.
    await db.sql`insert into leasehold_batches (tenant, datasource, job, params, request_key, status, total, created_at, finished_at)
      select 'small', 'small', 'noop', '{}', 'small-' || b, 'succeeded', 0, f, f
      from generate_series(1, 50000) b, lateral (select now() - make_interval(days => 1 + b % 60) as f) t`;
    await db.sql`analyze leasehold_batches`;
    // 400,000 usage rows of 400 tenants over two years, nearly half of them older than 400 days,
    // analyzed.
    await db.sql`truncate leasehold_run_usage`;
    await usageRows(400, 1_000, 1);
    await db.sql`update leasehold_run_usage set recorded_at = recorded_at - make_interval(days => (hashtext(run_id::text) & 1023) % 730)`;
    await db.sql`analyze leasehold_run_usage`;
    traced = postgres(db.url, {
      max: 1,
      onnotice: () => {},
      connection: { search_path: db.schema, application_name: 'leasehold-test-traced' },
      debug: (_c, query, parameters) => sent.push({ query, parameters: [...parameters] }),
    }) as unknown as Sql;
    // One real pass of each, whose statements are explained below.
    await deleteExpiredBatches(traced, { retentionDays: 30, chunkRows: 1_000, maxRowsPerPass: 3_000 });
    await deleteDeliveredOutboxMessages(traced, { retentionDays: 30, chunkRows: 1_000, maxRowsPerPass: 3_000 });
    await deleteExpiredUsage(traced, { usageRetentionDays: 400, chunkRows: 100, maxRowsPerPass: 3_000, pauseRatio: 0 });
  }, 240_000);
  afterAll(() => traced?.end({ timeout: 5 }));

  interface Node {
    'Node Type': string;
    'Relation Name'?: string;
    'Index Name'?: string;
    'Actual Rows'?: number;
    'Actual Loops'?: number;
    'Rows Removed by Filter'?: number;
    'Shared Hit Blocks'?: number;
    'Shared Read Blocks'?: number;
    Plans?: Node[];
  }
  const nodes = (p: Node): Node[] => [p, ...(p.Plans ?? []).flatMap(nodes)];

  /** EXPLAIN ANALYZE of the last captured statement containing `marker`, rolled back. */
  async function analyzed(marker: string, parameters?: unknown[]): Promise<Node> {
    const found = sent.filter((x) => x.query.includes(marker)).at(-1);
    expect(found, `a statement containing ${marker}`).toBeDefined();
    const s = { query: found!.query, parameters: parameters ?? found!.parameters };
    let plan: Node | undefined;
    await db.sql
      .begin(async (tx) => {
        const [row] = await (tx as unknown as Sql).unsafe(
          `explain (analyze, buffers, format json) ${s!.query}`,
          s!.parameters as never[],
        );
        const json = (row as Record<string, unknown>)['QUERY PLAN'];
        plan = (typeof json === 'string' ? JSON.parse(json) : json)[0].Plan as Node;
        throw new Error('rollback');
      })
      .catch((e: unknown) => {
        if ((e as Error).message !== 'rollback') throw e;
      });
    return plan!;
  }

  /** Rows each scan of `relation` read: returned plus removed by its filter, over its loops. */
  function rowsRead(p: Node, relation: string): number {
    return nodes(p)
      .filter(
        (n) => /Scan/.test(n['Node Type']) && (n['Relation Name'] === relation || n['Index Name']?.startsWith(`${relation}_`)),
      )
      .reduce((sum, n) => sum + ((n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0)) * (n['Actual Loops'] ?? 1), 0);
  }

  const seqScans = (p: Node) =>
    nodes(p)
      .filter((n) => n['Node Type'] === 'Seq Scan')
      .map((n) => n['Relation Name']);

  it('the expired batches are found through the partial index of finished batches', async () => {
    const p = await analyzed("from leasehold_batches\n    where status <> 'open' and finished_at <");
    expect(seqScans(p)).toEqual([]);
    expect(nodes(p).some((n) => n['Index Name'] === 'leasehold_batches_finished')).toBe(true);
    // 16 asked for (the pass deletes at most 16 batches per look-up), of 50,030 batch rows.
    expect(rowsRead(p, 'leasehold_batches')).toBeLessThanOrEqual(16);
  });

  it('a chunk of items reads about its chunk of rows through the primary key', async () => {
    // The pass spent its cap on the oldest (empty) batches: explain a chunk from the middle of an
    // expired batch of 10,000 items, after keys deleted before it (dead index entries).
    const [b] = await db.sql<
      { id: string }[]
    >`select batch_id as id from leasehold_items i join leasehold_batches b on b.id = i.batch_id
      where b.finished_at < now() - interval '30 days' limit 1`;
    await db.sql`delete from leasehold_items where batch_id = ${b.id} and key <= '0005000'`;
    const p = await analyzed('delete from leasehold_items where ctid = any', [b.id, 30, '0005000', 1_000]);
    expect(seqScans(p)).toEqual([]);
    expect(nodes(p).some((n) => n['Index Name'] === 'leasehold_items_pkey')).toBe(true);
    expect(nodes(p).some((n) => n['Node Type'] === 'Tid Scan')).toBe(true);
    // 1,000 through the index, 1,000 by ctid, one batch row.
    expect(rowsRead(p, 'leasehold_items')).toBeLessThanOrEqual(2 * 1_000 + 10);
    expect(rowsRead(p, 'leasehold_items')).toBeGreaterThanOrEqual(1_000);
  });

  it('a chunk of the outbox reads about its chunk of messages through the primary key', async () => {
    const p = await analyzed('with scan as materialized (\n      select id, created_at, assigned_at from leasehold_outbox');
    expect(seqScans(p)).toEqual([]);
    // 1,000 messages in the range, each probed again to lock it, to delete it and to count its
    // deliveries: a few times the chunk, of a table of 100,000.
    expect(rowsRead(p, 'leasehold_outbox')).toBeLessThanOrEqual(4 * 1_000 + 10);
    expect(rowsRead(p, 'leasehold_outbox_deliveries')).toBeLessThanOrEqual(3 * 1_000 + 10);
  });

  it('the tenants with usage are walked by a loose scan of the (tenant, recorded_at) index, a probe or two each', async () => {
    const p = await analyzed('with recursive t as (');
    expect(seqScans(p)).toEqual([]);
    expect(nodes(p).every((n) => !n['Index Name'] || n['Index Name'] === 'leasehold_run_usage_tenant')).toBe(true);
    // 64 tenants asked for, each one probe to find it and one for its oldest row, of 400,000 rows.
    expect(rowsRead(p, 'leasehold_run_usage')).toBeLessThanOrEqual(3 * 64 + 10);
  });

  it('a chunk of usage rows reads about its chunk through the (tenant, recorded_at) index, after the chunks before it', async () => {
    // A tenant with expired rows left, its oldest 300 deleted before (dead index entries).
    const [t] = await db.sql<{ tenant: string }[]>`select tenant from leasehold_run_usage
      where recorded_at < now() - interval '400 days' group by tenant order by count(*) desc limit 1`;
    const [cut] = await db.sql<{ after: string }[]>`select max(recorded_at)::text as after from (select recorded_at
      from leasehold_run_usage where tenant = ${t.tenant} order by recorded_at limit 100) x`;
    await db.sql`delete from leasehold_run_usage where tenant = ${t.tenant} and recorded_at < ${cut.after}::text::timestamptz`;
    const p = await analyzed('delete from leasehold_run_usage where ctid = any', [t.tenant, cut.after, 400, 100]);
    expect(seqScans(p)).toEqual([]);
    expect(nodes(p).some((n) => n['Index Name'] === 'leasehold_run_usage_tenant')).toBe(true);
    expect(nodes(p).some((n) => n['Node Type'] === 'Tid Scan')).toBe(true);
    // 100 through the index, 100 by ctid.
    expect(rowsRead(p, 'leasehold_run_usage')).toBeLessThanOrEqual(2 * 100 + 10);
    expect(rowsRead(p, 'leasehold_run_usage')).toBeGreaterThanOrEqual(100);
  });
});
