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

  // Millions of rows load faster into tables without their indexes, primary keys and foreign keys,
  // which are then built once each from sorted input, instead of taking every row one at a time
  // (and a foreign key check per delivery); rebuilt from their own definitions, under their own
  // names, the schema ends as migrated, with the same rows and statistics. The items and the
  // outbox are written side by side on two of the pool's connections (each table by one session
  // alone, so its rows lie in the order they were written, as before: batch after batch).
  const rows: HistoryRows = { per, batches, tenants, units, outbox, older, spread, tag };
  await withoutIndexes(sql, [
    { tables: ['leasehold_items'], load: () => insertBatches(sql, rows) },
    { tables: ['leasehold_outbox', 'leasehold_outbox_deliveries'], load: () => insertUnitsAndOutbox(sql, rows) },
  ]);

  await analyzeSchema(sql);
  return { items: per * batches, batches, units, outbox, ms: performance.now() - t0 };
}

/** What {@link insertHistory} writes (see {@link HistorySize}; `per` items a batch, `tag` in every request key). */
interface HistoryRows {
  per: number;
  batches: number;
  tenants: number;
  units: number;
  outbox: number;
  older: number;
  spread: number;
  tag: string;
}

/** The finished batches and their items of {@link loadHistory}. */
async function insertBatches(sql: Sql, { per, batches, tenants, older, spread, tag }: HistoryRows): Promise<void> {
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
}

/** The idle units and the delivered outbox of {@link loadHistory}. */
async function insertUnitsAndOutbox(sql: Sql, { tenants, units, outbox, older, spread, tag }: HistoryRows): Promise<void> {
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
}

/** Tables to strip of their indexes and keys, and what loads them. */
interface Load {
  tables: string[];
  load: () => Promise<void>;
}

/**
 * Run every `load` at once, each with its `tables` (of the schema `sql` points at) stripped of
 * their indexes, primary and unique keys and the foreign keys from or to them; then build them
 * all again from their definitions (`pg_get_indexdef`, `pg_get_constraintdef`), under their names,
 * each load's indexes and keys at once with the others', then the foreign keys that need them;
 * also when a load throws.
 *
 * @throws the database error of any statement; a key the loaded rows break fails its rebuild.
 */
async function withoutIndexes(sql: Sql, loads: Load[]): Promise<void> {
  const stripped = await Promise.all(loads.map(async (l) => ({ ...l, ...(await definitions(sql, l.tables)) })));
  const foreign = stripped.flatMap((s) => s.foreign).filter((f, i, all) => all.findIndex((g) => g.name === f.name) === i);
  for (const f of foreign) await sql.unsafe(`alter table ${f.table} drop constraint ${quoteName(f.name)}`);
  for (const s of stripped) {
    for (const k of s.keys) await sql.unsafe(`alter table ${k.table} drop constraint ${quoteName(k.name)}`);
    for (const i of s.indexes) await sql.unsafe(`drop index ${quoteName(i.name)}`);
  }
  const loaded = await Promise.allSettled(stripped.map((s) => s.load()));
  await Promise.all(
    stripped.map((s) =>
      // One transaction each, so its setting holds for every build: the sorts of the larger keys fit in memory.
      sql.begin(async (tx) => {
        await tx`set local maintenance_work_mem = '256MB'`;
        for (const i of s.indexes) await tx.unsafe(i.def);
        for (const k of s.keys) await tx.unsafe(`alter table ${k.table} add constraint ${quoteName(k.name)} ${k.def}`);
      }),
    ),
  );
  for (const f of foreign) await sql.unsafe(`alter table ${f.table} add constraint ${quoteName(f.name)} ${f.def}`);
  for (const r of loaded) if (r.status === 'rejected') throw r.reason;
}

const quoteName = (name: string) => `"${name.replaceAll('"', '""')}"`;

/** The foreign keys from or to `tables`, their primary and unique keys and their other indexes, with the SQL of each. */
async function definitions(sql: Sql, tables: string[]) {
  // The tables of the schema `sql` points at, by name (a JSON array: the test pools fetch no array types).
  const named = sql`select c.oid from pg_class c
    where c.relnamespace = (select oid from pg_namespace where nspname = current_schema())
      and c.relname in (select jsonb_array_elements_text(${sql.json(tables)}))`;
  // The foreign keys from or to the tables (dropped first, built last).
  const foreign = await sql<{ table: string; name: string; def: string }[]>`
    select c.conrelid::regclass::text as table, c.conname as name, pg_get_constraintdef(c.oid) as def
    from pg_constraint c where c.contype = 'f' and (c.conrelid in (${named}) or c.confrelid in (${named}))`;
  // Their primary and unique keys.
  const keys = await sql<{ table: string; name: string; def: string }[]>`
    select c.conrelid::regclass::text as table, c.conname as name, pg_get_constraintdef(c.oid) as def
    from pg_constraint c where c.contype in ('p', 'u') and c.conrelid in (${named})`;
  // Their other indexes, as the CREATE INDEX that makes each.
  const indexes = await sql<{ name: string; def: string }[]>`
    select i.relname as name, pg_get_indexdef(x.indexrelid) as def
    from pg_index x join pg_class i on i.oid = x.indexrelid
    where x.indrelid in (${named})
      and not exists (select 1 from pg_constraint c where c.conindid = x.indexrelid and c.contype in ('p', 'u'))`;
  return { foreign, keys, indexes };
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
