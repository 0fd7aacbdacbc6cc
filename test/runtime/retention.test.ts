// Retention in the scheduler (docs/design.md, "Retention"): a scheduler run deletes what is older
// than LEASEHOLD_RETENTION_DAYS, reports it and records it as EMF; every statement of a pass reads
// about its chunk of rows through an index, beside a lived-in, analyzed history.
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteExpiredBatches, type Dispatcher } from '../../src/batch/index.js';
import { loadConfig, metricsFor, recordRetention, runScheduler, setLogSink } from '../../src/runtime/index.js';
import type { Sql } from '../../src/store/index.js';
import { deleteDeliveredOutboxMessages } from '../../src/units/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { loadHistory } from '../support/history.js';

const db = useTestDatabase();

const nobody: Dispatcher = { invoke: async () => {} };

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

    const config = loadConfig({ DATABASE_URL: db.url, LEASEHOLD_RETENTION_CHUNK_ROWS: '100' });
    const r = await runScheduler({ sql: db.sql, config, dispatcher: nobody });
    expect(r.retention).toEqual({
      retentionDays: 30,
      batches: 4,
      items: 2_000,
      redrives: 0,
      deferred: 0,
      outbox: { messages: 299, deliveries: 299 },
      more: false,
    });
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
      RetentionBacklog: 0,
    });

    // LEASEHOLD_RETENTION_DAYS=0 keeps everything, however old.
    await loadHistory(db.sql, { batches: 1, items: 10, units: 0, outbox: 10, olderDays: 400, spreadDays: 1 });
    const keep = await runScheduler({
      sql: db.sql,
      config: loadConfig({ DATABASE_URL: db.url, LEASEHOLD_RETENTION_DAYS: '0' }),
      dispatcher: nobody,
    });
    expect(keep.retention).toMatchObject({ retentionDays: 0, batches: 0, items: 0, outbox: { messages: 0, deliveries: 0 } });
    expect(await count('leasehold_batches')).toBe(2);
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
    traced = postgres(db.url, {
      max: 1,
      onnotice: () => {},
      connection: { search_path: db.schema, application_name: 'leasehold-test-traced' },
      debug: (_c, query, parameters) => sent.push({ query, parameters: [...parameters] }),
    }) as unknown as Sql;
    // One real pass of each, whose statements are explained below.
    await deleteExpiredBatches(traced, { retentionDays: 30, chunkRows: 1_000, maxRowsPerPass: 3_000 });
    await deleteDeliveredOutboxMessages(traced, { retentionDays: 30, chunkRows: 1_000, maxRowsPerPass: 3_000 });
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
});
