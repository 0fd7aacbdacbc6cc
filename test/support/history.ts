// History for a lived-in database (docs/design.md, "The database in production"): finished
// batches with their items, registered units and delivered outbox rows, written in bulk by the
// server itself (generate_series), then analyzed. The plan test and `npm run bench` load it so
// that their statements run beside months of finished rows and the statistics they leave.
import type { Sql } from '../../src/store/index.js';

/** How much history {@link loadHistory} writes; every count may be 0. */
export interface HistorySize {
  /** Finished items in all, spread evenly over {@link HistorySize.batches}. Default 5,000,000. */
  items?: number;
  /** Finished batches. Default 250. */
  batches?: number;
  /** Tenants the batches (and units) belong to, `history-0` … Default 50. */
  tenants?: number;
  /** Registered units of weight 0 (nothing to do: never claimed), over the tenants. Default 10,000. */
  units?: number;
  /** Delivered outbox messages, each with one delivered delivery. Default 1,000,000. */
  outbox?: number;
  /**
   * How long ago the history finished, days: batch `i` of `n` finished `olderDays` days ago plus
   * up to `spreadDays` more. Defaults 1 and 89 (the last 90 days).
   */
  olderDays?: number;
  spreadDays?: number;
}

/** What {@link loadHistory} wrote. */
export interface LoadedHistory {
  items: number;
  batches: number;
  units: number;
  outbox: number;
  /** ms the load took, ANALYZE included. */
  ms: number;
}

/** Rows per insert statement: a load never holds one huge transaction. */
const PIECE = 100_000;

/**
 * Write finished history into the schema `sql` points at, then `ANALYZE` it. Batches are
 * `succeeded` (one item in a hundred `failed`, their batch `failed`), items `done` with a small
 * output, tenants `history-<n>`; nothing is open, owned or pending, so no claim, takeover or
 * dispatch ever takes it. Loading twice adds a second history (request keys carry a random tag).
 *
 * @throws the database error of any statement (for example a schema that is not migrated).
 */
export async function loadHistory(sql: Sql, size: HistorySize = {}): Promise<LoadedHistory> {
  const t0 = performance.now();
  const items = size.items ?? 5_000_000;
  const batches = size.batches ?? 250;
  const tenants = Math.max(1, size.tenants ?? 50);
  const units = size.units ?? 10_000;
  const outbox = size.outbox ?? 1_000_000;
  const older = size.olderDays ?? 1;
  const spread = size.spreadDays ?? 89;
  const per = batches > 0 ? Math.ceil(items / batches) : 0;
  const tag = Math.random().toString(36).slice(2, 10);

  if (batches > 0) {
    await sql`insert into leasehold_batches
        (tenant, datasource, job, params, request_key, status, total, runs, created_at, finished_at, final_counts)
      select 'history-' || (b % ${tenants}), 'history-' || (b % ${tenants}), 'noop', '{}'::jsonb,
        'history-' || ${tag} || '-' || b, case when ${per} >= 100 then 'failed' else 'succeeded' end, ${per}, 1,
        f - interval '10 minutes', f,
        jsonb_build_object('pending', 0, 'running', 0, 'done', ${per} - ${per} / 100, 'failed', ${per} / 100)
      from generate_series(0, ${batches - 1}) b,
        lateral (select now() - make_interval(days => ${older}) - make_interval(secs => ${spread * 86_400} * b::float8 / ${batches}) as f) t`;
    const ids = await sql<{ id: string; finished_at: Date }[]>`select id, finished_at from leasehold_batches
      where request_key like ${`history-${tag}-%`} order by id`;
    // Items in pieces of whole batches.
    const perPiece = Math.max(1, Math.floor(PIECE / Math.max(per, 1)));
    for (let i = 0; i < ids.length; i += perPiece) {
      const piece = ids.slice(i, i + perPiece).map((r) => r.id);
      await sql`insert into leasehold_items (batch_id, key, input, state, attempts, output, error, run_id, run_after, updated_at)
        select b.id, lpad(k::text, 7, '0'), jsonb_build_object('n', k),
          case when k % 100 = 0 then 'failed' else 'done' end, 1,
          case when k % 100 = 0 then null else jsonb_build_object('ok', true) end,
          case when k % 100 = 0 then 'history failure' end,
          b.id, b.created_at, b.finished_at
        from leasehold_batches b, generate_series(1, ${per}) k
        where b.id in (select jsonb_array_elements_text(${sql.json(piece)})::uuid)`;
    }
  }

  if (units > 0) {
    await sql`insert into leasehold_units (tenant, shard, job, weight, config)
      select 'history-' || (u % ${tenants}), u / ${tenants}, 'history', 0, '{}'::jsonb
      from generate_series(0, ${units - 1}) u
      on conflict (tenant, shard) do nothing`;
  }

  for (let done = 0; done < outbox; done += PIECE) {
    const n = Math.min(PIECE, outbox - done);
    await sql`with m as (
        insert into leasehold_outbox (tenant, shard, key, payload, created_at, assigned_at)
        select 'history-' || (x % ${tenants}), 0, 'history-' || ${tag} || '-' || (${done} + x), '{"n":1}'::jsonb,
          now() - make_interval(days => ${older}) - make_interval(secs => ${spread * 86_400} * x::float8 / ${n}),
          now() - make_interval(days => ${older}) - make_interval(secs => ${spread * 86_400} * x::float8 / ${n})
        from generate_series(0, ${n - 1}) x
        returning id, tenant, shard, created_at
      )
      insert into leasehold_outbox_deliveries (message_id, endpoint, tenant, shard, attempts, next_attempt_at, delivered_at)
      select id, 'https://history.invalid/hook', tenant, shard, 1, created_at, created_at from m`;
  }

  await analyzeSchema(sql);
  return { items: per * batches, batches, units, outbox, ms: performance.now() - t0 };
}

/**
 * `ANALYZE` of every table in the schema `sql` points at (its `search_path`), and no other: a
 * bare `ANALYZE` would gather statistics for every schema of the database, other test files'
 * included.
 *
 * @throws the database error of the statement.
 */
export async function analyzeSchema(sql: Sql): Promise<void> {
  const tables = await sql<{ name: string }[]>`select format('%I.%I', schemaname, tablename) as name
    from pg_tables where schemaname = current_schema()`;
  if (tables.length > 0) await sql.unsafe(`analyze ${tables.map((t) => t.name).join(', ')}`);
}
