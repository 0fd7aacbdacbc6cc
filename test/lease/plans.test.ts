// The statements a leaser (and the fleet read) sends find their units through indexes, never a
// scan of the unit table: over 100,000 units, EXPLAIN of each (as captured from a real leaser)
// shows index scans and no Seq Scan on leasehold_units, with custom and with generic plans.
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Leaser, readFleet, sweep } from '../../src/lease/index.js';
import { heavyUnits, releaseUnits } from '../../src/lease/sql/ownership.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { Recorder } from '../support/lease.js';

const db = useTestDatabase({ max: 4 });
let traced: Sql;
/** Every statement the traced pool sent, with its parameters. */
const sent: { query: string; parameters: unknown[] }[] = [];

const UNITS = 100_000;

/** Process ids computed in SQL: live for k < 20, expired for 20 ≤ k < 25. */
const PID_SQL = (k: string) => `('00000000-0000-4000-8000-' || lpad(to_hex(${k}), 12, '0'))::uuid`;

beforeAll(async () => {
  traced = postgres(db.url, {
    max: 1,
    onnotice: () => {},
    connection: { search_path: db.schema, application_name: 'leasehold-test-traced' },
    types: { bigint: { to: 20, from: [20], serialize: (x: number) => x.toString(), parse: (x: string) => Number(x) } },
    debug: (_connection, query, parameters) => sent.push({ query, parameters: [...parameters] }),
  }) as unknown as Sql;
  // 25 processes: 20 live, 5 expired an hour ago. Units: 2,000 per live process, 1,000 per
  // expired one, the rest (55,000) unowned.
  await db.sql.unsafe(`insert into leasehold_processes (id, hostname, version, expires_at)
    select ${PID_SQL('k')}, 'h', 'v', case when k < 20 then now() + interval '1 hour' else now() - interval '1 hour' end
    from generate_series(0, 24) k`);
  await db.sql.unsafe(`insert into leasehold_units (tenant, shard, job, weight, owner)
    select 't' || (i / 1000), i % 1000, 'sync', 1,
      case when i < 40000 then ${PID_SQL('i / 2000')} when i < 45000 then ${PID_SQL('20 + (i - 40000) / 1000')} end
    from generate_series(0, ${UNITS - 1}) i`);
  await db.sql`analyze leasehold_units`;
  await db.sql`analyze leasehold_processes`;
}, 120_000);
afterAll(async () => {
  await traced?.end({ timeout: 5 });
});

/** The plan of `query` with `parameters`, as JSON. */
async function plan(query: string, parameters: unknown[], generic: boolean): Promise<PlanNode> {
  return db.sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    if (generic) await t.unsafe('set local plan_cache_mode = force_generic_plan');
    const [row] = await t.unsafe(`explain (format json) ${query}`, parameters as never[]);
    const json = (row as Record<string, unknown>)['QUERY PLAN'];
    return (typeof json === 'string' ? JSON.parse(json) : json)[0].Plan as PlanNode;
  });
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function nodes(p: PlanNode): PlanNode[] {
  return [p, ...(p.Plans ?? []).flatMap(nodes)];
}

/** How each statement reads leasehold_units: the scans of that table and its indexes. */
function unitScans(p: PlanNode): string[] {
  return nodes(p)
    .filter((n) => /Scan/.test(n['Node Type']))
    .filter((n) => n['Relation Name'] === 'leasehold_units' || n['Index Name']?.startsWith('leasehold_units_'))
    .map((n) => `${n['Node Type']}${n['Index Name'] ? ` using ${n['Index Name']}` : ''}`);
}

/** The captured statements whose text contains `marker`. */
function statements(marker: string): { query: string; parameters: unknown[] }[] {
  const found = sent.filter((s) => s.query.includes(marker));
  expect(found.length, `a statement containing "${marker}" was sent`).toBeGreaterThan(0);
  return found;
}

describe('query plans over 100,000 units', () => {
  it('claims, share reads, releases and sweeps use indexes, never a Seq Scan on leasehold_units', async () => {
    const rec = new Recorder('traced');
    // Claims from both kinds of candidates: units of the expired processes, then unowned ones.
    const leaser = new Leaser(traced, { maxClaimPerTick: 256, claimBatch: 64 }, rec);
    await leaser.heartbeat();
    const first = await leaser.tick();
    expect(first.claimed).toBe(256);
    expect(first.fairShare).toBe(Math.ceil(UNITS / 21));
    const [byKind] = await db.sql<{ abandoned: number }[]>`select count(*) as abandoned from leasehold_units
      where owner = ${leaser.processId} and tenant between 't40' and 't44'`;
    expect(byKind.abandoned).toBeGreaterThan(0);
    // A share read with owned units, the shed statement (as a tick that sheds sends it), a
    // release, and a sweep of the expired processes.
    await leaser.tick();
    const shed = leaser.owned().slice(0, 10);
    const [{ token }] = await db.sql<{ token: string }[]>`select token from leasehold_processes where id = ${leaser.processId}`;
    expect(await releaseUnits(traced, { id: leaser.processId, token }, shed)).toBe(10);
    await leaser.release();
    await leaser.deleteProcess();
    const [left] = await db.sql<{ n: number }[]>`select count(*) as n from leasehold_units u
      join leasehold_processes p on p.id = u.owner where p.expires_at < now()`;
    expect(await sweep(traced, 1_000)).toEqual({ processes: 5, units: left.n });

    const checked: Record<string, string[]> = {};
    const check = async (name: string, marker: string) => {
      for (const s of statements(marker).slice(0, 3)) {
        for (const generic of [false, true]) {
          const scans = unitScans(await plan(s.query, s.parameters, generic));
          checked[`${name}${generic ? ' (generic)' : ''}`] = scans;
          expect(scans.length, `${name} reads leasehold_units`).toBeGreaterThan(0);
          expect(
            scans.filter((x) => /Seq Scan/.test(x)),
            `${name}: ${scans.join(', ')}`,
          ).toEqual([]);
        }
      }
    };
    await check('claim', '), claimed as (');
    await check('owned units', 'where owner = $1 and exists');
    await check('release all', 'with mine as');
    await check('shed', 'jsonb_to_recordset');
    await check('sweep', 'with dead as');
    // The claim's candidates come through the partial index of claimable units and the owner index.
    expect(checked.claim.join()).toMatch(/leasehold_units_claimable/);
    expect(checked.claim.join()).toMatch(/leasehold_units_owner/);
    expect(checked['owned units'].join()).toMatch(/leasehold_units_owner/);
    expect(checked['release all'].join()).toMatch(/leasehold_units_owner/);
    expect(checked.sweep.join()).toMatch(/leasehold_units_owner/);
    // Totals come from the one-row totals table; whether anything is claimable, from one probe
    // of the unowned index and the owner index: never a scan of the units.
    const totals = statements('from leasehold_unit_totals');
    for (const s of totals) {
      for (const generic of [false, true]) {
        const p = await plan(s.query, s.parameters, generic);
        expect(unitScans(p).filter((x) => /Seq Scan/.test(x))).toEqual([]);
        expect(nodes(p).some((n) => n['Relation Name'] === 'leasehold_unit_totals')).toBe(true);
      }
    }
  });

  it('the fleet read and the heavy-unit reads of the fair share use the partial weight index, never a Seq Scan', async () => {
    // 100 units heavier than 1 among the 100,000, so the index has entries to find.
    await db.sql`update leasehold_units set weight = 2 + (shard % 7) where tenant = 't99'`;
    await db.sql`analyze leasehold_units`;
    expect((await readFleet(traced)).totalWeight).toBeGreaterThan(UNITS);
    expect(await heavyUnits(traced, { above: 3, atMost: 8, limit: 5 })).toEqual([8, 8, 8, 8, 8]);
    for (const marker of ['json_agg(weight)', 'weight <= $']) {
      for (const s of statements(marker)) {
        for (const generic of [false, true]) {
          const scans = unitScans(await plan(s.query, s.parameters, generic));
          expect(
            scans.filter((x) => /Seq Scan/.test(x)),
            `${marker}: ${scans.join(', ')}`,
          ).toEqual([]);
          expect(scans.join(), marker).toMatch(/leasehold_units_heavy/);
        }
      }
    }
    await db.sql`update leasehold_units set weight = 1 where tenant = 't99'`;
  });
});
